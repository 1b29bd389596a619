//! The access log of Haboob's routes to upstreams: a proxied response, streamed,
//! and the route's own 502 are each logged once with the route's stage.

#[path = "support/backend.rs"]
#[allow(dead_code)] // the proxy tests use the rest
mod backend;
mod support;

use std::time::{Duration, Instant};

use backend::{Backend, Script};
use seda_http::{AccessLogConfig, AccessLogFormat, ProxyRoute};
use support::start;

#[test]
fn proxied_responses_are_logged_once_with_their_route() {
    let b = Backend::start(Script::Ok("from upstream\n"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.json");
    let log = AccessLogConfig::new(&path).with_format(AccessLogFormat::Json);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let s = start(move |c| {
        c.access_log = Some(log);
        c.proxies = vec![
            ProxyRoute::new("/api", &[&b.url()]).unwrap(),
            ProxyRoute::new("/dead", &[&dead_url]).unwrap(),
        ];
    });
    let mut c = s.connect();
    let r = c.get("/api/x");
    assert_eq!((r.status, r.text().as_str()), (200, "from upstream\n"));
    assert_eq!(s.connect().get("/dead/y").status, 502);
    let log = s.server().access_log().unwrap().clone();
    let t0 = Instant::now();
    while log.stats().lines < 2 {
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", log.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let v: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 2, "{text}");
    assert_eq!(v[0]["uri"], "/api/x");
    assert_eq!(v[0]["status"], 200);
    assert_eq!(v[0]["body_bytes_sent"], "from upstream\n".len());
    assert_eq!(v[0]["stage"], "proxy:api");
    assert_eq!(v[1]["uri"], "/dead/y");
    assert_eq!(v[1]["status"], 502);
    assert_eq!(v[1]["stage"], "proxy:dead");
}
