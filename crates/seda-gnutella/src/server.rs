//! GnutellaServer: the 0.6 handshake and message framing of every connection
//! (SEDA 5.2.1).
//!
//! Socket events arrive colored by connection, so one connection's bytes are
//! handled in order by one worker at a time; its state sits behind its own mutex,
//! which is therefore uncontended. Complete messages that pass the payload rules
//! go to the router stage as one event per read; link messages (Bye, vendor, QRP)
//! are handled here; unknown types are read by their length and dropped.
//!
//! Bad input never stalls other peers: a malformed or oversized handshake gets a
//! status line (400, 413) and a close; a payload over the limit or a corrupt
//! deflate stream gets a Bye and a close; each is counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use seda::{Batch, Context, EventHandler, Meta};
use seda_io::{CloseReason, ConnId, Outgoing, SocketEvent};

use crate::catcher::CatcherEvent;
use crate::node::Node;
use crate::peer::{Peer, PeerInfo};
use crate::proto::framing::{Chunk, Framer, Inflater};
use crate::proto::handshake::{Block, HandshakeError, plausible_request};
use crate::proto::message::{Guid, Header, MsgType, check, parse_bye};
use crate::proto::vendor::{self, VendorMsg};
use crate::router::RouterEvent;
use crate::routing::Dropped;
use crate::stats::{Event, Tally};

/// Most inflated bytes framed per step (bounds a decompression bomb's footprint).
const INFLATE_STEP: usize = 64 * 1024;

#[derive(Debug)]
enum Phase {
    /// Incoming: waiting for `GNUTELLA CONNECT/0.6`.
    Connect,
    /// Incoming: we said 200, waiting for the client's final 200.
    Final(PeerInfo),
    /// Outgoing: we sent CONNECT, waiting for the answer.
    Response,
    /// Messages flow.
    Established,
    /// Refused or closing: input is ignored.
    Done,
}

/// One connection's handshake and framing state.
#[derive(Debug)]
pub(crate) struct ConnState {
    phase: Phase,
    hs: Vec<u8>,
    inflater: Option<Inflater>,
    framer: Framer,
    addr: SocketAddr,
    outgoing: bool,
    since: Instant,
    sent_vendor: bool,
    scratch: Vec<u8>,
}

const SHARDS: usize = 16;

/// Connection states by id, sharded.
#[derive(Debug, Default)]
pub(crate) struct ConnTable {
    shards: [RwLock<HashMap<u64, Arc<Mutex<ConnState>>>>; SHARDS],
}

impl ConnTable {
    fn shard(&self, id: ConnId) -> &RwLock<HashMap<u64, Arc<Mutex<ConnState>>>> {
        &self.shards[(id.0 as usize) % SHARDS]
    }

    fn get(&self, id: ConnId) -> Option<Arc<Mutex<ConnState>>> {
        self.shard(id).read().get(&id.0).cloned()
    }

    /// Connections known (handshaking or established).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// Connections still in the handshake since before `deadline`.
    pub(crate) fn stale(&self, deadline: Instant) -> Vec<ConnId> {
        let mut out = Vec::new();
        for s in &self.shards {
            for (id, st) in s.read().iter() {
                if let Some(st) = st.try_lock()
                    && !matches!(st.phase, Phase::Established | Phase::Done)
                    && st.since < deadline
                {
                    out.push(ConnId(*id));
                }
            }
        }
        out
    }

    /// Connections other than `except` in the handshake's last step (counted
    /// against `max_peers`); one whose state is busy counts.
    fn accepting(&self, except: ConnId) -> usize {
        let mut n = 0;
        for s in &self.shards {
            for (id, st) in s.read().iter() {
                if *id != except.0
                    && st
                        .try_lock()
                        .is_none_or(|st| matches!(st.phase, Phase::Final(_)))
                {
                    n += 1;
                }
            }
        }
        n
    }
}

/// The server stage's handler.
#[derive(Debug)]
pub(crate) struct Server {
    node: Arc<Node>,
}

