//! GnutellaRouter: routing of every message (SEDA 5.2.1: it "performs actual packet
//! routing and maintenance of routing tables"), the connections' output, the
//! slow-peer tick (5.2.2), and Fig. 14's artificial query cost.
//!
//! The stage owns the routing tables ([`Routes`]), the established peers and their
//! output path ([`peer`]): the server hands it a connection with
//! [`RouterEvent::Joined`] and from then on only the router writes to it.
//!
//! One batch: decide each message with [`Routes::route`], rewrite a forwarded
//! message's TTL and hops where it lies, collect per destination the runs of the
//! read buffer it gets ([`out`]), then hand each destination its runs with one
//! [`peer::Peer::send`] (fast path: one `writev` per destination per batch, the
//! bytes never copied). A fresh ping is also answered with our own pong.
//!
//! The stage may run on several threads: each connection's events come in a color
//! of their own, so two threads never route one connection's reads at once nor out
//! of order (QRP sequences, `Joined` before and `Left` after its messages), and
//! share only the routing tables (sharded locks), the peer list (a snapshot) and
//! each destination's output lock.
//!
//! Every [`TICK`] the router drains the held-back queues of slow peers, closes a
//! peer whose queue has stayed over its threshold, or has read none of its queue,
//! for `slow_grace`, and sends a
//! keep-alive ping on links it has been quiet on. Ticks form a chain (each
//! schedules the next); a chain broken by a refused tick is re-armed by the next
//! batch that finds the last tick stale, with a new generation (the old one, if it
//! still exists, dies at its next tick).

mod out;
mod peer;
mod pongs;
mod qrp;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use seda::{Batch, Context, EventHandler, Meta, Sink};
use seda_io::{ConnId, Writer};

use crate::config::RouterConfig;
use crate::events::{CatcherEvent, Messages, PeerInfo, Role, RouterEvent};
use crate::flow::ReadPause;
use crate::proto::message::{
    Guid, HEADER_LEN, Header, Malformed, MsgType, bye_payload, pong_addr, pong_payload, pong_port,
    usable,
};
use crate::proto::qrp::query_codes;
use crate::proto::vendor::{self, VendorMsg};
use crate::routing::{Action, Dropped, Routed, Routes};
use crate::stats::{Count, Counters, Event, Gauge, Tally};

use self::out::Dest;
pub(crate) use self::peer::Peers;
use self::peer::{Peer, Snapshot};
use self::pongs::PongCache;
use self::qrp::QueryRouting;

/// Period of the router's tick.
pub const TICK: Duration = Duration::from_millis(20);

/// Reads queued at the router from which a read past the delay bound means a
/// standing queue (see `RouterConfig::max_queue_delay`).
const STANDING_QUEUE: usize = 32;

/// A tick older than this many periods means the chain broke.
const STALE_TICKS: u32 = 50;

/// The router stage's handler.
#[derive(Debug)]
pub(crate) struct Router {
    cfg: Arc<RouterConfig>,
    writer: Writer,
    /// Our own sink (ticks).
    me: Sink<RouterEvent>,
    catcher: Sink<CatcherEvent>,
    routes: Routes,
    peers: Arc<Peers>,
    counters: Arc<Counters>,
    /// The address our pongs name.
    advertised: SocketAddr,
    /// Generation of the live tick chain.
    generation: AtomicU64,
    /// Milliseconds since `epoch` of the last tick handled.
    last_tick_ms: AtomicU64,
    epoch: Instant,
    /// Per-destination buffers, reused across batches.
    pool: Mutex<Vec<Vec<Dest>>>,
    /// Query routing tables.
    qrp: QueryRouting,
    /// Ultrapeers that sent us a complete table (as of the last tick).
    up_tables: AtomicUsize,
    /// The pong cache, if pong caching is on.
    pongs: Option<Mutex<PongCache>>,
    /// Connections the server paused while our queue stood: resumed once it is
    /// down (end of a batch, tick).
    pause: Arc<ReadPause>,
}

