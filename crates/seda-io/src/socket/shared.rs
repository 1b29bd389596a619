//! State shared by the event loops, the writers and the handle: the open
//! connections by id, each loop's mailbox and counters, the configuration.
//!
//! Imports only the leaves (`event`, `conn`, `config`): the loops, the writers and
//! `mod.rs` import it, never the other way round.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use mio::Waker;
use parking_lot::{Condvar, Mutex, RwLock};
use seda::Sink;

use super::config::{IoBackend, SocketConfig};
use super::conn::Conn;
use super::event::{CloseReason, ConnId, ConnState, SocketEvent};
use super::slab::{self, Slots};

/// One event loop's counters (a writer counts on its connection's loop). Each
/// loop's block has its own cache lines, so two loops on two cores do not pass a
/// line back and forth on every read and write; [`SocketHandle::stats`](super::SocketHandle::stats) sums them.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Counters {
    pub(super) accepted: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) connects: AtomicU64,
    pub(super) connect_failures: AtomicU64,
    pub(super) closed: AtomicU64,
    pub(super) backlog_closes: AtomicU64,
    pub(super) backlog_pauses: AtomicU64,
    pub(super) send_timeouts: AtomicU64,
    pub(super) backlog_notices: AtomicU64,
    pub(super) packets_read: AtomicU64,
    pub(super) bytes_read: AtomicU64,
    pub(super) bytes_written: AtomicU64,
    pub(super) deferred_writes: AtomicU64,
    pub(super) stalls: AtomicU64,
    pub(super) undelivered: AtomicU64,
}

const SHARDS: usize = 64;

/// A map keyed by connection id. Ids are the server's own sequence numbers, never a
/// client's choice, so a fast non-cryptographic hash is safe here (SipHash cost two
/// hashings of ~100 instructions on every event and every write).
pub(crate) type ConnMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// Open connections by id, sharded to keep writers on different connections apart.
#[derive(Debug)]
pub(super) struct ConnTable {
    pub(super) shards: Vec<Shard>,
}

/// One shard, on cache lines of its own: the lock word of a shard that one core
/// takes must not share a line with the shard another core takes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Shard(RwLock<ConnMap<Arc<Conn>>>);

impl ConnTable {
    pub(super) fn new() -> Self {
        ConnTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }

    pub(super) fn shard(&self, id: ConnId) -> &RwLock<ConnMap<Arc<Conn>>> {
        &self.shards[(id.0 % SHARDS as u64) as usize].0
    }

    pub(super) fn get(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).read().get(&id.0).cloned()
    }

    pub(super) fn insert(&self, conn: Arc<Conn>) {
        self.shard(conn.id).write().insert(conn.id.0, conn);
    }

    pub(super) fn remove(&self, id: ConnId) {
        self.shard(id).write().remove(&id.0);
    }
}

/// The application's function that makes a new connection's state
/// ([`BoundSockets::start_attached`](super::BoundSockets::start_attached)).
pub(super) struct Attach(pub(super) Box<AttachFn>);

pub(super) type AttachFn = dyn Fn(ConnId, SocketAddr) -> Option<ConnState> + Send + Sync;

impl std::fmt::Debug for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attach")
    }
}

/// A command from a writer (any thread) to the loop owning a connection.
#[derive(Debug)]
pub(crate) enum Cmd {
    Close(ConnId, CloseReason),
    Backlog(ConnId, usize),
    /// An already connected stream handed over by [`Writer::adopt`](super::Writer::adopt).
    Adopt(ConnId, mio::net::TcpStream, SocketAddr),
    /// An outbound connect in progress ([`Writer::connect`](super::Writer::connect)), whose events go to
    /// `sink`.
    Connect {
        conn: Arc<Conn>,
        peer: SocketAddr,
        sink: Sink<SocketEvent>,
    },
    /// The application resumed reading: deliver `Resumed`, then read.
    Resume(ConnId),
    /// io_uring only: a write from another thread left output queued; the loop
    /// sends the rest (epoll's loop has `EPOLLOUT` for that).
    Flush(ConnId),
}

/// What interrupts a loop's wait when a command arrives.
#[derive(Debug)]
pub(super) enum Wake {
    /// epoll: mio's waker (an eventfd registered with the poller).
    Epoll(Waker),
    /// io_uring: an eventfd the loop keeps a read submitted on.
    Uring(Arc<OwnedFd>),
}