impl Server {
    pub(crate) fn new(node: Arc<Node>) -> Server {
        Server { node }
    }

    fn write(&self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(w) = self.node.writer() {
            let _ = w.send(conn, Outgoing::from(bytes));
        }
    }

    /// Answers a handshake with `code reason` (and hosts to try) and closes.
    fn refuse(&self, conn: ConnId, st: &mut ConnState, code: u16, reason: &str, event: Event) {
        tracing::info!(%conn, addr = %st.addr, code, reason, "handshake refused");
        self.node.counters.event(event);
        let mut b = Block::new(format!("GNUTELLA/0.6 {code} {reason}"))
            .header("User-Agent", self.node.cfg.user_agent.clone());
        if matches!(code, 503)
            && let Some(hosts) = self.node.try_hosts(st.addr)
        {
            b = b.header("X-Try-Ultrapeers", hosts);
        }
        self.write(conn, b.to_bytes());
        st.phase = Phase::Done;
        if let Some(w) = self.node.writer() {
            w.close(conn);
        }
    }

    fn accepted(&self, conn: ConnId, addr: SocketAddr) {
        let outgoing = self.node.dialing.lock().remove(&addr).is_some();
        let st = ConnState {
            phase: if outgoing {
                Phase::Response
            } else {
                Phase::Connect
            },
            hs: Vec::new(),
            inflater: None,
            framer: Framer::new(self.node.cfg.max_payload),
            addr,
            outgoing,
            since: Instant::now(),
            sent_vendor: false,
            scratch: Vec::new(),
        };
        self.node
            .conns
            .shard(conn)
            .write()
            .insert(conn.0, Arc::new(Mutex::new(st)));
        if outgoing {
            tracing::info!(%conn, %addr, "outgoing connection: sending GNUTELLA CONNECT/0.6");
            let b = self.node.our_headers(Block::new("GNUTELLA CONNECT/0.6"));
            self.write(conn, b.to_bytes());
        }
    }

    fn closed(&self, conn: ConnId, reason: CloseReason) {
        let st = self.node.conns.shard(conn).write().remove(&conn.0);
        let peer = self.node.peers.remove(conn);
        let Some(st) = st else { return };
        let st = st.lock();
        if st.outgoing
            && let Some(c) = self.node.catcher.get()
        {
            let _ = c.try_enqueue(CatcherEvent::Lost {
                addr: st.addr,
                established: peer.is_some(),
            });
        }
        tracing::debug!(%conn, addr = %st.addr, ?reason, "gnutella connection closed");
    }