/// What one batch collects.
struct Work {
    snap: Arc<Snapshot>,
    /// Leaves in `snap`.
    leaves: usize,
    dests: Vec<Dest>,
    tally: Tally,
    learned: Vec<SocketAddr>,
    /// Keyword codes of the query being routed (reused).
    codes: Vec<u32>,
    /// The routable messages of the read being routed, and their decisions.
    routed: Vec<Routed>,
}

impl Router {
    #[allow(clippy::too_many_arguments)] // the stage's sinks, shared state and settings
    pub(crate) fn new(
        cfg: Arc<RouterConfig>,
        advertised: SocketAddr,
        writer: Writer,
        me: Sink<RouterEvent>,
        catcher: Sink<CatcherEvent>,
        peers: Arc<Peers>,
        counters: Arc<Counters>,
        pause: Arc<ReadPause>,
    ) -> Router {
        let qrp = QueryRouting::new(&cfg.qrp);
        let pongs = cfg
            .pong_cache
            .as_ref()
            .map(|pc| Mutex::new(PongCache::new(cfg.routing.max_ttl, pc.per_hop, pc.lifespan)));
        Router {
            routes: Routes::new(cfg.routing.clone()),
            cfg,
            writer,
            me,
            catcher,
            peers,
            counters,
            advertised,
            generation: AtomicU64::new(1),
            last_tick_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            pool: Mutex::new(Vec::new()),
            qrp,
            up_tables: AtomicUsize::new(0),
            pongs,
            pause,
        }
    }

    /// The first tick of chain 1 (scheduled once at start).
    pub(crate) fn first_tick() -> RouterEvent {
        RouterEvent::Tick(1)
    }

    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn work(&self) -> Work {
        let snap = self.peers.snapshot();
        let mut dests = self.pool.lock().pop().unwrap_or_default();
        dests.resize_with(snap.list.len(), Dest::default);
        Work {
            leaves: leaves(&snap),
            snap,
            dests,
            tally: Tally::default(),
            learned: Vec::new(),
            codes: Vec::new(),
            routed: Vec::new(),
        }
    }

    /// Sends what `w` collected and points it at the current peers.
    fn flush(&self, w: &mut Work, now: Instant) {
        let ms = self.millis(now);
        for (d, peer) in w.dests.iter_mut().zip(&w.snap.list) {
            if d.msgs == 0 {
                continue;
            }
            d.seal();
            peer.touch_tx(ms);
            let sent = peer.send(&self.writer, &mut d.bufs, d.msgs, now);
            w.tally.slow_drops(&sent.dropped);
            d.msgs = 0;
        }
        w.snap = self.peers.snapshot();
        w.leaves = leaves(&w.snap);
        w.dests.resize_with(w.snap.list.len(), Dest::default);
    }

    /// Whether the router decides message `h` with its routing tables (the rest
    /// it consumes: vendor messages, QRP, pings the pong cache answers).
    fn table_routed(&self, h: &Header) -> bool {
        match h.kind {
            MsgType::Vendor | MsgType::StdVendor | MsgType::Qrp => false,
            MsgType::Ping => self.pongs.is_none(),
            _ => true,
        }
    }

