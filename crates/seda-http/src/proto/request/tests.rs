use super::*;

/// (method, path, query, version, keep-alive, head length, body framing)
type Summary = (Method, Vec<u8>, Vec<u8>, Version, bool, usize, BodyFraming);

fn parse(buf: &[u8]) -> Result<Option<Summary>, ParseError> {
    let r = parse_head(buf, &Limits::default())?;
    Ok(r.map(|h| {
        (
            h.method,
            h.path(buf).to_vec(),
            h.get(buf, &h.query).to_vec(),
            h.version,
            h.keep_alive,
            h.head_len,
            h.body,
        )
    }))
}

fn code(buf: &[u8]) -> u16 {
    parse(buf).unwrap_err().status().code()
}

#[test]
fn simple_get() {
    let (m, p, q, v, ka, n, body) = parse(b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(
        (m, p.as_slice(), q.as_slice(), v, ka, n, body),
        (
            Method::Get,
            &b"/a/b"[..],
            &b"x=1"[..],
            Version::Http11,
            true,
            34,
            BodyFraming::None
        )
    );
}

#[test]
fn incomplete_needs_more() {
    assert_eq!(parse(b"GET /a HTTP/1.1\r\nHost: h\r\n").unwrap(), None);
    assert_eq!(parse(b"GE").unwrap(), None);
    assert_eq!(parse(b"").unwrap(), None);
}

#[test]
fn keep_alive_rules() {
    let ka = |b: &[u8]| parse(b).unwrap().unwrap().4;
    assert!(ka(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    ));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n"
    ));
    assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
}

#[test]
fn pipelined_requests_parse_in_turn() {
    let buf = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n";
    let mut at = 0;
    let mut paths = Vec::new();
    while at < buf.len() {
        let h = parse_head(&buf[at..], &Limits::default()).unwrap().unwrap();
        paths.push(h.path(&buf[at..]).to_vec());
        at += h.head_len;
    }
    assert_eq!(paths, vec![b"/1".to_vec(), b"/2".to_vec(), b"/3".to_vec()]);
}

