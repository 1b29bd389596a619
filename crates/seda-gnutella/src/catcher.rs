//! GnutellaCatcher: the host cache and the outgoing connections (SEDA 5.2.1: "it
//! attempts to maintain at least 4 simultaneous connections to the network").
//!
//! Hosts come from `--peer` (seeds, never forgotten), from pongs answering our own
//! pings and from `X-Try-Ultrapeers` headers. Every [`TICK`] the catcher dials
//! hosts until `min_outgoing` outgoing connections are up or being set up. It runs
//! on a thread of its own because `connect` blocks (bounded by `connect_timeout`).
//!
//! Backoff, per host: after `k` consecutive failures (refused connect, refused or
//! failed handshake) the next try waits `min(backoff * 2^(k-1), max_backoff)`;
//! after an established connection closes, `backoff`. With the default 30 s a host
//! sees at most two handshakes a minute from us, under the rate at which servents
//! answer `429` and ban.
//!
//! # Invariants
//! - A host is dialled only when it is idle and its `next_try` has passed, so two
//!   connections to one host are never set up at once by the catcher.
//! - The cache holds at most [`MAX_HOSTS`] hosts; seeds are never evicted.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seda::{Batch, Context, EventHandler, Meta, Runtime};

use crate::config::RouterConfig;
use crate::node::Node;
use crate::stats::Event;

/// Period of the catcher's tick.
pub const TICK: Duration = Duration::from_millis(500);
/// Most hosts in the cache.
pub const MAX_HOSTS: usize = 1024;

/// An event of the catcher stage.
#[derive(Debug)]
pub enum CatcherEvent {
    /// Dial if needed, reap stale handshakes.
    Tick,
    /// Hosts learned from pongs or `X-Try-Ultrapeers`.
    Learned(Vec<SocketAddr>),
    /// An outgoing connection to `addr` closed (`established`: after its handshake).
    Lost {
        /// The host.
        addr: SocketAddr,
        /// Whether the handshake had completed.
        established: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Connected,
}

#[derive(Clone, Debug)]
struct Host {
    seed: bool,
    state: State,
    failures: u32,
    next_try: Instant,
    learned: Instant,
}

/// The known hosts.
#[derive(Debug)]
pub(crate) struct HostCache {
    hosts: HashMap<SocketAddr, Host>,
    backoff: Duration,
    max_backoff: Duration,
}

impl HostCache {
    pub(crate) fn new(cfg: &RouterConfig) -> HostCache {
        let mut c = HostCache {
            hosts: HashMap::new(),
            backoff: cfg.backoff,
            max_backoff: cfg.max_backoff,
        };
        for s in &cfg.seeds {
            c.add_seed(*s);
        }
        c
    }

    pub(crate) fn len(&self) -> usize {
        self.hosts.len()
    }

    pub(crate) fn add_seed(&mut self, addr: SocketAddr) {
        let now = Instant::now();
        self.hosts
            .entry(addr)
            .or_insert(Host {
                seed: true,
                state: State::Idle,
                failures: 0,
                next_try: now,
                learned: now,
            })
            .seed = true;
    }

    fn learn(&mut self, addr: SocketAddr, now: Instant) {
        if addr.port() == 0 || addr.ip().is_unspecified() {
            return;
        }
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.learned = now;
            return;
        }
        if self.hosts.len() >= MAX_HOSTS {
            let oldest = self
                .hosts
                .iter()
                .filter(|(_, h)| !h.seed && h.state == State::Idle)
                .min_by_key(|(_, h)| h.learned)
                .map(|(a, _)| *a);
            match oldest {
                Some(a) => {
                    self.hosts.remove(&a);
                }
                None => return,
            }
        }
        self.hosts.insert(
            addr,
            Host {
                seed: false,
                state: State::Idle,
                failures: 0,
                next_try: now,
                learned: now,
            },
        );
    }

    /// Up to `n` hosts for `X-Try-Ultrapeers`, most recently learned first.
    pub(crate) fn sample(&self, n: usize, not: SocketAddr) -> Vec<SocketAddr> {
        let mut v: Vec<(&SocketAddr, &Host)> =
            self.hosts.iter().filter(|(a, _)| **a != not).collect();
        v.sort_by_key(|(_, h)| std::cmp::Reverse(h.learned));
        v.into_iter().take(n).map(|(a, _)| *a).collect()
    }

    fn outgoing(&self) -> usize {
        self.hosts
            .values()
            .filter(|h| h.state != State::Idle)
            .count()
    }

    fn candidate(&self, now: Instant, skip: &dyn Fn(&SocketAddr) -> bool) -> Option<SocketAddr> {
        self.hosts
            .iter()
            .filter(|(a, h)| h.state == State::Idle && h.next_try <= now && !skip(a))
            .min_by_key(|(_, h)| (!h.seed, h.next_try))
            .map(|(a, _)| *a)
    }

    fn failed(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = State::Idle;
            h.failures = h.failures.saturating_add(1);
            let factor = 1u32 << (h.failures - 1).min(16);
            h.next_try = now + (self.backoff * factor).min(self.max_backoff);
        }
    }

    fn closed_after_use(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = State::Idle;
            h.failures = 0;
            h.next_try = now + self.backoff;
        }
    }

    pub(crate) fn set_connected(&mut self, addr: SocketAddr) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = State::Connected;
        }
    }

    fn set_connecting(&mut self, addr: SocketAddr) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = State::Connecting;
        }
    }
}

/// The catcher stage's handler.
#[derive(Debug)]
pub(crate) struct Catcher {
    node: Arc<Node>,
}

impl Catcher {
    pub(crate) fn new(node: Arc<Node>) -> Catcher {
        Catcher { node }
    }

