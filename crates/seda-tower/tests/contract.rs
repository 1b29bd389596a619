//! The layer's contract, clause by clause: permits released on drop, completions fed to
//! the policy, refusals as 503 + Retry-After or as `Overloaded`, `poll_ready`
//! forwarded, lazy and background ticks.

mod support;

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use seda_tower::{
    AdmissionLayer, Born, ClassExtension, ClassHeader, Overloaded, Refusal, ServiceUnavailable,
};
use support::{Gated, Recorder, Shared, pending_service, tokio_clock};
use tower::{BoxError, Layer, Service, ServiceExt};

fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(f).poll(&mut cx)
}

#[test]
fn a_dropped_response_future_releases_its_permit_and_reports_a_completion() {
    let rec = Recorder::new();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .max_in_flight(1)
        .build();
    let handle = layer.handle();
    let mut svc = layer.layer(pending_service::<u32>());

    let first = svc.call(1);
    assert_eq!(handle.in_flight(), 1);
    // The only slot is taken: the next request is refused by the cap, before the policy.
    let err = match poll_once(svc.call(2)) {
        Poll::Ready(Err(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let o = err
        .downcast_ref::<Overloaded>()
        .expect("an Overloaded error");
    assert_eq!(o.refusal(), Refusal::InFlightLimit);
    assert_eq!(
        rec.offers().len(),
        1,
        "the cap refuses before the policy is asked"
    );

    // The client goes away: the future is dropped without ever being polled.
    drop(first);
    assert_eq!(handle.in_flight(), 0, "the slot came back");
    let done = rec.completions();
    assert_eq!(done.len(), 1, "the policy learns of the abandoned request");
    assert_eq!(done[0].in_flight, 0);

    // The slot is usable again.
    let third = svc.call(3);
    assert_eq!(handle.in_flight(), 1);
    drop(third);
    let s = handle.stats();
    assert_eq!((s.admitted, s.rejected, s.in_flight), (2, 1, 0), "{s:?}");
}

/// An application error that refusals convert into.
#[derive(Debug)]
struct Failure;

impl From<Overloaded> for Failure {
    fn from(_: Overloaded) -> Self {
        Failure
    }
}

#[tokio::test(start_paused = true)]
async fn completions_carry_response_time_from_born_and_the_inner_error_too() {
    let rec = Recorder::new();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .classify(ClassExtension::or(0))
        .clock(tokio_clock)
        .build();
    let inner = tower::service_fn(|req: Request<()>| async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        if req.uri().path() == "/fail" {
            Err(Failure)
        } else {
            Ok(())
        }
    });
    let svc = layer.layer(inner);
    // Entered the service 300 ms before it reached the layer (queued in a proxy).
    let born = tokio_clock() - Duration::from_millis(300);
    let mut req = Request::new(());
    req.extensions_mut().insert(Born(born));
    svc.clone().oneshot(req).await.unwrap();
    let req = Request::get("/fail").body(()).unwrap();
    assert!(svc.clone().oneshot(req).await.is_err());

    let done = rec.completions();
    assert_eq!(done.len(), 2, "an inner error completes the request too");
    assert_eq!(done[0].response_time, Duration::from_millis(340));
    assert_eq!(done[0].queue_delay, Duration::from_millis(300));
    assert_eq!(done[0].service_time, Duration::from_millis(40));
    assert_eq!(
        done[1].response_time,
        Duration::from_millis(40),
        "no born: from the call"
    );
    assert_eq!(done[1].queue_delay, Duration::ZERO);
}

#[tokio::test]
async fn a_refused_http_request_is_a_503_with_retry_after_and_never_reaches_the_service() {
    let rec = Recorder::refusing();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .classify(ClassHeader::new("x-class"))
        .reject_with(ServiceUnavailable)
        .retry_after(Duration::from_millis(1500))
        .build();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = calls.clone();
    let svc = layer.layer(tower::service_fn(move |_req: Request<String>| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(String::from("hello"))) }
    }));
    let req = Request::get("/")
        .header("x-class", "2")
        .body(String::new())
        .unwrap();
    let res = svc.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "2", "1.5 s rounds up");
    assert_eq!(res.headers()["cache-control"], "no-store");
    assert!(res.body().contains("overloaded"), "{}", res.body());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the inner service never saw it"
    );
    assert_eq!(rec.offers()[0].class, 2, "the class came from the header");

    rec.refuse.store(false, Ordering::SeqCst);
    let res = svc.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body(), "hello");
}

