//! Admin endpoints, dynamic handlers under overload, and graceful shutdown.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seda::control::ThreadPoolConfig;
use seda_http::proto::Status;
use seda_http::{Handler, HandlerContext, HandlerRegistration, OverloadAction, Request, Response};
use support::{Client, start};

fn slow(ms: u64) -> impl Fn(&Request, &HandlerContext<'_>) -> Response + Send + Sync + 'static {
    move |req: &Request, _cx: &HandlerContext<'_>| {
        std::thread::sleep(Duration::from_millis(ms));
        Response::text(Status::OK, format!("done {}", req.path))
    }
}

#[test]
fn admin_endpoints_show_stages_graph_and_metrics_on_their_own_listener() {
    let s = start(|c| c.handlers.push(HandlerRegistration::new("/dyn", slow(0))));
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").status, 200);
    assert_eq!(c.get("/dyn/x").text(), "done /dyn/x");
    // Let the controller thread publish a stats window.
    std::thread::sleep(Duration::from_millis(200));
    let mut a = s.admin();
    let r = a.get("/_seda/stats");
    assert_eq!(
        (r.status, r.header("content-type")),
        (200, Some("application/json"))
    );
    let doc: seda_http::StatsDoc = serde_json::from_slice(&r.body).unwrap();
    let names: Vec<&str> = doc.stages.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "HttpParse",
        "HttpRecv",
        "PageCache",
        "CacheMiss",
        "HttpSend",
        "file-helper",
        "handler:dyn",
        "sock-io",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(doc.stage("HttpParse").unwrap().processed >= 3);
    assert!(doc.has_edge("sock-io", "HttpParse"), "{:?}", doc.edges);
    // Dynamic requests are offered to their handler's stage by HttpParse itself
    // (early refusal, USITS'03 6).
    assert!(doc.has_edge("HttpParse", "handler:dyn"), "{:?}", doc.edges);
    let haboob: seda_http::HaboobStats = doc.section("haboob").unwrap();
    assert!(haboob.requests >= 2);
    assert!(doc.sections.contains_key("sockets"));

    let g = a.get("/_seda/graph");
    assert!(g.text().starts_with("digraph"), "{}", g.text());
    assert!(g.text().contains("\"sock-io\" -> \"HttpParse\""));
    let gj: serde_json::Value = serde_json::from_slice(&a.get("/_seda/graph.json").body).unwrap();
    assert!(gj["edges"].as_array().is_some_and(|e| !e.is_empty()));
    let m = a.get("/_seda/metrics");
    assert!(
        m.text()
            .contains("seda_stage_processed_total{stage=\"HttpParse\"}")
    );
    assert!(m.text().contains("haboob_requests_total"));
    assert!(a.get("/_seda/").text().contains("/_seda/stats"));
    assert_eq!(a.get("/_seda/nothing").status, 404);
    a.send(b"POST /_seda/stats HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(a.read_response(false).unwrap().status, 405);
    // The service port has no admin endpoints: /_seda/ is an ordinary path there.
    assert_eq!(c.get("/_seda/stats").status, 404);
}

#[test]
fn a_dynamic_handler_gets_its_request() {
    let s = start(|c| {
        c.handlers.push(HandlerRegistration::new(
            "/echo",
            |req: &Request, _cx: &HandlerContext<'_>| {
                let body = format!(
                    "{} {} q={} x={} body={}",
                    req.method,
                    req.path,
                    req.query_param("q").unwrap_or_default(),
                    String::from_utf8_lossy(req.header("x-test").unwrap_or(b"")),
                    String::from_utf8_lossy(&req.body)
                );
                Response::text(Status::OK, body).with_header("X-Handler", "echo")
            },
        ))
    });
    let mut c = s.connect();
    c.send(b"POST /echo/a%20b?q=1+2 HTTP/1.1\r\nHost: t\r\nX-Test: yes\r\nContent-Length: 4\r\n\r\nPING");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-handler"), Some("echo"));
    assert_eq!(r.text(), "POST /echo/a b q=1 2 x=yes body=PING");
    assert_eq!(
        c.get("/echoes").status,
        404,
        "prefix matches whole segments"
    );
}

