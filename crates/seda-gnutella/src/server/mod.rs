//! GnutellaServer: the 0.6 handshake and message framing of every connection
//! (SEDA 5.2.1: it "accepts TCP connections and processes packets, passing packet
//! events to the GnutellaRouter stage").
//!
//! The stage owns the connection table ([`conn`]) and the admission decisions
//! ([`admit`]); it tells the router when a connection joins or leaves, hands it the
//! messages that passed the payload rules, and tells the catcher what it learns of
//! hosts and how outgoing connections fare. It never writes to an established
//! connection: from [`RouterEvent::Joined`] on, the router owns the output.
//!
//! Socket events arrive colored by connection, so one connection's bytes are
//! handled in order by one worker at a time. Complete messages go to the router as
//! one event per read; a Bye is handled here; unknown types are read by their
//! length and dropped. Every router event about a connection (`Joined`, its
//! `Messages`, `Bye`, `Left`) carries the connection's router color
//! ([`router_color`]), so the router sees them in the order sent here, one at a
//! time, whatever its thread count.
//!
//! Bad input never stalls other peers: a malformed or oversized handshake gets a
//! status line (400, 413) and a close; a payload over the limit or a corrupt
//! deflate stream gets a Bye (through the router) and a close; each is counted.

mod admit;
mod conn;
mod limit;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use seda::{Batch, Color, Context, EventHandler, Meta, Sink};
use seda_io::{CloseReason, ConnId, Outgoing, SocketEvent, Writer};

use crate::config::RouterConfig;
use crate::events::{CatcherEvent, Messages, PeerInfo, Role, RouterEvent};
use crate::flow::ReadPause;
use crate::proto::framing::Inflater;
use crate::proto::handshake::{Block, HandshakeError, plausible_request};
use crate::proto::message::{MsgType, check, parse_bye};
use crate::routing::Dropped;
use crate::stats::{Counters, Event, Gauge, Tally};

use self::admit::{Admission, RecentHosts, Slots};
use self::conn::{ConnState, ConnTable, Phase};
use self::limit::Limiter;

/// Most inflated bytes framed per step (bounds a decompression bomb's footprint).
const INFLATE_STEP: usize = 64 * 1024;

/// Marks a router color (bit 62: seda-io's file colors use bit 63, socket events
/// the bare connection id).
const ROUTER_COLOR_BIT: u64 = 1 << 62;

/// The color of a connection's events at the router: one per connection, so the
/// router runs them one at a time and in the order the server sent them (a QRP
/// PATCH after its RESET, a `Left` after every read), while other connections'
/// events run beside them. Distinct from the socket events' color (the bare id):
/// colors are runtime-wide, and the server may frame a connection's next read
/// while the router routes its last one.
pub(crate) fn router_color(conn: ConnId) -> Color {
    Color::new(conn.0 | ROUTER_COLOR_BIT)
}

/// Metadata of a router event about `conn`: born when `meta` was (the read), in
/// the connection's router color.
fn to_router(conn: ConnId, meta: Meta) -> Meta {
    meta.with_color(router_color(conn))
}

/// The server stage's handler.
#[derive(Debug)]
pub(crate) struct Server {
    cfg: Arc<RouterConfig>,
    /// The address we announce (`Listen-IP`).
    advertised: SocketAddr,
    writer: Writer,
    router: Sink<RouterEvent>,
    catcher: Sink<CatcherEvent>,
    conns: ConnTable,
    slots: Slots,
    limiter: Limiter,
    recent: RecentHosts,
    counters: Arc<Counters>,
    /// Connections paused while the router's queue stands (shared with the router,
    /// which resumes them).
    pause: Arc<ReadPause>,
}

impl Server {
    pub(crate) fn new(
        cfg: Arc<RouterConfig>,
        advertised: SocketAddr,
        writer: Writer,
        router: Sink<RouterEvent>,
        catcher: Sink<CatcherEvent>,
        counters: Arc<Counters>,
        pause: Arc<ReadPause>,
    ) -> Server {
        Server {
            slots: Slots::new(&cfg),
            limiter: Limiter::new(&cfg.handshake_limit),
            cfg,
            advertised,
            writer,
            router,
            catcher,
            conns: ConnTable::default(),
            recent: RecentHosts::default(),
            counters,
            pause,
        }
    }

