//! The `Date` header line, formatted once per second and shared (DESIGN.md,
//! "Performance notes": no per-request formatting).

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

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

thread_local! {
    /// This thread's line and the second it is for (empty before the first use).
    static LINE: RefCell<(u64, Bytes)> = const { RefCell::new((0, Bytes::new())) };
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
        let s = secs(now);
        LINE.with(|l| {
            let mut l = l.borrow_mut();
            if l.0 != s || l.1.is_empty() {
                *l = (s, Self::format(now));
            }
            l.1.clone()
        })
    }
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
}
