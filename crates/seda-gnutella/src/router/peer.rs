//! Established connections and their output path (owned by the router stage).
//!
//! Every message to a peer after the handshake goes through [`Peer::send`], which
//! owns the connection's ordering, its deflate stream and its value-ordered queue:
//! - fast path: when nothing is held back and the socket's own queue has room
//!   (`socket_budget`), the batch is written at once: one `writev` of the slices
//!   the router collected for this destination (no copy unless deflated);
//! - slow path: otherwise the messages wait in the [`OutQueue`], where the lowest
//!   value is dropped first past `out_queue_bytes`; [`Peer::drain`] moves them to
//!   the socket as it empties (the router calls it on every tick).
//!
//! # Invariants
//! - Memory per peer is bounded: our queue holds at most `out_queue_bytes`, and we
//!   only hand the socket a chunk while its queue is under `socket_budget`, so the
//!   socket queue stays under `socket_budget + chunk`.
//! - Bytes reach the deflate stream in the order they are sent; nothing is
//!   dropped after compression.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use seda_io::{ConnId, Outgoing, Writer};

use crate::events::{PeerInfo, Role};
use crate::outq::{CLASSES, OutQueue, Pushed, Value};
use crate::proto::framing::{Deflater, messages};
use crate::proto::message::{Header, MsgType};
use crate::proto::qrp::{RouteTable, TableReceiver};

/// Most bytes handed to the socket per drain step.
const CHUNK: usize = 64 * 1024;

/// What one [`Peer::send`] did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sent {
    /// Messages handed to the socket or queued.
    pub(crate) accepted: u64,
    /// Messages dropped by value, per class.
    pub(crate) dropped: [u32; CLASSES],
}

#[derive(Debug)]
struct Out {
    queue: OutQueue,
    deflate: Option<Deflater>,
    /// Since when the queue has been over its threshold (dropping).
    over_since: Option<Instant>,
    /// Since when the router's ticks found the queue not empty and could move none
    /// of it to the socket (the peer reads nothing).
    stalled_since: Option<Instant>,
}

/// An established connection.
#[derive(Debug)]
pub(crate) struct Peer {
    /// The connection.
    pub(crate) id: ConnId,
    /// Remote address of the socket.
    pub(crate) addr: SocketAddr,
    /// Whether we opened it.
    pub(crate) outgoing: bool,
    /// What the handshake said.
    pub(crate) info: PeerInfo,
    /// Hops Flow limit: queries with hops >= this are not sent (255: no limit).
    hops_flow: AtomicU8,
    closing: AtomicBool,
    /// Whether we sent it our "Messages Supported".
    sent_vendor: AtomicBool,
    /// The query routing table it sends us (a leaf's, or an ultrapeer's for
    /// last-hop filtering). Routing reads it; QRP messages write it.
    pub(crate) qrt: RwLock<TableReceiver>,
    /// Our table as we last sent it (an ultrapeer that asked for it).
    pub(crate) sent_qrt: Mutex<Option<Arc<RouteTable>>>,
    /// Before this time (ms since the router's epoch) its pings are throttled.
    ping_ok_ms: AtomicU64,
    out: Mutex<Out>,
    socket_budget: usize,
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// When we last sent it anything, ms since the node's epoch.
    last_tx_ms: AtomicU64,
}

impl Peer {
    /// A peer with an empty queue of `out_queue_bytes`.
    pub(crate) fn new(
        id: ConnId,
        addr: SocketAddr,
        outgoing: bool,
        info: PeerInfo,
        out_queue_bytes: usize,
        socket_budget: usize,
    ) -> Peer {
        Peer {
            id,
            addr,
            outgoing,
            hops_flow: AtomicU8::new(u8::MAX),
            closing: AtomicBool::new(false),
            sent_vendor: AtomicBool::new(false),
            qrt: RwLock::new(TableReceiver::default()),
            sent_qrt: Mutex::new(None),
            ping_ok_ms: AtomicU64::new(0),
            out: Mutex::new(Out {
                queue: OutQueue::new(out_queue_bytes),
                deflate: info.deflate_out.then(Deflater::default),
                over_since: None,
                stalled_since: None,
            }),
            info,
            socket_budget,
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            last_tx_ms: AtomicU64::new(0),
        }
    }

