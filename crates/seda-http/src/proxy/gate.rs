//! The admission policy of a route's stage, told the truth about time.
//!
//! A route's stage forwards a request and returns at once: the runtime sees it
//! finish in microseconds, while the client waits for the upstream. A policy fed
//! those completions would hold a target of nothing. [`RouteGate`] wraps the route's
//! policy (any of the runtime's: USITS'03 3.2's response-time controller, the
//! multiclass controller of 3.3, delay-budget, CoDel, the concurrency limits) so
//! that it sees what a synchronous stage's policy sees:
//! - `admit`: the offer's `in_flight` counts the requests the route holds, queued
//!   *or* waiting for their upstream (the stage's own count only knows the queue);
//!   past [`ProxyRoute::max_in_flight`](super::ProxyRoute) it refuses, as a full
//!   queue would;
//! - `on_complete` from the runtime (the forward finished) is dropped; the route
//!   calls [`RouteGate::finish`] when the upstream's response head arrives (or the
//!   request fails), with the response time since `born` (USITS'03 3.2's measure),
//!   the upstream's service time and the requests still in flight;
//! - ticks and state pass through; a policy without a p90 estimate of its own
//!   (CoDel, the concurrency limits, none) shows the p90 of the route's last window
//!   of completions, so the dashboard row and `rt_p90_ms` are the upstream's p90.
//!
//! # Invariants
//! `in_flight` = requests admitted and not yet finished: raised by every `admit`
//! that returns true, lowered once by [`RouteGate::finish`] or
//! [`RouteGate::forget`] per admitted request.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::Class;
use seda::admission::{AdmissionPolicy, AdmissionState, Completion, Offer};

/// Completions per p90 window of the fallback estimate.
const WINDOW: usize = 100;

/// See the module docs.
pub(crate) struct RouteGate {
    inner: Option<Arc<dyn AdmissionPolicy>>,
    in_flight: AtomicUsize,
    max_in_flight: usize,
    /// Response times of the current window, and the last window's p90.
    window: Mutex<(Vec<Duration>, Option<Duration>)>,
}

impl fmt::Debug for RouteGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteGate")
            .field("policy", &self.inner.as_ref().map(|p| p.name()))
            .field("in_flight", &self.in_flight.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl RouteGate {
    pub(crate) fn new(inner: Option<Arc<dyn AdmissionPolicy>>, max_in_flight: usize) -> Self {
        RouteGate {
            inner,
            in_flight: AtomicUsize::new(0),
            max_in_flight,
            window: Mutex::new((Vec::with_capacity(WINDOW), None)),
        }
    }

    /// Requests the route holds now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// An admitted request is settled: its response head arrived (or it failed) at
    /// `now`; `service` is the time its upstream took.
    pub(crate) fn finish(&self, class: Class, born: Instant, service: Duration, now: Instant) {
        let left = self.release().saturating_sub(1);
        let response_time = now.saturating_duration_since(born);
        {
            let mut w = self.window.lock();
            w.0.push(response_time);
            if w.0.len() >= WINDOW {
                let p90 = p90(&mut w.0);
                w.1 = Some(p90);
                w.0.clear();
            }
        }
        if let Some(p) = &self.inner {
            p.on_complete(&Completion {
                class,
                response_time,
                queue_delay: response_time.saturating_sub(service),
                service_time: service,
                in_flight: left,
                now,
            });
        }
    }

    /// An admitted request left without a response time worth learning from (its
    /// client went away before anything was asked of the upstream).
    pub(crate) fn forget(&self) {
        self.release();
    }

    /// Lowers `in_flight` by one (never below zero); returns its value before.
    fn release(&self) -> usize {
        self.in_flight
            .fetch_update(AcqRel, Acquire, |n| Some(n.saturating_sub(1)))
            .unwrap_or(0)
    }
}

fn p90(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let i = (samples.len() * 9 / 10).min(samples.len().saturating_sub(1));
    samples[i]
}

impl AdmissionPolicy for RouteGate {
    fn name(&self) -> &'static str {
        self.inner.as_ref().map_or("none", |p| p.name())
    }

    fn admit(&self, offer: &Offer) -> bool {
        let held = self.in_flight.fetch_add(1, AcqRel);
        let ok = held < self.max_in_flight
            && self.inner.as_ref().is_none_or(|p| {
                // The route's queue is every request not yet answered: those in
                // the stage's queue and those waiting for their upstream.
                p.admit(&Offer {
                    in_flight: held.max(offer.in_flight),
                    queue_len: held.max(offer.queue_len),
                    ..*offer
                })
            });
        if !ok {
            self.in_flight.fetch_sub(1, AcqRel);
        }
        ok
    }

    /// The forward finished: not a response time (module docs).
    fn on_complete(&self, _done: &Completion) {}

    fn on_tick(&self, now: Instant) {
        if let Some(p) = &self.inner {
            p.on_tick(now);
        }
        // A slow route may not fill a window for long: close it once a second.
        let mut w = self.window.lock();
        if !w.0.is_empty() && w.0.len() >= 10 {
            let p = p90(&mut w.0);
            w.1 = Some(p);
            w.0.clear();
        }
    }

    fn state(&self) -> AdmissionState {
        let mut st = match &self.inner {
            Some(p) => p.state(),
            None => AdmissionState::named("none"),
        };
        if st.p90_ms.is_none() {
            st.p90_ms = self.window.lock().1.map(|d| d.as_secs_f64() * 1000.0);
        }
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seda::admission::QueueThreshold;

    fn offer(in_flight: usize) -> Offer {
        Offer {
            class: 0,
            queue_len: 0,
            in_flight,
            capacity: 1024,
            now: Instant::now(),
        }
    }

    #[test]
    fn in_flight_counts_requests_waiting_upstream_and_bounds_them() {
        // A queue threshold of 3 sees the requests at the upstream, not the empty queue.
        let g = RouteGate::new(Some(Arc::new(QueueThreshold::new(3))), 100);
        assert!(g.admit(&offer(0)) && g.admit(&offer(0)) && g.admit(&offer(0)));
        assert!(
            !g.admit(&offer(0)),
            "three wait upstream: the fourth is refused"
        );
        assert_eq!(g.in_flight(), 3);
        let t0 = Instant::now();
        g.finish(0, t0, Duration::ZERO, t0 + Duration::from_millis(5));
        assert!(g.admit(&offer(0)));
        let bounded = RouteGate::new(None, 2);
        assert!(bounded.admit(&offer(0)) && bounded.admit(&offer(0)));
        assert!(!bounded.admit(&offer(0)));
        bounded.forget();
        assert!(bounded.admit(&offer(0)));
    }

    #[test]
    fn the_p90_shown_is_the_upstream_response_time() {
        let g = RouteGate::new(None, 1000);
        let t0 = Instant::now();
        for i in 0..WINDOW {
            assert!(g.admit(&offer(0)));
            // The runtime's completion of the forward is ignored.
            g.on_complete(&Completion {
                class: 0,
                response_time: Duration::from_micros(5),
                queue_delay: Duration::ZERO,
                service_time: Duration::from_micros(5),
                in_flight: 0,
                now: t0,
            });
            g.finish(
                0,
                t0,
                Duration::ZERO,
                t0 + Duration::from_millis(i as u64 + 1),
            );
        }
        let p90 = g.state().p90_ms.unwrap();
        assert!((89.0..=92.0).contains(&p90), "{p90}");
        assert_eq!(g.in_flight(), 0);
    }
}
