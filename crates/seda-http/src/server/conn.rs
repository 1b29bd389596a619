//! Per-connection state: the parse buffer, request sequence numbers and the reorder
//! buffer that keeps responses in request order (HTTP/1.1 pipelining).
//!
//! # Invariants
//! - Requests of a connection are numbered `0, 1, 2, ...` in arrival order
//!   (`next_seq`); responses leave in the same order (`send_seq` counts those sent),
//!   whichever stage produced them and in whatever order they finished. A response
//!   finished early waits in `pending`.
//! - Output is handed to the writer while `ConnState` is locked, so two stages
//!   finishing consecutive responses cannot interleave them on the socket.
//! - Once `dead`, nothing more is written and no further request is parsed.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use seda_io::{ConnId, Outgoing, Writer};

use crate::cache::Fnv;

/// `Connection` lines and the blank line that ends a head.
pub(crate) static KEEP_ALIVE: Bytes = Bytes::from_static(b"Connection: keep-alive\r\n\r\n");
pub(crate) static CLOSE: Bytes = Bytes::from_static(b"Connection: close\r\n\r\n");

/// One response, ready to go out.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The head: either complete, or (for cached `200` heads) without its `Date`
    /// and `Connection` lines, which `date` and the close flag supply.
    pub(crate) head: Bytes,
    /// The `Date` line when `head` is a cached prefix.
    pub(crate) date: Option<Bytes>,
    pub(crate) body: Body,
    /// Close the connection after this response.
    pub(crate) close: bool,
}

#[derive(Debug)]
pub(crate) enum Body {
    None,
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

impl Reply {
    /// Bytes the response puts on the wire (for shortest-first ordering).
    pub(crate) fn wire_len(&self) -> u64 {
        let body = match &self.body {
            Body::None => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File { len, .. } => *len,
        };
        self.head.len() as u64 + body
    }
}

#[derive(Debug)]
pub(crate) struct ConnState {
    /// Bytes received and not yet consumed by a complete request.
    pub(crate) buf: Vec<u8>,
    /// When the first byte of the incomplete request in `buf` arrived.
    pub(crate) head_started: Option<Instant>,
    /// Last time bytes arrived or a response left.
    pub(crate) last_active: Instant,
    /// Sequence number of the next request parsed.
    pub(crate) next_seq: u64,
    /// Sequence number of the next response to send.
    pub(crate) send_seq: u64,
    /// Responses finished before their turn.
    pub(crate) pending: BTreeMap<u64, Reply>,
    /// A request asked to close (or was unparseable): parse nothing more.
    pub(crate) closing: bool,
    /// The connection is closed or closing on the socket: write nothing more.
    pub(crate) dead: bool,
}

impl ConnState {
    /// Requests parsed whose responses have not been sent.
    pub(crate) fn outstanding(&self) -> u64 {
        self.next_seq - self.send_seq
    }
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    pub(crate) peer: SocketAddr,
    pub(crate) st: Mutex<ConnState>,
}

impl Conn {
    pub(crate) fn new(id: ConnId, peer: SocketAddr, now: Instant) -> Self {
        Conn {
            id,
            peer,
            st: Mutex::new(ConnState {
                buf: Vec::new(),
                head_started: None,
                last_active: now,
                next_seq: 0,
                send_seq: 0,
                pending: BTreeMap::new(),
                closing: false,
                dead: false,
            }),
        }
    }

    /// Hands `reply` for request `seq` to the connection with its state locked:
    /// sends it (and any responses it unblocks) into `out` if it is its turn, else
    /// parks it. Call [`Conn::flush`] after the last delivery of a batch.
    pub(crate) fn deliver(
        &self,
        st: &mut ConnState,
        seq: u64,
        reply: Reply,
        out: &mut Vec<Bytes>,
        writer: &Writer,
    ) {
        if st.dead {
            return;
        }
        if seq != st.send_seq {
            debug_assert!(seq > st.send_seq);
            st.pending.insert(seq, reply);
            return;
        }
        let mut next = Some(reply);
        while let Some(r) = next.take() {
            st.send_seq += 1;
            self.emit(st, r, out, writer);
            if st.dead {
                st.pending.clear();
                return;
            }
            next = st.pending.remove(&st.send_seq);
        }
    }

    fn emit(&self, st: &mut ConnState, r: Reply, out: &mut Vec<Bytes>, writer: &Writer) {
        out.push(r.head);
        if let Some(date) = r.date {
            out.push(date);
            out.push(if r.close {
                CLOSE.clone()
            } else {
                KEEP_ALIVE.clone()
            });
        }
        match r.body {
            Body::None => {}
            Body::Bytes(b) => out.push(b),
            Body::File { file, offset, len } => {
                self.flush(st, out, writer);
                if !st.dead
                    && writer
                        .send(self.id, Outgoing::File { file, offset, len })
                        .is_err()
                {
                    st.dead = true;
                }
            }
        }
        if r.close {
            self.flush(st, out, writer);
            writer.close(self.id);
            st.dead = true;
            st.closing = true;
        }
    }

    /// Writes what `out` holds.
    pub(crate) fn flush(&self, st: &mut ConnState, out: &mut Vec<Bytes>, writer: &Writer) {
        if out.is_empty() {
            return;
        }
        if st.dead {
            out.clear();
            return;
        }
        let o = if out.len() == 1 {
            Outgoing::Bytes(out.pop().unwrap_or_default())
        } else {
            Outgoing::Vectored(std::mem::take(out))
        };
        if writer.send(self.id, o).is_err() {
            st.dead = true;
        }
        out.clear();
    }
}

const SHARDS: usize = 32;

type Shard = Mutex<HashMap<u64, Arc<Conn>, BuildHasherDefault<Fnv>>>;

/// Open connections by id.
#[derive(Debug)]
pub(crate) struct ConnTable {
    shards: Vec<Shard>,
}

impl ConnTable {
    pub(crate) fn new() -> Self {
        ConnTable {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        }
    }

    fn shard(&self, id: ConnId) -> &Shard {
        &self.shards[(id.0 % SHARDS as u64) as usize]
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).lock().get(&id.0).cloned()
    }

    pub(crate) fn insert(&self, conn: Arc<Conn>) {
        self.shard(conn.id).lock().insert(conn.id.0, conn);
    }

    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).lock().remove(&id.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// A copy of every open connection (for the timeout sweep and shutdown).
    pub(crate) fn all(&self) -> Vec<Arc<Conn>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect()
    }
}
