//! Validators, conditional requests, byte ranges and response heads.
//!
//! # Invariants
//! - A [`ByteRange`] returned by [`parse_range`] is non-empty and lies inside the
//!   representation: `start <= end < len`.
//! - `If-None-Match` takes precedence over `If-Modified-Since` (RFC 9110 13.2.2).

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::request::trim;
use super::status::Status;

/// The validators of a file: a strong ETag and its modification time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validators {
    /// Quoted strong entity tag, e.g. `"5f3a1c-400"`.
    pub etag: String,
    /// Modification time, truncated to whole seconds (HTTP dates have no fraction).
    pub last_modified: SystemTime,
}

impl Validators {
    /// Validators of a file from its size, modification time and inode.
    pub fn of(len: u64, mtime: SystemTime, ino: u64) -> Self {
        let secs = mtime.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Validators {
            etag: format!("\"{secs:x}-{len:x}-{ino:x}\""),
            last_modified: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }
}

/// Outcome of the conditional headers of a GET/HEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conditional {
    /// Send the representation (maybe a range of it).
    Send,
    /// Answer 304 Not Modified.
    NotModified,
}

/// Whether an `If-None-Match` value matches `etag` (weak comparison, `*` matches).
pub fn etag_matches(header: &[u8], etag: &str) -> bool {
    let etag = etag.as_bytes();
    let strip_weak = |t: &[u8]| -> Vec<u8> { t.strip_prefix(b"W/").unwrap_or(t).to_vec() };
    let own = strip_weak(etag);
    header
        .split(|&c| c == b',')
        .map(trim)
        .any(|t| t == b"*" || strip_weak(t) == own)
}

/// RFC 9110 13.2.2 for GET and HEAD: If-None-Match, else If-Modified-Since.
pub fn evaluate_conditional(
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    v: &Validators,
) -> Conditional {
    if let Some(inm) = if_none_match {
        return if etag_matches(inm, &v.etag) {
            Conditional::NotModified
        } else {
            Conditional::Send
        };
    }
    if let Some(ims) = if_modified_since.and_then(|b| std::str::from_utf8(b).ok()) {
        if let Ok(since) = httpdate::parse_http_date(ims.trim()) {
            if v.last_modified <= since {
                return Conditional::NotModified;
            }
        }
    }
    Conditional::Send
}

/// One satisfiable byte range, inclusive bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
}

impl ByteRange {
    /// Bytes in the range.
    pub fn len(self) -> u64 {
        self.end - self.start + 1
    }

    /// Always false: a parsed range holds at least one byte.
    pub fn is_empty(self) -> bool {
        false
    }
}

/// What a `Range` header asks for, against a representation of a known length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// No usable range (absent, not `bytes`, several ranges, or malformed): send 200.
    Full,
    /// One satisfiable range: send 206.
    Partial(ByteRange),
    /// A well-formed range that misses the representation: send 416.
    Unsatisfiable,
}

/// Parses a `Range` header for a representation of `len` bytes. Only a single range
/// is honoured; a list of ranges is answered with the whole representation, which RFC
/// 9110 14.2 allows.
pub fn parse_range(header: &[u8], len: u64) -> RangeRequest {
    let h = trim(header);
    let Some(spec) = h.strip_prefix(b"bytes=") else {
        return RangeRequest::Full;
    };
    let spec = trim(spec);
    if spec.contains(&b',') {
        return RangeRequest::Full;
    }
    let Some(dash) = spec.iter().position(|&c| c == b'-') else {
        return RangeRequest::Full;
    };
    let (a, b) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    let range = match (a.is_empty(), b.is_empty()) {
        (true, true) => return RangeRequest::Full,
        (true, false) => {
            // Suffix range: the last n bytes.
            let Some(n) = range_position(b) else {
                return RangeRequest::Full;
            };
            if n == 0 || len == 0 {
                return RangeRequest::Unsatisfiable;
            }
            ByteRange {
                start: len.saturating_sub(n),
                end: len - 1,
            }
        }
        (false, _) => {
            let Some(start) = range_position(a) else {
                return RangeRequest::Full;
            };
            let end = if b.is_empty() {
                u64::MAX
            } else {
                match range_position(b) {
                    Some(e) if e >= start => e,
                    _ => return RangeRequest::Full,
                }
            };
            if start >= len {
                return RangeRequest::Unsatisfiable;
            }
            ByteRange {
                start,
                end: end.min(len - 1),
            }
        }
    };
    RangeRequest::Partial(range)
}

