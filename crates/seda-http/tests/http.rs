//! HTTP behaviour of Haboob over a real loopback socket (issue 3).

mod support;

use std::io::Write;
use std::time::Duration;

use support::{Client, pattern, raw_request, start};

#[test]
fn serves_a_file_with_its_headers() {
    let s = start(|_| {});
    let r = s.connect().get("/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("13"));
    assert!(r.header("etag").is_some_and(|e| e.starts_with('"')));
    assert!(httpdate::parse_http_date(r.header("last-modified").unwrap()).is_ok());
    assert!(httpdate::parse_http_date(r.header("date").unwrap()).is_ok());
    let r = s.connect().get("/with%20space.txt");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"spaced\n"[..]),
        "percent-decoding"
    );
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let s = start(|_| {});
    let mut c = s.connect();
    for i in 0..20 {
        let path = if i % 2 == 0 {
            "/hello.txt"
        } else {
            "/one_k.bin"
        };
        let r = c.get(path);
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    assert_eq!(c.get("/one_k.bin").body, pattern(1024, 1));
}

#[test]
fn http10_closes_unless_keep_alive_and_close_is_honoured() {
    let s = start(|_| {});
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.0\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(c.is_closed());

    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        c.read_response(false).unwrap().header("connection"),
        Some("keep-alive")
    );
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    assert!(c.is_closed());
}

fn pipelined_in_order(model: seda::ThreadModel) {
    let s = start(|c| c.thread_model = model);
    let paths = [
        "/hello.txt",
        "/one_k.bin",
        "/nope",
        "/mid.bin",
        "/sub",
        "/index.html",
        "/hello.txt",
        "/big.bin",
        "/sub/",
    ];
    let mut c = s.connect();
    let mut all = Vec::new();
    for p in paths {
        all.extend_from_slice(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    c.send(&all);
    let statuses: Vec<u16> = paths
        .iter()
        .map(|_| c.read_response(false).unwrap().status)
        .collect();
    assert_eq!(statuses, vec![200, 200, 404, 200, 301, 200, 200, 200, 200]);
    // Again, now that everything is cached, with bodies checked.
    c.send(&all);
    let bodies: Vec<Vec<u8>> = paths
        .iter()
        .map(|_| c.read_response(false).unwrap().body)
        .collect();
    assert_eq!(bodies[1], pattern(1024, 1));
    assert_eq!(bodies[3], pattern(300 * 1024, 2));
    assert_eq!(bodies[5], b"<p>home</p>\n");
    assert_eq!(bodies[7], pattern(3 * 1024 * 1024 + 17, 3));
    assert_eq!(bodies[8], b"<p>sub</p>\n");
}

#[test]
fn pipelined_responses_come_in_request_order() {
    pipelined_in_order(seda::ThreadModel::PerStage);
}

#[test]
fn pipelined_responses_come_in_order_on_the_shared_thread_model() {
    pipelined_in_order(seda::ThreadModel::Shared);
}

#[test]
fn the_shared_model_leaves_blocking_stages_their_own_threads() {
    let s = start(|c| c.thread_model = seda::ThreadModel::Shared);
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").status, 200);
    let snap = s.server().runtime().snapshot();
    assert_eq!(snap.thread_model, "shared", "stats report the chosen model");
    for stage in &snap.stages {
        let blocking = ["sock-io", "file-helper", "CacheMiss"].contains(&stage.name.as_str());
        let want = if blocking { "per-stage" } else { "shared" };
        assert_eq!(stage.thread_model, want, "{}", stage.name);
    }
}

#[test]
fn large_files_arrive_byte_for_byte() {
    let s = start(|c| c.max_cached_file = 64 * 1024);
    let mut c = s.connect();
    for _ in 0..2 {
        let r = c.get("/big.bin");
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 3 * 1024 * 1024 + 17);
        assert!(
            r.body == pattern(3 * 1024 * 1024 + 17, 3),
            "streamed file differs"
        );
        let r = c.get("/mid.bin");
        assert!(r.body == pattern(300 * 1024, 2), "mid file differs");
    }
}

#[test]
fn head_has_headers_and_no_body() {
    let s = start(|_| {});
    let mut c = s.connect();
    c.send(b"HEAD /one_k.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true).unwrap();
    assert_eq!((r.status, r.header("content-length")), (200, Some("1024")));
    // The next response must start right after the head: no body was sent.
    let r = c.get("/hello.txt");
    assert_eq!(r.body, b"hello, world\n");
}

#[test]
fn conditional_get_gives_304() {
    let s = start(|_| {});
    let mut c = s.connect();
    let r = c.get("/hello.txt");
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    c.send(
        format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes(),
    );
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    c.send(
        format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: {lm}\r\n\r\n").as_bytes(),
    );
    assert_eq!(c.read_response(false).unwrap().status, 304);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"stale\"\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello, world\n"[..]));
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
}

