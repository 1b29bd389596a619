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
//! # The pool
//! Idle connections are kept by the event loop that owns them: a request takes the
//! most recently idled one of its client's loop, so the client's and the upstream's
//! sockets are served by one loop (one core, no wake-up of another loop, no cache
//! line of the client's connection moving between cores); only when that loop has
//! none does it take another loop's, before opening a new connection.
//!
//! The pool keeps `max_idle` idle connections, or, while more requests than that
//! are at the upstream, as many as the most requests in flight there within the
//! last second or two: under high concurrency a connection that comes back is
//! about to be needed again, and closing it past a fixed bound costs a new connect
//! a moment later (with 1,000 clients and a bound of 256, 18 % of the requests
//! opened a connection). Connections are only opened when the pool is empty, so
//! an upstream never has more than its peak of requests in flight (bounded by the
//! route's `max_in_flight`); the surplus is closed once the peak has passed.
//!
//! # Invariants
//! - The pool holds at most `max(max_idle, recent peak of in_flight)` connections
//!   (the sweep trims a surplus), each idle (no request on it) and believed open; a
//!   connection leaves the pool when a request takes it, when it closes, when it
//!   has been idle for `idle_timeout`, or as surplus.
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

/// The idle connections of an upstream, by the event loop that owns them (each
/// list oldest first).
#[derive(Debug)]
struct Pool {
    by_loop: Vec<Vec<Arc<UpConn>>>,
    /// Connections in all of `by_loop`.
    len: usize,
    /// The most requests in flight at the upstream seen in the current and the
    /// last window of [`PEAK_WINDOW`], and when the current one began.
    peak_now: usize,
    peak_last: usize,
    rotated: Instant,
}

/// How long a peak of requests in flight keeps the pool's bound up (module docs).
const PEAK_WINDOW: Duration = Duration::from_secs(1);

impl Default for Pool {
    fn default() -> Self {
        Pool {
            by_loop: Vec::new(),
            len: 0,
            peak_now: 0,
            peak_last: 0,
            rotated: Instant::now(),
        }
    }
}

impl Pool {
    /// Idle connections kept at most now (module docs).
    fn bound(&self, max_idle: usize) -> usize {
        max_idle.max(self.peak_now).max(self.peak_last)
    }
}

