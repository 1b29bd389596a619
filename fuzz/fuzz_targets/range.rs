//! Range parsing (`proto::parse_range`) against a representation whose length the
//! input's first bytes choose (small, near 2^64, or anything). Properties checked
//! beyond "no panic":
//! - a partial range is non-empty and inside the representation;
//! - a range written back as `bytes=FIRST-LAST` is read as the same range;
//! - "unsatisfiable" is only said of a header of the `bytes=` unit;
//! - the answer for a suffix range `bytes=-N` is the last `min(N, len)` bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seda_http::proto::{ByteRange, RangeRequest, parse_range};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (len, header) = match mode % 4 {
        0 => (u64::from(mode / 4), rest),
        1 if rest.len() >= 2 => (u64::from(u16::from_le_bytes([rest[0], rest[1]])), &rest[2..]),
        2 if !rest.is_empty() => (u64::MAX - u64::from(rest[0]), &rest[1..]),
        3 if rest.len() >= 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rest[..8]);
            (u64::from_le_bytes(b), &rest[8..])
        }
        _ => (1024, rest),
    };
    match parse_range(header, len) {
        RangeRequest::Full => {}
        RangeRequest::Unsatisfiable => {
            assert!(header.trim_ascii().starts_with(b"bytes="), "{header:?}");
        }
        RangeRequest::Partial(r) => {
            assert!(r.start <= r.end && r.end < len, "{r:?} of {len}");
            assert!(r.len() >= 1 && r.len() <= len);
            let again = format!("bytes={}-{}", r.start, r.end);
            assert_eq!(parse_range(again.as_bytes(), len), RangeRequest::Partial(r));
        }
    }
    // A suffix range built from the input's bytes.
    if let Some(n) = std::str::from_utf8(header).ok().and_then(|s| s.parse::<u64>().ok()) {
        let got = parse_range(format!("bytes=-{n}").as_bytes(), len);
        let want = if n == 0 || len == 0 {
            RangeRequest::Unsatisfiable
        } else {
            RangeRequest::Partial(ByteRange {
                start: len - n.min(len),
                end: len - 1,
            })
        };
        assert_eq!(got, want, "bytes=-{n} of {len}");
    }
});
