//! Path translation (`proto::remove_dot_segments`, `url_to_relative`, `translate`,
//! `slash_location`) of any bytes as a raw URL path, against a real directory tree
//! with files, a directory without an index, dotfiles, `.well-known`, and symlinks
//! inside, out of the root, to the parent, to hidden files, and in a loop. Properties
//! checked beyond "no panic":
//! - dot-segment removal is idempotent, keeps the leading `/`, leaves no `.` or `..`
//!   segment, and never lengthens a path by more than the trailing `/` of a final
//!   dot segment; `translate` acts on the path it gives;
//! - a relative path has only plain segments (no root, `.`, `..`), so joining it to the
//!   root stays under the root; hidden segments never pass `Dotfiles::Hide`;
//! - hiding dotfiles only ever refuses more: what `Hide` accepts, `Serve` accepts alike;
//! - a translated file is canonical, a regular file, inside the canonical root, never
//!   the secret beside the root, not hidden under `Hide`, and named with a trailing
//!   `/` only when the path is a directory (its index);
//! - a redirect location starts with exactly one `/` (never `//host` or `/\host`) and
//!   ends with `/`; a refusal of the URL is the refusal `translate` gives.
#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use seda_http::proto::{
    Dotfiles, PathError, Translation, remove_dot_segments, slash_location, translate,
    url_to_relative,
};

struct Fixture {
    root: PathBuf,
    secret: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // Under this package's target/ (ignored by git), made idempotently so that
        // parallel fuzz jobs can share it.
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/path-fixture");
        let root = base.join("root");
        for d in ["dir", "nodex", ".git", ".well-known"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for (f, text) in [
            ("index.html", "home"),
            ("a.txt", "a"),
            ("dir/index.html", "dir"),
            ("dir/b.txt", "b"),
            (".env", "SECRET=1"),
            (".git/config", "[core]"),
            (".well-known/x.txt", "x"),
        ] {
            std::fs::write(root.join(f), text).unwrap();
        }
        let secret = base.join("secret.txt");
        std::fs::write(&secret, "TOP-SECRET").unwrap();
        for (link, to) in [
            ("in_link", "a.txt"),
            ("out_link", "../secret.txt"),
            ("up_link", ".."),
            ("hidden_link", ".env"),
            ("hidden_dir_link", ".git"),
            ("loop", "loop"),
            ("dir/back", "../dir"),
        ] {
            match std::os::unix::fs::symlink(to, root.join(link)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("symlink {link}: {e}"),
            }
        }
        Fixture {
            root: std::fs::canonicalize(&root).unwrap(),
            secret: std::fs::canonicalize(&secret).unwrap(),
        }
    })
}

fn hidden(s: &std::ffi::OsStr) -> bool {
    let b = s.as_encoded_bytes();
    b.first() == Some(&b'.') && b != b".well-known"
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let loc = slash_location(data);
    assert!(loc.len() >= 2 && loc[0] == b'/' && loc.last() == Some(&b'/'), "{loc:?}");
    assert!(loc[1] != b'/' && loc[1] != b'\\' || loc.len() == 2, "{loc:?}");

    let norm = match remove_dot_segments(data) {
        Ok(n) => n.into_owned(),
        Err(e) => {
            assert_eq!(e, PathError::Malformed);
            for mode in [Dotfiles::Hide, Dotfiles::Serve] {
                let t = translate(&f.root, data, "index.html", mode);
                assert_eq!(t.err(), Some(PathError::Malformed), "translate of a path above the root");
            }
            return;
        }
    };
    if data.first() == Some(&b'/') {
        assert_eq!(norm.first(), Some(&b'/'));
        assert!(norm.len() <= data.len() + 1, "{norm:?} longer than {data:?}");
        assert_eq!(remove_dot_segments(&norm).unwrap().as_ref(), &norm[..], "idempotent");
        for seg in norm.split(|&c| c == b'/') {
            let lower = seg.to_ascii_lowercase();
            assert!(
                !matches!(&lower[..], b"." | b".." | b"%2e" | b"%2e%2e" | b".%2e" | b"%2e."),
                "{norm:?} keeps a dot segment"
            );
        }
    } else {
        assert_eq!(norm, data, "only absolute paths are normalised");
    }
    let data = &norm[..];
    let served = url_to_relative(data, Dotfiles::Serve);
    for mode in [Dotfiles::Hide, Dotfiles::Serve] {
        let rel = url_to_relative(data, mode);
        if let Ok(rel) = &rel {
            for c in rel.components() {
                let Component::Normal(s) = c else { panic!("{c:?} in {rel:?}") };
                assert!(mode == Dotfiles::Serve || !hidden(s), "{rel:?} under Hide");
            }
            assert!(f.root.join(rel).starts_with(&f.root));
            assert_eq!(served.as_ref().ok(), Some(rel), "Hide accepts what Serve refuses");
        }
        match (translate(&f.root, data, "index.html", mode), rel) {
            (Err(e), Err(r)) => assert_eq!(e, r, "the URL's refusal is translate's"),
            (_, Err(r)) => panic!("url_to_relative refused ({r:?}), translate did not"),
            (Err(_), Ok(_)) => {}
            (Ok(Translation::File(p, meta)), Ok(rel)) => {
                assert!(meta.is_file(), "{p:?}");
                assert!(p.starts_with(&f.root) && p != f.secret, "{p:?} escapes the root");
                assert_eq!(std::fs::canonicalize(&p).unwrap(), p, "{p:?} not canonical");
                let inside = p.strip_prefix(&f.root).unwrap();
                assert!(
                    mode == Dotfiles::Serve || !inside.iter().any(hidden),
                    "{p:?} served under Hide"
                );
                let lower = data.to_ascii_lowercase();
                assert!(
                    !(lower.ends_with(b"/") || lower.ends_with(b"%2f")) || f.root.join(&rel).is_dir(),
                    "{p:?} served under a directory spelling"
                );
            }
            (Ok(Translation::AddSlash(loc)), Ok(_)) => {
                assert_eq!(loc, slash_location(data));
                let lower = data.to_ascii_lowercase();
                assert!(!lower.ends_with(b"/") && !lower.ends_with(b"%2f"));
            }
        }
    }
});
