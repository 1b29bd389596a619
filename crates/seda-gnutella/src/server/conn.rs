//! The server's per-connection state: handshake phase, framing, inflating.
//!
//! # Invariants
//! - A connection is in the table from its `Accepted`/`Adopted` event to its
//!   `Closed` event; socket events are colored by connection, so one connection's
//!   state is only ever touched by one server thread at a time (its mutex is
//!   uncontended, and the table's shard locks are held only to look it up).
//! - `Phase::Established` is entered once, after the router was told
//!   ([`crate::events::RouterEvent::Joined`]); `Phase::Done` is never left.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use seda_io::ConnId;

use crate::events::{PeerInfo, Role};
use crate::proto::framing::{Framer, Inflater};

/// Where a connection is in its life.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Incoming: waiting for `GNUTELLA CONNECT/0.6`.
    Connect,
    /// Incoming: we said 200 (a slot of `Role` is held), waiting for the final 200.
    Final(PeerInfo),
    /// Outgoing: we sent CONNECT, waiting for the answer.
    Response,
    /// Messages flow; the router owns the output.
    Established,
    /// Refused or closing: input is ignored.
    Done,
}

/// One connection's handshake and framing state.
#[derive(Debug)]
pub(crate) struct ConnState {
    pub(crate) phase: Phase,
    /// Handshake bytes not parsed yet.
    pub(crate) hs: Vec<u8>,
    pub(crate) inflater: Option<Inflater>,
    pub(crate) framer: Framer,
    pub(crate) addr: SocketAddr,
    pub(crate) outgoing: bool,
    pub(crate) since: Instant,
    /// The slot this connection holds (from our 200 until it closes), if any.
    pub(crate) slot: Option<Role>,
    /// Whether it is still counted and watched as handshaking.
    pub(crate) in_handshake: bool,
    /// The listening address an incoming ultrapeer named, once established.
    pub(crate) inbound: Option<SocketAddr>,
    /// Whether the router took it ([`crate::events::RouterEvent::Joined`]): it
    /// then gets a `Left` when the connection closes.
    pub(crate) joined: bool,
}

impl ConnState {
    pub(crate) fn new(addr: SocketAddr, outgoing: bool, max_payload: u32) -> ConnState {
        ConnState {
            phase: if outgoing {
                Phase::Response
            } else {
                Phase::Connect
            },
            hs: Vec::new(),
            inflater: None,
            framer: Framer::new(max_payload),
            addr,
            outgoing,
            since: Instant::now(),
            slot: None,
            in_handshake: true,
            inbound: None,
            joined: false,
        }
    }
}

const SHARDS: usize = 16;

type Shard = RwLock<HashMap<u64, Arc<Mutex<ConnState>>>>;

/// Connection states by id, sharded.
#[derive(Debug, Default)]
pub(crate) struct ConnTable {
    shards: [Shard; SHARDS],
}

impl ConnTable {
    fn shard(&self, id: ConnId) -> &Shard {
        &self.shards[(id.0 as usize) % SHARDS]
    }

    pub(crate) fn insert(&self, id: ConnId, st: ConnState) {
        self.shard(id)
            .write()
            .insert(id.0, Arc::new(Mutex::new(st)));
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<Mutex<ConnState>>> {
        self.shard(id).read().get(&id.0).cloned()
    }

    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<Mutex<ConnState>>> {
        self.shard(id).write().remove(&id.0)
    }
}