impl Wake {
    pub(super) fn wake(&self) -> io::Result<()> {
        match self {
            Wake::Epoll(w) => w.wake(),
            Wake::Uring(fd) => match rustix::io::write(fd, &1u64.to_ne_bytes()) {
                // A full counter wakes the loop all the same.
                Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
                Err(e) => Err(e.into()),
            },
        }
    }
}

/// Where a loop delivers its connections' events: the application's sink and the
/// function that makes a new connection's state, if it gave one. Typed wiring:
/// [`BoundSockets::start`](super::BoundSockets::start) hands them to the loops it
/// starts, as arguments; nothing is set later or looked up.
#[derive(Clone, Debug)]
pub(super) struct Delivery {
    pub(super) app: Sink<SocketEvent>,
    pub(super) attach: Option<Arc<Attach>>,
}

/// A loop's body with what it needs that is created before its thread runs (its
/// poller or ring's eventfd, and its listener): called once, on the loop's thread,
/// with where to deliver. Dropping it unrun closes the listener.
pub(super) type LoopRun = Box<dyn FnOnce(&Shared, usize, Delivery) + Send>;

/// One loop's mailbox: commands from writers, and what interrupts its wait; and
/// the slots of its table (a writer takes one for an outbound connection).
pub(super) struct LoopSlot {
    pub(super) cmds: Mutex<Vec<Cmd>>,
    pub(super) waker: Wake,
    pub(super) slots: Mutex<Slots>,
    /// The loop, until its thread takes it.
    pub(super) parts: Mutex<Option<LoopRun>>,
}

impl std::fmt::Debug for LoopSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopSlot")
            .field("cmds", &self.cmds)
            .field("waker", &self.waker)
            .field("started", &self.parts.lock().is_none())
            .finish()
    }
}

/// State shared by the loops, the writers and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) cfg: SocketConfig,
    /// `cfg.max_connections`, changeable while running
    /// ([`SocketHandle::set_max_connections`](super::SocketHandle::set_max_connections)).
    pub(super) max_connections: AtomicUsize,
    pub(super) conns: ConnTable,
    pub(super) loops: Vec<LoopSlot>,
    /// Turns of [`Shared::next_owner`].
    pub(super) next_owner: AtomicUsize,
    pub(super) stopping: AtomicBool,
    pub(super) open: AtomicUsize,
    /// Loops running now.
    pub(super) active: Mutex<usize>,
    pub(super) idle: Condvar,
    /// Per event loop, see [`Counters`].
    pub(super) counters: Box<[Counters]>,
    /// The backend the loops run (never `Auto`) and why it was chosen.
    pub(super) backend: IoBackend,
    pub(super) backend_reason: String,
}

impl Shared {
    pub(super) fn command(&self, owner: usize, cmd: Cmd) {
        let Some(slot) = self.loops.get(owner) else {
            return;
        };
        slot.cmds.lock().push(cmd);
        if let Err(e) = slot.waker.wake() {
            tracing::warn!("cannot wake event loop {owner}: {e}");
        }
    }

    /// The loop that takes the next connection the application opens (adopted or
    /// outbound): each in turn.
    pub(super) fn next_owner(&self) -> usize {
        self.next_owner.fetch_add(1, Relaxed) % self.loops.len().max(1)
    }

    /// A new connection's id, in a free slot of loop `owner`'s table (`None` if
    /// it has none left).
    pub(super) fn new_id(&self, owner: usize) -> Option<ConnId> {
        let slot = self.loops.get(owner)?.slots.lock().take()?;
        Some(slab::compose(slab::next_seq(), slot))
    }

    /// Connection `id` of loop `owner` has left its table: its slot is free.
    pub(super) fn give_back(&self, owner: usize, id: ConnId) {
        if let Some(l) = self.loops.get(owner) {
            l.slots.lock().give_back(slab::slot_of(id.0) as u32);
        }
    }

    pub(super) fn begin_stop(&self) {
        if self.stopping.swap(true, AcqRel) {
            return;
        }
        for (i, slot) in self.loops.iter().enumerate() {
            // A loop that never ran gives up its listener now.
            drop(slot.parts.lock().take());
            if let Err(e) = slot.waker.wake() {
                tracing::warn!("cannot wake event loop {i}: {e}");
            }
        }
    }

    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Acquire)
    }

    /// The counters of event loop `idx`.
    pub(super) fn counters(&self, idx: usize) -> &Counters {
        &self.counters[idx % self.counters.len()]
    }

    /// A counter summed over the loops.
    pub(super) fn total(&self, counter: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.counters.iter().map(|c| counter(c).load(Relaxed)).sum()
    }
}
