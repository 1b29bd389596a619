//! Request paths: dot-segment removal, percent-decoding and safe translation to a
//! file under the root.
//!
//! This is the work Flash's pathname-translation cache (Flash 5.2) saves: decoding,
//! normalising and resolving symlinks are done once per URL, on the miss path.
//! [`remove_dot_segments`] is not: the parser applies it to every request's path
//! ([`RequestHead::path`](super::RequestHead::path)), so that every cache key, route
//! and handler sees one spelling of a path (`/sub/../a.txt` is `/a.txt`), as nginx
//! does.
//!
//! # Invariants
//! - A path that climbs above the root (`/..`, `/a/../..`, `/%2e%2e/x`) is refused
//!   as malformed (400), never clamped to the root.
//! - A file is served only under its own spelling: a path that ends with `/` (or
//!   with a `.` segment, which stands for the directory it is in) names a
//!   directory, so a regular file there is `NotFound` (`/a.txt/` and `/a.txt/.`
//!   are 404, as in nginx).
//! - A [`Translation::File`] path is canonical (no symlinks, no `.`/`..`) and lies
//!   inside the canonical root: `..` segments, encoded `%2e%2e`, NUL bytes and symlinks
//!   that lead out of the root are all refused before any file is opened.
//! - With [`Dotfiles::Hide`], no file is served whose path under the root, as asked
//!   or after resolving symlinks, has a segment starting with `.` (other than
//!   `.well-known`, RFC 8615): such paths are `NotFound`, as if absent.
//! - A redirect location is an absolute path starting with exactly one `/`, never
//!   `//host` (which a browser would read as another host).

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::Status;

/// Decodes `%XX` escapes. `+` stays `+` (it means space only in form bodies).
/// Returns `None` for a malformed escape.
pub fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        if c == b'%' {
            let hi = hex(*input.get(i + 1)?)?;
            let lo = hex(*input.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Whether `seg`, a segment of a raw path, is `.` or `..` (0 for neither), with
/// `%2e`/`%2E` counted as `.` (RFC 3986 6.2.2.2: an encoded unreserved character is
/// that character).
fn dots(seg: &[u8]) -> u8 {
    let mut n = 0;
    let mut rest = seg;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return 0,
        };
        n += 1;
        if n > 2 {
            return 0;
        }
    }
    n
}

/// Whether some segment of `raw_path` starts with `.` or `%` (a `/` followed by
/// either): a dot segment (`.`, `..`, `%2e`, ...) must, so a path without one has
/// none. One pass that stops at the first candidate: the only pass nearly every
/// request's path needs.
fn may_have_dot_segment(raw_path: &[u8]) -> bool {
    let mut prev = 0u8;
    for &c in raw_path {
        if prev == b'/' && (c == b'.' || c == b'%') {
            return true;
        }
        prev = c;
    }
    false
}

/// Removes the `.` and `..` segments of a raw (still percent-encoded) absolute path,
/// RFC 3986 5.2.4, with `%2e` counted as `.`; other escapes are left as they are.
/// `Err(PathError::Malformed)` (400, as nginx answers) for a path that climbs above
/// the root. A path without dot segments (nearly all) is returned as it is,
/// borrowed; a path not starting with `/` (`*`) too.
///
/// A final `.` or `..` segment leaves the trailing slash the directory spelling
/// needs (`/a/.` is `/a/`, `/a/b/..` is `/a/`).
///
/// ```
/// use seda_http::proto::{PathError, remove_dot_segments};
/// assert_eq!(&*remove_dot_segments(b"/a/./b/../c").unwrap(), b"/a/c");
/// assert_eq!(&*remove_dot_segments(b"/sub/%2e%2e/hello.txt").unwrap(), b"/hello.txt");
/// assert_eq!(&*remove_dot_segments(b"/hello.txt/.").unwrap(), b"/hello.txt/");
/// assert_eq!(remove_dot_segments(b"/a/../../etc/passwd"), Err(PathError::Malformed));
/// ```
#[inline]
pub fn remove_dot_segments(raw_path: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    if raw_path.first() != Some(&b'/') || !may_have_dot_segment(raw_path) {
        return Ok(Cow::Borrowed(raw_path));
    }
    remove_dot_segments_slow(raw_path)
}

