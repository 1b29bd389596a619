//! The request-head parser (`proto::parse_head`), fed any bytes as a connection's
//! buffer, with the default limits and with small ones (so that 414 and 431 are
//! reached). Properties checked beyond "no panic":
//! - a parsed head's ranges lie inside `..head_len`, and `head_len` within the limit;
//! - the answer does not depend on how the bytes arrived: every prefix of the buffer
//!   is answered "need more" or exactly as the whole buffer (the server re-parses its
//!   buffer as each read arrives, so otherwise TCP segmentation would change it);
//! - the head alone (without what follows its blank line) parses the same;
//! - a parsed head written out again (request line, fields) parses to the same
//!   request: method, target, version, keep-alive, framing, expectations, `Host`, the
//!   conditional and range fields, and the fields themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seda_http::proto::{Limits, RequestHead, parse_head, skip_leading_crlf};

fuzz_target!(|data: &[u8]| {
    check(data, &Limits::default());
    check(
        data,
        &Limits::default()
            .with_max_request_line(64)
            .with_max_head_bytes(256)
            .with_max_headers(8)
            .with_max_body(1000),
    );
});

fn check(data: &[u8], limits: &Limits) {
    let buf = &data[skip_leading_crlf(data)..];
    if buf.is_empty() {
        return;
    }
    let whole = parse_head(buf, limits);
    for k in split_points(buf) {
        let part = parse_head(&buf[..k], limits);
        assert!(
            matches!(part, Ok(None)) || part == whole,
            "prefix of {k} of {} bytes: {part:?}, whole: {whole:?}",
            buf.len()
        );
    }
    let Ok(Some(head)) = &whole else { return };
    assert!(head.head_len <= buf.len() && head.head_len <= limits.max_head_bytes);
    for r in ranges(head) {
        assert!(
            r.start <= r.end && r.end <= head.head_len,
            "{r:?} past {}",
            head.head_len
        );
    }
    assert_eq!(&parse_head(&buf[..head.head_len], limits), &whole);
    // The rewrite may be a little longer (`name:v` becomes `name: v`): only the size
    // limits are relaxed for it.
    let roomy = limits
        .clone()
        .with_max_request_line(usize::MAX / 4)
        .with_max_head_bytes(usize::MAX / 4);
    let again = rewrite(head, buf);
    let Ok(Some(second)) = parse_head(&again, &roomy) else {
        panic!(
            "{:?} parsed, its rewrite {:?} did not: {:?}",
            String::from_utf8_lossy(&buf[..head.head_len]),
            String::from_utf8_lossy(&again),
            parse_head(&again, &roomy)
        );
    };
    assert_eq!(meaning(head, buf), meaning(&second, &again));
}

/// A few cut points, the same for the same input: both sides of the blank line and
/// some spread by a hash of the bytes.
fn split_points(buf: &[u8]) -> Vec<usize> {
    let n = buf.len();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in buf {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut points = vec![1, n / 2, n.saturating_sub(1)];
    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
        points.extend([end + 3, end + 4]);
    }
    for _ in 0..4 {
        h = h.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        points.push((h % n as u64) as usize);
    }
    points.retain(|&k| k > 0 && k < n);
    points
}

fn ranges(h: &RequestHead) -> Vec<std::ops::Range<usize>> {
    let mut v = vec![h.method_token.clone(), h.path.clone(), h.query.clone()];
    v.extend(
        [
            &h.host,
            &h.if_none_match,
            &h.if_modified_since,
            &h.range,
            &h.if_range,
        ]
        .into_iter()
        .flatten()
        .cloned(),
    );
    v
}

/// The head written out as a client would send it: method, path and query, the
/// version we understood, every field as `name: value`.
fn rewrite(h: &RequestHead, buf: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(h.get(buf, &h.method_token));
    out.push(b' ');
    out.extend_from_slice(h.path(buf));
    let query = h.get(buf, &h.query);
    if !query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(query);
    }
    out.push(b' ');
    out.extend_from_slice(h.version.as_str().as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in h.fields(buf) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Everything a request means, as owned values (ranges resolved against their buffer).
fn meaning(h: &RequestHead, buf: &[u8]) -> String {
    let opt = |r: &Option<std::ops::Range<usize>>| r.as_ref().map(|r| h.get(buf, r).to_vec());
    let fields: Vec<(Vec<u8>, Vec<u8>)> = h
        .fields(buf)
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    format!(
        "{:?}",
        (
            (
                h.method,
                h.get(buf, &h.method_token),
                h.path(buf),
                h.get(buf, &h.query)
            ),
            (h.version, h.keep_alive, h.body, h.expect_continue),
            (
                opt(&h.host),
                opt(&h.if_none_match),
                opt(&h.if_modified_since)
            ),
            (opt(&h.range), opt(&h.if_range)),
            fields,
        )
    )
}