#[test]
fn byte_ranges_give_206_and_416() {
    let s = start(|c| c.max_cached_file = 64 * 1024);
    let mut c = s.connect();
    let one_k = pattern(1024, 1);
    c.send(b"GET /one_k.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=100-199\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(
        (r.status, r.header("content-range")),
        (206, Some("bytes 100-199/1024"))
    );
    assert_eq!(r.body, &one_k[100..200]);
    c.send(b"GET /one_k.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=-24\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().body, &one_k[1000..]);
    c.send(b"GET /one_k.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=5000-\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(
        (r.status, r.header("content-range")),
        (416, Some("bytes */1024"))
    );
    // A range of a streamed (sendfile) file.
    let big = pattern(3 * 1024 * 1024 + 17, 3);
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=2000000-2000999\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 206);
    assert!(r.body == big[2_000_000..2_001_000]);
    // An If-Range that does not match gives the whole file.
    c.send(b"GET /one_k.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9\r\nIf-Range: \"old\"\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.body.len()), (200, 1024));
}

#[test]
fn directories_redirect_or_give_their_index() {
    let s = start(|_| {});
    let mut c = s.connect();
    let r = c.get("/sub");
    assert_eq!((r.status, r.header("location")), (301, Some("/sub/")));
    let r = c.get("/sub?x=1");
    assert_eq!(r.header("location"), Some("/sub/?x=1"));
    assert_eq!(c.get("/sub/").body, b"<p>sub</p>\n");
    assert_eq!(c.get("/").body, b"<p>home</p>\n");
    assert_eq!(c.get("/nodex/").status, 404);
    assert_eq!(c.get("/missing.html").status, 404);
}

#[test]
fn other_methods_get_405_with_allow() {
    let s = start(|_| {});
    let mut c = s.connect();
    c.send(b"DELETE /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    c.send(b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(c.read_response(false).unwrap().status, 405);
    assert_eq!(
        c.get("/hello.txt").status,
        200,
        "the body was skipped, the stream stays framed"
    );
}

#[test]
fn malformed_and_oversized_requests_get_their_status() {
    let s = start(|_| {});
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\x01\x02\r\n\r\n".to_vec(), 400),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), 400),
        (b"GET /%zz HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), 400),
        (
            format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(10_000)).into_bytes(),
            414,
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
                "b".repeat(20_000)
            )
            .into_bytes(),
            431,
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\n{}\r\n",
                "X: y\r\n".repeat(100)
            )
            .into_bytes(),
            431,
        ),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n".to_vec(), 505),
        (b"GET / HTTP/3.0\r\nHost: t\r\n\r\n".to_vec(), 505),
    ];
    for (raw, want) in cases {
        let mut c = Client::connect(s.addr);
        c.send(&raw);
        let r = c.read_response(false).unwrap_or_else(|| {
            panic!(
                "no response to {:?}",
                String::from_utf8_lossy(&raw[..40.min(raw.len())])
            )
        });
        assert_eq!(
            r.status,
            want,
            "{:?}",
            String::from_utf8_lossy(&raw[..40.min(raw.len())])
        );
        if want != 400 || r.header("connection") == Some("close") {
            assert!(c.is_closed(), "connection closed after {want}");
        }
    }
}

#[test]
fn nothing_outside_the_root_is_served() {
    let s = start(|_| {});
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/sub/../../secret.txt",
        "/a%00b",
        "/escape",
        "/up/secret.txt",
    ] {
        let r = raw_request(
            s.addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
        );
        assert!(
            [400, 403, 404].contains(&r.status),
            "{path} gave {}",
            r.status
        );
        assert!(!r.text().contains("TOP-SECRET"), "{path} leaked the secret");
    }
    let r = raw_request(s.addr, b"GET /escape HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 403, "a symlink out of the root is refused");
}