#[tokio::test]
async fn axum_routes_get_a_503_from_the_layer() {
    use axum::{Router, body::Body, routing::get};
    let rec = Recorder::refusing();
    let app = Router::new().route("/", get(|| async { "hello" })).layer(
        AdmissionLayer::builder(Shared(rec.clone()))
            .reject_with(ServiceUnavailable)
            .build(),
    );
    let res = app
        .clone()
        .oneshot(Request::new(Body::empty()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "1");
    rec.refuse.store(false, Ordering::SeqCst);
    let res = app.oneshot(Request::new(Body::empty())).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[test]
fn poll_ready_forwards_the_inner_readiness_and_admits_nothing() {
    let rec = Recorder::new();
    let inner = Gated::default();
    let mut svc = AdmissionLayer::new(Shared(rec.clone())).layer(inner.clone());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(Service::<()>::poll_ready(&mut svc, &mut cx).is_pending());
    assert!(
        inner.waker.lock().unwrap().is_some(),
        "the inner service holds the waker"
    );
    inner.open();
    assert!(matches!(
        Service::<()>::poll_ready(&mut svc, &mut cx),
        Poll::Ready(Ok(()))
    ));
    assert!(
        rec.offers().is_empty(),
        "readiness takes no admission decision"
    );
    assert_eq!(svc.handle().in_flight(), 0, "and reserves no slot");

    // A refusal does not consume the inner service's readiness: it is never called.
    rec.refuse.store(true, Ordering::SeqCst);
    assert!(matches!(poll_once(svc.call(())), Poll::Ready(Err(_))));
    assert_eq!(inner.calls.load(Ordering::SeqCst), 0);
    rec.refuse.store(false, Ordering::SeqCst);
    assert!(matches!(poll_once(svc.call(())), Poll::Ready(Ok("inner"))));
    assert_eq!(inner.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn ticks_are_driven_lazily_by_requests_and_spaced_by_the_interval() {
    let rec = Recorder::new();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .tick_interval(Duration::from_millis(50))
        .clock(tokio_clock)
        .build();
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|()| async { Ok::<(), BoxError>(()) }));
    svc.call(()).await.unwrap();
    assert_eq!(rec.ticks(), 0, "no interval has passed yet");
    tokio::time::advance(Duration::from_millis(60)).await;
    svc.call(()).await.unwrap();
    assert_eq!(rec.ticks(), 1, "the first request after the interval ticks");
    svc.call(()).await.unwrap();
    assert!(!handle.tick(), "a manual tick respects the interval");
    assert_eq!(rec.ticks(), 1);
    // Idle: nothing ticks until someone does.
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(rec.ticks(), 1);
    assert!(
        handle.tick(),
        "a runtime timer can drive the clock while idle"
    );
    assert_eq!(rec.ticks(), 2);
}

#[test]
fn a_background_ticker_ticks_until_dropped() {
    let rec = Recorder::new();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .tick_interval(Duration::from_millis(1))
        .build();
    let ticker = layer.handle().spawn_ticker().expect("spawn ticker");
    let deadline = Instant::now() + Duration::from_secs(10);
    while rec.ticks() < 3 {
        assert!(Instant::now() < deadline, "ticker never ticked 3 times");
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(ticker); // joins the thread
    let after = rec.ticks();
    // A second ticker on the same interval is the clock: once it has ticked 20
    // times, the dropped one would have ticked too, had its thread survived.
    let clock = Recorder::new();
    let other = AdmissionLayer::builder(Shared(clock.clone()))
        .tick_interval(Duration::from_millis(1))
        .build();
    let _running = other.handle().spawn_ticker().expect("spawn ticker");
    let deadline = Instant::now() + Duration::from_secs(10);
    while clock.ticks() < 20 {
        assert!(Instant::now() < deadline, "the clock ticker never ticked");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(rec.ticks(), after, "no tick after the ticker is dropped");
}

#[test]
fn a_ticker_stops_when_the_layer_is_gone() {
    let rec = Recorder::new();
    let layer = AdmissionLayer::builder(Shared(rec.clone()))
        .tick_interval(Duration::from_millis(1))
        .build();
    let ticker = layer.handle().spawn_ticker().expect("spawn ticker");
    assert!(ticker.is_running());
    drop(layer);
    // The thread holds only a weak reference: with the layer gone it exits by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ticker.is_running() {
        assert!(Instant::now() < deadline, "ticker outlived its layer");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn concurrent_offers_never_overshoot_the_in_flight_cap() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    const CAP: usize = 3;
    let layer = AdmissionLayer::builder(Shared(Recorder::new()))
        .max_in_flight(CAP)
        .build();
    let handle = layer.handle();
    let svc = layer.layer(pending_service::<u32>());
    // `live` counts admitted requests whose future is still held: never above the cap.
    let (live, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (mut svc, live, peak) = (svc.clone(), live.clone(), peak.clone());
            std::thread::spawn(move || {
                let mut admitted = 0u64;
                for i in 0..5000 {
                    let mut fut = Box::pin(svc.call(i));
                    if poll_once(&mut fut).is_pending() {
                        admitted += 1;
                        let n = live.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        live.fetch_sub(1, Ordering::SeqCst);
                    }
                    drop(fut);
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let s = handle.stats();
    assert!(
        peak.load(Ordering::SeqCst) <= CAP,
        "peak {peak:?} over cap {CAP}"
    );
    assert_eq!(admitted, s.admitted);
    assert_eq!(s.admitted + s.rejected, 4 * 5000);
    assert_eq!(s.in_flight, 0);
}