    fn data(&self, conn: ConnId, bytes: Vec<u8>, meta: Meta) {
        let Some(st) = self.node.conns.get(conn) else {
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
                if !st.hs.is_empty() {
                    self.handshake(conn, st, meta);
                }
            }
            Phase::Final(mut info) => {
                if block.status() != Some(200) {
                    return self.refuse_quietly(conn, Event::RefusedByPeer);
                }
                info.deflate_in = block.has_token("Content-Encoding", "deflate");
                self.establish(conn, st, info);
                if !rest.is_empty() {
                    self.stream(conn, st, rest, meta);
                }
            }
            Phase::Response => {
                if block.status() != Some(200) {
                    tracing::info!(addr = %st.addr, status = %block.start, "outgoing handshake refused");
                    return self.refuse_quietly(conn, Event::RefusedByPeer);
                }
                let deflate_out =
                    self.node.cfg.deflate && block.has_token("Accept-Encoding", "deflate");
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
                self.node.counters.event(crate::stats::Event::Connected);
                self.establish(conn, st, info);
                if !rest.is_empty() {
                    self.stream(conn, st, rest, meta);
                }
            }
            Phase::Established | Phase::Done => {}
        }
    }

    fn refuse_quietly(&self, conn: ConnId, event: Event) {
        self.node.counters.event(event);
        if let Some(w) = self.node.writer() {
            w.close(conn);
        }
    }

    /// Decides on an incoming `GNUTELLA CONNECT`.
    fn on_connect(&self, conn: ConnId, st: &mut ConnState, b: &Block) {
        match b.connect_version() {
            None => return self.refuse(conn, st, 400, "Bad Request", Event::HandshakeMalformed),
            Some((0, minor)) if minor < 6 => {
                return self.refuse(
                    conn,
                    st,
                    505,
                    "Gnutella 0.6 or later required",
                    Event::HandshakeLegacy,
                );
            }
            Some(_) => {}
        }
        if b.get("X-Ultrapeer").is_none() {
            return self.refuse(conn, st, 403, "Normal nodes refused", Event::RefusedNormal);
        }
        if !b.is_true("X-Ultrapeer") {
            return self.refuse(
                conn,
                st,
                503,
                "Ultrapeer router: leaves not accepted",
                Event::RefusedLeaf,
            );
        }
        if self.node.peers.len() + self.node.conns.accepting(conn) >= self.node.cfg.max_peers {
            return self.refuse(conn, st, 503, "Too many connections", Event::RefusedFull);
        }
        let deflate_out = self.node.cfg.deflate && b.has_token("Accept-Encoding", "deflate");
        let mut resp = self
            .node
            .our_headers(Block::new("GNUTELLA/0.6 200 OK"))
            .header("Remote-IP", st.addr.ip().to_string());
        if deflate_out {
            resp = resp.header("Content-Encoding", "deflate");
        }
        tracing::debug!(%conn, headers = ?resp.headers, "handshake answer sent");
        self.write(conn, resp.to_bytes());
        st.phase = Phase::Final(PeerInfo {
            deflate_out,
            ..peer_info(b)
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
        if !hosts.is_empty()
            && let Some(c) = self.node.catcher.get()
        {
            hosts.truncate(64);
            let _ = c.try_enqueue(CatcherEvent::Learned(hosts));
        }
    }

    fn establish(&self, conn: ConnId, st: &mut ConnState, info: PeerInfo) {
        st.phase = Phase::Established;
        st.inflater = info.deflate_in.then(Inflater::default);
        let cfg = &self.node.cfg;
        let vendor = info.vendor;
        let peer = Arc::new(Peer::new(
            conn,
            st.addr,
            st.outgoing,
            info,
            cfg.out_queue_bytes,
            cfg.socket_budget,
        ));
        tracing::info!(
            %conn,
            addr = %st.addr,
            outgoing = st.outgoing,
            agent = %peer.info.user_agent,
            deflate_out = peer.info.deflate_out,
            deflate_in = peer.info.deflate_in,
            "gnutella connection established"
        );
        self.node.peers.insert(Arc::clone(&peer));
        if st.outgoing {
            self.node.hosts.lock().set_connected(st.addr);
        }
        self.node.counters.event(Event::HandshakeOk);
        if vendor {
            self.send_messages_supported(&peer, st);
        }
        // A one-hop ping: its pong tells the catcher the peer's listening address.
        self.node.send_keepalive(&peer);
    }

    fn send_messages_supported(&self, peer: &Peer, st: &mut ConnState) {
        st.sent_vendor = true;
        self.node.counters.event(Event::VendorAnswered);
        self.node.send_own(
            peer,
            Header {
                guid: Guid::random(),
                kind: MsgType::Vendor,
                ttl: 1,
                hops: 0,
                len: 0,
            },
            &vendor::messages_supported(),
        );
    }

    /// Frames (and inflates) message bytes.
    fn stream(&self, conn: ConnId, st: &mut ConnState, bytes: Vec<u8>, meta: Meta) {
        let Some(peer) = self.node.peers.get(conn) else {
            return;
        };
        if st.inflater.is_none() {
            match st.framer.feed(bytes) {
                Ok(chunk) => self.deliver(&peer, st, chunk, meta),
                Err(e) => self.too_large(conn, st, e.len, e.max),
            }
            return;
        }
        let mut input: &[u8] = &bytes;
        let mut out = std::mem::take(&mut st.scratch);
        while let Some(inf) = st.inflater.as_mut() {
            let used = match inf.inflate(input, &mut out, INFLATE_STEP) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(%conn, "corrupt deflate stream: {}", e.0);
                    self.node.counters.event(Event::InflateError);
                    st.phase = Phase::Done;
                    self.node.bye(conn, 400, "Corrupt compressed stream");
                    break;
                }
            };
            input = &input[used..];
            if !out.is_empty() {
                match st.framer.feed_slice(&out) {
                    Ok(chunk) => self.deliver(&peer, st, chunk, meta),
                    Err(e) => {
                        self.too_large(conn, st, e.len, e.max);
                        break;
                    }
                }
            }
            if matches!(st.phase, Phase::Done) || (input.is_empty() && out.len() < INFLATE_STEP) {
                break;
            }
        }
        st.scratch = out;
    }

    fn too_large(&self, conn: ConnId, st: &mut ConnState, len: u32, max: u32) {
        self.node.counters.event(Event::TooLarge);
        st.phase = Phase::Done;
        self.node.bye(
            conn,
            413,
            &format!("Message of {len} bytes over the {max}-byte limit"),
        );
    }

    /// Handles link messages here and hands the rest to the router.
    fn deliver(&self, peer: &Arc<Peer>, st: &mut ConnState, mut chunk: Chunk, meta: Meta) {
        if chunk.frames.is_empty() || matches!(st.phase, Phase::Done) {
            return;
        }
        let mut t = Tally::default();
        let mut routable = Vec::with_capacity(chunk.frames.len());
        for f in &chunk.frames {
            let h = f.header;
            t.received(h.kind);
            let p = chunk.payload(f);
            if let Err(m) = check(&h, p) {
                t.malformed(m);
                continue;
            }
            match h.kind {
                MsgType::Bye => {
                    let (code, reason) = parse_bye(p).unwrap_or_default();
                    tracing::info!(conn = %peer.id, code, reason, "peer said Bye");
                    self.node.counters.event(Event::ByeReceived);
                    st.phase = Phase::Done;
                    peer.set_closing();
                    if let Some(w) = self.node.writer() {
                        w.close(peer.id);
                    }
                    break;
                }
                MsgType::Vendor | MsgType::StdVendor => self.vendor(peer, st, p),
                MsgType::Qrp => self.node.counters.event(Event::QrpConsumed),
                MsgType::Unknown(_) => t.dropped(Dropped::NotRouted),
                _ => routable.push(*f),
            }
        }
        peer.received.fetch_add(
            chunk.frames.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.node.counters.add(&t);
        if routable.is_empty() {
            return;
        }
        chunk.frames = routable;
        let Some(router) = self.node.router.get() else {
            return;
        };
        let n = chunk.frames.len() as u64;
        let ev = RouterEvent::Messages {
            from: peer.id,
            chunk,
        };
        // Uncolored: router threads may route one connection's messages in parallel.
        if router.try_enqueue_with(ev, meta.with_color(None)).is_err() {
            let mut t = Tally::default();
            t.dropped_n(Dropped::Overload, n);
            self.node.counters.add(&t);
        }
    }

    fn vendor(&self, peer: &Arc<Peer>, st: &mut ConnState, p: &[u8]) {
        let Some(v) = VendorMsg::parse(p) else { return };
        if v.is_messages_supported() {
            if !st.sent_vendor {
                self.send_messages_supported(peer, st);
            }
        } else if let Some(h) = v.hops_flow() {
            peer.set_hops_flow(h);
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
        ..PeerInfo::default()
    }
}

impl EventHandler<SocketEvent> for Server {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, _cx: &Context<'_>) {
        while let Some((ev, meta)) = batch.next_with_meta() {
            match ev {
                SocketEvent::Accepted { conn, peer } | SocketEvent::Adopted { conn, peer } => {
                    self.accepted(conn, peer)
                }
                SocketEvent::Data { conn, bytes } => self.data(conn, bytes, meta),
                SocketEvent::Closed { conn, reason } => self.closed(conn, reason),
                // WriteBacklog (not asked for: on_backlog is Close), Resumed (reading
                // is never paused here), and kinds added later.
                _ => {}
            }
        }
    }
}