    /// Routes the messages of one read; `late`: the read waited past the delay
    /// bound, so its pings and queries are dropped unrouted.
    ///
    /// Two passes: the first collects the messages the routing tables decide and
    /// decides them at once ([`Routes::route_many`]: one lock per table shard for
    /// the read, not one per message); the second acts on each message in order.
    fn route(&self, w: &mut Work, from: ConnId, m: Messages, late: bool, now: Instant) {
        let Messages {
            mut buf,
            skip,
            count,
        } = m;
        let src = w.snap.position(from);
        if let Some(i) = src {
            w.snap.list[i].received.fetch_add(u64::from(count), Relaxed);
        }
        let shed = |h: &Header| late && matches!(h.kind, MsgType::Ping | MsgType::Query);
        w.routed.clear();
        let mut skipped = skip.iter().copied().peekable();
        let mut off = 0;
        while buf.len() - off >= HEADER_LEN {
            let h = Header::parse(&buf[off..off + HEADER_LEN]);
            let (at, end) = (off, off + HEADER_LEN + h.len as usize);
            if end > buf.len() {
                break;
            }
            off = end;
            if skipped.peek() == Some(&(at as u32)) {
                skipped.next();
                continue;
            }
            if self.table_routed(&h) && !shed(&h) {
                w.routed.push(Routed::new(at, h));
            }
        }
        self.routes.route_many(from, &buf, &mut w.routed, now);
        let mut decided = 0;
        let mut skip = skip.into_iter().peekable();
        let mut off = 0;
        while buf.len() - off >= HEADER_LEN {
            let h = Header::parse(&buf[off..off + HEADER_LEN]);
            let (at, end) = (off, off + HEADER_LEN + h.len as usize);
            if end > buf.len() {
                break;
            }
            off = end;
            if skip.peek() == Some(&(at as u32)) {
                skip.next();
                continue;
            }
            if shed(&h) && self.table_routed(&h) {
                w.tally.dropped(Dropped::Late);
                continue;
            }
            let p = &buf[at + HEADER_LEN..end];
            match h.kind {
                MsgType::Vendor | MsgType::StdVendor => {
                    if let Some(i) = src {
                        self.vendor(&w.snap.list[i], p, now);
                    }
                    continue;
                }
                MsgType::Qrp => {
                    if let Some(i) = src {
                        let peer = Arc::clone(&w.snap.list[i]);
                        self.qrp_message(w, &peer, p, now);
                    }
                    continue;
                }
                MsgType::Ping if self.pongs.is_some() => {
                    self.answer_ping(w, src, &h, now);
                    continue;
                }
                _ => {}
            }
            if h.kind == MsgType::Query
                && let Some(d) = self.cfg.query_delay
            {
                std::thread::sleep(d);
            }
            let action = w.routed[decided].action;
            decided += 1;
            if h.kind == MsgType::Ping
                && matches!(action, Action::Broadcast(_) | Action::Absorb)
                && let (Some(i), Some((ph, pp))) = (src, self.pong_for(&h))
            {
                w.dests[i].own(&ph, &pp);
                w.tally.sent(MsgType::Pong, 1);
            }
            // The keywords, if a table may have to be consulted.
            let last_hop = matches!(action, Action::Broadcast(n) if n.ttl == 1);
            let consult = h.kind == MsgType::Query
                && (w.leaves > 0 || (last_hop && self.up_tables.load(Relaxed) > 0));
            if consult {
                query_codes(p, &mut w.codes);
            }
            match action {
                Action::Broadcast(next) => {
                    rewrite(&mut buf, at, &next);
                    let n = if h.kind == MsgType::Query {
                        self.fan_query(w, src, at, end, &next, true, consult)
                    } else {
                        // Pings (pong caching off) go to ultrapeers only.
                        let mut n = 0;
                        for (i, peer) in w.snap.list.iter().enumerate() {
                            if Some(i) != src
                                && peer.info.role == Role::Ultrapeer
                                && !peer.is_closing()
                            {
                                w.dests[i].take(at, end);
                                n += 1;
                            }
                        }
                        n
                    };
                    if n > 0 {
                        w.tally.routed(h.kind);
                        w.tally.sent(h.kind, n);
                    }
                }
                // A query that reached us with its last hop still reaches our
                // leaves (they are part of us), with TTL 1 (never 0).
                Action::Absorb if h.kind == MsgType::Query && w.leaves > 0 && h.hops < u8::MAX => {
                    let next = Header {
                        ttl: 1,
                        hops: h.hops + 1,
                        ..h
                    };
                    rewrite(&mut buf, at, &next);
                    let n = self.fan_query(w, src, at, end, &next, false, consult);
                    if n > 0 {
                        w.tally.routed(h.kind);
                        w.tally.sent(h.kind, n);
                    }
                }
                Action::Absorb => {}
                // A pong naming an address no one can reach is useless (and
                // counted against us) once it leaves its sender's neighbour.
                Action::Forward(..) if h.kind == MsgType::Pong && !usable(pong_addr(p)) => {
                    w.tally.malformed(Malformed::UnusableAddress);
                }
                Action::Forward(to, next) => match w.snap.position(to) {
                    Some(i) if !w.snap.list[i].is_closing() => {
                        rewrite(&mut buf, at, &next);
                        w.dests[i].take(at, end);
                        w.tally.routed(h.kind);
                        w.tally.sent(h.kind, 1);
                    }
                    _ => w.tally.dropped(Dropped::NoRoute),
                },
                Action::Local => {
                    if h.kind == MsgType::Pong && usable(pong_addr(p)) {
                        w.learned
                            .push(SocketAddr::from((pong_addr(p), pong_port(p))));
                        if let (Some(c), Ok(payload)) = (&self.pongs, p[..14].try_into()) {
                            c.lock().insert(h.hops, payload, from);
                        }
                    }
                }
                Action::Drop(d) => w.tally.dropped(d),
            }
        }
        if w.dests.iter().any(Dest::has_runs) {
            let bytes = Bytes::from(buf);
            for d in &mut w.dests {
                d.slice(&bytes);
            }
        }
    }