    /// Sets the Hops Flow limit.
    pub(crate) fn set_hops_flow(&self, hops: u8) {
        self.hops_flow.store(hops, Relaxed);
    }

    /// Whether a message with (outgoing) header `h` may be sent to this peer now.
    pub(crate) fn wants(&self, h: &Header) -> bool {
        h.kind != MsgType::Query || h.hops < self.hops_flow.load(Relaxed)
    }

    /// Marks the peer as closing: later sends are refused. True the first time.
    pub(crate) fn set_closing(&self) -> bool {
        !self.closing.swap(true, Relaxed)
    }

    /// Whether it is closing.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Relaxed)
    }

    /// Whether a ping from it at `ms` may be answered; if so, none is until
    /// `ms + throttle`.
    pub(crate) fn accept_ping(&self, ms: u64, throttle: u64) -> bool {
        if ms < self.ping_ok_ms.load(Relaxed) {
            return false;
        }
        self.ping_ok_ms.store(ms + throttle, Relaxed);
        true
    }

    /// Whether a query with keyword codes `codes` may go to it as far as its
    /// query routing table is concerned: a leaf only if its table holds every
    /// keyword; an ultrapeer at the last hop only if it sent no table or its table
    /// matches (`last_hop`: the copy would arrive with TTL 1).
    pub(crate) fn qrp_allows(&self, codes: &[u32], last_hop: bool) -> bool {
        let rx = self.qrt.read();
        match (self.info.role, rx.table()) {
            (Role::Leaf, Some(t)) => t.matches(codes),
            (Role::Leaf, None) => false,
            (Role::Ultrapeer, Some(t)) if last_hop => t.matches(codes),
            (Role::Ultrapeer, _) => true,
        }
    }

    /// Marks our "Messages Supported" as sent; true the first time.
    pub(crate) fn claim_vendor(&self) -> bool {
        !self.sent_vendor.swap(true, Relaxed)
    }

    /// When we last sent it anything (ms since the router's epoch).
    pub(crate) fn last_tx_ms(&self) -> u64 {
        self.last_tx_ms.load(Relaxed)
    }

    /// Records that we sent it something at `ms`.
    pub(crate) fn touch_tx(&self, ms: u64) {
        self.last_tx_ms.store(ms, Relaxed);
    }

    /// Bytes in our queue for it.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.out.lock().queue.bytes()
    }

    /// Sends the `msgs` whole messages in `bufs` (taken; the vector is left empty
    /// with its capacity) on the connection; see the module docs.
    pub(crate) fn send(&self, w: &Writer, bufs: &mut Vec<Bytes>, msgs: u64, now: Instant) -> Sent {
        let mut sent = Sent::default();
        if bufs.is_empty() || self.is_closing() {
            bufs.clear();
            return sent;
        }
        let len: usize = bufs.iter().map(Bytes::len).sum();
        let mut o = self.out.lock();
        let socket = w.queued(self.id).unwrap_or(0);
        if o.queue.is_empty() && socket + len <= self.socket_budget {
            sent.accepted = msgs;
            if o.deflate.is_some() {
                let mut all = Vec::with_capacity(len);
                for b in bufs.drain(..) {
                    all.extend_from_slice(&b);
                }
                self.write(&mut o, w, all);
            } else {
                // A failed send means the connection is going; its Closed follows.
                let _ = w.send_vectored(self.id, bufs);
            }
        } else {
            for all in bufs.drain(..) {
                for (at, h) in messages(&all) {
                    let end = at + crate::proto::message::HEADER_LEN + h.len as usize;
                    let Pushed { queued, dropped } =
                        o.queue.push(Value::of(h.kind), all.slice(at..end));
                    sent.accepted += u64::from(queued);
                    if dropped.iter().any(|&d| d > 0) {
                        o.over_since.get_or_insert(now);
                        for (a, b) in sent.dropped.iter_mut().zip(dropped) {
                            *a += b;
                        }
                    }
                }
            }
            self.drain_locked(&mut o, w);
        }
        self.sent.fetch_add(sent.accepted, Relaxed);
        let lost: u32 = sent.dropped.iter().sum();
        if lost > 0 {
            self.dropped.fetch_add(u64::from(lost), Relaxed);
        }
        sent
    }

    /// Moves queued messages to the socket while it has room. Returns how long the
    /// peer has been slow, if it still is: its queue over its threshold, or not
    /// empty with none of it moved to the socket, whichever began first.
    pub(crate) fn drain(&self, w: &Writer, now: Instant) -> Option<std::time::Duration> {
        let mut o = self.out.lock();
        let before = o.queue.bytes();
        self.drain_locked(&mut o, w);
        // A backlog that sank under half the threshold by dropping ends `over_since`,
        // but a peer that reads nothing must still go: a queue no tick can move any
        // of counts as stalled, and the longer of the two is the peer's slowness.
        if o.queue.is_empty() || o.queue.bytes() < before {
            o.stalled_since = None;
        } else {
            o.stalled_since.get_or_insert(now);
        }
        let since = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t));
        since(o.over_since).max(since(o.stalled_since))
    }

    fn drain_locked(&self, o: &mut Out, w: &Writer) {
        while !o.queue.is_empty() && !self.is_closing() {
            let socket = w.queued(self.id).unwrap_or(usize::MAX);
            if socket >= self.socket_budget {
                break;
            }
            let mut buf = Vec::with_capacity(CHUNK);
            o.queue
                .pop_into(&mut buf, CHUNK.min(self.socket_budget - socket));
            self.write(o, w, buf);
        }
        if o.queue.bytes() <= o.queue.threshold() / 2 {
            o.over_since = None;
        }
    }

    fn write(&self, o: &mut Out, w: &Writer, buf: Vec<u8>) {
        let bytes = match o.deflate.as_mut() {
            Some(d) => {
                let mut z = Vec::with_capacity(buf.len() / 2 + 64);
                d.deflate(&buf, &mut z);
                z
            }
            None => buf,
        };
        // A failed send means the connection is going; its Closed event follows.
        let _ = w.send(self.id, Outgoing::from(bytes));
    }
}

