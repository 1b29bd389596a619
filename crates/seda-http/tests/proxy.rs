//! The front door (issue 26): routes of Haboob that forward to upstreams, with a
//! recording backend that shows exactly what the upstream received.

#[path = "support/backend.rs"]
mod backend;
mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use backend::{Backend, Script};
use seda::admission::QueueThreshold;
use seda_http::proto::Status;
use seda_http::{HandlerContext, HandlerRegistration, ProxyRoute, Request, Response, StatsDoc};
use support::{Client, TestServer, start};

fn route(prefix: &str, urls: &[&str]) -> ProxyRoute {
    ProxyRoute::new(prefix, urls).unwrap()
}

fn proxy(routes: Vec<ProxyRoute>) -> TestServer {
    start(move |c| {
        c.handlers.push(HandlerRegistration::new(
            "/dyn",
            |_: &Request, _: &HandlerContext<'_>| Response::text(Status::OK, "dynamic\n"),
        ));
        c.proxies = routes;
    })
}

fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

fn proxy_section(doc: &StatsDoc) -> serde_json::Value {
    doc.sections.get("proxy").cloned().expect("a proxy section")
}

/// Reads a chunked body after a head already read into `head`.
fn read_chunked(c: &mut Client) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the last chunk");
        all.extend_from_slice(&buf[..n]);
        if all.ends_with(b"0\r\n\r\n") {
            break;
        }
    }
    all
}

#[test]
fn a_route_forwards_a_normalised_request_and_static_and_dynamic_still_work() {
    let b = Backend::start(Script::Ok("from upstream\n"));
    let s = proxy(vec![route("/api", &[&b.url()])]);
    let mut c = s.connect();
    c.send(
        b"GET /api/users?x=1 HTTP/1.1\r\nHost: front\r\nConnection: keep-alive, X-Drop\r\nX-Drop: secret\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 10.9.9.9\r\nUpgrade: h2c\r\nX-Keep: yes\r\n\r\n",
    );
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "from upstream\n"));
    assert_eq!(r.header("X-Backend"), Some("yes"));
    assert_eq!(
        r.header("X-Secret"),
        None,
        "named in the upstream's Connection"
    );
    assert!(r.header("Via").unwrap().contains("seda"));
    let got = b.all_received();
    assert!(
        got.starts_with("GET /api/users?x=1 HTTP/1.1\r\nHost: front\r\n"),
        "{got}"
    );
    for gone in ["X-Drop", "Keep-Alive", "TE:", "Upgrade", "Connection"] {
        assert!(!got.contains(gone), "{gone} reached the upstream: {got}");
    }
    assert!(got.contains("X-Keep: yes\r\n"));
    assert!(
        got.contains("X-Forwarded-For: 10.9.9.9, 127.0.0.1\r\n"),
        "{got}"
    );
    assert!(got.contains("X-Forwarded-Proto: http\r\n"));
    assert!(got.contains("Via: 1.1 seda\r\n"));
    // Static files and dynamic handlers beside the route.
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
    assert_eq!(c.get("/dyn").text(), "dynamic\n");
    // The second proxied request reuses the kept-alive upstream connection.
    assert_eq!(c.get("/api/again").status, 200);
    assert_eq!(
        b.connections(),
        1,
        "one upstream connection for two requests"
    );
    let doc = s.stats();
    assert!(
        doc.stages.iter().any(|st| st.name == "proxy:api"),
        "the route is a stage"
    );
    let p = proxy_section(&doc);
    let up = &p["routes"][0]["upstreams"][0];
    assert_eq!(up["requests"], 2);
    assert_eq!(up["reused"], 1);
    assert_eq!(up["connects"], 1);
}

#[test]
fn bodies_stream_both_ways_in_one_framing() {
    let b = Backend::start(Script::Echo);
    let s = proxy(vec![route("/echo", &[&b.url()])]);
    let mut c = s.connect();
    // Content-Length, sent in two pieces.
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello");
    std::thread::sleep(Duration::from_millis(20));
    c.send(b"world");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.text(), "helloworld");
    // Chunked with an extension and a trailer: re-chunked, extension and trailer gone.
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.text(), "abcde");
    let got = b.all_received();
    assert!(
        got.contains("Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
        "{got}"
    );
    assert!(
        !got.contains("ext=1") && !got.contains("X-Trailer"),
        "{got}"
    );
    assert!(!got.contains("Content-Length: 10\r\nTransfer"), "{got}");
}

