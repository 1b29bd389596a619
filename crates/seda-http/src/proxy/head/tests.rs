use super::*;
use crate::proto::{Limits, parse_head};

fn forwarded(raw: &[u8], prefix: &str, base: Option<&str>, body: RequestBody) -> String {
    let head = parse_head(raw, &Limits::default()).unwrap().unwrap();
    let f = Forward {
        prefix,
        base,
        authority: "up:81",
        peer: "192.0.2.7:5555".parse().unwrap(),
        scheme: "http",
        body,
    };
    String::from_utf8(request_head(raw, &head, &f).to_vec()).unwrap()
}

#[test]
fn the_forwarded_head_is_normalised() {
    let got = forwarded(
        b"GET http://front/api/x?q=1 HTTP/1.1\r\nHost: front\r\nConnection: close, X-A\r\nX-A: 1\r\nProxy-Connection: keep-alive\r\nX-Forwarded-Proto: https\r\nVia: 1.0 other\r\nX-B: 2\r\n\r\n",
        "/api",
        None,
        RequestBody::None,
    );
    assert_eq!(
        got,
        "GET /api/x?q=1 HTTP/1.1\r\nHost: front\r\nX-B: 2\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nVia: 1.0 other, 1.1 seda\r\n\r\n"
    );
}

#[test]
fn a_base_path_replaces_the_prefix() {
    let raw = b"GET /api/users HTTP/1.1\r\nHost: h\r\n\r\n";
    let line = |base| {
        forwarded(raw, "/api", base, RequestBody::None)
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(line(Some("/v1")), "GET /v1/users HTTP/1.1");
    assert_eq!(line(Some("/")), "GET /users HTTP/1.1");
    let raw = b"GET /api HTTP/1.1\r\nHost: h\r\n\r\n";
    let got = forwarded(raw, "/api", Some("/v1"), RequestBody::None);
    assert!(got.starts_with("GET /v1/ HTTP/1.1"), "{got}");
    // The prefix matched only decoded: the rest is forwarded re-encoded.
    let raw = b"GET /%61pi/a%20b HTTP/1.1\r\nHost: h\r\n\r\n";
    let got = forwarded(raw, "/api", Some("/v1"), RequestBody::None);
    assert!(got.starts_with("GET /v1/a%20b HTTP/1.1"), "{got}");
}

#[test]
fn the_upstream_framing_is_ours_alone() {
    let raw = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    let got = forwarded(raw, "/", None, RequestBody::Length(5));
    assert_eq!(got.matches("Content-Length").count(), 1, "{got}");
    assert!(
        got.contains("Content-Length: 5\r\n") && !got.contains("Expect"),
        "{got}"
    );
    let raw = b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    let got = forwarded(raw, "/", None, RequestBody::Chunked);
    assert_eq!(got.matches("Transfer-Encoding").count(), 1, "{got}");
    let raw = b"POST /a HTTP/1.1\r\nHost: h\r\n\r\n";
    let got = forwarded(raw, "/", None, RequestBody::None);
    assert!(got.contains("Content-Length: 0\r\n"), "{got}");
    let raw = b"GET /a HTTP/1.0\r\n\r\n";
    let got = forwarded(raw, "/", None, RequestBody::None);
    assert!(
        got.contains("Host: up:81\r\n") && got.contains("Via: 1.0 seda"),
        "{got}"
    );
}

#[test]
fn upstream_responses_are_parsed_strictly() {
    let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Keep: 2\r\n\r\nabc", false)
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.status, r.body, r.keep_alive),
        (200, ResponseBody::Length(3), true)
    );
    assert_eq!(r.out, b"HTTP/1.1 200 OK\r\nX-Keep: 2\r\n");
    assert!(matches!(
        parse_response(b"HTTP/1.1 200 OK\r\nContent-Le", false),
        Ok(None)
    ));
    for (bytes, why) in [
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            BadResponse::Framing,
        ),
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"[..],
            BadResponse::Framing,
        ),
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n"[..],
            BadResponse::Framing,
        ),
        (&b"SSH-2.0-OpenSSH_9\r\n\r\n"[..], BadResponse::Malformed),
        (
            &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"[..],
            BadResponse::Upgrade,
        ),
        (
            &b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n"[..],
            BadResponse::Malformed,
        ),
    ] {
        assert_eq!(
            parse_response(bytes, false).err(),
            Some(why),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let mut huge = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    huge.resize(MAX_RESPONSE_HEAD + 10, b'a');
    assert_eq!(
        parse_response(&huge, false).err(),
        Some(BadResponse::TooLarge)
    );
    // Framing by status and method.
    let r = parse_response(
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
        false,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.body, ResponseBody::None);
    let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
        .unwrap()
        .unwrap();
    assert_eq!((r.body, r.head_length), (ResponseBody::None, Some(9)));
    let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\n", false)
        .unwrap()
        .unwrap();
    assert_eq!((r.body, r.keep_alive), (ResponseBody::Close, false));
    let r = parse_response(b"HTTP/1.1 100 Continue\r\n\r\n", false)
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 100);
}