    fn write(&self, conn: ConnId, bytes: Vec<u8>) {
        let _ = self.writer.send(conn, Outgoing::from(bytes));
    }

    /// The headers every handshake block of ours carries; `needed` is
    /// `X-Ultrapeer-Needed` as the slots stood before this connection.
    fn our_headers(&self, mut b: Block, needed: Option<&str>) -> Block {
        let cfg = &self.cfg;
        b = b
            .header("User-Agent", cfg.user_agent.clone())
            .header("X-Ultrapeer", "True");
        if let Some(needed) = needed {
            b = b.header("X-Ultrapeer-Needed", needed);
        }
        b = b
            .header("X-Degree", cfg.max_peers.max(16).to_string())
            .header("X-Max-TTL", cfg.routing.max_ttl.to_string())
            .header("X-Dynamic-Querying", "0.1")
            .header("X-Query-Routing", "0.2")
            .header("X-Ultrapeer-Query-Routing", "0.1")
            .header("GGEP", "0.5")
            .header("Vendor-Message", "0.2")
            .header("Bye-Packet", "0.1");
        if cfg.pong_cache.is_some() {
            b = b.header("Pong-Caching", "0.1");
        }
        b = b.header("Listen-IP", self.advertised.to_string());
        if cfg.deflate {
            b = b.header("Accept-Encoding", "deflate");
        }
        b
    }

    /// The connection left its handshake: stop the catcher's watch on it.
    fn settle(&self, conn: ConnId, st: &mut ConnState) {
        if st.in_handshake {
            st.in_handshake = false;
            self.counters.gauge_add(Gauge::Handshaking, -1);
            let _ = self.catcher.try_enqueue(CatcherEvent::Settled { conn });
        }
    }

    /// Answers a handshake with `code reason` (and hosts to try) and closes.
    fn refuse(&self, conn: ConnId, st: &mut ConnState, code: u16, reason: &str, event: Event) {
        tracing::info!(%conn, addr = %st.addr, code, reason, "handshake refused");
        self.counters.event(event);
        let mut b = Block::new(format!("GNUTELLA/0.6 {code} {reason}"))
            .header("User-Agent", self.cfg.user_agent.clone());
        if code == 503
            && let Some(hosts) = self.recent.header(st.addr)
        {
            b = b.header("X-Try-Ultrapeers", hosts);
        }
        self.write(conn, b.to_bytes());
        self.close_quietly(conn, st);
    }

    /// Answers a rate-limited handshake as gtk-gnutella does (`429`, RFC 6585's
    /// "Too Many Requests"), with how long the ban lasts, and closes.
    fn ban(&self, conn: ConnId, st: &mut ConnState, secs: u64, event: Event) {
        tracing::info!(%conn, addr = %st.addr, secs, "handshake rate-limited");
        self.counters.event(event);
        let b = Block::new(format!("GNUTELLA/0.6 429 Banned for {secs}s"))
            .header("User-Agent", self.cfg.user_agent.clone())
            .header("Retry-After", secs.to_string());
        self.write(conn, b.to_bytes());
        self.close_quietly(conn, st);
    }

    /// Closes a connection in its handshake without a word.
    fn close_quietly(&self, conn: ConnId, st: &mut ConnState) {
        st.phase = Phase::Done;
        self.release(st);
        self.settle(conn, st);
        self.writer.close(conn);
    }

    fn release(&self, st: &mut ConnState) {
        if let Some(role) = st.slot.take() {
            self.slots.release(role);
        }
    }

    fn opened(&self, conn: ConnId, addr: SocketAddr, outgoing: bool) {
        let st = ConnState::new(addr, outgoing, self.cfg.max_payload);
        let since = st.since;
        self.conns.insert(conn, st);
        self.counters.gauge_add(Gauge::Handshaking, 1);
        let _ = self
            .catcher
            .try_enqueue(CatcherEvent::Handshaking { conn, since });
        if outgoing {
            tracing::info!(%conn, %addr, "outgoing connection: sending GNUTELLA CONNECT/0.6");
            let b = self.our_headers(Block::new("GNUTELLA CONNECT/0.6"), self.slots.needed());
            self.write(conn, b.to_bytes());
        }
    }