    /// Hands the query at `at..end` (its header already `next`) to the peers its
    /// query routing allows: ultrapeers (if `to_ups`; at the last hop only those
    /// whose table matches, when they sent one) and leaves whose table holds every
    /// keyword (`consult`: `w.codes` holds them). Returns the copies taken.
    #[allow(clippy::too_many_arguments)]
    fn fan_query(
        &self,
        w: &mut Work,
        src: Option<usize>,
        at: usize,
        end: usize,
        next: &Header,
        to_ups: bool,
        consult: bool,
    ) -> u64 {
        let last_hop = next.ttl == 1;
        let mut n = 0;
        for (i, peer) in w.snap.list.iter().enumerate() {
            if Some(i) == src || !peer.wants(next) || peer.is_closing() {
                continue;
            }
            let leaf = peer.info.role == Role::Leaf;
            if !leaf && !to_ups {
                continue;
            }
            if consult && !peer.qrp_allows(&w.codes, last_hop) {
                w.tally.count(
                    if leaf {
                        Count::QrpLeafFiltered
                    } else {
                        Count::QrpUltrapeerFiltered
                    },
                    1,
                );
                continue;
            }
            if leaf {
                w.tally.count(Count::QrpLeafCopies, 1);
            }
            w.dests[i].take(at, end);
            n += 1;
        }
        n
    }

    /// Answers a ping from the pong cache (0.6 ping/pong scheme): an alive ping
    /// (TTL 1, hops 0) with our pong only; any other, unless the peer pinged within
    /// its throttle period, with our pong and cached ones. A ping is never
    /// broadcast; a stale cache is refilled by pinging our ultrapeers.
    fn answer_ping(&self, w: &mut Work, src: Option<usize>, h: &Header, now: Instant) {
        let (Some(i), Some(pc), Some(cache)) = (src, &self.cfg.pong_cache, &self.pongs) else {
            return;
        };
        let peer = Arc::clone(&w.snap.list[i]);
        if h.ttl == 1 && h.hops == 0 {
            if let Some((ph, pp)) = self.pong_for(h) {
                w.dests[i].own(&ph, &pp);
                w.tally.sent(MsgType::Pong, 1);
            }
            return;
        }
        let throttle = match peer.info.role {
            Role::Ultrapeer => pc.throttle.0,
            Role::Leaf => pc.throttle.1,
        };
        if !peer.accept_ping(self.millis(now), throttle.as_millis() as u64) {
            w.tally.dropped(Dropped::Throttled);
            w.tally.count(Count::PingsThrottled, 1);
            return;
        }
        if let Some((ph, pp)) = self.pong_for(h) {
            w.dests[i].own(&ph, &pp);
            w.tally.sent(MsgType::Pong, 1);
        }
        let (answers, refresh) = {
            let mut c = cache.lock();
            let a = c.answer(h.ttl, peer.id, pc.per_ping);
            (a, c.refresh_due(now))
        };
        let ttl = h.hops.saturating_add(1).min(self.cfg.routing.max_ttl);
        for (hops, payload) in &answers {
            let ph = Header {
                guid: h.guid,
                kind: MsgType::Pong,
                ttl,
                hops: hops.saturating_add(1),
                len: 14,
            };
            w.dests[i].own(&ph, payload);
        }
        w.tally.sent(MsgType::Pong, answers.len() as u64);
        w.tally.count(Count::PingsAnswered, 1);
        w.tally.count(Count::PongsFromCache, answers.len() as u64);
        let saved = w
            .snap
            .list
            .iter()
            .enumerate()
            .filter(|(j, p)| *j != i && p.info.role == Role::Ultrapeer && !p.is_closing())
            .count();
        w.tally.count(Count::PingCopiesSaved, saved as u64);
        if refresh {
            self.refill_pongs(w, now);
        }
    }