#[test]
fn pipelined_sequential_and_half_closed_clients_of_a_route_get_every_response() {
    let b = Backend::start(Script::Echo);
    let s = proxy(vec![route("/echo", &[&b.url()])]);
    // One request at a time, as most clients send: each answered, on one upstream
    // connection.
    let mut c = s.connect();
    for i in 0..50 {
        let body = format!("request {i}");
        c.send(
            format!(
                "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        let r = c.read_response(false).expect("a response");
        assert_eq!((r.status, r.text()), (200, body));
        if i % 10 == 9 {
            assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
        }
    }
    assert_eq!(
        b.connections(),
        1,
        "one upstream connection for 50 requests"
    );
    // Pipelined behind proxied requests, then the client shuts down its sending
    // side: every response comes, in order, then the server closes.
    let mut c = s.connect();
    c.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc\
          POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\ndef\
          GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nghi",
    );
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    for want in ["abc", "def", "hello, world\n", "ghi"] {
        let r = c.read_response(false).expect("a response");
        assert_eq!((r.status, r.text().as_str()), (200, want));
    }
    assert!(c.is_closed(), "closed once every response is out");
    // A half-closed client whose one proxied request is still upstream.
    let slow = Backend::start(Script::Slow(Duration::from_millis(200), "late\n"));
    let s = proxy(vec![route("/slow", &[&slow.url()])]);
    let mut c = s.connect();
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let r = c.read_response(false).expect("a response");
    assert_eq!((r.status, r.text().as_str()), (200, "late\n"));
    assert!(c.is_closed(), "closed after its response");
}

#[test]
fn upstream_failures_get_clean_502s_and_504s() {
    let garbage = Backend::start(Script::Raw(b"SSH-2.0-OpenSSH\r\n\r\n"));
    let oversized: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n",
            "a".repeat(40 * 1024)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let big_head = Backend::start(Script::Raw(oversized));
    let mid_body = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..",
    ));
    let smuggle = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ));
    let stall = Backend::start(Script::Stall);
    let s = proxy(vec![
        route("/garbage", &[&garbage.url()]),
        route("/bighead", &[&big_head.url()]),
        route("/midbody", &[&mid_body.url()]),
        route("/smuggle", &[&smuggle.url()]),
        route("/stall", &[&stall.url()]).with_timeout(Duration::from_millis(300)),
        route("/refused", &["http://127.0.0.1:1"]),
    ]);
    for (path, status) in [
        ("/garbage", 502),
        ("/bighead", 502),
        ("/midbody", 502),
        ("/smuggle", 502),
        ("/stall", 504),
        ("/refused", 502),
    ] {
        let mut c = s.connect();
        let r = c.get(path);
        assert_eq!(r.status, status, "{path}");
        // The client's connection is still usable.
        assert_eq!(c.get("/hello.txt").status, 200, "{path}");
    }
    let p = proxy_section(&s.stats());
    let timeouts: u64 = p["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["gateway_timeout"].as_u64().unwrap())
        .sum();
    assert_eq!(timeouts, 1);
}