#[test]
fn an_overloaded_handler_answers_503_at_once_and_the_connection_stays_usable() {
    let s = start(|c| {
        c.handlers.push(
            HandlerRegistration::new("/slow", slow(300))
                .capacity(2)
                .thread_pool(
                    ThreadPoolConfig::default()
                        .with_min_threads(1)
                        .with_max_threads(1),
                ),
        )
    });
    let mut clients: Vec<Client> = (0..12).map(|_| s.connect()).collect();
    for c in &mut clients {
        c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    let mut ok = 0;
    let mut rejected = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c.read_response(false).unwrap();
        match r.status {
            200 => ok += 1,
            503 => {
                assert_eq!(r.header("retry-after"), Some("1"));
                assert!(r.text().contains("503"));
                rejected.push(i);
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        (1..=6).contains(&ok),
        "one running and about a full queue admitted, got {ok}"
    );
    assert!(
        rejected.len() >= 6,
        "the burst was shed: {} rejected",
        rejected.len()
    );
    // A rejected client's connection still works.
    let c = &mut clients[rejected[0]];
    assert_eq!(c.get("/hello.txt").status, 200);
    let stats: serde_json::Value = serde_json::from_str(&s.server().stats_json()).unwrap();
    let st = stats["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "handler:slow")
        .unwrap()
        .clone();
    assert!(
        st["full"].as_u64().unwrap() + st["rejected"].as_u64().unwrap() >= 6,
        "{st}"
    );
}

#[test]
fn overload_can_redirect_or_degrade() {
    struct Cheap;
    impl Handler for Cheap {
        fn handle(&self, _: &Request, _: &HandlerContext<'_>) -> Response {
            std::thread::sleep(Duration::from_millis(300));
            Response::text(Status::OK, "full")
        }
        fn degrade(&self, _: &Request) -> Response {
            Response::text(Status::OK, "degraded")
        }
    }
    let one = ThreadPoolConfig::default()
        .with_min_threads(1)
        .with_max_threads(1);
    let s = start(|c| {
        c.handlers.push(
            HandlerRegistration::new("/deg", Cheap)
                .capacity(1)
                .thread_pool(one.clone())
                .on_overload(OverloadAction::Degrade),
        );
        c.handlers.push(
            HandlerRegistration::new("/red", slow(300))
                .capacity(1)
                .thread_pool(one.clone())
                .on_overload(OverloadAction::Redirect(
                    "http://mirror.invalid/busy".into(),
                )),
        );
    });
    for (path, want_status, check) in [
        ("/deg", 200u16, "degraded"),
        ("/red", 302, "http://mirror.invalid/busy"),
    ] {
        let mut clients: Vec<Client> = (0..6).map(|_| s.connect()).collect();
        for c in &mut clients {
            c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        }
        let resps: Vec<_> = clients
            .iter_mut()
            .map(|c| c.read_response(false).unwrap())
            .collect();
        let (shed, served): (Vec<_>, Vec<_>) = resps
            .iter()
            .partition(|r| r.text() == check || r.header("location") == Some(check));
        assert!(shed.len() >= 3, "{path}: {} shed", shed.len());
        assert!(
            shed.iter().all(|r| r.status == want_status),
            "{path}: {shed:?}"
        );
        assert!(
            !served.is_empty() && served.iter().all(|r| r.status == 200 && r.text() != check),
            "{path}: {served:?}"
        );
    }
}

#[test]
fn a_panicking_handler_gives_500_and_the_server_goes_on() {
    let s = start(|c| {
        c.handlers.push(HandlerRegistration::new(
            "/boom",
            |_: &Request, _: &HandlerContext<'_>| -> Response { panic!("handler bug") },
        ))
    });
    let mut c = s.connect();
    assert_eq!(c.get("/boom").status, 500);
    assert_eq!(c.get("/hello.txt").status, 200);
}

#[test]
fn handlers_can_be_mounted_on_a_running_server_with_classes() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = start(|_| {});
    let count = Arc::clone(&seen);
    s.server()
        .register(
            HandlerRegistration::new("/late", move |_: &Request, cx: &HandlerContext<'_>| {
                count.fetch_add(usize::from(cx.meta().class()), Ordering::Relaxed);
                Response::text(Status::OK, "late")
            })
            .classify(|req: &Request| {
                req.header("x-class")
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
                    .unwrap_or(0)
            }),
        )
        .unwrap();
    let mut c = s.connect();
    c.send(b"GET /late HTTP/1.1\r\nHost: t\r\nX-Class: 3\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().text(), "late");
    assert_eq!(
        seen.load(Ordering::Relaxed),
        3,
        "the classifier's class reached the handler"
    );
    assert!(
        s.server()
            .register(HandlerRegistration::new("/late", slow(0)))
            .is_err(),
        "duplicate prefix"
    );
}

#[test]
fn shutdown_finishes_requests_in_flight() {
    let mut s = start(|c| {
        c.handlers
            .push(HandlerRegistration::new("/slow", slow(400)))
    });
    let mut c = s.connect();
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let server = s.server.take().unwrap();
    let t = std::thread::spawn(move || server.shutdown(Duration::from_secs(5)));
    let r = c
        .read_response(false)
        .expect("the in-flight response arrives");
    assert_eq!((r.status, r.text().as_str()), (200, "done /slow"));
    assert_eq!(r.header("connection"), Some("close"));
    let report = t.join().unwrap();
    assert!(report.requests_drained);
    assert!(
        std::net::TcpStream::connect(s.addr).is_err() || {
            let mut late = Client::connect(s.addr);
            late.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            late.read_response(false).is_none()
        }
    );
}

#[test]
fn pipelined_responses_stay_in_order_across_stages() {
    let s = start(|c| {
        c.handlers
            .push(HandlerRegistration::new("/slow", slow(200)));
        c.handlers.push(HandlerRegistration::new("/fast", slow(0)));
    });
    let mut c = s.connect();
    let paths = [
        "/slow/1",
        "/hello.txt",
        "/fast/2",
        "/one_k.bin",
        "/slow/3",
        "/nope",
        "/sub",
        "/fast/4",
    ];
    let mut all = Vec::new();
    for p in paths {
        all.extend_from_slice(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    c.send(&all);
    let got: Vec<(u16, String)> = paths
        .iter()
        .map(|_| {
            c.read_response(false)
                .map(|r| (r.status, r.text()))
                .unwrap()
        })
        .collect();
    assert_eq!(got[0], (200, "done /slow/1".to_owned()));
    assert_eq!(got[1], (200, "hello, world\n".to_owned()));
    assert_eq!(got[2], (200, "done /fast/2".to_owned()));
    assert_eq!(got[3].0, 200);
    assert_eq!(got[4], (200, "done /slow/3".to_owned()));
    assert_eq!(got[5].0, 404);
    assert_eq!(got[6].0, 301);
    assert_eq!(got[7], (200, "done /fast/4".to_owned()));
}

#[test]
fn misses_read_through_the_file_helper() {
    let s = start(|c| c.residency_check = false);
    let mut c = s.connect();
    assert_eq!(c.get("/mid.bin").body, support::pattern(300 * 1024, 2));
    assert_eq!(c.get("/hello.txt").body, b"hello, world\n");
    // A stage counts a batch when the batch ends, which may be after the response.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stats = loop {
        let doc = s.server().stats();
        if doc.stage("file-helper").unwrap().processed >= 2 || Instant::now() > deadline {
            break doc;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(stats.stage("file-helper").unwrap().processed >= 2);
    assert!(
        stats.has_edge("CacheMiss", "file-helper"),
        "{:?}",
        stats.edges
    );
    assert!(
        stats.has_edge("file-helper", "PageCache"),
        "{:?}",
        stats.edges
    );
    let haboob: seda_http::HaboobStats = stats.section("haboob").unwrap();
    assert_eq!(haboob.resident_reads, 0);
}
