//! The `Date` header line, formatted once per second and shared (DESIGN.md,
//! "Performance notes": no per-request formatting).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::RwLock;

/// Formats a time as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

/// A `Date: ...\r\n` line, reformatted at most once per second.
#[derive(Debug)]
pub struct DateCache {
    line: RwLock<(u64, Bytes)>,
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    /// A cache holding the current second's line.
    pub fn new() -> Self {
        let now = SystemTime::now();
        DateCache {
            line: RwLock::new((secs(now), Self::format(now))),
        }
    }

    fn format(t: SystemTime) -> Bytes {
        Bytes::from(format!("Date: {}\r\n", http_date(t)))
    }

    /// The `Date: ...\r\n` line for now (a cheap reference-counted clone).
    pub fn line(&self) -> Bytes {
        let now = SystemTime::now();
        let s = secs(now);
        {
            let cur = self.line.read();
            if cur.0 == s {
                return cur.1.clone();
            }
        }
        let mut cur = self.line.write();
        if cur.0 != s {
            *cur = (s, Self::format(now));
        }
        cur.1.clone()
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