/// [`remove_dot_segments`] for a path with a segment that may be a dot segment (kept
/// apart so that the common case above stays small enough to inline).
#[cold]
fn remove_dot_segments_slow(raw_path: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    if !raw_path.split(|&c| c == b'/').skip(1).any(|s| dots(s) > 0) {
        return Ok(Cow::Borrowed(raw_path));
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw_path.len());
    // Segments after the leading `/`: `/a/b/` is `a`, `b`, ``.
    let mut segs = raw_path[1..].split(|&c| c == b'/').peekable();
    while let Some(seg) = segs.next() {
        let last = segs.peek().is_none();
        match dots(seg) {
            1 => {}
            2 => {
                // Drop the last output segment with its `/`; none left: above the root.
                let Some(cut) = out.iter().rposition(|&c| c == b'/') else {
                    return Err(PathError::Malformed);
                };
                out.truncate(cut);
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(seg);
                continue;
            }
        }
        if last {
            // A final dot segment names the directory: keep its slash.
            out.push(b'/');
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(Cow::Owned(out))
}

/// Whether a raw path spells a directory: it ends with `/`, encoded or not.
fn ends_with_slash(raw_path: &[u8]) -> bool {
    matches!(raw_path, [.., b'/'] | [.., b'%', b'2', b'f' | b'F'])
}

/// Why a URL path cannot name a file under the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError {
    /// Bad escape, not an absolute path, or a path above the root: 400.
    Malformed,
    /// `..`, NUL, or a symlink out of the root: 403.
    Forbidden,
    /// Nothing there: 404.
    NotFound,
}

impl PathError {
    /// Status the client gets.
    pub fn status(self) -> Status {
        match self {
            PathError::Malformed => Status::BAD_REQUEST,
            PathError::Forbidden => Status::FORBIDDEN,
            PathError::NotFound => Status::NOT_FOUND,
        }
    }
}

/// Whether files and directories whose name starts with `.` are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dotfiles {
    /// Answer 404 for them (`.git/`, `.env`, ...), except `.well-known` (the default).
    #[default]
    Hide,
    /// Serve them like any file.
    Serve,
}

fn hidden(segment: &[u8]) -> bool {
    segment.first() == Some(&b'.') && segment != b".well-known"
}

/// Decodes and normalises a raw URL path into the segments of a relative file path.
/// Empty and `.` segments are dropped; a `..` segment is refused (`Forbidden`): once
/// [`remove_dot_segments`] has run, one can only come from an encoded slash
/// (`/a%2f..%2fb`), which is an attack, not a spelling; a hidden segment is
/// `NotFound` under [`Dotfiles::Hide`].
pub fn url_to_relative(raw_path: &[u8], dotfiles: Dotfiles) -> Result<PathBuf, PathError> {
    if raw_path.first() != Some(&b'/') {
        return Err(PathError::Malformed);
    }
    let decoded = percent_decode(raw_path).ok_or(PathError::Malformed)?;
    if decoded.contains(&0) {
        return Err(PathError::Forbidden);
    }
    let mut rel = PathBuf::new();
    for seg in decoded.split(|&c| c == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => return Err(PathError::Forbidden),
            s if dotfiles == Dotfiles::Hide && hidden(s) => return Err(PathError::NotFound),
            s => rel.push(OsStr::from_bytes(s)),
        }
    }
    Ok(rel)
}

/// What a URL path translates to.
#[derive(Debug)]
pub enum Translation {
    /// A regular file inside the root: canonical path and its metadata.
    File(PathBuf, Metadata),
    /// A directory named without its trailing slash: redirect (301) to this
    /// still-encoded path with `/` appended (see [`slash_location`]).
    AddSlash(Vec<u8>),
}

/// The location that adds the trailing slash to a directory's raw path: the path
/// with its leading run of `/` and `\\` reduced to one `/` (so `//host/dir` cannot
/// become a redirect to another host), plus `/`.
pub fn slash_location(raw_path: &[u8]) -> Vec<u8> {
    let start = raw_path
        .iter()
        .position(|&c| c != b'/' && c != b'\\')
        .unwrap_or(raw_path.len());
    let mut loc = Vec::with_capacity(raw_path.len() - start + 2);
    loc.push(b'/');
    loc.extend_from_slice(&raw_path[start..]);
    loc.push(b'/');
    loc
}