#[test]
fn an_idempotent_request_is_retried_on_another_upstream_after_a_connect_failure() {
    let b = Backend::start(Script::Ok("alive\n"));
    let s = proxy(vec![route("/r", &["http://127.0.0.1:1", &b.url()])]);
    let mut c = s.connect();
    for _ in 0..4 {
        let r = c.get("/r");
        assert_eq!((r.status, r.text().as_str()), (200, "alive\n"));
    }
    let p = proxy_section(&s.stats());
    assert!(p["routes"][0]["retries"].as_u64().unwrap() >= 1);
    assert!(
        p["routes"][0]["upstreams"][0]["connect_failures"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // A POST is not retried.
    let s = proxy(vec![
        route("/r", &["http://127.0.0.1:1", &b.url()]).with_health(100, Duration::from_secs(1)),
    ]);
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let mut c = s.connect();
        c.send(b"POST /r HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
        statuses.push(c.read_response(false).unwrap().status);
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 502],
        "round robin: one POST hits the dead upstream"
    );
}

#[test]
fn a_failing_upstream_is_ejected_then_tried_again() {
    let b = Backend::start(Script::Ok("ok\n"));
    let s = proxy(vec![
        route("/h", &["http://127.0.0.1:1", &b.url()]).with_health(2, Duration::from_millis(300)),
    ]);
    let mut c = s.connect();
    for _ in 0..10 {
        assert_eq!(c.get("/h").status, 200);
    }
    let p = proxy_section(&s.stats());
    let dead = &p["routes"][0]["upstreams"][0];
    assert_eq!(dead["ejections"], 1, "{dead}");
    // Fewer connects were tried than requests: ejected meanwhile.
    assert!(dead["connect_failures"].as_u64().unwrap() <= 3, "{dead}");
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..4 {
        assert_eq!(c.get("/h").status, 200);
    }
    let p = proxy_section(&s.stats());
    assert!(
        p["routes"][0]["upstreams"][0]["ejections"]
            .as_u64()
            .unwrap()
            >= 2
    );
}

#[test]
fn the_route_refuses_early_with_503_and_the_refused_body_never_reaches_the_upstream() {
    let b = Backend::start(Script::Slow(Duration::from_millis(400), "slow\n"));
    let mut r = route("/slow", &[&b.url()]);
    r.admission = Some(std::sync::Arc::new(QueueThreshold::new(1)));
    let s = proxy(vec![r]);
    let mut first = s.connect();
    first.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(wait_for(Duration::from_secs(5), || b
        .requests
        .load(std::sync::atomic::Ordering::SeqCst)
        == 1));
    let mut second = s.connect();
    second.send(b"POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\n\r\nrefused");
    let r = second.read_response(false).unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert_eq!(first.read_response(false).unwrap().text(), "slow\n");
    assert!(!b.all_received().contains("refused"));
    // The refused client's connection stays in step.
    assert_eq!(second.get("/hello.txt").status, 200);
    let p = proxy_section(&s.stats());
    assert_eq!(p["routes"][0]["refused"], 1);
}

#[test]
fn smuggling_attempts_never_reach_the_upstream_as_two_requests() {
    let b = Backend::start(Script::Echo);
    let s = proxy(vec![route("/", &[&b.url()])]);
    let attempts: [&[u8]; 8] = [
        // CL.TE and TE.CL
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        // duplicate, different Content-Length
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        // obs-fold hiding Transfer-Encoding
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        // bare LF
        b"POST / HTTP/1.1\nHost: t\nTransfer-Encoding: chunked\n\n0\n\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        // chunk size with a sign, with an overflow, with a bare LF after the size
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000001\r\nx\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        // a coding after chunked
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    ];
    for a in attempts {
        let mut c = s.connect();
        c.send(a);
        let mut all = Vec::new();
        let _ = c.stream.read_to_end(&mut all);
        let text = String::from_utf8_lossy(&all);
        assert!(
            text.starts_with("HTTP/1.1 4") || text.starts_with("HTTP/1.1 5"),
            "{}: {text}",
            String::from_utf8_lossy(a)
        );
    }
    let got = b.all_received();
    assert!(
        !got.contains("/smuggled"),
        "a smuggled request reached the upstream: {got}"
    );
    assert!(b.requests.load(std::sync::atomic::Ordering::SeqCst) <= attempts.len());
}

#[test]
fn a_slow_client_never_makes_the_proxy_buffer_a_whole_response() {
    const SIZE: usize = 64 << 20;
    let b = Backend::start(Script::Big(SIZE));
    let s = proxy(vec![route("/big", &[&b.url()])]);
    let mut c = s.connect();
    c.send(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n");
    // The client reads nothing: the backend is held back after the window and the
    // sockets' buffers (a few MiB), far from the whole body.
    assert!(wait_for(Duration::from_secs(5), || b
        .written
        .load(std::sync::atomic::Ordering::SeqCst)
        > 0));
    std::thread::sleep(Duration::from_millis(500));
    let held = b.written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        held < 24 << 20,
        "the backend wrote {held} bytes to a client that reads nothing"
    );
    // Then the client reads it all, in order.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let mut head_done = false;
    let mut pending = Vec::new();
    while total < SIZE {
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0);
        if head_done {
            total += n;
        } else {
            pending.extend_from_slice(&buf[..n]);
            if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                head_done = true;
                total += pending.len() - i - 4;
            }
        }
    }
    assert_eq!(total, SIZE);
    let _ = c
        .stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
}