    fn closed(&self, conn: ConnId, reason: CloseReason) {
        let Some(st) = self.conns.remove(conn) else {
            return;
        };
        let mut st = st.lock();
        let established = matches!(st.phase, Phase::Established)
            || (matches!(st.phase, Phase::Done) && st.joined);
        self.release(&mut st);
        self.settle(conn, &mut st);
        if st.joined
            && self
                .router
                .try_enqueue_with(RouterEvent::Left { conn }, to_router(conn, Meta::new()))
                .is_err()
        {
            tracing::warn!(%conn, "the router did not take a Left event");
        }
        if st.outgoing {
            let _ = self.catcher.try_enqueue(CatcherEvent::Lost {
                addr: st.addr,
                established,
            });
        }
        if let Some(addr) = st.inbound.take() {
            let _ = self
                .catcher
                .try_enqueue(CatcherEvent::Inbound { addr, open: false });
        }
        tracing::debug!(%conn, addr = %st.addr, ?reason, "gnutella connection closed");
    }

    fn data(&self, conn: ConnId, bytes: Vec<u8>, meta: Meta) {
        let Some(st) = self.conns.get(conn) else {
            return;
        };
        let mut st = st.lock();
        match st.phase {
            Phase::Established => self.stream(conn, &mut st, bytes, meta),
            Phase::Done => {}
            _ => {
                st.hs.extend_from_slice(&bytes);
                self.handshake(conn, &mut st, meta);
            }
        }
    }

    /// Advances the handshake with the bytes in `st.hs`.
    fn handshake(&self, conn: ConnId, st: &mut ConnState, meta: Meta) {
        if matches!(st.phase, Phase::Connect) && !plausible_request(&st.hs) {
            return self.refuse(conn, st, 400, "Bad Request", Event::HandshakeMalformed);
        }
        let (block, used) = match Block::parse(&st.hs) {
            Ok(None) => return,
            Ok(Some(b)) => b,
            Err(HandshakeError::Oversized) => {
                return self.refuse(
                    conn,
                    st,
                    413,
                    "Handshake headers too large",
                    Event::HandshakeOversized,
                );
            }
            Err(HandshakeError::Malformed(_)) => {
                return self.refuse(conn, st, 400, "Bad Request", Event::HandshakeMalformed);
            }
        };
        let rest = st.hs.split_off(used);
        st.hs.clear();
        self.learn_try_hosts(&block);
        tracing::debug!(%conn, addr = %st.addr, start = %block.start, headers = ?block.headers, "handshake block received");
        match std::mem::replace(&mut st.phase, Phase::Done) {
            Phase::Connect => {
                self.on_connect(conn, st, &block);
                st.hs = rest;
                if !st.hs.is_empty() && !matches!(st.phase, Phase::Done) {
                    self.handshake(conn, st, meta);
                }
            }
            Phase::Final(mut info) => {
                if block.status() != Some(200) {
                    self.counters.event(Event::RefusedByPeer);
                    return self.close_quietly(conn, st);
                }
                info.deflate_in = block.has_token("Content-Encoding", "deflate");
                self.establish(conn, st, info, rest, meta);
            }
            Phase::Response => {
                if block.status() != Some(200) {
                    tracing::info!(addr = %st.addr, status = %block.start, "outgoing handshake refused");
                    self.counters.event(Event::RefusedByPeer);
                    return self.close_quietly(conn, st);
                }
                let deflate_out = self.cfg.deflate && block.has_token("Accept-Encoding", "deflate");
                let mut fin = Block::new("GNUTELLA/0.6 200 OK");
                if deflate_out {
                    fin = fin.header("Content-Encoding", "deflate");
                }
                self.write(conn, fin.to_bytes());
                let info = PeerInfo {
                    deflate_out,
                    deflate_in: block.has_token("Content-Encoding", "deflate"),
                    ..peer_info(&block)
                };
                self.counters.event(Event::Connected);
                self.slots.force(Role::Ultrapeer);
                st.slot = Some(Role::Ultrapeer);
                self.establish(conn, st, info, rest, meta);
            }
            Phase::Established | Phase::Done => {}
        }
    }