/// Translates a raw (encoded) URL path to a file under `root`, which must be
/// canonical. Dot segments are removed first ([`remove_dot_segments`]; the server
/// has done it already). A directory gives its `index`, or a redirect to the slash
/// form when the URL lacks the trailing slash; a regular file named with a trailing
/// slash is `NotFound`. Blocking: call it on a helper stage.
pub fn translate(
    root: &Path,
    raw_path: &[u8],
    index: &str,
    dotfiles: Dotfiles,
) -> Result<Translation, PathError> {
    let raw_path = &*remove_dot_segments(raw_path)?;
    let rel = url_to_relative(raw_path, dotfiles)?;
    let joined = root.join(&rel);
    let canonical = canonical_under(root, &joined, dotfiles)?;
    let meta = std::fs::metadata(&canonical).map_err(io_to_path_error)?;
    if meta.is_dir() {
        if !ends_with_slash(raw_path) {
            return Ok(Translation::AddSlash(slash_location(raw_path)));
        }
        let index_path = canonical_under(root, &canonical.join(index), dotfiles)?;
        let meta = std::fs::metadata(&index_path).map_err(io_to_path_error)?;
        return if meta.is_file() {
            Ok(Translation::File(index_path, meta))
        } else {
            Err(PathError::NotFound)
        };
    }
    if meta.is_file() && ends_with_slash(raw_path) {
        // `/a.txt/`: a directory spelling of a file (a second cache key, a way
        // around a proxy's rules): nothing there, as nginx answers.
        Err(PathError::NotFound)
    } else if meta.is_file() {
        Ok(Translation::File(canonical, meta))
    } else {
        Err(PathError::Forbidden)
    }
}

/// Resolves every symlink of `path` and checks the result is inside `root` (and not
/// hidden, under [`Dotfiles::Hide`]).
fn canonical_under(root: &Path, path: &Path, dotfiles: Dotfiles) -> Result<PathBuf, PathError> {
    let canonical = std::fs::canonicalize(path).map_err(io_to_path_error)?;
    let Ok(inside) = canonical.strip_prefix(root) else {
        return Err(PathError::Forbidden);
    };
    if dotfiles == Dotfiles::Hide && inside.iter().any(|s| hidden(s.as_bytes())) {
        return Err(PathError::NotFound);
    }
    Ok(canonical)
}