/// The established connections. Broadcasts iterate a shared snapshot that is
/// replaced (not mutated) when a peer comes or goes; only the router changes it.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    snapshot: RwLock<Arc<Snapshot>>,
}

/// An immutable list of peers with an index by connection.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// The peers.
    pub(crate) list: Vec<Arc<Peer>>,
    index: HashMap<u64, usize>,
}

impl Snapshot {
    /// Position of `id` in `list`.
    pub(crate) fn position(&self, id: ConnId) -> Option<usize> {
        self.index.get(&id.0).copied()
    }

    fn rebuild(list: Vec<Arc<Peer>>) -> Snapshot {
        let index = list.iter().enumerate().map(|(i, p)| (p.id.0, i)).collect();
        Snapshot { list, index }
    }
}

impl Peers {
    /// The current peers.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read())
    }

    /// Adds a peer.
    pub(crate) fn insert(&self, p: Arc<Peer>) {
        let mut s = self.snapshot.write();
        let mut list = s.list.clone();
        list.retain(|x| x.id != p.id);
        list.push(p);
        *s = Arc::new(Snapshot::rebuild(list));
    }

    /// Removes and returns a peer.
    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<Peer>> {
        let mut s = self.snapshot.write();
        let pos = s.position(id)?;
        let mut list = s.list.clone();
        let p = list.remove(pos);
        *s = Arc::new(Snapshot::rebuild(list));
        Some(p)
    }

    /// The peer of `id`.
    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<Peer>> {
        let s = self.snapshot.read();
        s.position(id).map(|i| Arc::clone(&s.list[i]))
    }
}