/// A position or suffix length of a byte range: `1*DIGIT`, saturating at `u64::MAX`
/// (a number past it still means "past the end", or "all of it" as a suffix, which
/// is what RFC 9110 14.1.2 makes of any number larger than the representation).
fn range_position(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |acc, &c| {
        acc.saturating_mul(10).saturating_add(u64::from(c - b'0'))
    }))
}

/// Writes a response head: status line, the given fields, `Content-Length` (unless
/// `None`), `Connection`, the `Date` line and the blank line.
pub fn write_head(
    out: &mut Vec<u8>,
    status: Status,
    fields: &[(&str, &str)],
    content_length: Option<u64>,
    keep_alive: bool,
    date_line: &[u8],
) {
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nServer: seda\r\n",
        status.code(),
        status.reason()
    );
    for (name, value) in fields {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    if let Some(n) = content_length {
        let _ = write!(out, "Content-Length: {n}\r\n");
    }
    out.extend_from_slice(date_line);
    out.extend_from_slice(if keep_alive {
        b"Connection: keep-alive\r\n\r\n"
    } else {
        b"Connection: close\r\n\r\n"
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> Validators {
        Validators::of(1024, UNIX_EPOCH + Duration::from_secs(1_000_000), 7)
    }

    #[test]
    fn conditional_get() {
        let val = v();
        let etag = val.etag.clone();
        let date = httpdate::fmt_http_date(val.last_modified);
        let later = httpdate::fmt_http_date(val.last_modified + Duration::from_secs(10));
        let earlier = httpdate::fmt_http_date(val.last_modified - Duration::from_secs(10));
        let c = |inm: Option<&str>, ims: Option<&str>| {
            evaluate_conditional(inm.map(str::as_bytes), ims.map(str::as_bytes), &val)
        };
        assert_eq!(c(Some(&etag), None), Conditional::NotModified);
        assert_eq!(
            c(Some(&format!("\"x\", W/{etag}")), None),
            Conditional::NotModified
        );
        assert_eq!(c(Some("*"), None), Conditional::NotModified);
        assert_eq!(
            c(Some("\"other\""), Some(&later)),
            Conditional::Send,
            "If-None-Match wins"
        );
        assert_eq!(c(None, Some(&date)), Conditional::NotModified);
        assert_eq!(c(None, Some(&later)), Conditional::NotModified);
        assert_eq!(c(None, Some(&earlier)), Conditional::Send);
        assert_eq!(c(None, Some("garbage")), Conditional::Send);
        assert_eq!(c(None, None), Conditional::Send);
    }

    #[test]
    fn ranges() {
        let p = |h: &str| parse_range(h.as_bytes(), 100);
        let r = |start, end| RangeRequest::Partial(ByteRange { start, end });
        assert_eq!(p("bytes=0-9"), r(0, 9));
        assert_eq!(p("bytes=90-"), r(90, 99));
        assert_eq!(p("bytes=90-1000"), r(90, 99));
        assert_eq!(p("bytes=-10"), r(90, 99));
        assert_eq!(p("bytes=-1000"), r(0, 99));
        assert_eq!(p("bytes=100-"), RangeRequest::Unsatisfiable);
        assert_eq!(p("bytes=-0"), RangeRequest::Unsatisfiable);
        assert_eq!(p("bytes=5-2"), RangeRequest::Full);
        assert_eq!(p("bytes=0-1,5-6"), RangeRequest::Full);
        assert_eq!(p("items=0-1"), RangeRequest::Full);
        assert_eq!(p("bytes=x-1"), RangeRequest::Full);
        assert_eq!(parse_range(b"bytes=0-0", 0), RangeRequest::Unsatisfiable);
        assert_eq!(ByteRange { start: 3, end: 3 }.len(), 1);
    }

    #[test]
    fn head_format() {
        let mut out = Vec::new();
        write_head(
            &mut out,
            Status::NOT_FOUND,
            &[("Content-Type", "text/plain")],
            Some(3),
            false,
            b"Date: x\r\n",
        );
        assert_eq!(
            out,
            b"HTTP/1.1 404 Not Found\r\nServer: seda\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nDate: x\r\nConnection: close\r\n\r\n"
        );
        assert!(Status::NOT_MODIFIED.bodiless() && !Status::OK.bodiless());
        assert_eq!(Status::from_code(42), None);
    }
}