    /// Pings every ultrapeer (TTL `max_ttl`): the pongs that answer refill the cache.
    fn refill_pongs(&self, w: &mut Work, now: Instant) {
        let guid = Guid::random();
        self.routes.originate(guid, MsgType::Ping, now);
        let h = Header {
            guid,
            kind: MsgType::Ping,
            ttl: self.cfg.routing.max_ttl,
            hops: 0,
            len: 0,
        };
        let mut n = 0;
        for (i, p) in w.snap.list.iter().enumerate() {
            if p.info.role == Role::Ultrapeer && !p.is_closing() {
                w.dests[i].own(&h, &[]);
                n += 1;
            }
        }
        w.tally.sent(MsgType::Ping, n);
        w.tally.count(Count::PongRefreshes, 1);
    }

    /// A QRP message from `peer`: its table grows; a malformed message or a table
    /// past our memory limit ends that peer's connection only (Bye 413).
    fn qrp_message(&self, w: &mut Work, peer: &Peer, p: &[u8], now: Instant) {
        w.tally.count(Count::QrpMessages, 1);
        match self.qrp.receive(peer, p) {
            Ok(true) => w.tally.count(Count::QrpTables, 1),
            Ok(false) => {}
            Err(r) => {
                tracing::info!(conn = %peer.id, addr = %peer.addr, "dropping a peer: {}", r.reason);
                w.tally.count(r.count, 1);
                self.bye(peer.id, 413, &r.reason, now);
            }
        }
    }