    /// Decides on an incoming `GNUTELLA CONNECT`.
    fn on_connect(&self, conn: ConnId, st: &mut ConnState, b: &Block) {
        let info = peer_info(b);
        let needed = self.slots.needed();
        match admit::decide(b, st.addr.ip(), &self.slots, &self.limiter, Instant::now()) {
            Admission::Accept(role) => st.slot = Some(role),
            Admission::Refuse {
                code,
                reason,
                event,
            } => return self.refuse(conn, st, code, reason, event),
            Admission::Banned { secs, event } => return self.ban(conn, st, secs, event),
        }
        let deflate_out = self.cfg.deflate && b.has_token("Accept-Encoding", "deflate");
        let mut resp = self
            .our_headers(Block::new("GNUTELLA/0.6 200 OK"), needed)
            .header("Remote-IP", st.addr.ip().to_string());
        if deflate_out {
            resp = resp.header("Content-Encoding", "deflate");
        }
        tracing::debug!(%conn, headers = ?resp.headers, "handshake answer sent");
        self.write(conn, resp.to_bytes());
        st.phase = Phase::Final(PeerInfo {
            deflate_out,
            ..info
        });
    }

    fn learn_try_hosts(&self, b: &Block) {
        let mut hosts = Vec::new();
        for name in ["X-Try-Ultrapeers", "X-Try"] {
            if let Some(v) = b.get(name) {
                hosts.extend(
                    v.split(',')
                        .filter_map(|h| h.trim().parse::<SocketAddr>().ok()),
                );
            }
        }
        if !hosts.is_empty() {
            hosts.truncate(64);
            self.recent.learn(&hosts);
            let _ = self.catcher.try_enqueue(CatcherEvent::Learned(hosts));
        }
    }

    fn establish(
        &self,
        conn: ConnId,
        st: &mut ConnState,
        info: PeerInfo,
        rest: Vec<u8>,
        meta: Meta,
    ) {
        st.phase = Phase::Established;
        st.inflater = info.deflate_in.then(Inflater::default);
        self.settle(conn, st);
        tracing::info!(
            %conn,
            addr = %st.addr,
            outgoing = st.outgoing,
            agent = %info.user_agent,
            deflate_out = info.deflate_out,
            deflate_in = info.deflate_in,
            "gnutella connection established"
        );
        let listen = info.listen;
        let ultrapeer = info.role == Role::Ultrapeer;
        let joined = RouterEvent::Joined {
            conn,
            addr: st.addr,
            outgoing: st.outgoing,
            info,
        };
        if self
            .router
            .try_enqueue_with(joined, to_router(conn, meta))
            .is_err()
        {
            // The router cannot take the connection: it could never be served.
            tracing::warn!(%conn, "router refused a new connection; closing it");
            self.counters.event(Event::RouterRefusedJoin);
            st.phase = Phase::Done;
            self.release(st);
            self.writer.abort(conn);
            return;
        }
        st.joined = true;
        self.counters.event(Event::HandshakeOk);
        if st.outgoing {
            let _ = self
                .catcher
                .try_enqueue(CatcherEvent::Connected { addr: st.addr });
        } else if ultrapeer && let Some(addr) = listen {
            // A peer that dialled us names its listening address only in its
            // headers (gtk-gnutella: `Node:`): the host cache learns it here.
            self.recent.learn(&[addr]);
            st.inbound = Some(addr);
            let _ = self
                .catcher
                .try_enqueue(CatcherEvent::Inbound { addr, open: true });
        }
        if !rest.is_empty() {
            self.stream(conn, st, rest, meta);
        }
    }

    /// Ends an established connection with a Bye sent by the router (which owns
    /// its output), or closes it at once if the router cannot take the request.
    fn bye(&self, conn: ConnId, st: &mut ConnState, code: u16, reason: String) {
        st.phase = Phase::Done;
        let ev = RouterEvent::Bye { conn, code, reason };
        if self
            .router
            .try_enqueue_with(ev, to_router(conn, Meta::new()))
            .is_err()
        {
            self.writer.close(conn);
        }
    }