/// An upstream server (module docs).
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) url: UpstreamUrl,
    idle: Mutex<Pool>,
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
            idle: Mutex::new(Pool::default()),
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

    /// The most recently idled connection of event loop `near`'s pool, else of
    /// another loop's (module docs), if any. Call once per request, after counting
    /// it in `in_flight`.
    pub(crate) fn take_idle(&self, near: usize) -> Option<Arc<UpConn>> {
        let mut pool = self.idle.lock();
        let busy = usize::try_from(self.counters.in_flight.load(Relaxed)).unwrap_or(usize::MAX);
        pool.peak_now = pool.peak_now.max(busy);
        let found = match pool.by_loop.get_mut(near).and_then(Vec::pop) {
            Some(c) => Some(c),
            None => pool.by_loop.iter_mut().find_map(Vec::pop),
        };
        if found.is_some() {
            pool.len -= 1;
        }
        found
    }

    /// Puts an idle connection back; false (the caller closes it) if the pool is
    /// full.
    pub(crate) fn put_idle(&self, c: Arc<UpConn>) -> bool {
        let mut pool = self.idle.lock();
        if pool.len >= pool.bound(self.max_idle) {
            return false;
        }
        let at = c.event_loop;
        if pool.by_loop.len() <= at {
            pool.by_loop.resize_with(at + 1, Vec::new);
        }
        pool.by_loop[at].push(c);
        pool.len += 1;
        true
    }

    /// Drops `conn` from the pool (it closed).
    pub(crate) fn forget_idle(&self, conn: seda_io::ConnId) {
        let mut pool = self.idle.lock();
        let before = pool.len;
        let mut left = 0;
        for l in &mut pool.by_loop {
            l.retain(|c| c.id != conn);
            left += l.len();
        }
        debug_assert!(left <= before);
        pool.len = left;
    }

    /// Takes the pooled connections to close at `now`: those idle since before
    /// `cutoff`, and the oldest of a surplus over the bound (module docs).
    pub(crate) fn expired(&self, now: Instant, cutoff: Instant) -> Vec<Arc<UpConn>> {
        let mut pool = self.idle.lock();
        if now.saturating_duration_since(pool.rotated) >= PEAK_WINDOW {
            pool.peak_last = std::mem::take(&mut pool.peak_now);
            pool.rotated = now;
        }
        let mut old = Vec::new();
        let mut left = 0;
        for l in &mut pool.by_loop {
            let (gone, keep): (Vec<_>, Vec<_>) =
                l.drain(..).partition(|c| c.idle_since() < Some(cutoff));
            *l = keep;
            left += l.len();
            old.extend(gone);
        }
        pool.len = left;
        let bound = pool.bound(self.max_idle);
        while pool.len > bound {
            // Each loop's list is oldest first: trim the longest.
            let Some(l) = pool.by_loop.iter_mut().max_by_key(|l| l.len()) else {
                break;
            };
            old.push(l.remove(0));
            pool.len -= 1;
        }
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
            idle: self.idle.lock().len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Version;
    use crate::proxy::flight::{Flight, Resp};
    use seda_io::ConnId;

    fn idle_conn(id: u64, event_loop: usize) -> Arc<UpConn> {
        let now = Instant::now();
        let c = UpConn::new(
            ConnId(id),
            0,
            0,
            event_loop,
            Flight {
                ex: None,
                class: 0,
                born: now,
                started: now,
                deadline: now,
                head: bytes::Bytes::new(),
                body: None,
                head_request: false,
                idempotent: true,
                client_version: Version::Http11,
                retried: false,
                settled: true,
                failed_on: Vec::new(),
                resp: Resp::Head,
            },
        );
        let mut st = c.st.lock();
        st.flight = None;
        st.idle_since = Some(now);
        drop(st);
        Arc::new(c)
    }

    #[test]
    fn a_request_takes_an_idle_connection_of_its_clients_loop_first() {
        let u = Upstream::new(
            "http://127.0.0.1:1".parse().unwrap(),
            3,
            3,
            Duration::from_secs(10),
        );
        assert!(u.put_idle(idle_conn(1, 0)));
        assert!(u.put_idle(idle_conn(2, 1)));
        assert!(u.put_idle(idle_conn(3, 0)));
        assert!(!u.put_idle(idle_conn(4, 1)), "the pool holds max_idle");
        assert_eq!(u.stats(Instant::now()).idle, 3);
        // Loop 1's own, then loop 0's most recent, then the last one.
        assert_eq!(u.take_idle(1).map(|c| c.id), Some(ConnId(2)));
        assert_eq!(u.take_idle(1).map(|c| c.id), Some(ConnId(3)));
        u.forget_idle(ConnId(1));
        assert_eq!(u.stats(Instant::now()).idle, 0);
        assert!(u.take_idle(0).is_none());
        // A loop the pool has not seen yet.
        assert!(u.put_idle(idle_conn(5, 7)));
        assert_eq!(u.take_idle(2).map(|c| c.id), Some(ConnId(5)));
        // Expiry takes from every loop.
        assert!(u.put_idle(idle_conn(6, 0)) && u.put_idle(idle_conn(7, 1)));
        let now = Instant::now();
        let gone = u.expired(now, now + Duration::from_secs(1));
        assert_eq!(gone.len(), 2);
        assert_eq!(u.stats(Instant::now()).idle, 0);
    }

    #[test]
    fn the_pool_keeps_as_many_as_the_recent_peak_of_requests_in_flight() {
        let u = Upstream::new(
            "http://127.0.0.1:1".parse().unwrap(),
            2,
            3,
            Duration::from_secs(10),
        );
        // Five requests at the upstream at once: five connections come back.
        u.counters.in_flight.store(5, Relaxed);
        assert!(u.take_idle(0).is_none());
        u.counters.in_flight.store(0, Relaxed);
        for id in 1..=5 {
            assert!(u.put_idle(idle_conn(id, (id % 2) as usize)), "{id} kept");
        }
        assert!(!u.put_idle(idle_conn(6, 0)), "over the peak");
        let t0 = Instant::now();
        let long_ago = t0
            .checked_sub(Duration::from_secs(60))
            .expect("a minute since boot");
        // Within the peak's window nothing is surplus; two windows later the three
        // oldest are.
        assert!(u.expired(t0, long_ago).is_empty());
        assert!(u.expired(t0 + PEAK_WINDOW, long_ago).is_empty());
        let gone = u.expired(t0 + 2 * PEAK_WINDOW, long_ago);
        let mut ids: Vec<u64> = gone.iter().map(|c| c.id.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3], "the oldest of the surplus");
        assert_eq!(u.stats(t0).idle, 2);
    }

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
