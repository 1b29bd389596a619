//! GnutellaCatcher: the host cache and the outgoing connections (SEDA 5.2.1: "it
//! attempts to maintain at least 4 simultaneous connections to the network").
//!
//! The stage owns the host cache. Hosts come from `--peer` (seeds, never
//! forgotten), from pongs answering our own pings (the router sends them), from
//! `X-Try-Ultrapeers` headers and from the addresses ultrapeers that dialled us
//! name in their handshake (the server sends those). Every [`TICK`] the catcher
//! dials hosts until `min_outgoing` outgoing connections are up or being set up,
//! and hands each connected stream to the sockets ([`Writer::adopt`]: the server
//! sees it as `Adopted` and runs the handshake); the server tells it how each
//! fared. It runs on a thread of its own because `connect` blocks (bounded by
//! `connect_timeout`).
//!
//! It is also the watchdog of handshakes: the server reports each connection that
//! enters its handshake and each that leaves it, and a tick closes those that
//! stalled past `handshake_timeout`.
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::{Batch, Context, EventHandler, Meta, Sink};
use seda_io::{ConnId, Writer};

use crate::config::RouterConfig;
use crate::events::CatcherEvent;
use crate::stats::{Counters, Event, Gauge};

/// Period of the catcher's tick.
pub const TICK: Duration = Duration::from_millis(500);
/// Most hosts in the cache.
pub const MAX_HOSTS: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostState {
    Idle,
    Connecting,
    Connected,
}

#[derive(Clone, Debug)]
struct Host {
    seed: bool,
    state: HostState,
    failures: u32,
    next_try: Instant,
    learned: Instant,
}

/// The known hosts.
#[derive(Debug)]
struct HostCache {
    hosts: HashMap<SocketAddr, Host>,
    backoff: Duration,
    max_backoff: Duration,
}

impl HostCache {
    fn new(cfg: &RouterConfig) -> HostCache {
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

    fn len(&self) -> usize {
        self.hosts.len()
    }

    fn add_seed(&mut self, addr: SocketAddr) {
        let now = Instant::now();
        self.hosts
            .entry(addr)
            .or_insert(Host {
                seed: true,
                state: HostState::Idle,
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
                .filter(|(_, h)| !h.seed && h.state == HostState::Idle)
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
                state: HostState::Idle,
                failures: 0,
                next_try: now,
                learned: now,
            },
        );
    }

    fn outgoing(&self) -> usize {
        self.hosts
            .values()
            .filter(|h| h.state != HostState::Idle)
            .count()
    }

    fn candidate(&self, now: Instant, skip: &dyn Fn(&SocketAddr) -> bool) -> Option<SocketAddr> {
        self.hosts
            .iter()
            .filter(|(a, h)| h.state == HostState::Idle && h.next_try <= now && !skip(a))
            .min_by_key(|(_, h)| (!h.seed, h.next_try))
            .map(|(a, _)| *a)
    }

    fn failed(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = HostState::Idle;
            h.failures = h.failures.saturating_add(1);
            let factor = 1u32 << (h.failures - 1).min(16);
            h.next_try = now + (self.backoff * factor).min(self.max_backoff);
        }
    }

    fn closed_after_use(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = HostState::Idle;
            h.failures = 0;
            h.next_try = now + self.backoff;
        }
    }

    fn set_connected(&mut self, addr: SocketAddr) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = HostState::Connected;
        }
    }

    fn set_connecting(&mut self, addr: SocketAddr) {
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.state = HostState::Connecting;
        }
    }
}

/// What the catcher owns.
#[derive(Debug)]
struct State {
    hosts: HostCache,
    /// Hosts dialled and handed to the sockets, not yet `Connected` or `Lost`.
    dialing: HashMap<SocketAddr, Instant>,
    /// Connections in their handshake, since when.
    watch: HashMap<ConnId, Instant>,
    /// Listening addresses of ultrapeers connected to us (not dialled while up).
    inbound: HashMap<SocketAddr, usize>,
}

/// The catcher stage's handler.
#[derive(Debug)]
pub(crate) struct Catcher {
    cfg: Arc<RouterConfig>,
    writer: Writer,
    /// Our own sink (ticks).
    me: Sink<CatcherEvent>,
    /// Addresses that are us: never dialled.
    us: [SocketAddr; 2],
    state: Mutex<State>,
    counters: Arc<Counters>,
    generation: AtomicU64,
    last_tick: Mutex<Instant>,
}

impl Catcher {
    pub(crate) fn new(
        cfg: Arc<RouterConfig>,
        listen: SocketAddr,
        advertised: SocketAddr,
        writer: Writer,
        me: Sink<CatcherEvent>,
        counters: Arc<Counters>,
    ) -> Catcher {
        let hosts = HostCache::new(&cfg);
        counters.gauge(Gauge::KnownHosts, hosts.len());
        Catcher {
            cfg,
            writer,
            me,
            us: [listen, advertised],
            state: Mutex::new(State {
                hosts,
                dialing: HashMap::new(),
                watch: HashMap::new(),
                inbound: HashMap::new(),
            }),
            counters,
            generation: AtomicU64::new(1),
            last_tick: Mutex::new(Instant::now()),
        }
    }