    /// Frames (and inflates) message bytes.
    fn stream(&self, conn: ConnId, st: &mut ConnState, bytes: Vec<u8>, meta: Meta) {
        if st.inflater.is_none() {
            return self.frame(conn, st, bytes, meta);
        }
        let mut input: &[u8] = &bytes;
        while let Some(inf) = st.inflater.as_mut() {
            let mut out = Vec::new();
            let used = match inf.inflate(input, &mut out, INFLATE_STEP) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(%conn, "corrupt deflate stream: {}", e.0);
                    self.counters.event(Event::InflateError);
                    return self.bye(conn, st, 400, "Corrupt compressed stream".into());
                }
            };
            input = &input[used..];
            // A full step may leave more output inside the inflater.
            let full = out.len() >= INFLATE_STEP;
            if !out.is_empty() {
                self.frame(conn, st, out, meta);
            }
            if matches!(st.phase, Phase::Done) || (input.is_empty() && !full) {
                break;
            }
        }
    }

    /// Cuts `bytes` into messages, applies the payload rules, handles a Bye, and
    /// hands the rest to the router in one event.
    fn frame(&self, conn: ConnId, st: &mut ConnState, bytes: Vec<u8>, meta: Meta) {
        if matches!(st.phase, Phase::Done) {
            return;
        }
        let mut t = Tally::default();
        let mut skip: Vec<u32> = Vec::new();
        let mut routable = 0u64;
        let mut count = 0u32;
        let mut bye: Option<(u16, String)> = None;
        let res = st.framer.feed_each(bytes, |at, h, p| {
            t.received(h.kind);
            count += 1;
            if bye.is_some() {
                skip.push(at as u32);
                return;
            }
            if let Err(m) = check(h, p) {
                t.malformed(m);
                skip.push(at as u32);
                return;
            }
            match h.kind {
                MsgType::Bye => {
                    bye = Some(parse_bye(p).unwrap_or_default());
                    skip.push(at as u32);
                }
                MsgType::Unknown(_) => {
                    t.dropped(Dropped::NotRouted);
                    skip.push(at as u32);
                }
                _ => routable += 1,
            }
        });
        self.counters.add(&t);
        let buf = match res {
            Ok(buf) => buf,
            Err(e) => {
                self.counters.event(Event::TooLarge);
                let reason = format!("Message of {} bytes over the {}-byte limit", e.len, e.max);
                return self.bye(conn, st, 413, reason);
            }
        };
        if routable > 0 {
            let ev = RouterEvent::Messages {
                from: conn,
                messages: Messages { buf, skip, count },
            };
            // In the connection's router color: routed in the order read.
            if self
                .router
                .try_enqueue_with(ev, to_router(conn, meta))
                .is_err()
            {
                let mut t = Tally::default();
                t.dropped_n(Dropped::Overload, routable);
                self.counters.add(&t);
            } else if self
                .pause
                .after_enqueue(&self.writer, conn, self.router.queue_len())
            {
                self.counters.event(Event::ReadPaused);
            }
        }
        if let Some((code, reason)) = bye {
            tracing::info!(%conn, code, reason, "peer said Bye");
            self.counters.event(Event::ByeReceived);
            st.phase = Phase::Done;
            self.writer.close(conn);
        }
    }
}

/// What a peer's handshake block says about it.
fn peer_info(b: &Block) -> PeerInfo {
    let listen = b
        .get("Listen-IP")
        .or_else(|| b.get("X-My-Address"))
        .or_else(|| b.get("Node"))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok());
    PeerInfo {
        user_agent: b
            .get("User-Agent")
            .unwrap_or("")
            .chars()
            .take(128)
            .collect(),
        listen,
        vendor: b.get("Vendor-Message").is_some(),
        role: if b.get("X-Ultrapeer").is_some() && !b.is_true("X-Ultrapeer") {
            Role::Leaf
        } else {
            Role::Ultrapeer
        },
        qrp: b.get("X-Query-Routing").is_some(),
        up_qrp: b.get("X-Ultrapeer-Query-Routing").is_some(),
        ..PeerInfo::default()
    }
}

impl EventHandler<SocketEvent> for Server {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, _cx: &Context<'_>) {
        while let Some((ev, meta)) = batch.next_with_meta() {
            match ev {
                SocketEvent::Accepted { conn, peer, .. } => self.opened(conn, peer, false),
                SocketEvent::Adopted { conn, peer, .. } => self.opened(conn, peer, true),
                SocketEvent::Data { conn, bytes, .. } => self.data(conn, bytes, meta),
                SocketEvent::Closed { conn, reason, .. } => self.closed(conn, reason),
                // WriteBacklog (not asked for: on_backlog is Close), Resumed (reading
                // is never paused here), and kinds added later.
                _ => {}
            }
        }
    }
}
