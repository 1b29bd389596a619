//! Established connections and their output path.
//!
//! Every message to a peer after the handshake goes through [`Peer::send`], which
//! owns the connection's ordering, its deflate stream and its value-ordered queue:
//! - fast path: when nothing is held back and the socket's own queue has room
//!   (`socket_budget`), the batch is written at once (one `send` per destination
//!   per router batch);
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

use crate::outq::{CLASSES, OutQueue, Pushed, Value};
use crate::proto::framing::Deflater;
use crate::proto::message::{Header, MsgType};

/// Most bytes handed to the socket per drain step.
const CHUNK: usize = 64 * 1024;

/// What the handshake told us about a peer.
#[derive(Clone, Debug, Default)]
pub struct PeerInfo {
    /// Its `User-Agent`.
    pub user_agent: String,
    /// Its listening address (`Listen-IP` or `X-My-Address`), if it said.
    pub listen: Option<SocketAddr>,
    /// Whether we compress what we send.
    pub deflate_out: bool,
    /// Whether it compresses what it sends.
    pub deflate_in: bool,
    /// Whether it understands vendor messages.
    pub vendor: bool,
}

/// Messages for one destination, collected during a batch.
#[derive(Debug, Default)]
pub struct Pending {
    buf: Vec<u8>,
    /// End offset and value of each message in `buf`.
    marks: Vec<(usize, Value)>,
}

impl Pending {
    /// Appends a message with header `h` and payload `p`.
    pub fn push(&mut self, h: &Header, p: &[u8]) {
        self.buf.extend_from_slice(&h.to_bytes());
        self.buf.extend_from_slice(p);
        self.marks.push((self.buf.len(), Value::of(h.kind)));
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

/// What one [`Peer::send`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    /// Messages handed to the socket or queued.
    pub accepted: u64,
    /// Messages dropped by value, per class.
    pub dropped: [u32; CLASSES],
}

#[derive(Debug)]
struct Out {
    queue: OutQueue,
    deflate: Option<Deflater>,
    /// Since when the queue has been over its threshold (dropping).
    over_since: Option<Instant>,
    scratch: Vec<u8>,
}

/// An established connection.
#[derive(Debug)]
pub struct Peer {
    /// The connection.
    pub id: ConnId,
    /// Remote address of the socket.
    pub addr: SocketAddr,
    /// Whether we opened it.
    pub outgoing: bool,
    /// What the handshake said.
    pub info: PeerInfo,
    /// Hops Flow limit: queries with hops >= this are not sent (255: no limit).
    hops_flow: AtomicU8,
    closing: AtomicBool,
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
    pub fn new(
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
            out: Mutex::new(Out {
                queue: OutQueue::new(out_queue_bytes),
                deflate: info.deflate_out.then(Deflater::default),
                over_since: None,
                scratch: Vec::new(),
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
    pub fn set_hops_flow(&self, hops: u8) {
        self.hops_flow.store(hops, Relaxed);
    }

    /// Whether a message with (outgoing) header `h` may be sent to this peer now.
    pub fn wants(&self, h: &Header) -> bool {
        h.kind != MsgType::Query || h.hops < self.hops_flow.load(Relaxed)
    }

    /// Marks the peer as closing: later sends are refused.
    pub fn set_closing(&self) -> bool {
        !self.closing.swap(true, Relaxed)
    }

    /// Whether it is closing.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Relaxed)
    }

    /// When we last sent it anything (ms since the node's epoch).
    pub fn last_tx_ms(&self) -> u64 {
        self.last_tx_ms.load(Relaxed)
    }

    /// Records that we sent it something at `ms`.
    pub fn touch_tx(&self, ms: u64) {
        self.last_tx_ms.store(ms, Relaxed);
    }

    /// Bytes in our queue for it.
    pub fn queued_bytes(&self) -> usize {
        self.out.lock().queue.bytes()
    }

    /// Sends `p` (consumed) on the connection; see the module docs.
    pub fn send(&self, w: &Writer, p: &mut Pending, now: Instant) -> Sent {
        let mut sent = Sent::default();
        if p.is_empty() || self.is_closing() {
            return sent;
        }
        let mut o = self.out.lock();
        let socket = w.queued(self.id).unwrap_or(0);
        if o.queue.is_empty() && socket + p.buf.len() <= self.socket_budget {
            sent.accepted = p.marks.len() as u64;
            let buf = std::mem::take(&mut p.buf);
            p.marks.clear();
            self.write(&mut o, w, buf);
        } else {
            let all = Bytes::from(std::mem::take(&mut p.buf));
            let mut start = 0;
            for (end, v) in p.marks.drain(..) {
                let Pushed { queued, dropped } = o.queue.push(v, all.slice(start..end));
                start = end;
                sent.accepted += u64::from(queued);
                if dropped.iter().any(|&d| d > 0) {
                    o.over_since.get_or_insert(now);
                    for (a, b) in sent.dropped.iter_mut().zip(dropped) {
                        *a += b;
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
    /// queue has been over its threshold, if it still is.
    pub fn drain(&self, w: &Writer, now: Instant) -> Option<std::time::Duration> {
        let mut o = self.out.lock();
        self.drain_locked(&mut o, w);
        o.over_since.map(|t| now.saturating_duration_since(t))
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
                o.scratch.clear();
                d.deflate(&buf, &mut o.scratch);
                o.scratch.clone()
            }
            None => buf,
        };
        // A failed send means the connection is going; its Closed event follows.
        let _ = w.send(self.id, Outgoing::from(bytes));
    }
}

/// The established connections. Broadcasts iterate a shared snapshot that is
/// replaced (not mutated) when a peer comes or goes.
#[derive(Debug, Default)]
pub struct Peers {
    snapshot: RwLock<Arc<Snapshot>>,
}

/// An immutable list of peers with an index by connection.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The peers.
    pub list: Vec<Arc<Peer>>,
    index: HashMap<u64, usize>,
}

impl Snapshot {
    /// Position of `id` in `list`.
    pub fn position(&self, id: ConnId) -> Option<usize> {
        self.index.get(&id.0).copied()
    }

    fn rebuild(list: Vec<Arc<Peer>>) -> Snapshot {
        let index = list.iter().enumerate().map(|(i, p)| (p.id.0, i)).collect();
        Snapshot { list, index }
    }
}

impl Peers {
    /// The current peers.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read())
    }

    /// Adds a peer.
    pub fn insert(&self, p: Arc<Peer>) {
        let mut s = self.snapshot.write();
        let mut list = s.list.clone();
        list.retain(|x| x.id != p.id);
        list.push(p);
        *s = Arc::new(Snapshot::rebuild(list));
    }

    /// Removes and returns a peer.
    pub fn remove(&self, id: ConnId) -> Option<Arc<Peer>> {
        let mut s = self.snapshot.write();
        let pos = s.position(id)?;
        let mut list = s.list.clone();
        let p = list.remove(pos);
        *s = Arc::new(Snapshot::rebuild(list));
        Some(p)
    }

    /// The peer of `id`.
    pub fn get(&self, id: ConnId) -> Option<Arc<Peer>> {
        let s = self.snapshot.read();
        s.position(id).map(|i| Arc::clone(&s.list[i]))
    }

    /// Established connections.
    pub fn len(&self) -> usize {
        self.snapshot.read().list.len()
    }
}