#[test]
fn the_client_head_says_one_framing_and_our_connection() {
    let r = parse_response(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n",
        false,
    )
    .unwrap()
    .unwrap();
    let body = r.body;
    let h = client_head(r, ClientBody::of(body, Version::Http11), false);
    assert_eq!(
        &h[..],
        b"HTTP/1.1 200 OK\r\nX: y\r\nVia: 1.1 seda\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    );
    assert_eq!(ClientBody::of(body, Version::Http10), ClientBody::Close);
    let r = parse_response(b"HTTP/1.1 204 \r\n\r\n", false)
        .unwrap()
        .unwrap();
    let h = client_head(r, ClientBody::None, true);
    assert!(
        h.starts_with(b"HTTP/1.1 204 No Content\r\n") && h.ends_with(b"Connection: close\r\n\r\n")
    );
}

#[test]
fn integers_are_written_without_fmt_as_fmt_would() {
    for n in [0u64, 7, 9, 10, 99, 100, 1024, 65_535, 1 << 40, u64::MAX] {
        let mut out = b"x".to_vec();
        push_decimal(&mut out, n);
        assert_eq!(out, format!("x{n}").into_bytes());
    }
    for n in [1usize, 9, 10, 15, 16, 255, 0xabc, 65_536, usize::MAX] {
        assert_eq!(&chunk_header(n)[..], format!("{n:x}\r\n").as_bytes());
    }
    let r = parse_response(b"HTTP/1.1 404 Nope\r\nContent-Length: 12345\r\n\r\n", false)
        .unwrap()
        .unwrap();
    let body = r.body;
    let h = client_head(r, ClientBody::of(body, Version::Http11), false);
    assert_eq!(
        &h[..],
        b"HTTP/1.1 404 Nope\r\nVia: 1.1 seda\r\nContent-Length: 12345\r\nConnection: keep-alive\r\n\r\n"
    );
}

#[test]
fn the_forwarded_for_address_is_written_for_both_families() {
    let raw = b"POST /api HTTP/1.0\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n";
    let head = parse_head(raw, &Limits::default()).unwrap().unwrap();
    for (peer, want) in [
        ("0.0.0.0:1", "0.0.0.0"),
        ("255.10.0.99:2", "255.10.0.99"),
        ("[2001:db8::7]:3", "2001:db8::7"),
    ] {
        let f = Forward {
            prefix: "/api",
            base: None,
            authority: "up",
            peer: peer.parse().unwrap(),
            scheme: "https",
            body: RequestBody::Length(300),
        };
        let got = String::from_utf8(request_head(raw, &head, &f).to_vec()).unwrap();
        assert!(
            got.contains(&format!(
                "X-Forwarded-For: 10.0.0.1, {want}\r\nX-Forwarded-Proto: https\r\nVia: 1.0 seda\r\nContent-Length: 300\r\n\r\n"
            )),
            "{got}"
        );
    }
}