fn io_to_path_error(e: io::Error) -> PathError {
    match e.kind() {
        io::ErrorKind::PermissionDenied => PathError::Forbidden,
        _ => PathError::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes() {
        assert_eq!(percent_decode(b"/a%20b%2Fc").unwrap(), b"/a b/c");
        assert_eq!(percent_decode(b"/a+b").unwrap(), b"/a+b");
        assert_eq!(percent_decode(b"/%zz"), None);
        assert_eq!(percent_decode(b"/%4"), None);
    }

    #[test]
    fn refuses_dot_dot_in_every_spelling() {
        for p in [
            &b"/../etc/passwd"[..],
            b"/a/../../b",
            b"/%2e%2e/x",
            b"/%2E%2E%2fetc",
            b"/a/%2e%2e",
            b"/..",
        ] {
            assert_eq!(
                url_to_relative(p, Dotfiles::Serve).unwrap_err(),
                PathError::Forbidden,
                "{}",
                String::from_utf8_lossy(p)
            );
        }
        assert_eq!(
            url_to_relative(b"/a%00b", Dotfiles::Serve).unwrap_err(),
            PathError::Forbidden
        );
        let rel = |p: &[u8]| url_to_relative(p, Dotfiles::Serve);
        assert_eq!(rel(b"*").unwrap_err(), PathError::Malformed);
        assert_eq!(rel(b"/./a//b/").unwrap(), PathBuf::from("a/b"));
        assert_eq!(rel(b"/..a/b..").unwrap(), PathBuf::from("..a/b.."));
    }

    #[test]
    fn dot_segments_are_removed_as_rfc_3986_says() {
        let norm =
            |p: &[u8]| remove_dot_segments(p).map(|c| String::from_utf8_lossy(&c).into_owned());
        for (given, want) in [
            ("/a/b/c/./../../g", "/a/g"), // RFC 3986 5.2.4's own example
            ("/mid/content=5/../6", "/mid/6"),
            ("/sub/../hello.txt", "/hello.txt"),
            ("/sub/%2e%2E/hello.txt", "/hello.txt"),
            ("/sub/.%2e/hello.txt", "/hello.txt"),
            ("/./a", "/a"),
            ("/a/.", "/a/"),
            ("/a/..", "/"),
            ("/a/b/..", "/a/"),
            ("/.", "/"),
            ("//..", "/"),
            ("/a//../b", "/a/b"),
            ("/a/.../b", "/a/.../b"),
            ("/a/..b/c", "/a/..b/c"),
            ("/a/%2e%2e%2e", "/a/%2e%2e%2e"),
            ("/a%2f..%2fb", "/a%2f..%2fb"),
            ("*", "*"),
        ] {
            assert_eq!(norm(given.as_bytes()).as_deref(), Ok(want), "{given}");
        }
        for above in [
            "/..",
            "/../a",
            "/a/../..",
            "/a/../../b",
            "/%2e%2e/x",
            "/a/./../../.",
        ] {
            assert_eq!(
                remove_dot_segments(above.as_bytes()),
                Err(PathError::Malformed),
                "{above}"
            );
        }
        // Nearly every path: no copy.
        assert!(matches!(
            remove_dot_segments(b"/a/b.txt"),
            Ok(Cow::Borrowed(_))
        ));
        assert!(matches!(
            remove_dot_segments(b"/.well-known/x"),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn a_file_named_with_a_trailing_slash_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.txt"), b"a").unwrap();
        std::fs::write(dir.path().join("sub/index.html"), b"i").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let tr = |p: &[u8]| translate(&root, p, "index.html", Dotfiles::Serve);
        for p in [
            &b"/a.txt/"[..],
            b"/a.txt/.",
            b"/a.txt//",
            b"/a.txt%2f",
            b"/sub/index.html/",
        ] {
            assert_eq!(
                tr(p).unwrap_err(),
                PathError::NotFound,
                "{}",
                String::from_utf8_lossy(p)
            );
        }
        assert!(matches!(tr(b"/a.txt"), Ok(Translation::File(..))));
        assert!(matches!(tr(b"/sub/../a.txt"), Ok(Translation::File(..))));
        assert!(
            matches!(tr(b"/sub/."), Ok(Translation::File(p, _)) if p.ends_with("sub/index.html"))
        );
        assert!(
            matches!(tr(b"/sub/nope/.."), Ok(Translation::File(p, _)) if p.ends_with("sub/index.html"))
        );
        assert_eq!(tr(b"/sub/../..").unwrap_err(), PathError::Malformed);
    }

    #[test]
    fn translates_files_dirs_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("a.txt"), b"a").unwrap();
        std::fs::write(root.join("sub/index.html"), b"i").unwrap();
        std::fs::write(dir.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("in")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let tr = |root: &Path, p: &[u8], index: &str| translate(root, p, index, Dotfiles::Serve);

        assert!(
            matches!(tr(&root, b"/a.txt", "index.html"), Ok(Translation::File(p, _)) if p.ends_with("a.txt"))
        );
        assert!(
            matches!(tr(&root, b"/in", "index.html"), Ok(Translation::File(p, _)) if p.ends_with("a.txt"))
        );
        assert!(
            matches!(tr(&root, b"/sub/", "index.html"), Ok(Translation::File(p, _)) if p.ends_with("sub/index.html"))
        );
        assert!(
            matches!(tr(&root, b"/sub", "index.html"), Ok(Translation::AddSlash(l)) if l == b"/sub/")
        );
        assert_eq!(
            tr(&root, b"/empty/", "index.html").unwrap_err(),
            PathError::NotFound
        );
        assert_eq!(
            tr(&root, b"/out", "index.html").unwrap_err(),
            PathError::Forbidden
        );
        assert_eq!(
            tr(&root, b"/nope", "index.html").unwrap_err(),
            PathError::NotFound
        );
        assert_eq!(
            tr(&root, b"/a.txt/x", "index.html").unwrap_err(),
            PathError::NotFound
        );
    }

    #[test]
    fn dotfiles_are_hidden_by_default_except_well_known() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join(".well-known")).unwrap();
        std::fs::write(root.join(".git/config"), b"c").unwrap();
        std::fs::write(root.join(".env"), b"e").unwrap();
        std::fs::write(root.join(".well-known/security.txt"), b"s").unwrap();
        std::os::unix::fs::symlink(root.join(".env"), root.join("env-link")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let hide = |p: &[u8]| translate(&root, p, "index.html", Dotfiles::Hide);
        for p in [
            &b"/.git/config"[..],
            b"/.env",
            b"/%2eenv",
            b"/env-link",
            b"/.git/",
        ] {
            assert_eq!(
                hide(p).unwrap_err(),
                PathError::NotFound,
                "{}",
                String::from_utf8_lossy(p)
            );
        }
        assert!(matches!(
            hide(b"/.well-known/security.txt"),
            Ok(Translation::File(..))
        ));
        let serve = translate(&root, b"/.env", "index.html", Dotfiles::Serve);
        assert!(matches!(serve, Ok(Translation::File(..))));
    }

    #[test]
    fn slash_redirects_stay_on_this_host() {
        assert_eq!(slash_location(b"/dir"), b"/dir/");
        assert_eq!(slash_location(b"//dir"), b"/dir/");
        assert_eq!(slash_location(b"/\\\\evil.example/x"), b"/evil.example/x/");
        assert_eq!(slash_location(b"///a//b"), b"/a//b/");
    }
}
