//! The control loop end to end on tokio's paused clock: a single-server inner service
//! whose service time jumps above what the offered load allows, so its p90 climbs past
//! the target; the layer must start shedding, hold the p90 near the target, and stop
//! shedding when the service recovers. Then two classes: the low one is cut first.

mod support;

use std::time::Duration;

use seda::admission::{MulticlassConfig, MulticlassPolicy, ResponseTimeConfig, ResponseTimePolicy};
use seda_tower::{AdmissionLayer, AdmissionStats, RequestClass};
use support::{Server, counts, open_loop, tokio_clock};
use tower::Layer;

const RATE: u32 = 50; // offered requests per second
const FAST: Duration = Duration::from_millis(2); // capacity 500/s
const SLOW: Duration = Duration::from_millis(30); // capacity 33/s < RATE

fn diff(a: &AdmissionStats, b: &AdmissionStats) -> (u64, u64) {
    (b.admitted - a.admitted, b.rejected - a.rejected)
}

#[tokio::test(start_paused = true)]
async fn shedding_starts_over_target_and_stops_after_recovery() {
    let mut cfg = ResponseTimeConfig::with_target(Duration::from_millis(100));
    cfg.nreq = 20;
    let layer = AdmissionLayer::builder(ResponseTimePolicy::new(cfg).unwrap())
        .clock(tokio_clock)
        .build();
    let handle = layer.handle();
    let server = Server::new(FAST);
    let svc = layer.layer(server.service::<u32>());

    let s0 = handle.stats();
    open_loop(&svc, RATE, 5, |i| i).await;
    let s1 = handle.stats();
    let (ok, refused) = diff(&s0, &s1);
    assert_eq!(refused, 0, "a fast service is not shed: {s1:?}");
    assert_eq!(ok, u64::from(RATE * 5));

    // The service slows to 30 ms a request: 50/s queue up without bound unless shed.
    server.set_service_time(SLOW);
    open_loop(&svc, RATE, 20, |i| i).await;
    let s2 = handle.stats();
    println!("slow phase: {s2:?}");
    let (ok, refused) = diff(&s1, &s2);
    assert!(refused > 0, "over target, requests are shed: {s2:?}");
    // Admitted no faster than the service can serve, plus what queued before the
    // controller reacted (20 s at 33/s = 666).
    assert!(ok < 800, "admitted {ok} of {} : {s2:?}", RATE * 20);
    let p90 = s2.policy.p90_ms.expect("p90 estimate");
    assert!(
        p90 < 1000.0,
        "the p90 is held within 10x the target, not left to grow: {p90} ms"
    );

    // Recovery: the rate climbs back and shedding stops.
    server.set_service_time(FAST);
    open_loop(&svc, RATE, 40, |i| i).await;
    let s3 = handle.stats();
    open_loop(&svc, RATE, 10, |i| i).await;
    let s4 = handle.stats();
    let (ok, refused) = diff(&s3, &s4);
    assert_eq!(
        refused, 0,
        "after recovery nothing is shed: {s3:?} -> {s4:?}"
    );
    assert_eq!(ok, u64::from(RATE * 10));
    assert_eq!(s4.in_flight, 0, "every permit came back");
}

#[tokio::test(start_paused = true)]
async fn the_low_class_is_cut_first() {
    let mut cfg = MulticlassConfig::with_target(Duration::from_millis(100));
    cfg.base.nreq = 20;
    let layer = AdmissionLayer::builder(MulticlassPolicy::new(cfg).unwrap())
        .classify(|r: &http::Request<()>| r.extensions().get::<RequestClass>().map_or(0, |c| c.0))
        .clock(tokio_clock)
        .build();
    let handle = layer.handle();
    let server = Server::new(FAST);
    let svc = layer.layer(server.service::<http::Request<()>>());
    // Half the requests are class 1 (e.g. paying customers), half class 0.
    let request = |i: u32| {
        let mut r = http::Request::new(());
        r.extensions_mut().insert(RequestClass((i % 2) as u8));
        r
    };

    open_loop(&svc, RATE, 5, request).await;
    server.set_service_time(SLOW);
    let s1 = handle.stats();
    open_loop(&svc, RATE, 30, request).await;
    let s2 = handle.stats();
    let delta = |class| {
        let ((a1, r1), (a2, r2)) = (counts(&s1, class), counts(&s2, class));
        (a2 - a1, r2 - r1)
    };
    let (low, high) = (delta(0), delta(1));
    println!(
        "low (admitted, rejected) {low:?}, high {high:?}, {:?}",
        s2.policy
    );
    assert!(low.1 > 0, "the low class is shed: {s2:?}");
    assert!(
        low.1 > 2 * high.1,
        "the low class takes most of the cut: low {low:?} high {high:?}"
    );
    assert!(
        high.0 > low.0,
        "the high class gets more of the capacity: low {low:?} high {high:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_policies_see_the_layers_in_flight_count_and_latency() {
    use seda::admission::{AimdLimit, AimdLimitConfig};
    // AIMD: the limit on requests in flight shrinks while in-layer latency exceeds
    // 50 ms and grows again when it is back under.
    let policy = AimdLimit::new(AimdLimitConfig::with_timeout(Duration::from_millis(50))).unwrap();
    let layer = AdmissionLayer::builder(policy).clock(tokio_clock).build();
    let handle = layer.handle();
    let server = Server::new(FAST);
    let svc = layer.layer(server.service::<u32>());
    open_loop(&svc, RATE, 5, |i| i).await;
    let s1 = handle.stats();
    assert_eq!(s1.rejected, 0, "{s1:?}");
    let before = s1.policy.limit.expect("a limit");

    server.set_service_time(SLOW);
    open_loop(&svc, RATE, 20, |i| i).await;
    let s2 = handle.stats();
    let (_, refused) = diff(&s1, &s2);
    let cut = s2.policy.limit.expect("a limit");
    assert!(
        refused > 0,
        "the limit refuses once latency is over its bound: {s2:?}"
    );
    assert!(cut < before, "the limit was cut: {before} -> {cut}");
}
