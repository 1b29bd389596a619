//! One upstream server of a route: its keep-alive pool, its passive health and its
//! counters.
//!
//! # Passive health
//! Connect failures, resets and garbage before a response, and response timeouts
//! count as failures; a response head counts as a success and clears them. After
//! [`ProxyRoute::max_fails`](super::ProxyRoute) failures in a row the upstream is
//! ejected for [`ProxyRoute::eject_for`](super::ProxyRoute): it gets no new request
//! until then. The next request after that tries it (the count is not cleared): one
//! more failure ejects it again at once, a success brings it back.
//!
//! # Invariants
//! - The pool holds at most `max_idle` connections, each idle (no request on it)
//!   and believed open; a connection leaves the pool when a request takes it, when it
//!   closes, or when it has been idle for `idle_timeout`.
//! - `in_flight` counts requests assigned to this upstream and not yet settled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::config::UpstreamUrl;
use super::flight::UpConn;

/// Counters of one upstream, the `upstreams` of a route in the `proxy` section.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct UpstreamStats {
    /// The upstream's URL.
    pub url: String,
    /// Connections established.
    pub connects: u64,
    /// Connects that failed (refused, unreachable, timed out).
    pub connect_failures: u64,
    /// Failures counted by passive health (connect failures, resets and garbage
    /// before a response, response timeouts).
    pub failures: u64,
    /// Times the upstream was ejected.
    pub ejections: u64,
    /// Whether it is ejected now.
    pub ejected: bool,
    /// Requests sent to it.
    pub requests: u64,
    /// Of these, on a kept-alive connection.
    pub reused: u64,
    /// Requests waiting for its answer now.
    pub in_flight: u64,
    /// Idle keep-alive connections now.
    pub idle: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connects: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) ejections: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) reused: AtomicU64,
    pub(crate) in_flight: AtomicU64,
}

#[derive(Debug, Default)]
struct Health {
    fails: u32,
    ejected_until: Option<Instant>,
}

/// An upstream server (module docs).
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) url: UpstreamUrl,
    idle: Mutex<Vec<Arc<UpConn>>>,
    health: Mutex<Health>,
    pub(crate) counters: Counters,
    max_idle: usize,
    max_fails: u32,
    eject_for: Duration,
}

impl Upstream {
    pub(crate) fn new(
        url: UpstreamUrl,
        max_idle: usize,
        max_fails: u32,
        eject_for: Duration,
    ) -> Self {
        Upstream {
            url,
            idle: Mutex::new(Vec::new()),
            health: Mutex::new(Health::default()),
            counters: Counters::default(),
            max_idle,
            max_fails,
            eject_for,
        }
    }

    /// Whether the upstream takes requests now (not ejected).
    pub(crate) fn is_available(&self, now: Instant) -> bool {
        self.health
            .lock()
            .ejected_until
            .is_none_or(|until| until <= now)
    }

    /// A response head arrived: healthy.
    pub(crate) fn succeeded(&self) {
        let mut h = self.health.lock();
        h.fails = 0;
        h.ejected_until = None;
    }

    /// A failure (module docs); ejects past `max_fails` in a row.
    pub(crate) fn failed(&self, now: Instant) {
        self.counters.failures.fetch_add(1, Relaxed);
        let mut h = self.health.lock();
        h.fails = h.fails.saturating_add(1);
        let ejected_now = h.ejected_until.is_some_and(|u| u > now);
        if h.fails >= self.max_fails && !ejected_now {
            h.ejected_until = Some(now + self.eject_for);
            self.counters.ejections.fetch_add(1, Relaxed);
            tracing::warn!(
                upstream = %self.url,
                fails = h.fails,
                "upstream ejected for {:?}",
                self.eject_for
            );
        }
    }

    /// The most recently idled connection of the pool, if any.
    pub(crate) fn take_idle(&self) -> Option<Arc<UpConn>> {
        self.idle.lock().pop()
    }

    /// Puts an idle connection back; false (the caller closes it) if the pool is
    /// full.
    pub(crate) fn put_idle(&self, c: Arc<UpConn>) -> bool {
        let mut idle = self.idle.lock();
        if idle.len() >= self.max_idle {
            return false;
        }
        idle.push(c);
        true
    }

    /// Drops `conn` from the pool (it closed).
    pub(crate) fn forget_idle(&self, conn: seda_io::ConnId) {
        self.idle.lock().retain(|c| c.id != conn);
    }

    /// Takes the pooled connections idle since before `cutoff` (to close).
    pub(crate) fn expired(&self, cutoff: Instant) -> Vec<Arc<UpConn>> {
        let mut idle = self.idle.lock();
        let (old, keep): (Vec<_>, Vec<_>) =
            idle.drain(..).partition(|c| c.idle_since() < Some(cutoff));
        *idle = keep;
        old
    }

    pub(crate) fn stats(&self, now: Instant) -> UpstreamStats {
        let c = &self.counters;
        UpstreamStats {
            url: self.url.to_string(),
            connects: c.connects.load(Relaxed),
            connect_failures: c.connect_failures.load(Relaxed),
            failures: c.failures.load(Relaxed),
            ejections: c.ejections.load(Relaxed),
            ejected: !self.is_available(now),
            requests: c.requests.load(Relaxed),
            reused: c.reused.load(Relaxed),
            in_flight: c.in_flight.load(Relaxed),
            idle: self.idle.lock().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_is_ejected_after_max_fails_and_retried_after_the_period() {
        let u = Upstream::new(
            "http://127.0.0.1:1".parse().unwrap(),
            4,
            3,
            Duration::from_secs(10),
        );
        let t0 = Instant::now();
        u.failed(t0);
        u.failed(t0);
        assert!(u.is_available(t0));
        u.failed(t0);
        assert!(!u.is_available(t0 + Duration::from_secs(9)));
        assert!(u.is_available(t0 + Duration::from_secs(10)), "tried again");
        // One more failure on the trial ejects it again at once.
        u.failed(t0 + Duration::from_secs(10));
        assert!(!u.is_available(t0 + Duration::from_secs(11)));
        assert_eq!(u.stats(t0).ejections, 2);
        u.succeeded();
        assert!(u.is_available(t0 + Duration::from_secs(11)));
        u.failed(t0 + Duration::from_secs(11));
        assert!(
            u.is_available(t0 + Duration::from_secs(11)),
            "count cleared"
        );
    }
}