    fn tick(&self, cx: &Context<'_>) {
        let node = &self.node;
        if let Some(sink) = node.catcher.get() {
            cx.runtime()
                .schedule_with(TICK, sink, CatcherEvent::Tick, Meta::new());
        }
        let now = Instant::now();
        if let Some(w) = node.writer() {
            for conn in node
                .conns
                .stale(now.checked_sub(node.cfg.handshake_timeout).unwrap_or(now))
            {
                node.counters.event(Event::HandshakeTimeout);
                w.abort(conn);
            }
        }
        // A dialled connection the sockets never announced (they were stopping, or
        // the socket died before its loop took it) must not hold its host forever.
        let lost: Vec<SocketAddr> = {
            let mut dialing = node.dialing.lock();
            let gone: Vec<SocketAddr> = dialing
                .iter()
                .filter(|(_, t)| now.saturating_duration_since(**t) > node.cfg.handshake_timeout)
                .map(|(a, _)| *a)
                .collect();
            dialing.retain(|a, _| !gone.contains(a));
            gone
        };
        for addr in lost {
            node.hosts.lock().failed(addr, now);
        }
        crate::router::rearm_if_stale(cx.runtime(), node, Duration::from_secs(2));
        self.dial(now);
    }

    /// Dials hosts until `min_outgoing` outgoing connections exist or are being set up.
    fn dial(&self, now: Instant) {
        let node = &self.node;
        let Some(w) = node.writer() else { return };
        let me = node.advertised();
        let listen = node.listen.get().copied();
        let snap = node.peers.snapshot();
        let connected_to = |a: &SocketAddr| {
            *a == me
                || Some(*a) == listen
                || snap
                    .list
                    .iter()
                    .any(|p| p.info.listen == Some(*a) || (p.outgoing && p.addr == *a))
        };
        for _ in 0..node.cfg.min_outgoing {
            let addr = {
                let hosts = node.hosts.lock();
                if hosts.outgoing() >= node.cfg.min_outgoing {
                    return;
                }
                match hosts.candidate(now, &connected_to) {
                    Some(a) => a,
                    None => return,
                }
            };
            node.hosts.lock().set_connecting(addr);
            match TcpStream::connect_timeout(&addr, node.cfg.connect_timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    node.dialing.lock().insert(addr, now);
                    if let Err(e) = w.adopt(stream) {
                        node.dialing.lock().remove(&addr);
                        node.hosts.lock().failed(addr, now);
                        tracing::warn!(%addr, "cannot hand a connection to the sockets: {e}");
                    }
                }
                Err(e) => {
                    tracing::debug!(%addr, "connect failed: {e}");
                    node.counters.event(Event::ConnectFailed);
                    node.hosts.lock().failed(addr, Instant::now());
                }
            }
        }
    }
}

impl EventHandler<CatcherEvent> for Catcher {
    fn handle_events(&self, batch: Batch<'_, CatcherEvent>, cx: &Context<'_>) {
        let mut tick = false;
        for ev in batch {
            match ev {
                CatcherEvent::Tick => tick = true,
                CatcherEvent::Learned(hosts) => {
                    let now = Instant::now();
                    let mut c = self.node.hosts.lock();
                    for h in hosts {
                        c.learn(h, now);
                    }
                }
                CatcherEvent::Lost { addr, established } => {
                    let now = Instant::now();
                    let mut c = self.node.hosts.lock();
                    if established {
                        c.closed_after_use(addr, now);
                    } else {
                        c.failed(addr, now);
                    }
                }
            }
        }
        if tick {
            self.tick(cx);
        }
    }
}

/// Starts the catcher's tick chain.
pub(crate) fn start_ticks(rt: &Runtime, node: &Arc<Node>) {
    if let Some(sink) = node.catcher.get() {
        rt.schedule_with(Duration::ZERO, sink, CatcherEvent::Tick, Meta::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> HostCache {
        HostCache::new(&RouterConfig {
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(100),
            ..RouterConfig::default()
        })
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_the_cap_and_resets_after_use() {
        let mut c = cache();
        let a: SocketAddr = "10.0.0.1:6346".parse().unwrap();
        c.add_seed(a);
        let t0 = Instant::now();
        let none = |_: &SocketAddr| false;
        assert_eq!(c.candidate(t0, &none), Some(a));
        c.set_connecting(a);
        assert_eq!(c.candidate(t0, &none), None, "one connection at a time");
        assert_eq!(c.outgoing(), 1);
        let mut waits = Vec::new();
        for _ in 0..4 {
            c.failed(a, t0);
            waits.push(c.hosts[&a].next_try - t0);
        }
        assert_eq!(waits, [30, 60, 100, 100].map(Duration::from_secs).to_vec());
        assert_eq!(c.candidate(t0 + Duration::from_secs(99), &none), None);
        assert_eq!(c.candidate(t0 + Duration::from_secs(100), &none), Some(a));
        c.closed_after_use(a, t0);
        assert_eq!(c.hosts[&a].next_try - t0, Duration::from_secs(30));
    }

    #[test]
    fn the_cache_is_bounded_and_keeps_seeds() {
        let mut c = cache();
        let seed: SocketAddr = "10.9.9.9:1".parse().unwrap();
        c.add_seed(seed);
        let now = Instant::now();
        for i in 0..(MAX_HOSTS as u32 + 500) {
            let ip = std::net::Ipv4Addr::from(0x0b00_0000 + i);
            c.learn(
                SocketAddr::from((ip, 6346)),
                now + Duration::from_millis(u64::from(i)),
            );
        }
        assert_eq!(c.len(), MAX_HOSTS);
        assert!(c.hosts.contains_key(&seed));
        assert_eq!(c.sample(3, seed).len(), 3);
    }
}
