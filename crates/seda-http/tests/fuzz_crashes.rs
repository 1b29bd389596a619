//! Regression tests for the crashes the fuzz targets found (`fuzz/run.sh`), one test
//! per crash, named after the bug, with the crashing input (as the target's harness
//! sees it) and the property it broke. Each failed before its fix.

use seda_http::proto::{
    ByteRange, Limits, ParseError, RangeRequest, parse_head, parse_range, skip_leading_crlf,
};

/// The small limits of the `request_head` target (so that 414 and 431 are reached).
fn small() -> Limits {
    Limits::default()
        .with_max_request_line(64)
        .with_max_head_bytes(256)
        .with_max_headers(8)
        .with_max_body(1000)
}

/// The `request_head` target's property: the answer does not depend on how the bytes
/// arrived (every prefix is "need more" or the whole buffer's answer).
fn assert_same_however_it_arrives(data: &[u8], limits: &Limits) {
    let buf = &data[skip_leading_crlf(data)..];
    let whole = parse_head(buf, limits);
    for k in 1..buf.len() {
        let part = parse_head(&buf[..k], limits);
        assert!(
            matches!(part, Ok(None)) || part == whole,
            "prefix of {k} of {} bytes: {part:?}, whole: {whole:?}",
            buf.len()
        );
    }
}

#[test]
fn request_head_error_past_the_head_limit_is_431_however_it_arrives() {
    // crash-76b2432c: a head past max_head_bytes with a stray CR past the limit was 431
    // when its first 287 bytes came alone and 400 when it came whole.
    let crash: &[u8] = b"POST /test.html HTTP/1.1\r\nHost: desync.test\r\nUser-Agent:  Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:68.0) Gecko/20100101 Firefox/68.0\r\nAccept:  text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language:  en-US,en;q=0.5\r\nAccept-Encoding:  gzip, deflate\r\nContent-Type:  application/x-www-form-urlencoded\r\nConnection:  keep-alive\r\nUpgrade-Insecure-Requests:  1\r\n\rTransfer-Encoding:  chunked\r\n\r\n";
    assert_eq!(
        parse_head(crash, &small()),
        Err(ParseError::HeadersTooLarge)
    );
    assert_same_however_it_arrives(crash, &small());
    // Within the limit the same stray CR is a 400.
    let short = b"GET / HTTP/1.1\r\nHost: h\r\n\rX: 1\r\n\r\n";
    assert_eq!(parse_head(short, &small()), Err(ParseError::Malformed));
}

#[test]
fn request_head_garbage_is_400_however_much_of_it_arrived() {
    // crash-f736f514: `PO` and NUL bytes with no line end were a 400 at 39 bytes and a
    // 414 once past max_request_line.
    let mut crash = b"PO".to_vec();
    crash.extend_from_slice(&[0; 82]);
    crash.extend_from_slice(b"ST /foo/bar HTTP/1.1\r\xffHost: desync.test\r\nTransfer-Encoding: gziw , deflate , \tidentity\t, c\x7fmpress\t, c\n\r\n");
    assert_eq!(parse_head(&crash, &small()), Err(ParseError::Malformed));
    assert_same_however_it_arrives(&crash, &small());
    // A plausible request line that is too long is still a 414.
    let long = format!("GET /{}", "a".repeat(100));
    assert_eq!(
        parse_head(long.as_bytes(), &small()),
        Err(ParseError::UriTooLong)
    );
}

#[test]
fn request_head_overlong_method_is_400_with_or_without_its_line_end() {
    // crash-e726cc92: a 46-byte method token (`TTT...TPOST`) was a 400 while its line
    // was arriving (too long to be a method) and, once the line end came, was parsed
    // and answered by its framing (the unsupported transfer coding's 501).
    let mut crash = vec![b'T'; 46];
    crash.extend_from_slice(b"POST /foo/bar HTTP/1.1\r\nHost: desync.test\r\nTransfer-Encoding: gzip , deflate , \tidentity\t, compress\t, chunked\r\n\r\n");
    for limits in [small(), Limits::default()] {
        assert_eq!(parse_head(&crash, &limits), Err(ParseError::Malformed));
        assert_same_however_it_arrives(&crash, &limits);
    }
    // A method of 32 bytes is still a method (405 or 501 is the server's business).
    let long_method = format!("{} / HTTP/1.1\r\nHost: h\r\n\r\n", "M".repeat(32));
    assert!(matches!(
        parse_head(long_method.as_bytes(), &Limits::default()),
        Ok(Some(_))
    ));
}

#[test]
fn range_positions_past_u64_are_read_as_past_the_end() {
    // crash-c9e845ef: `bytes=-18446744073709551615` (20 digits) was ignored (200) where
    // `bytes=-9999999999999999999` (19) gave the whole representation as a 206.
    let p = |h: &str| parse_range(h.as_bytes(), 16);
    let all = RangeRequest::Partial(ByteRange { start: 0, end: 15 });
    assert_eq!(p("bytes=-18446744073709551615"), all);
    assert_eq!(p("bytes=-9999999999999999999"), all);
    assert_eq!(p("bytes=-123456789012345678901234567890"), all);
    assert_eq!(p("bytes=0-123456789012345678901234567890"), all);
    assert_eq!(
        p("bytes=123456789012345678901234567890-"),
        RangeRequest::Unsatisfiable
    );
    assert_eq!(
        p("bytes=123456789012345678901234567890-5"),
        RangeRequest::Full
    );
}