#[test]
fn a_chunked_upstream_reaches_an_http11_client_chunked_and_a_head_gets_no_body() {
    let b = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    ));
    let s = proxy(vec![route("/c", &[&b.url()])]);
    let mut c = s.connect();
    c.send(b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    let all = String::from_utf8(read_chunked(&mut c)).unwrap();
    assert!(all.contains("Transfer-Encoding: chunked\r\n"), "{all}");
    assert!(
        all.ends_with("\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
        "{all}"
    );
    let close_delimited = Backend::start(Script::Raw(b"HTTP/1.0 200 OK\r\n\r\nuntil close"));
    let s = proxy(vec![route("/c", &[&close_delimited.url()])]);
    let mut c = s.connect();
    c.send(b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    let all = String::from_utf8(read_chunked(&mut c)).unwrap();
    assert!(all.ends_with("b\r\nuntil close\r\n0\r\n\r\n"), "{all}");
    let head = Backend::start(Script::Ok("body"));
    let s = proxy(vec![route("/c", &[&head.url()])]);
    let mut c = s.connect();
    c.send(b"HEAD /c HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true).unwrap();
    assert_eq!((r.status, r.header("Content-Length")), (200, Some("4")));
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
}

#[test]
fn clients_that_go_away_leave_nothing_in_flight() {
    let b = Backend::start(Script::Slow(Duration::from_millis(200), "late\n"));
    let s = proxy(vec![route("/s", &[&b.url()])]);
    // 64 clients send a request each and hang up before the answer.
    let clients: Vec<Client> = (0..64)
        .map(|_| {
            let mut c = s.connect();
            c.send(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n");
            c
        })
        .collect();
    assert!(wait_for(Duration::from_secs(10), || {
        b.requests.load(std::sync::atomic::Ordering::SeqCst) == 64
    }));
    drop(clients);
    let settled = wait_for(Duration::from_secs(10), || {
        let p = proxy_section(&s.stats());
        p["routes"][0]["in_flight"] == 0 && p["routes"][0]["upstreams"][0]["in_flight"] == 0
    });
    assert!(settled, "{}", proxy_section(&s.stats()));
    // A client that closed may only have half-closed: its answer is still written
    // (and counted); one whose close was seen is dropped. Either way, settled.
    let p = proxy_section(&s.stats());
    let r = &p["routes"][0];
    assert_eq!(
        r["responses"].as_u64().unwrap() + r["client_gone"].as_u64().unwrap(),
        64,
        "{p}"
    );
    // The route still serves.
    assert_eq!(s.connect().get("/s").text(), "late\n");
}

#[test]
fn an_upstream_that_never_stops_talking_costs_bounded_memory() {
    let pad: &'static [u8] = b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let endless_head = Backend::start(Script::Flood(b"HTTP/1.1 200 OK\r\n", pad));
    let ext: &'static [u8] = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let endless_chunk_line = Backend::start(Script::Flood(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;x=",
        ext,
    ));
    let s = proxy(vec![
        route("/head", &[&endless_head.url()]),
        route("/chunk", &[&endless_chunk_line.url()]),
    ]);
    // A head that never ends: 502 once it passes the limit, the upstream closed.
    let mut c = s.connect();
    assert_eq!(c.get("/head").status, 502);
    assert_eq!(c.get("/hello.txt").status, 200);
    // A chunk line that never ends: the client never gets the last chunk (the
    // response is cut, its connection closed); nothing is buffered past a limit.
    let mut c = s.connect();
    c.send(b"GET /chunk HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut all = Vec::new();
    let _ = c.stream.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    // The cut comes as a 502 or as a 200 whose body stops, never as a whole response
    // (nor as a close with nothing: an abort keeps what the route sent before it).
    assert!(
        text.starts_with("HTTP/1.1 502") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut response looks whole: {text}"
    );
    assert!(
        all.len() < 1 << 20,
        "{} bytes reached the client",
        all.len()
    );
    // Both floods stop: the proxy closed the connections instead of reading on.
    for b in [&endless_head, &endless_chunk_line] {
        let mut last = usize::MAX;
        let stopped = wait_for(Duration::from_secs(10), || {
            let now = b.written.load(std::sync::atomic::Ordering::SeqCst);
            let same = now == last;
            last = now;
            std::thread::sleep(Duration::from_millis(100));
            same
        });
        let written = b.written.load(std::sync::atomic::Ordering::SeqCst);
        assert!(stopped, "the upstream still writes ({written} bytes)");
        assert!(
            written < 16 << 20,
            "the proxy took {written} bytes of one answer"
        );
    }
    let p = proxy_section(&s.stats());
    assert_eq!(p["routes"][0]["in_flight"], 0, "{p}");
    assert_eq!(p["routes"][1]["in_flight"], 0, "{p}");
}

#[test]
fn an_upstream_never_answers_a_client_twice_or_with_two_lengths() {
    // Bytes after the body are not a second response for the next request.
    let extra = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled\n",
    ));
    let two_lengths = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nok\n",
    ));
    let bad_chunk = Backend::start(Script::Raw(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n+5\r\nworld\r\n0\r\n\r\n",
    ));
    let s = proxy(vec![
        route("/extra", &[&extra.url()]),
        route("/two", &[&two_lengths.url()]),
        route("/badchunk", &[&bad_chunk.url()]),
    ]);
    let mut c = s.connect();
    for _ in 0..3 {
        // Pipelined: the second request must get its own answer.
        c.send(b"GET /extra HTTP/1.1\r\nHost: t\r\n\r\nGET /extra HTTP/1.1\r\nHost: t\r\n\r\n");
        for _ in 0..2 {
            let r = c.read_response(false).unwrap();
            assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
        }
    }
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
    assert_eq!(s.connect().get("/two").status, 502);
    // A chunk size with a sign: never passed on as a whole response.
    let mut c = s.connect();
    c.send(b"GET /badchunk HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut all = Vec::new();
    let _ = c.stream.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    assert!(!text.contains("world"), "{text}");
    assert!(
        text.starts_with("HTTP/1.1 502") || !text.ends_with("0\r\n\r\n"),
        "{text}"
    );
}