/// Issue 29.1: `/hello.txt/` and `/hello.txt/.` answered 200 with the file (a second
/// spelling of every file: another cache key, a way past a proxy's rules).
#[test]
fn a_file_named_as_a_directory_is_not_found() {
    let s = start(|_| {});
    for path in [
        "/hello.txt/",
        "/hello.txt/.",
        "/hello.txt//",
        "/hello.txt%2F",
        "/sub/index.html/",
        "/big.bin/",
        "/sub/../hello.txt/",
    ] {
        let r = s.connect().get(path);
        assert_eq!(r.status, 404, "{path}");
        assert!(
            !r.body.starts_with(b"hello, world"),
            "{path} served the file"
        );
    }
    assert_eq!(s.connect().get("/hello.txt").status, 200);
    assert_eq!(s.connect().get("/sub/").body, b"<p>sub</p>\n");
}

/// Issue 29.2: `/sub/../hello.txt` was a 403 (nginx serves the file); a path above
/// the root is a 400, and every spelling of a file is one key of the caches.
#[test]
fn dot_segments_are_removed_before_any_cache_key() {
    let s = start(|c| {
        c.handlers.push(seda_http::HandlerRegistration::new(
            "/api",
            |_: &seda_http::Request, _: &seda_http::HandlerContext<'_>| {
                seda_http::Response::text(seda_http::proto::Status::OK, "handler\n")
            },
        ));
    });
    for path in [
        "/hello.txt",
        "/sub/../hello.txt",
        "/./hello.txt",
        "/sub/./../hello.txt",
        "/sub/%2e%2e/hello.txt",
        "/sub/%2E./nodex/../hello.txt",
        "/api/../hello.txt",
    ] {
        let r = s.connect().get(path);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"hello, world\n"[..]),
            "{path}"
        );
    }
    let stats = s.server().haboob_stats();
    assert_eq!(
        stats.path_cache.entries, 1,
        "one translation for every spelling of /hello.txt"
    );
    assert_eq!(stats.dynamic_requests, 0, "/api/.. is not the handler's");
    // A final dot segment names the directory it is in.
    assert_eq!(s.connect().get("/sub/..").body, b"<p>home</p>\n");
    assert_eq!(s.connect().get("/sub/.").body, b"<p>sub</p>\n");
    assert_eq!(s.connect().get("/nodex/../sub/").body, b"<p>sub</p>\n");
    assert_eq!(s.connect().get("/api/x/..").body, b"handler\n");
    for path in [
        "/..",
        "/../hello.txt",
        "/sub/../../hello.txt",
        "/%2e%2e/hello.txt",
        "/sub/.%2E/..",
    ] {
        let r = raw_request(
            s.addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 400, "{path} climbs above the root");
    }
}

#[test]
fn a_slow_client_trips_the_header_timeout() {
    let s = start(|c| c.header_timeout = Duration::from_millis(600));
    let mut c = s.connect();
    // One byte every 100 ms (at least): the head would take over 60 s to arrive,
    // 100 times the header timeout, so no loaded machine gets it through in time.
    let request = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(600)
    );
    let request = request.as_bytes();
    let mut sent = 0;
    let _ = c.stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut got = Vec::new();
    while sent < request.len() {
        if c.stream.write_all(&request[sent..sent + 1]).is_err() {
            break;
        }
        sent += 1;
        let mut b = [0u8; 512];
        match std::io::Read::read(&mut c.stream, &mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(_) => {}
        }
        if !got.is_empty() {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "got {text:?} after {sent} bytes"
    );
    // Cut off before the head was complete: the timeout bounds the head, not the
    // gap between bytes.
    assert!(sent < request.len(), "the whole head got through");
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let s = start(|c| c.idle_timeout = Duration::from_millis(300));
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").status, 200);
    // The server closes (end of stream), long before our own 60 s read timeout.
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut b = [0u8; 64];
    match std::io::Read::read(&mut c.stream, &mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the idle connection was not closed: {other:?}"),
    }
}

#[test]
fn max_connections_is_enforced() {
    let s = start(|c| c.max_connections = 2);
    let mut a = s.connect();
    let mut b = s.connect();
    assert_eq!(a.get("/hello.txt").status, 200);
    assert_eq!(b.get("/hello.txt").status, 200);
    // The third connection is told why (503, Retry-After) and closed.
    let mut third = s.connect();
    let r = third.read_response(false).expect("a 503 before the close");
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    assert!(third.is_closed());
    drop(a);
    assert_eq!(b.get("/hello.txt").status, 200);
}