    /// Our pong answering a ping `h`, if our address may be named to whoever sent
    /// the ping (see [`RouterConfig::advertise`]).
    fn pong_for(&self, h: &Header) -> Option<(Header, [u8; 14])> {
        let adv = self.advertised;
        let ip = match adv.ip() {
            IpAddr::V4(ip) => ip,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        // An unusable address (loopback, ...) only answers a neighbour's alive ping
        // (TTL 1, hops 0), which servents match by GUID before they look at the
        // address; anywhere else it would be counted as an unusable pong.
        if !(usable(ip) || (h.hops == 0 && h.ttl == 1)) {
            self.counters.event(Event::PongSuppressed);
            return None;
        }
        self.counters.event(Event::OwnPong);
        let payload = pong_payload(ip, adv.port(), 0, 0);
        let header = Header {
            guid: h.guid,
            kind: MsgType::Pong,
            ttl: h.hops.saturating_add(1),
            hops: 0,
            len: 14,
        };
        Some((header, payload))
    }

    /// Sends one message of ours to `peer`, counted in the per-type `sent`.
    fn send_own(&self, peer: &Peer, h: Header, payload: &[u8], now: Instant) {
        let mut m = Vec::with_capacity(HEADER_LEN + payload.len());
        Header {
            len: payload.len() as u32,
            ..h
        }
        .write(&mut m);
        m.extend_from_slice(payload);
        peer.touch_tx(self.millis(now));
        let sent = peer.send(&self.writer, &mut vec![Bytes::from(m)], 1, now);
        if sent.accepted > 0 {
            self.counters.sent(h.kind, 1);
        }
    }

    /// A one-hop ping of ours (its pong comes back `Local`).
    fn send_keepalive(&self, peer: &Peer, now: Instant) {
        let guid = Guid::random();
        self.routes.originate(guid, MsgType::Ping, now);
        let h = Header {
            guid,
            kind: MsgType::Ping,
            ttl: 1,
            hops: 0,
            len: 0,
        };
        self.send_own(peer, h, &[], now);
    }

    fn send_messages_supported(&self, peer: &Peer, now: Instant) {
        self.counters.event(Event::VendorAnswered);
        let h = Header {
            guid: Guid::random(),
            kind: MsgType::Vendor,
            ttl: 1,
            hops: 0,
            len: 0,
        };
        self.send_own(peer, h, &vendor::messages_supported(), now);
    }

    fn vendor(&self, peer: &Peer, p: &[u8], now: Instant) {
        let Some(v) = VendorMsg::parse(p) else { return };
        if v.is_messages_supported() {
            if peer.claim_vendor() {
                self.send_messages_supported(peer, now);
            }
        } else if let Some(h) = v.hops_flow() {
            peer.set_hops_flow(h);
        }
    }

    fn join(&self, conn: ConnId, addr: SocketAddr, outgoing: bool, info: PeerInfo, now: Instant) {
        let vendor = info.vendor;
        let peer = Arc::new(Peer::new(
            conn,
            addr,
            outgoing,
            info,
            self.cfg.out_queue_bytes,
            self.cfg.socket_budget,
        ));
        self.peers.insert(Arc::clone(&peer));
        if vendor && peer.claim_vendor() {
            self.send_messages_supported(&peer, now);
        }
        // A one-hop ping: its pong tells the catcher the peer's listening address.
        self.send_keepalive(&peer, now);
    }

    /// Ends a connection: a Bye (code, reason), then a close once it is flushed.
    fn bye(&self, conn: ConnId, code: u16, reason: &str, now: Instant) {
        if let Some(peer) = self.peers.get(conn)
            && !peer.is_closing()
        {
            let payload = bye_payload(code, reason);
            let h = Header {
                guid: Guid::random(),
                kind: MsgType::Bye,
                ttl: 1,
                hops: 0,
                len: 0,
            };
            self.send_own(&peer, h, &payload, now);
            peer.set_closing();
            self.counters.event(Event::ByeSent);
        }
        self.writer.close(conn);
    }

    fn tick(&self, generation: u64, cx: &Context<'_>, now: Instant) {
        if generation != self.generation.load(Relaxed) {
            return;
        }
        let ms = self.millis(now);
        self.last_tick_ms.store(ms, Relaxed);
        cx.schedule_with(TICK, &self.me, RouterEvent::Tick(generation), Meta::new());
        self.pause
            .resume_if_drained(&self.writer, self.me.queue_len());
        let (routes, push) = self.routes.sizes();
        self.counters.gauge(Gauge::RouteEntries, routes);
        self.counters.gauge(Gauge::PushEntries, push);
        let snap = self.peers.snapshot();
        let tables = snap
            .list
            .iter()
            .filter(|p| p.qrt.read().table().is_some())
            .map(|p| p.info.role)
            .collect::<Vec<_>>();
        self.up_tables.store(
            tables.iter().filter(|r| **r == Role::Ultrapeer).count(),
            Relaxed,
        );
        self.counters.gauge(Gauge::QrpTables, tables.len());
        self.counters.gauge(Gauge::QrpBytes, self.qrp.used());
        if let Some(c) = &self.pongs {
            self.counters.gauge(Gauge::CachedPongs, c.lock().len());
        }
        for (peer, payloads) in self.qrp.due(&snap, now) {
            for payload in payloads {
                let h = Header {
                    guid: Guid::random(),
                    kind: MsgType::Qrp,
                    ttl: 1,
                    hops: 0,
                    len: 0,
                };
                self.send_own(&peer, h, &payload, now);
            }
            self.counters.count(Count::QrpTablesSent, 1);
        }
        let keepalive = self.cfg.keepalive.as_millis() as u64;
        for peer in &snap.list {
            // Keep-alive: a link we have been silent on gets a one-hop ping. Servents
            // probe a quiet link with "alive" pings and close it after a few go
            // unanswered (gtk-gnutella: 20 s quiet, 6 pings, Bye 406); traffic of ours
            // spares both sides the probing.
            if ms.saturating_sub(peer.last_tx_ms()) >= keepalive && !peer.is_closing() {
                self.send_keepalive(peer, now);
            }
            if peer.queued_bytes() == 0 {
                continue;
            }
            if let Some(over) = peer.drain(&self.writer, now)
                && over >= self.cfg.slow_grace
                && peer.set_closing()
            {
                tracing::info!(conn = %peer.id, addr = %peer.addr, "closing a slow peer: outgoing queue over its threshold for {over:?}");
                self.counters.event(Event::SlowPeerClosed);
                // It does not read: a Bye would only queue behind the backlog.
                self.writer.abort(peer.id);
            }
        }
    }

    /// Starts a new tick chain if the last tick is stale (a tick refused by a full
    /// queue ends its chain).
    fn rearm_if_stale(&self, cx: &Context<'_>, now: Instant) {
        let last = self.last_tick_ms.load(Relaxed);
        if self.millis(now).saturating_sub(last) > (TICK * STALE_TICKS).as_millis() as u64 {
            let g = self.generation.fetch_add(1, Relaxed) + 1;
            self.last_tick_ms.store(self.millis(now), Relaxed);
            cx.schedule_with(TICK, &self.me, RouterEvent::Tick(g), Meta::new());
        }
    }
}

/// Leaves among the peers.
fn leaves(snap: &Snapshot) -> usize {
    snap.list
        .iter()
        .filter(|p| p.info.role == Role::Leaf)
        .count()
}

/// Writes the TTL and hops of `next` into the header at `at`.
fn rewrite(buf: &mut [u8], at: usize, next: &Header) {
    buf[at + 17] = next.ttl;
    buf[at + 18] = next.hops;
}

impl EventHandler<RouterEvent> for Router {
    fn handle_events(&self, mut batch: Batch<'_, RouterEvent>, cx: &Context<'_>) {
        let now = Instant::now();
        let mut w = self.work();
        // A late read with no queue behind it was only descheduled (a busy
        // machine), not held up by a standing queue: it is routed.
        let standing = self.me.queue_len() >= STANDING_QUEUE;
        while let Some((ev, meta)) = batch.next_with_meta() {
            match ev {
                RouterEvent::Messages { from, messages } => {
                    let late = standing
                        && self
                            .cfg
                            .max_queue_delay
                            .is_some_and(|d| now.saturating_duration_since(meta.born()) > d);
                    self.route(&mut w, from, messages, late, now)
                }
                RouterEvent::Joined {
                    conn,
                    addr,
                    outgoing,
                    info,
                } => {
                    self.flush(&mut w, now);
                    self.join(conn, addr, outgoing, info, now);
                    self.flush(&mut w, now);
                }
                RouterEvent::Left { conn } => {
                    self.flush(&mut w, now);
                    if let Some(p) = self.peers.remove(conn) {
                        p.set_closing();
                        self.qrp.left(&p);
                    }
                    self.flush(&mut w, now);
                }
                RouterEvent::Bye { conn, code, reason } => {
                    self.flush(&mut w, now);
                    self.bye(conn, code, &reason, now);
                }
                RouterEvent::Tick(g) => {
                    self.flush(&mut w, now);
                    self.tick(g, cx, now);
                }
                RouterEvent::Shutdown { done } => {
                    self.flush(&mut w, now);
                    for p in &self.peers.snapshot().list {
                        self.bye(p.id, 200, "Servent shutdown", now);
                    }
                    let _ = done.try_send(());
                }
            }
        }
        self.flush(&mut w, now);
        self.counters.add(&w.tally);
        if !w.learned.is_empty() {
            let _ = self
                .catcher
                .try_enqueue(CatcherEvent::Learned(std::mem::take(&mut w.learned)));
        }
        self.pool.lock().push(w.dests);
        self.pause
            .resume_if_drained(&self.writer, self.me.queue_len());
        self.rearm_if_stale(cx, now);
    }
}