#[test]
fn error_statuses() {
    assert_eq!(code(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
    assert_eq!(code(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
    assert_eq!(code(b"GET / HTTP/1.1\r\n\r\n"), 400, "missing Host");
    assert_eq!(code(b"GET / FOO/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(code(b"\x00\x01\x02 garbage\r\n\r\n"), 400);
    assert_eq!(
        code(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n"),
        400
    );
    assert_eq!(
        code(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        400
    );
    assert_eq!(code(b"GET foo HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(code(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    let long = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(9000));
    assert_eq!(code(long.as_bytes()), 414);
    let long_partial = format!("GET /{}", "a".repeat(9000));
    assert_eq!(code(long_partial.as_bytes()), 414);
    let big = format!(
        "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
        "v".repeat(17000)
    );
    assert_eq!(code(big.as_bytes()), 431);
    let big_partial = format!("GET / HTTP/1.1\r\nHost: h\r\nX: {}", "v".repeat(17000));
    assert_eq!(code(big_partial.as_bytes()), 431);
    let many: String = (0..70).map(|i| format!("X-{i}: v\r\n")).collect();
    assert_eq!(
        code(format!("GET / HTTP/1.1\r\nHost: h\r\n{many}\r\n").as_bytes()),
        431
    );
    let body = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999\r\n\r\n";
    assert_eq!(code(body), 413);
}

#[test]
fn transfer_encoding_rules() {
    let framing = |b: &[u8]| parse(b).unwrap().unwrap().6;
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n"),
        501
    );
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        501,
        "a coding we cannot decode"
    );
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        400,
        "chunked not last"
    );
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400,
        "chunked twice"
    );
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
        400,
        "both framings: a smuggling attempt"
    );
    assert_eq!(
        code(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"),
        BodyFraming::None
    );
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n"),
        BodyFraming::Length(5)
    );
}

#[test]
fn host_must_be_a_valid_authority() {
    let ok = |host: &str| {
        parse(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .is_ok_and(|h| h.is_some())
    };
    for good in [
        "example.com",
        "example.com:8080",
        "127.0.0.1",
        "[::1]",
        "[::1]:80",
        "xn--bcher-kva.example",
        "",
    ] {
        assert!(ok(good), "{good:?} refused");
    }
    for bad in [
        "a b", "a/b@c", "a@b", "h:port", "h:123456", "[::1", "[zz]", "a\\b",
    ] {
        assert!(!ok(bad), "{bad:?} accepted");
    }
    assert_eq!(
        code(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
        400,
        "two Host fields"
    );
}

#[test]
fn desync_guardian_near_miss_framing_names_are_rejected() {
    // http_desync_guardian, ambiguous.yaml: "Transfer_Encoding with underscore.",
    // "Content_Length with underscore.", "... multiple hyphens", "... multiple delimiters".
    for name in [
        &b"Transfer_Encoding"[..],
        b"Content_Length",
        b"Transfer---Encoding",
        b"Transfer___Encoding",
        b"content.length",
    ] {
        let mut req = b"POST / HTTP/1.1\r\nHost: h\r\n".to_vec();
        req.extend_from_slice(name);
        req.extend_from_slice(b": chunked\r\n\r\n");
        assert_eq!(
            parse(&req),
            Err(ParseError::Malformed),
            "{}",
            String::from_utf8_lossy(name)
        );
    }
    // Ordinary long names, and names that only contain a framing name, still pass.
    for name in [
        &b"Accept-Language"[..],
        b"X-Content-Length-Hint",
        b"Content-Type",
    ] {
        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        req.extend_from_slice(name);
        req.extend_from_slice(b": 1\r\n\r\n");
        assert!(
            parse(&req).unwrap().is_some(),
            "{}",
            String::from_utf8_lossy(name)
        );
    }
}

#[test]
fn desync_guardian_space_in_uri_is_400_not_505() {
    // http_desync_guardian, uri-specific-test-cases.yaml: "[space] in URI". httparse
    // reads `escaped` as the version; the line is malformed, not of another version.
    let req = b"GET /endpoint_a?param=not escaped spaces HTTP/1.1\r\nHost: h\r\n\r\n";
    assert_eq!(code(req), 400);
    assert_eq!(code(b"GET /a HTTP/1.1 HTTP/2.0\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(code(b"GET /a HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
    assert_eq!(code(b"GET /a HTTP/0.9\r\n\r\n"), 505);
}

#[test]
fn later_minor_versions_are_http11_and_other_majors_505() {
    let (.., v, ka, _, _) = parse(b"GET / HTTP/1.2\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((v, ka), (Version::Http11, true));
    let (.., v, _, _, _) = parse(b"GET / HTTP/1.9\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(v, Version::Http11);
    assert_eq!(code(b"GET / HTTP/3.0\r\nHost: h\r\n\r\n"), 505);
    assert_eq!(code(b"GET / HTTP/1.10\r\nHost: h\r\n\r\n"), 400);
}

#[test]
fn bare_lf_in_the_head_is_rejected() {
    assert_eq!(code(b"GET / HTTP/1.1\nHost: h\r\n\r\n"), 400);
    assert_eq!(
        code(b"GET / HTTP/1.1\r\nHost: h\nX-Hidden: 1\r\n\r\n"),
        400,
        "a field hidden after a bare LF"
    );
    assert_eq!(code(b"GET / HTTP/1.1\r\nHost: h\r\n\n"), 400);
}

#[test]
fn expectations() {
    let h = parse_head(
        b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
        &Limits::default(),
    )
    .unwrap()
    .unwrap();
    assert!(h.expect_continue);
    let h = parse_head(
        b"GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n\r\n",
        &Limits::default(),
    )
    .unwrap()
    .unwrap();
    assert!(!h.expect_continue, "nothing to continue without a body");
    let h = parse_head(
        b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
        &Limits::default(),
    )
    .unwrap()
    .unwrap();
    assert!(!h.expect_continue, "HTTP/1.0 expectations are ignored");
    assert_eq!(
        code(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: teapot\r\n\r\n"),
        417
    );
}

#[test]
fn methods() {
    let m = |b: &[u8]| parse(b).unwrap().unwrap().0;
    assert_eq!(m(b"DELETE / HTTP/1.1\r\nHost: h\r\n\r\n"), Method::Delete);
    assert_eq!(m(b"FROB / HTTP/1.1\r\nHost: h\r\n\r\n"), Method::Other);
    assert_eq!(m(b"get / HTTP/1.1\r\nHost: h\r\n\r\n"), Method::Other);
    assert_eq!(m(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), Method::Options);
}

#[test]
fn absolute_form_and_fragment() {
    let (_, p, q, ..) = parse(b"GET http://example.com/x/y?z HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((p.as_slice(), q.as_slice()), (&b"/x/y"[..], &b"z"[..]));
    let (_, p, q, ..) = parse(b"GET http://example.com HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((p.as_slice(), q.as_slice()), (&b"/"[..], &b""[..]));
    let (_, p, q, ..) = parse(b"GET http://example.com?a#f HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((p.as_slice(), q.as_slice()), (&b"/"[..], &b"a"[..]));
    let (_, p, q, ..) = parse(b"GET /p?q#frag HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((p.as_slice(), q.as_slice()), (&b"/p"[..], &b"q"[..]));
    // Origin form, split in one pass: a `?` after the fragment is the fragment's,
    // the query ends at the first `#`.
    for (target, path, query) in [
        (&b"/p#f?x"[..], &b"/p"[..], &b""[..]),
        (b"/p?a#b?c", b"/p", b"a"),
        (b"/p?", b"/p", b""),
        (b"/p#", b"/p", b""),
        (b"/?#", b"/", b""),
        (b"/a/b.c", b"/a/b.c", b""),
    ] {
        let mut req = b"GET ".to_vec();
        req.extend_from_slice(target);
        req.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
        let (_, p, q, ..) = parse(&req).unwrap().unwrap();
        assert_eq!((p.as_slice(), q.as_slice()), (path, query), "{target:?}");
    }
}

#[test]
fn dot_segments_are_removed_and_a_climb_above_the_root_is_400() {
    let buf = b"GET /sub/../a.txt?x HTTP/1.1\r\nHost: h\r\n\r\n";
    let h = parse_head(buf, &Limits::default()).unwrap().unwrap();
    assert_eq!(h.path(buf), b"/a.txt");
    assert_eq!(h.get(buf, &h.path), b"/sub/../a.txt", "the target as sent");
    assert_eq!(h.get(buf, &h.query), b"x");
    let (_, p, ..) = parse(b"GET http://e.com/a/%2e/b/. HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(p, b"/a/b/");
    let plain = b"GET /a.txt HTTP/1.1\r\nHost: h\r\n\r\n";
    let h = parse_head(plain, &Limits::default()).unwrap().unwrap();
    assert_eq!(h.normalized_path, None, "no copy for a plain path");
    for target in ["/..", "/a/../../b", "/%2E%2e", "http://e.com/../x"] {
        let req = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(code(req.as_bytes()), 400, "{target}");
    }
    assert_eq!(
        parse(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap()
            .1,
        b"*"
    );
}

#[test]
fn header_fields_and_conditionals() {
    let buf = b"GET / HTTP/1.1\r\nhost: h\r\nIf-None-Match: \"a\"\r\nif-modified-since: x\r\nRange:  bytes=0-1 \r\n\r\n";
    let h = parse_head(buf, &Limits::default()).unwrap().unwrap();
    assert_eq!(h.get(buf, h.if_none_match.as_ref().unwrap()), b"\"a\"");
    assert_eq!(h.get(buf, h.if_modified_since.as_ref().unwrap()), b"x");
    assert_eq!(h.get(buf, h.range.as_ref().unwrap()), b"bytes=0-1");
    let fields: Vec<_> = h.fields(buf).collect();
    assert_eq!(fields.len(), 4);
    assert_eq!(fields[3], (&b"Range"[..], &b"bytes=0-1"[..]));
}

#[test]
fn leading_empty_lines_are_skipped() {
    assert_eq!(skip_leading_crlf(b"\r\n\r\nGET"), 4);
    assert_eq!(skip_leading_crlf(b"GET"), 0);
}

proptest::proptest! {
    #[test]
    fn parser_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
        let limits = Limits { max_request_line: 64, max_head_bytes: 512, max_headers: 4, max_body: 10 };
        if let Ok(Some(h)) = parse_head(&bytes, &limits) {
            proptest::prop_assert!(h.head_len <= bytes.len());
            proptest::prop_assert!(h.head_len <= 512);
            proptest::prop_assert!(h.path.end <= h.head_len && h.query.end <= h.head_len);
            let _ = h.fields(&bytes).count();
        }
    }

    #[test]
    fn parser_never_panics_on_request_like_bytes(
        line in "(GET|HEAD|POST|X) [ -~]{0,40} HTTP/[0-9]\\.[0-9]",
        headers in proptest::collection::vec("[ -~]{0,30}", 0..6),
    ) {
        let text = format!("{line}\r\n{}\r\n", headers.join("\r\n"));
        let _ = parse_head(text.as_bytes(), &Limits::default());
    }
}

#[test]
fn a_bare_lf_is_found_wherever_it_is() {
    assert!(!has_bare_lf(b""));
    assert!(!has_bare_lf(b"\r\n"));
    assert!(!has_bare_lf(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(has_bare_lf(b"\n"));
    assert!(has_bare_lf(b"\nGET"));
    assert!(has_bare_lf(b"GET / HTTP/1.1\r\nX: a\nHost: h\r\n\r\n"));
    assert!(has_bare_lf(b"GET / HTTP/1.1\r\n\n"));
    assert!(has_bare_lf(b"\r\r\n\n"));
}