    /// The first tick of chain 1 (scheduled once at start).
    pub(crate) fn first_tick() -> CatcherEvent {
        CatcherEvent::Tick(1)
    }

    fn tick(&self, now: Instant) {
        let timeout = self.cfg.handshake_timeout;
        let mut st = self.state.lock();
        let stale: Vec<ConnId> = st
            .watch
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) > timeout)
            .map(|(c, _)| *c)
            .collect();
        for conn in stale {
            st.watch.remove(&conn);
            self.counters.event(Event::HandshakeTimeout);
            self.writer.abort(conn);
        }
        // A dialled connection the sockets never announced (they were stopping, or
        // at their connection limit) must not hold its host forever.
        let limit = timeout + self.cfg.connect_timeout;
        let lost: Vec<SocketAddr> = st
            .dialing
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) > limit)
            .map(|(a, _)| *a)
            .collect();
        for addr in lost {
            st.dialing.remove(&addr);
            st.hosts.failed(addr, now);
        }
        drop(st);
        self.dial(now);
    }

    /// Dials hosts until `min_outgoing` outgoing connections exist or are being set up.
    fn dial(&self, now: Instant) {
        for _ in 0..self.cfg.min_outgoing {
            let addr = {
                let mut st = self.state.lock();
                if st.hosts.outgoing() >= self.cfg.min_outgoing {
                    return;
                }
                let inbound = &st.inbound;
                let us = self.us;
                let skip = |a: &SocketAddr| us.contains(a) || inbound.contains_key(a);
                let Some(a) = st.hosts.candidate(now, &skip) else {
                    return;
                };
                st.hosts.set_connecting(a);
                a
            };
            // Blocking (bounded by connect_timeout): this stage has a thread of its own.
            match TcpStream::connect_timeout(&addr, self.cfg.connect_timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    let mut st = self.state.lock();
                    match self.writer.adopt(stream) {
                        Ok(_) => {
                            st.dialing.insert(addr, now);
                        }
                        Err(e) => {
                            st.hosts.failed(addr, now);
                            tracing::warn!(%addr, "cannot hand a connection to the sockets: {e}");
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%addr, "connect failed: {e}");
                    self.counters.event(Event::ConnectFailed);
                    self.state.lock().hosts.failed(addr, Instant::now());
                }
            }
        }
    }

    /// Starts a new tick chain if the last tick is stale (a tick refused by a full
    /// queue ends its chain).
    fn rearm_if_stale(&self, cx: &Context<'_>, now: Instant) {
        let mut last = self.last_tick.lock();
        if now.saturating_duration_since(*last) > TICK * 10 {
            *last = now;
            let g = self.generation.fetch_add(1, Relaxed) + 1;
            cx.schedule_with(TICK, &self.me, CatcherEvent::Tick(g), Meta::new());
        }
    }
}

impl EventHandler<CatcherEvent> for Catcher {
    fn handle_events(&self, batch: Batch<'_, CatcherEvent>, cx: &Context<'_>) {
        let mut tick = false;
        let now = Instant::now();
        {
            let mut st = self.state.lock();
            for ev in batch {
                match ev {
                    CatcherEvent::Tick(g) => {
                        if g == self.generation.load(Relaxed) {
                            tick = true;
                            *self.last_tick.lock() = now;
                            cx.schedule_with(TICK, &self.me, CatcherEvent::Tick(g), Meta::new());
                        }
                    }
                    CatcherEvent::Learned(hosts) => {
                        for h in hosts {
                            st.hosts.learn(h, now);
                        }
                    }
                    CatcherEvent::Seed(addr) => st.hosts.add_seed(addr),
                    CatcherEvent::Inbound { addr, open } => {
                        if open {
                            st.hosts.learn(addr, now);
                            *st.inbound.entry(addr).or_default() += 1;
                        } else if let Some(n) = st.inbound.get_mut(&addr) {
                            *n -= 1;
                            if *n == 0 {
                                st.inbound.remove(&addr);
                            }
                        }
                    }
                    CatcherEvent::Connected { addr } => {
                        st.dialing.remove(&addr);
                        st.hosts.set_connected(addr);
                    }
                    CatcherEvent::Lost { addr, established } => {
                        st.dialing.remove(&addr);
                        if established {
                            st.hosts.closed_after_use(addr, now);
                        } else {
                            st.hosts.failed(addr, now);
                        }
                    }
                    CatcherEvent::Handshaking { conn, since } => {
                        st.watch.insert(conn, since);
                    }
                    CatcherEvent::Settled { conn } => {
                        st.watch.remove(&conn);
                    }
                }
            }
            self.counters.gauge(Gauge::KnownHosts, st.hosts.len());
        }
        if tick {
            self.tick(now);
        }
        self.rearm_if_stale(cx, now);
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
    }
}
