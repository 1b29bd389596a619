//! Helpers shared by the integration tests: a policy that records what it is told, a
//! single-server inner service whose service time can change, and open-loop arrivals
//! on tokio's paused clock.
#![allow(dead_code)] // each test binary uses a part

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use seda::Class;
use seda::admission::{AdmissionPolicy, Completion, Offer};
use tower::{Service, ServiceExt};

/// The layer's clock in tests: tokio's (paused) clock.
pub fn tokio_clock() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A policy that admits while `admit` is true and records every call.
#[derive(Debug, Default)]
pub struct Recorder {
    pub refuse: AtomicBool,
    pub offers: Mutex<Vec<Offer>>,
    pub completions: Mutex<Vec<Completion>>,
    pub ticks: AtomicU64,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    pub fn refusing() -> Arc<Self> {
        let r = Self::default();
        r.refuse.store(true, Ordering::SeqCst);
        Arc::new(r)
    }
    pub fn completions(&self) -> Vec<Completion> {
        self.completions.lock().unwrap().clone()
    }
    pub fn offers(&self) -> Vec<Offer> {
        self.offers.lock().unwrap().clone()
    }
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::SeqCst)
    }
}

/// `Arc<Recorder>` as a policy, so the test keeps a reference.
#[derive(Debug, Clone)]
pub struct Shared(pub Arc<Recorder>);

impl AdmissionPolicy for Shared {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn admit(&self, offer: &Offer) -> bool {
        self.0.offers.lock().unwrap().push(*offer);
        !self.0.refuse.load(Ordering::SeqCst)
    }
    fn on_complete(&self, done: &Completion) {
        self.0.completions.lock().unwrap().push(*done);
    }
    fn on_tick(&self, _now: Instant) {
        self.0.ticks.fetch_add(1, Ordering::SeqCst);
    }
}

/// An inner service that never answers (a request stuck in a slow backend).
pub fn pending_service<Req>() -> impl Service<
    Req,
    Response = (),
    Error = tower::BoxError,
    Future = std::future::Pending<Result<(), tower::BoxError>>,
> + Clone {
    tower::service_fn(|_req: Req| std::future::pending())
}

/// A single server with FIFO order: each request waits for the ones before it, then
/// takes `service_time`. Its response time grows with the load it is given, as a
/// saturated server's does. Works on tokio's paused clock.
#[derive(Clone, Debug)]
pub struct Server {
    busy_until: Arc<Mutex<tokio::time::Instant>>,
    service_us: Arc<AtomicU64>,
}

impl Server {
    pub fn new(service_time: Duration) -> Self {
        let s = Self {
            busy_until: Arc::new(Mutex::new(tokio::time::Instant::now())),
            service_us: Arc::new(AtomicU64::new(0)),
        };
        s.set_service_time(service_time);
        s
    }

    pub fn set_service_time(&self, d: Duration) {
        self.service_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// The server as a tower service for any request type.
    pub fn service<Req: Send + 'static>(
        &self,
    ) -> impl Service<Req, Response = (), Error = tower::BoxError, Future: Send> + Clone + Send + use<Req>
    {
        let me = self.clone();
        tower::service_fn(move |_req: Req| {
            let now = tokio::time::Instant::now();
            let done = {
                let mut b = me.busy_until.lock().unwrap();
                *b = (*b).max(now) + Duration::from_micros(me.service_us.load(Ordering::SeqCst));
                *b
            };
            async move {
                tokio::time::sleep_until(done).await;
                Ok(())
            }
        })
    }
}

/// Offers `per_sec` requests a second for `secs` seconds (virtual), open loop: each
/// request runs in its own task and the next arrives on schedule whatever happened to
/// the last. `make` builds the request from its index. Waits for all of them.
pub async fn open_loop<S, Req>(svc: &S, per_sec: u32, secs: u32, make: impl Fn(u32) -> Req)
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    S::Response: Send,
    Req: Send + 'static,
{
    let gap = Duration::from_secs(1) / per_sec;
    let mut tasks = Vec::new();
    let mut next = tokio::time::Instant::now();
    for i in 0..per_sec * secs {
        tokio::time::sleep_until(next).await;
        next += gap;
        let call = svc.clone().oneshot(make(i));
        tasks.push(tokio::spawn(async move {
            let _ = call.await;
        }));
    }
    for t in tasks {
        t.await.expect("request task");
    }
}

/// A service whose readiness the test controls.
#[derive(Clone, Debug, Default)]
pub struct Gated {
    pub ready: Arc<AtomicBool>,
    pub waker: Arc<Mutex<Option<Waker>>>,
    pub calls: Arc<AtomicU64>,
}

impl Gated {
    pub fn open(&self) {
        self.ready.store(true, Ordering::SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }
}

impl<Req> Service<Req> for Gated {
    type Response = &'static str;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<&'static str, tower::BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.ready.load(Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok("inner") })
    }
}

/// `(admitted, rejected)` of `class` in a stats snapshot.
pub fn counts(stats: &seda_tower::AdmissionStats, class: Class) -> (u64, u64) {
    stats
        .classes
        .iter()
        .find(|c| c.class == class)
        .map_or((0, 0), |c| (c.admitted, c.rejected))
}
