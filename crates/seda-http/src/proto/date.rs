//! The `Date` header line, formatted once per second and shared (DESIGN.md,
//! "Performance notes": no per-request formatting).

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

/// Formats a time as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

/// A `Date: ...\r\n` line, reformatted at most once per second.
///
/// Each thread keeps its own copy: the threads that frame responses (one per
/// event loop) share no lock and no reference count, so they do not pass a cache
/// line back and forth on every response.
#[derive(Debug, Default)]
pub struct DateCache {
    _private: (),
}

/// This thread's line and the wall-clock second it is for.
struct Line {
    /// The start of the next second: the line is stale from then on (or before
    /// `from`, if the wall clock was set back). Kept as instants, so that the
    /// common case is two comparisons, not a subtraction from `UNIX_EPOCH` (a
    /// `Timespec` subtraction is ~37 instructions under callgrind, per response).
    from: SystemTime,
    until: SystemTime,
    bytes: Bytes,
}

thread_local! {
    /// This thread's line (`None` before the first use).
    static LINE: RefCell<Option<Line>> = const { RefCell::new(None) };
}

impl DateCache {
    /// A cache of the current second's line.
    pub fn new() -> Self {
        DateCache { _private: () }
    }

    fn format(t: SystemTime) -> Bytes {
        Bytes::from(format!("Date: {}\r\n", http_date(t)))
    }

    /// The `Date: ...\r\n` line for now (a cheap reference-counted clone).
    pub fn line(&self) -> Bytes {
        let now = SystemTime::now();
        LINE.with(|l| {
            let mut l = l.borrow_mut();
            match &*l {
                Some(line) if line.from <= now && now < line.until => line.bytes.clone(),
                _ => {
                    let line = Self::line_for(now);
                    let bytes = line.bytes.clone();
                    *l = Some(line);
                    bytes
                }
            }
        })
    }

    /// The line of the second `now` falls in.
    #[cold]
    fn line_for(now: SystemTime) -> Line {
        let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let from = UNIX_EPOCH + Duration::from_secs(since.as_secs());
        Line {
            from,
            until: from + Duration::from_secs(1),
            bytes: Self::format(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_is_a_valid_date_header() {
        let c = DateCache::new();
        let l = c.line();
        let s = std::str::from_utf8(&l).unwrap();
        assert!(s.starts_with("Date: ") && s.ends_with(" GMT\r\n"), "{s}");
        let parsed = httpdate::parse_http_date(s.trim_start_matches("Date: ").trim_end()).unwrap();
        let age = SystemTime::now().duration_since(parsed).unwrap_or_default();
        assert!(age.as_secs() <= 2);
    }

    /// A line covers exactly its own second: the instants just before and at its
    /// end, and before its start (a clock set back), get their own second's date.
    #[test]
    fn a_line_covers_its_second_only() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37
        let line = DateCache::line_for(t + Duration::from_millis(250));
        assert_eq!(&line.bytes[..], b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        assert_eq!((line.from, line.until), (t, t + Duration::from_secs(1)));
        let next = DateCache::line_for(line.until);
        assert_eq!(&next.bytes[..], b"Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
    }
}
