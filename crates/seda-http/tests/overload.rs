//! Overload control end to end over loopback (issue 5): what a client notices when a
//! dynamic stage is overloaded.
//!
//! Every test runs its clients for a fixed, short time; every read has a timeout
//! ([`READ_TIMEOUT`]), and a read that times out is a failure, never a hang.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seda::admission::ResponseTimeConfig;
use seda::control::{QualityConfig, ThreadPoolConfig};
use seda_http::proto::Status;
use seda_http::{
    Admission, Bottleneck, ClassRules, HandlerContext, HandlerRegistration, OverloadAction,
    OverloadControl, Request, Response,
};
use support::{Client, Resp, start};

const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A handler that sleeps `ms` per request: a slow stage whose capacity is its
/// threads / `ms`, independent of CPU load.
fn slow(ms: u64) -> impl Fn(&Request, &HandlerContext<'_>) -> Response + Send + Sync + 'static {
    move |req: &Request, _cx: &HandlerContext<'_>| {
        std::thread::sleep(Duration::from_millis(ms));
        Response::text(Status::OK, format!("done {}", req.path))
    }
}

/// Held shut until the test opens it; then every request passes.
#[derive(Default)]
struct Gate {
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
}

/// A handler that answers like [`slow`] once `gate` is open.
fn gated(gate: Arc<Gate>) -> impl Fn(&Request, &HandlerContext<'_>) -> Response + Send + Sync {
    move |req: &Request, _cx: &HandlerContext<'_>| {
        gate.wait();
        Response::text(Status::OK, format!("done {}", req.path))
    }
}

fn fixed_threads(n: usize) -> ThreadPoolConfig {
    ThreadPoolConfig::default()
        .with_min_threads(n)
        .with_max_threads(n)
}

fn connect(addr: SocketAddr) -> Client {
    let c = Client::connect(addr);
    c.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    c
}

/// One request as a client saw it.
#[derive(Debug, Clone)]
struct Outcome {
    sent: Instant,
    latency: Duration,
    /// `None`: no answer within the read timeout, or the connection broke.
    resp: Option<Resp>,
    group: usize,
}

/// `per_group[g]` closed-loop clients of group `g` send `GET path` (with group `g`'s
/// extra header lines) over keep-alive connections for `run`; a client answered 503
/// waits `backoff` before its next request. Returns every outcome.
fn closed_loop(
    addr: SocketAddr,
    path: &str,
    per_group: &[(usize, &str)],
    run: Duration,
    backoff: Duration,
) -> Vec<Outcome> {
    closed_loop_conns(addr, path, per_group, run, backoff, false)
}

/// [`closed_loop`], with a new connection for every request when `fresh` (its
/// latency then includes the connect, as a browser's first request does).
fn closed_loop_conns(
    addr: SocketAddr,
    path: &str,
    per_group: &[(usize, &str)],
    run: Duration,
    backoff: Duration,
    fresh: bool,
) -> Vec<Outcome> {
    let end = Instant::now() + run;
    let mut threads = Vec::new();
    for (group, &(n, headers)) in per_group.iter().enumerate() {
        for _ in 0..n {
            let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n");
            threads.push(std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut c = connect(addr);
                let mut used = false;
                while Instant::now() < end {
                    let sent = Instant::now();
                    if fresh && used {
                        c = connect(addr);
                    }
                    used = true;
                    c.send(raw.as_bytes());
                    let resp = c.read_response(false);
                    let latency = sent.elapsed();
                    let broken = resp.is_none();
                    let reject = resp.as_ref().is_some_and(|r| r.status == 503);
                    let close = resp
                        .as_ref()
                        .is_some_and(|r| r.header("connection") == Some("close"));
                    out.push(Outcome {
                        sent,
                        latency,
                        resp,
                        group,
                    });
                    if broken {
                        break;
                    }
                    if close {
                        c = connect(addr);
                    }
                    if reject {
                        std::thread::sleep(backoff);
                    }
                }
                out
            }));
        }
    }
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("client thread"))
        .collect()
}

fn p90(mut v: Vec<Duration>) -> Duration {
    assert!(!v.is_empty());
    v.sort_unstable();
    v[((v.len() as f64 * 0.9).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Group `g`'s share of 503s, its 503s and its requests.
fn rejected_share(out: &[Outcome], g: usize) -> (f64, usize, usize) {
    let mine: Vec<_> = out.iter().filter(|o| o.group == g).collect();
    let rej = mine.iter().filter(|o| status_of(o) == Some(503)).count();
    (rej as f64 / mine.len().max(1) as f64, rej, mine.len())
}

fn status_of(o: &Outcome) -> Option<u16> {
    o.resp.as_ref().map(|r| r.status)
}

/// Polls `cond` every 20 ms for up to 20 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stage_stats(addr: SocketAddr, stage: &str) -> serde_json::Value {
    let mut c = connect(addr);
    let r = c.get("/_seda/stats");
    assert_eq!(r.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&r.body).expect("stats are JSON");
    doc["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == stage))
        .cloned()
        .unwrap_or_else(|| panic!("no stage {stage} in {doc}"))
}

#[test]
fn a_burst_gets_quick_503s_and_admitted_requests_keep_a_bounded_p90() {
    // 2 threads x 100 ms: capacity 20 requests/s. Without admission control 40
    // clients would queue ~2 s each; with a 300 ms target they must not.
    let target = Duration::from_millis(300);
    let control = OverloadControl::default()
        .with_admission(Some(Admission::ResponseTime))
        .with_rt_target(Some(target))
        .with_response_time(
            ResponseTimeConfig::with_target(target)
                .with_nreq(10)
                .with_initial_rate(5.0),
        );
    let reg = HandlerRegistration::new("/slow", slow(100)).thread_pool(fixed_threads(2));
    let reg = control.apply(reg).unwrap();
    let s = start(|c| c.handlers.push(reg));
    let out = closed_loop(
        s.addr,
        "/slow",
        &[(40, "")],
        Duration::from_millis(2500),
        Duration::from_millis(50),
    );
    assert!(
        out.iter().all(|o| o.resp.is_some()),
        "every request was answered within {READ_TIMEOUT:?}"
    );
    let rejected: Vec<&Outcome> = out.iter().filter(|o| status_of(o) == Some(503)).collect();
    let admitted: Vec<&Outcome> = out.iter().filter(|o| status_of(o) == Some(200)).collect();
    assert_eq!(
        rejected.len() + admitted.len(),
        out.len(),
        "only 200 and 503"
    );
    assert!(rejected.len() >= 20, "{} rejected", rejected.len());
    assert!(admitted.len() >= 5, "{} admitted", admitted.len());
    for o in &rejected {
        let r = o.resp.as_ref().unwrap();
        assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
        assert_ne!(r.header("connection"), Some("close"));
    }
    // The figures (refusal latency, admitted p90 against the target) are the
    // overload benchmark's (bench/overload, docs/overload); here, what makes them:
    // every refusal was decided at admission and never queued behind the handler,
    // which ran exactly the admitted requests.
    let reject_p90 = p90(rejected.iter().map(|o| o.latency).collect());
    let admitted_p90 = p90(admitted.iter().map(|o| o.latency).collect());
    eprintln!(
        "burst: {} admitted (p90 {admitted_p90:?}), {} rejected (p90 {reject_p90:?})",
        admitted.len(),
        rejected.len()
    );
    wait_until("the handler's stage counted every admitted request", || {
        stage_stats(s.admin_addr(), "handler:slow")["processed"].as_u64()
            == Some(admitted.len() as u64)
    });
    let st = stage_stats(s.admin_addr(), "handler:slow");
    assert_eq!(
        st["rejected"].as_u64(),
        Some(rejected.len() as u64),
        "every 503 is a refusal at admission: {st}"
    );
    let adm = &st["admission"];
    assert_eq!(adm["policy"], "response-time", "{st}");
    assert_eq!(adm["enabled"], true);
    assert_eq!(adm["target_ms"], 300.0);
    assert!(adm["rate"].as_f64().is_some_and(|r| r > 0.0), "{adm}");
    let c0 = &st["classes"][0];
    assert_eq!(c0["class"], 0);
    assert!(c0["rejected"].as_u64().unwrap() >= rejected.len() as u64);
}

#[test]
fn the_low_class_is_rejected_before_the_high_class() {
    let target = Duration::from_millis(50);
    let control = OverloadControl::default()
        .with_admission(Some(Admission::ResponseTime))
        .with_rt_target(Some(target))
        // A bucket of 4 tokens: two clients of a class arriving together are not a
        // burst to refuse.
        .with_response_time(
            ResponseTimeConfig::with_target(target)
                .with_nreq(10)
                .with_bucket_depth(4.0),
        )
        .with_classes(ClassRules::default().with_header(Some("X-Class".into())));
    assert_eq!(control.policy_kind("slow"), Admission::ResponseTime);
    // 4 threads x 20 ms: capacity 200 requests/s. Two high-class clients alone fit
    // (at most 100/s); ten low-class clients on top overload the stage.
    let reg = HandlerRegistration::new("/slow", slow(20)).thread_pool(fixed_threads(4));
    let reg = control.apply(reg).unwrap();
    let s = start(|c| c.handlers.push(reg));
    let out = closed_loop(
        s.addr,
        "/slow",
        &[(10, "X-Class: 0\r\n"), (2, "X-Class: 1\r\n")],
        Duration::from_millis(3000),
        Duration::from_millis(20),
    );
    assert!(
        out.iter().all(|o| o.resp.is_some()),
        "every request answered"
    );
    let frac = |g: usize| rejected_share(&out, g);
    let (low, low_rej, low_n) = frac(0);
    let (high, high_rej, high_n) = frac(1);
    eprintln!("classes: low rejected {low_rej}/{low_n}, high {high_rej}/{high_n}");
    assert!(
        low > high + 0.3 && high < 0.5,
        "low class rejected {low_rej}/{low_n}, high class {high_rej}/{high_n}"
    );
    let st = stage_stats(s.admin_addr(), "handler:slow");
    assert_eq!(st["admission"]["policy"], "multiclass", "{st}");
    let counts = |c: u64| {
        st["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["class"] == c)
            .map(|x| {
                (
                    x["admitted"].as_u64().unwrap(),
                    x["rejected"].as_u64().unwrap(),
                )
            })
            .unwrap_or_else(|| panic!("class {c} in {st}"))
    };
    let ((la, lr), (ha, hr)) = (counts(0), counts(1));
    assert!(
        lr as f64 / (la + lr) as f64 > hr as f64 / (ha + hr) as f64,
        "stats agree: low {la}+{lr}, high {ha}+{hr}"
    );
}

fn quality_of(r: &Resp) -> f64 {
    r.header("x-seda-quality")
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("X-Seda-Quality in {r:?}"))
}

#[test]
fn degradation_lowers_quality_before_any_request_is_rejected() {
    // The p90 target is below the full-quality service time, so the stage is over
    // target from the start: quality must fall (x0.8 per 100 ms sample) before
    // admission control comes back at the lowest quality.
    let target = Duration::from_millis(3);
    let control = OverloadControl::default()
        .with_admission(Some(Admission::ResponseTime))
        .with_rt_target(Some(target))
        .with_response_time(ResponseTimeConfig::with_target(target).with_nreq(10))
        .with_degrade(true);
    let quality = control.quality_for("bottleneck").unwrap();
    assert_eq!(quality, QualityConfig::with_target(target));
    let b = Bottleneck::calibrate(Duration::from_millis(20))
        .unwrap()
        .degrade(quality, Duration::from_millis(100))
        .unwrap();
    let reg = control.apply(b.registration()).unwrap();
    let s = start(|c| c.handlers.push(reg));
    let mut c = connect(s.addr);
    assert_eq!(c.get("/bottleneck?q=1.5").status, 400, "q outside 0..1");
    assert_eq!(c.get("/bottleneck?q=abc").status, 400);
    let r = c.get("/bottleneck?q=0.25");
    assert_eq!((r.status, r.body.len()), (200, 8192));
    assert_eq!(quality_of(&r), 0.25);
    let st = stage_stats(s.admin_addr(), "handler:bottleneck");
    assert_eq!(st["admission"]["enabled"], false, "admission waits: {st}");
    assert_eq!(st["quality"], 1.0);

    let out = closed_loop(
        s.addr,
        "/bottleneck",
        &[(6, "")],
        Duration::from_millis(3000),
        Duration::from_millis(20),
    );
    assert!(
        out.iter().all(|o| o.resp.is_some()),
        "every request answered"
    );
    let done = |o: &Outcome| o.sent + o.latency;
    let t0 = out.iter().map(|o| o.sent).min().unwrap();
    let at = |t: Instant| t.saturating_duration_since(t0);
    let first_degraded = out
        .iter()
        .filter(|o| status_of(o) == Some(200) && quality_of(o.resp.as_ref().unwrap()) < 1.0)
        .map(done)
        .min()
        .expect("some response at reduced quality");
    let first_reject = out
        .iter()
        .filter(|o| status_of(o) == Some(503))
        .map(done)
        .min();
    eprintln!(
        "degrade: first reduced quality at {:?}, first rejection at {:?}",
        at(first_degraded),
        first_reject.map(at)
    );
    if let Some(first_reject) = first_reject {
        assert!(
            first_degraded < first_reject,
            "quality fell ({:?}) before the first rejection ({:?})",
            at(first_degraded),
            at(first_reject)
        );
    }
    let st = stage_stats(s.admin_addr(), "handler:bottleneck");
    let q = st["quality"].as_f64().expect("quality in stats");
    assert!(q < 1.0, "{st}");
}

/// A connection that was refused is still usable, at once and later, whatever the
/// overload action.
#[test]
fn a_rejected_request_never_leaves_its_connection_hanging() {
    for (action, want) in [
        (
            OverloadAction::Reject503 {
                retry_after_secs: 7,
            },
            503,
        ),
        (
            OverloadAction::Redirect("http://mirror.invalid/busy".into()),
            302,
        ),
    ] {
        // One thread, queue threshold 1: one request in service and one waiting fill
        // the stage; a third is refused. The stage's state is read from its stats,
        // not assumed after a sleep (a loaded machine may not have parsed `b` yet).
        let control = OverloadControl::default()
            .with_admission(Some(Admission::QueueThreshold))
            .with_queue_threshold(1)
            .with_on_overload(action.clone());
        // The handler holds every request until the gate opens: "refused at once,
        // not after service" is then a matter of order (the refusal arrives while
        // `a` is still held), not of time.
        let gate = Arc::new(Gate::default());
        let reg = HandlerRegistration::new("/slow", gated(Arc::clone(&gate)))
            .thread_pool(fixed_threads(1));
        let reg = control.apply(reg).unwrap();
        let s = start(|c| c.handlers.push(reg));
        let stage = |key: &str| stage_stats(s.admin_addr(), "handler:slow")[key].as_u64();
        let mut a = connect(s.addr);
        a.send(b"GET /slow/a HTTP/1.1\r\nHost: t\r\n\r\n");
        wait_until("a in service", || stage("threads_busy") == Some(1));
        let mut b = connect(s.addr);
        b.send(b"GET /slow/b HTTP/1.1\r\nHost: t\r\n\r\n");
        wait_until("b waiting", || stage("queue_len") == Some(1));

        let mut c = connect(s.addr);
        let r = c.get("/slow/c");
        assert_eq!(r.status, want, "{action:?}: {r:?}");
        // Queued, `c` would have waited for the gate: it is still shut.
        assert_eq!(
            stage("processed"),
            Some(0),
            "refused at once, not after service"
        );
        match &action {
            OverloadAction::Reject503 { .. } => assert_eq!(r.header("retry-after"), Some("7")),
            _ => assert_eq!(r.header("location"), Some("http://mirror.invalid/busy")),
        }
        assert_ne!(r.header("connection"), Some("close"));
        // The same connection: a static file, then a refused and a static request
        // pipelined in one write, answered in order.
        assert_eq!(c.get("/hello.txt").status, 200);
        c.send(
            b"GET /slow/d HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        let r1 = c.read_response(false).expect("refusal within the timeout");
        let r2 = c
            .read_response(false)
            .expect("next response within the timeout");
        assert_eq!((r1.status, r2.status), (want, 200));
        assert_eq!(r2.text(), "hello, world\n");
        // The stage drains; the refused connection is served once there is room.
        gate.open();
        assert_eq!(a.read_response(false).expect("a is answered").status, 200);
        assert_eq!(b.read_response(false).expect("b is answered").status, 200);
        let r = c.get("/slow/e");
        assert_eq!((r.status, r.text().as_str()), (200, "done /slow/e"));
        let st = stage_stats(s.admin_addr(), "handler:slow");
        assert_eq!(st["admission"]["policy"], "queue-threshold");
        assert!(st["rejected"].as_u64().unwrap() >= 2, "{st}");
    }
}

#[test]
fn every_dynamic_stage_gets_its_own_policy_and_stats_show_none_without_one() {
    let control = OverloadControl::default().with_admission(Some(Admission::CoDel));
    let regs: Vec<HandlerRegistration> = ["/one", "/two"]
        .iter()
        .map(|p| control.apply(HandlerRegistration::new(p, slow(0))).unwrap())
        .collect();
    let plain = HandlerRegistration::new("/plain", slow(0));
    let s = start(|c| {
        c.handlers.extend(regs);
        c.handlers.push(plain);
    });
    let mut c = connect(s.addr);
    for p in ["/one", "/two", "/plain"] {
        assert_eq!(c.get(p).status, 200);
    }
    for stage in ["handler:one", "handler:two"] {
        let st = stage_stats(s.admin_addr(), stage);
        assert_eq!(st["admission"]["policy"], "codel", "{st}");
        assert_eq!(st["admission"]["enabled"], true);
        assert_eq!(st["quality"], serde_json::Value::Null);
    }
    let st = stage_stats(s.admin_addr(), "handler:plain");
    assert_eq!(st["admission"]["policy"], "none", "{st}");
    assert_eq!(st["admission"]["enabled"], false);
}

/// The stage's cumulative response-time p90 once a stats tick has folded the last
/// window in, and its sample count.
fn server_p90(s: &support::TestServer, stage: &str, want: u64) -> (f64, u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = stage_stats(s.admin_addr(), stage);
        let rt = &st["response_time"];
        let n = rt["count"].as_u64().unwrap_or(0);
        if n >= want || Instant::now() > deadline {
            return (rt["p90_ms"].as_f64().unwrap_or(0.0), n);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_servers_p90_agrees_with_the_clients_within_ten_percent() {
    // Issue 14: `born` is the accept (first request of a connection) or the read of
    // a request's first byte, so the server's p90 covers what the client waits for.
    // 24 clients, a new connection per request, on 2 threads x 20 ms: each waits
    // ~240 ms, nearly all of it in queues before the handler runs.
    let reg = HandlerRegistration::new("/slow", slow(20)).thread_pool(fixed_threads(2));
    let s = start(|c| c.handlers.push(reg));
    let out = closed_loop_conns(
        s.addr,
        "/slow",
        &[(24, "")],
        Duration::from_millis(2500),
        Duration::ZERO,
        true,
    );
    let ok: Vec<Duration> = out
        .iter()
        .filter(|o| status_of(o) == Some(200))
        .map(|o| o.latency)
        .collect();
    assert_eq!(ok.len(), out.len(), "no admission control: all served");
    let client = p90(ok.clone()).as_secs_f64() * 1000.0;
    let (server, n) = server_p90(&s, "handler:slow", ok.len() as u64);
    eprintln!("p90: client {client:.1} ms, server {server:.1} ms over {n} requests");
    assert_eq!(n, ok.len() as u64, "the server counted every request");
    // 24 requests outstanding on 2 threads of 20 ms each: every one queues for
    // several services, however fast or loaded the machine (load only lengthens the
    // queue). Measured from the accept, the server's p90 is that queueing; measured
    // from the handler's start, it would be about one service time.
    assert!(
        server >= 3.0 * 20.0,
        "the server's p90 ({server:.1} ms) misses the queueing before the handler \
         (client p90 {client:.1} ms)"
    );
    // And it never exceeds what the client waited, which contains it (the client's
    // clock starts before the connect): a 5 % margin for the histogram's buckets.
    assert!(
        server <= 1.05 * client + 1.0,
        "server p90 {server:.1} ms vs client {client:.1} ms"
    );
}

#[test]
fn a_refused_request_never_reaches_the_handlers_stage_and_gets_the_configured_retry_after() {
    // One thread x 200 ms and a queue threshold of 1: of 8 simultaneous clients
    // most are refused, at HttpParse, from the pre-built 503.
    let control = OverloadControl::default()
        .with_admission(Some(Admission::QueueThreshold))
        .with_queue_threshold(1)
        .with_on_overload(OverloadAction::Reject503 {
            retry_after_secs: 7,
        });
    let reg = HandlerRegistration::new("/slow", slow(200)).thread_pool(fixed_threads(1));
    let reg = control.apply(reg).unwrap();
    let s = start(|c| {
        c.retry_after_secs = 7;
        c.handlers.push(reg);
    });
    let out = closed_loop(
        s.addr,
        "/slow",
        &[(8, "")],
        Duration::from_millis(1200),
        Duration::from_millis(100),
    );
    let ok = out.iter().filter(|o| status_of(o) == Some(200)).count() as u64;
    let refused: Vec<&Resp> = out
        .iter()
        .filter(|o| status_of(o) == Some(503))
        .filter_map(|o| o.resp.as_ref())
        .collect();
    assert_eq!(
        ok + refused.len() as u64,
        out.len() as u64,
        "only 200 and 503"
    );
    assert!(refused.len() >= 8, "{} refused", refused.len());
    for r in &refused {
        assert_eq!(r.header("retry-after"), Some("7"), "{r:?}");
        assert_eq!(
            r.body.len().to_string(),
            r.header("content-length").unwrap()
        );
        assert!(r.header("date").is_some());
    }
    wait_until("the handler's stage counted every admitted request", || {
        stage_stats(s.admin_addr(), "handler:slow")["processed"].as_u64() >= Some(ok)
    });
    let handler = stage_stats(s.admin_addr(), "handler:slow");
    let recv = stage_stats(s.admin_addr(), "HttpRecv");
    assert_eq!(
        handler["processed"].as_u64(),
        Some(ok),
        "the handler's stage ran exactly the admitted requests: {handler}"
    );
    assert!(
        handler["classes"][0]["rejected"].as_u64().unwrap() >= refused.len() as u64,
        "{handler}"
    );
    assert_eq!(
        recv["processed"].as_u64(),
        Some(0),
        "dynamic requests, admitted or refused, never pass HttpRecv: {recv}"
    );
}

#[test]
fn the_default_policy_refuses_part_of_a_burst_and_serves_the_rest() {
    // `--rt-target-ms` alone: delay-budget. 2 threads x 50 ms = 40 requests/s; 60
    // clients with no think time would wait 1.5 s each without control.
    let target = Duration::from_millis(300);
    let control = OverloadControl::default().with_rt_target(Some(target));
    assert_eq!(control.policy_kind("slow"), Admission::DelayBudget);
    let reg = HandlerRegistration::new("/slow", slow(50)).thread_pool(fixed_threads(2));
    let reg = control.apply(reg).unwrap();
    let s = start(|c| c.handlers.push(reg));
    let run = Duration::from_millis(3000);
    let t0 = Instant::now();
    let out = closed_loop(
        s.addr,
        "/slow",
        &[(60, "")],
        run,
        Duration::from_millis(200),
    );
    let after_1s: Vec<Duration> = out
        .iter()
        .filter(|o| status_of(o) == Some(200) && o.sent >= t0 + Duration::from_secs(1))
        .map(|o| o.latency)
        .collect();
    let served = out.iter().filter(|o| status_of(o) == Some(200)).count();
    let refused = out.iter().filter(|o| status_of(o) == Some(503)).count();
    let p = p90(after_1s);
    let capacity = 40.0 * run.as_secs_f64();
    eprintln!(
        "default policy: p90 after 1 s {p:?} (target {target:?}), {served} served of a \
         capacity of {capacity:.0}, {refused} refused"
    );
    // The p90 against the target and the share of capacity served are the
    // overload benchmark's figures (bench/overload, docs/overload: the default
    // policy's p90 and its share of capacity on a quiet machine). Here, counts: the
    // policy refused part of the burst and served the rest.
    assert!(refused > 0, "the burst is refused in part");
    assert!(served > 0, "the burst is served in part");
    assert_eq!(served + refused, out.len(), "only 200 and 503");
    let st = stage_stats(s.admin_addr(), "handler:slow");
    assert_eq!(st["admission"]["policy"], "delay-budget", "{st}");
}

#[test]
fn with_the_default_policy_a_high_class_that_fits_loses_almost_nothing() {
    // 4 threads x 20 ms: 200 requests/s. Two high-class clients fit (at most
    // 100/s); twelve low-class clients on top overload the stage.
    let target = Duration::from_millis(100);
    let control = OverloadControl::default()
        .with_rt_target(Some(target))
        .with_classes(ClassRules::default().with_header(Some("X-Class".into())));
    let reg = HandlerRegistration::new("/slow", slow(20)).thread_pool(fixed_threads(4));
    let reg = control.apply(reg).unwrap();
    let s = start(|c| c.handlers.push(reg));
    let out = closed_loop(
        s.addr,
        "/slow",
        &[(12, "X-Class: 0\r\n"), (2, "X-Class: 1\r\n")],
        Duration::from_millis(3000),
        Duration::from_millis(20),
    );
    let frac = |g: usize| rejected_share(&out, g);
    let (low, low_rej, low_n) = frac(0);
    let (high, high_rej, high_n) = frac(1);
    eprintln!("default, classes: low rejected {low_rej}/{low_n}, high {high_rej}/{high_n}");
    // Order, not a threshold: the low class is cut, and the high class loses at
    // most half the low class's share (on a quiet machine it loses 0-2 %: the
    // overload benchmark's classes scenario).
    assert!(low_rej > 0, "the low class is cut");
    assert!(
        high <= low / 2.0,
        "low class rejected {low_rej}/{low_n}, high class {high_rej}/{high_n}"
    );
}
