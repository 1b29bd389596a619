//! Socket stages over epoll or io_uring (SEDA SOSP'01 section 4.1).
//!
//! # Two backends, one behaviour
//! [`SocketConfig::backend`] picks the system interface of the loops: epoll
//! (readiness: `epoll_wait`, then a `read` per ready connection and a `writev` per
//! response) or io_uring (completions: a multishot accept, one multishot receive per
//! connection into kernel-provided buffers, and every send a turn produced submitted
//! with the next wait, in one system call; `uring/`). Everything below holds for
//! both; the tests run once per backend (`SEDA_TEST_IO`). `Auto` takes
//! [`IoBackend::PREFERRED`] where the kernel offers io_uring, and says which runs and
//! why in one log line ([`SocketHandle::backend_reason`]).
//!
//! # How the loops map onto stages
//! One stage, `sock-io` by default ([`SocketConfig::stage_name`]), with one fixed
//! thread per event loop, always on the per-stage thread model: under a runtime whose
//! default is the shared model the loops still run on threads of their own and never
//! occupy the shared workers. At start it receives one `Run(i)` event per loop, and its
//! handler runs loop `i` for as long as the sockets are up: a *long-running handler
//! on a fixed-thread stage*. We chose this over dedicated threads because events the
//! loop enqueues then come from inside a stage handler, so the runtime records the
//! stage-graph edge `sock-io -> <app>` and lets the loop deliver `Closed` events while
//! the runtime drains. Each loop plays the three roles of Sandstorm's socket stages:
//! it accepts (one `SO_REUSEPORT` listener per loop, so accepts spread over cores and
//! a connection stays on the core that accepted it), reads (epoll: edge-triggered, at
//! most [`SocketConfig::read_chunk`] bytes per connection per turn, ready sockets
//! served in random order; io_uring: chunks of at most `read_chunk` bytes as the
//! kernel completes them) and writes (flushes outgoing queues on `EPOLLOUT`, or with
//! send operations of its ring). Its counters
//! are in [`SocketHandle::stats`]; the stage's own statistics show its threads.
//!
//! With [`SocketConfig::domain`] the loops join a thread-pool domain, so that
//! delivering to an application stage of that domain may run its handler right on
//! the loop thread (SEDA's retrospective: a queue only where load is conditioned).
//!
//! Writers do not hop through a queue: [`Writer::send`] writes from the caller's
//! thread with `writev`/`sendfile` when the connection's outgoing queue is empty and
//! queues only what the socket would not take; the owning loop flushes the rest.
//! Under io_uring, output sent on the thread of the loop that owns the connection (a
//! handler the loop ran inline) is queued instead, and the loop sends it with the
//! rest of its turn's sends; `sendfile` has no io_uring form, so file segments are
//! still sent with it, on the loop, with a `POLLOUT` poll while the socket is full.
//!
//! # Backpressure and bounds
//! - Into the application: when the app's sink answers `Full` or `Rejected`, the
//!   loop keeps the refused packet, stops reading that connection (TCP flow control
//!   then slows the peer) and offers it again on the next turn. Nothing is dropped.
//! - The application can stop reading a connection itself ([`Writer::pause_reading`],
//!   e.g. while it has enough of that client's requests in flight) and start again
//!   ([`Writer::resume_reading`], followed by one `Resumed` event).
//! - Out of the application: each connection's outgoing queue has a threshold,
//!   [`SocketConfig::write_threshold`]. Past it the loop stops reading the
//!   connection until the queue drains below half the threshold
//!   ([`BacklogAction::Pause`], the default: a client that pipelines more than it reads
//!   is slowed, never cut), or closes it ([`BacklogAction::Close`], `Closed { reason:
//!   Backlog }`), or tells the app ([`BacklogAction::Notify`], one `WriteBacklog` per
//!   crossing).
//! - [`SocketConfig::send_timeout`]: a connection with output queued whose peer takes
//!   no byte of it for that long is closed (`Closed { reason: Error(TimedOut) }`);
//!   a slow reader that makes progress is never cut.
//! - At most [`SocketConfig::max_connections`] open connections; more are accepted,
//!   sent [`SocketConfig::refusal`] (if set, best effort) and closed at once (counted
//!   as `refused`).
//!
//! # End of file
//! A read of zero bytes means the peer shut down its sending side; whether it still
//! reads is unknown until a write fails. By default the connection closes
//! (`Closed { reason: PeerClosed }`). With [`SocketConfig::half_close`] the loop
//! delivers one `ReadClosed` after the connection's last `Data`, reads no more (a
//! later event on the socket only checks it for a reset), and leaves closing to the
//! application, which answers what it was sent first.
//!
//! # Outbound connections
//! [`Writer::connect`] opens a connection to another server without blocking (a
//! reverse proxy's upstream, a peer). Its events go to the sink given to `connect`,
//! not to the application's: `Connected { conn, peer }` first once the handshake
//! completes, then the same events as an accepted connection, `Closed` last. A
//! connect that fails delivers only `Closed { reason: Error(kind) }` (no `Connected`).
//! Output sent before `Connected` is queued and goes out once connected. Connect
//! timeouts are the application's: [`Writer::abort`] a connection that took too long.
//! Outbound connections are never refused at [`SocketConfig::max_connections`] (the
//! application bounds them) but count toward it, and stay on the loop of the connection passed to
//! [`Writer::connect_near`], so that a proxied request's client and upstream events
//! run on one core.
//!
//! [`Writer::resume_on_drain`] couples two connections for a relay: once one's
//! outgoing queue has drained to a low-water mark, reading of the other resumes (it
//! was paused with [`Writer::pause_reading`]), so a relay never holds more than a
//! window of one peer's bytes for a slow other peer.
//!
//! # Shutdown
//! [`SocketHandle::stop`] (or dropping the handle, or the runtime starting to shut
//! down, which a watcher thread notices) stops the loops: listeners close, each open
//! connection gets one best-effort flush, is closed, and its `Closed { reason:
//! Shutdown }` is delivered. Every accepted or outbound connection gets exactly one `Closed`.

mod config;
mod conn;
mod connect;
mod epoll;
mod inbox;
mod uring;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::Waker;
use parking_lot::{Condvar, Mutex, RwLock};
use seda::{Batch, Context, Runtime, Sink, ThreadModel};
use serde::{Deserialize, Serialize};

pub use config::{BacklogAction, DEFAULT_STAGE, IoBackend, SocketConfig};
use conn::Conn;
pub use writer::{ConnWriter, Writer};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// A connection's identity: unique in the process, never reused. Events of one
/// connection carry `Color(conn.0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl ConnId {
    pub(crate) fn next() -> Self {
        ConnId(NEXT_CONN.fetch_add(1, Relaxed))
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Why a connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed its side (read returned end of file).
    PeerClosed,
    /// A read or write failed.
    Error(io::ErrorKind),
    /// The outgoing queue passed the write threshold ([`BacklogAction::Close`]).
    Backlog,
    /// The application called [`Writer::close`] or [`Writer::abort`].
    Local,
    /// The socket stages stopped.
    Shutdown,
}

/// An event the socket stages deliver to the application's sink. Each carries
/// `Color(conn.0)`; `born` is the time the event arose (bytes read, connection
/// accepted). More kinds may be added: match with a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum SocketEvent {
    /// A new connection from the listener. The first event of an accepted
    /// connection.
    Accepted {
        /// The connection.
        conn: ConnId,
        /// The peer's address.
        peer: SocketAddr,
    },
    /// A connection the application opened itself and handed over with
    /// [`Writer::adopt`] (an outgoing connection): its first event, in place of
    /// `Accepted`, so that the application tells the two directions apart
    /// without keeping a table of its own dials.
    Adopted {
        /// The connection (the id `adopt` returned).
        conn: ConnId,
        /// The peer's address (the address connected to).
        peer: SocketAddr,
    },
    /// An outbound connection ([`Writer::connect`]) is established. Always its first
    /// event; a connection whose connect fails gets only `Closed`.
    Connected {
        /// The connection.
        conn: ConnId,
        /// The address connected to.
        peer: SocketAddr,
    },
    /// Bytes read, at most `read_chunk` of them.
    Data {
        /// The connection.
        conn: ConnId,
        /// The bytes, in stream order.
        bytes: Vec<u8>,
    },
    /// The outgoing queue passed its threshold ([`BacklogAction::Notify`] only); sent
    /// once per crossing.
    WriteBacklog {
        /// The connection.
        conn: ConnId,
        /// Bytes queued when the threshold was passed.
        queued: usize,
    },
    /// Reading resumed after [`Writer::pause_reading`]: input the application held
    /// back meanwhile can be processed now. One per [`Writer::resume_reading`] that
    /// found reading paused, in order with the connection's other events.
    Resumed {
        /// The connection.
        conn: ConnId,
    },
    /// The peer shut down its sending side (read returned end of file) and
    /// [`SocketConfig::half_close`] is set: nothing more will be read, but the
    /// connection stays open for output until the application closes it. At most
    /// once, after every `Data` of the connection.
    ReadClosed {
        /// The connection.
        conn: ConnId,
    },
    /// The connection is closed. Exactly once per accepted connection, and last.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
}

impl SocketEvent {
    /// The connection the event is about.
    pub fn conn(&self) -> ConnId {
        match self {
            SocketEvent::Accepted { conn, .. }
            | SocketEvent::Adopted { conn, .. }
            | SocketEvent::Connected { conn, .. }
            | SocketEvent::Data { conn, .. }
            | SocketEvent::WriteBacklog { conn, .. }
            | SocketEvent::ReadClosed { conn }
            | SocketEvent::Resumed { conn }
            | SocketEvent::Closed { conn, .. } => *conn,
        }
    }
}

/// What one piece of output is.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// A buffer.
    Bytes(Bytes),
    /// Several buffers, written with one `writev` where possible.
    Vectored(Vec<Bytes>),
    /// `len` bytes of `file` from `offset`, sent with `sendfile`.
    File {
        /// The file.
        file: Arc<File>,
        /// Where the range starts.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
}

impl From<Bytes> for Outgoing {
    fn from(b: Bytes) -> Self {
        Outgoing::Bytes(b)
    }
}

impl From<Vec<u8>> for Outgoing {
    fn from(v: Vec<u8>) -> Self {
        Outgoing::Bytes(Bytes::from(v))
    }
}

impl From<&'static [u8]> for Outgoing {
    fn from(s: &'static [u8]) -> Self {
        Outgoing::Bytes(Bytes::from_static(s))
    }
}

/// Why [`Writer::send`] did not take the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// No open connection has this id (never existed, or closed and gone).
    NoConnection,
    /// The connection is closing or closed: `close`/`abort` was called, or it is
    /// being torn down.
    Closed,
    /// This output took the queue past the write threshold and the connection is
    /// being closed (`Closed { reason: Backlog }` follows).
    Backlog,
    /// A file range lies outside the file: `offset + len` beyond its size.
    InvalidRange,
    /// The socket failed; the connection is being closed (`Closed { reason:
    /// Error(kind) }` follows).
    Io(io::ErrorKind),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::NoConnection => f.write_str("no such connection"),
            WriteError::Closed => f.write_str("connection closed"),
            WriteError::Backlog => {
                f.write_str("outgoing queue passed its threshold; connection closed")
            }
            WriteError::InvalidRange => f.write_str("file range beyond the end of the file"),
            WriteError::Io(k) => write!(f, "socket error: {k}"),
        }
    }
}

impl std::error::Error for WriteError {}

/// Counters of the socket stages since start.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SocketStats {
    /// The backend the loops run.
    pub backend: IoBackend,
    /// Event loops.
    pub event_loops: usize,
    /// Connections accepted and announced to the application.
    pub accepted: u64,
    /// Connections closed at accept because `max_connections` were open.
    pub refused: u64,
    /// Outbound connections established ([`Writer::connect`]).
    pub connects: u64,
    /// Outbound connections whose connect failed (refused, unreachable, reset).
    pub connect_failures: u64,
    /// Connections open now.
    pub open: usize,
    /// `Closed` events delivered.
    pub closed: u64,
    /// Connections closed because their outgoing queue passed the threshold.
    pub backlog_closes: u64,
    /// Times reading a connection stopped because its outgoing queue passed the
    /// threshold ([`BacklogAction::Pause`]).
    pub backlog_pauses: u64,
    /// Connections closed because their peer took no output for the send timeout.
    pub send_timeouts: u64,
    /// `WriteBacklog` notices sent.
    pub backlog_notices: u64,
    /// `Data` events delivered.
    pub packets_read: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Sends that could not be written at once: queued for `EPOLLOUT` (epoll), or
    /// whose first send operation left bytes for another (io_uring).
    pub deferred_writes: u64,
    /// Times the application's sink refused an event (Full or Rejected) and the loop
    /// held it back and stopped reading that connection: the backpressure path.
    pub stalls: u64,
    /// Events that could not be delivered because the application's stage had
    /// stopped (only at runtime shutdown).
    pub undelivered: u64,
}

/// One event loop's counters (a writer counts on its connection's loop). Each
/// loop's block has its own cache lines, so two loops on two cores do not pass a
/// line back and forth on every read and write; [`SocketHandle::stats`] sums them.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    closed: AtomicU64,
    backlog_closes: AtomicU64,
    backlog_pauses: AtomicU64,
    send_timeouts: AtomicU64,
    backlog_notices: AtomicU64,
    packets_read: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    deferred_writes: AtomicU64,
    stalls: AtomicU64,
    undelivered: AtomicU64,
}

const SHARDS: usize = 64;

/// A map keyed by connection id. Ids are the server's own sequence numbers, never a
/// client's choice, so a fast non-cryptographic hash is safe here (SipHash cost two
/// hashings of ~100 instructions on every event and every write).
pub(crate) type ConnMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// Open connections by id, sharded to keep writers on different connections apart.
#[derive(Debug)]
struct ConnTable {
    shards: Vec<Shard>,
}

/// One shard, on cache lines of its own: the lock word of a shard that one core
/// takes must not share a line with the shard another core takes.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(RwLock<ConnMap<Arc<Conn>>>);

impl ConnTable {
    fn new() -> Self {
        ConnTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }

    fn shard(&self, id: ConnId) -> &RwLock<ConnMap<Arc<Conn>>> {
        &self.shards[(id.0 % SHARDS as u64) as usize].0
    }

    fn get(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).read().get(&id.0).cloned()
    }

    fn insert(&self, conn: Arc<Conn>) {
        self.shard(conn.id).write().insert(conn.id.0, conn);
    }

    fn remove(&self, id: ConnId) {
        self.shard(id).write().remove(&id.0);
    }
}

/// A command from a writer (any thread) to the loop owning a connection.
#[derive(Debug)]
pub(crate) enum Cmd {
    Close(ConnId, CloseReason),
    Backlog(ConnId, usize),
    /// An already connected stream handed over by [`Writer::adopt`].
    Adopt(ConnId, mio::net::TcpStream, SocketAddr),
    /// An outbound connect in progress ([`Writer::connect`]), whose events go to
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
enum Wake {
    /// epoll: mio's waker (an eventfd registered with the poller).
    Epoll(Waker),
    /// io_uring: an eventfd the loop keeps a read submitted on.
    Uring(Arc<std::os::fd::OwnedFd>),
}

impl Wake {
    fn wake(&self) -> io::Result<()> {
        match self {
            Wake::Epoll(w) => w.wake(),
            Wake::Uring(fd) => uring::wake(fd),
        }
    }
}

/// What a loop needs that is created before its thread runs.
#[derive(Debug)]
enum LoopParts {
    Epoll(epoll::Parts),
    Uring(uring::Parts),
}

/// One loop's mailbox: commands from writers, and what interrupts its wait.
#[derive(Debug)]
struct LoopSlot {
    cmds: Mutex<Vec<Cmd>>,
    waker: Wake,
    /// The loop's poller (or ring's eventfd) and listener until its thread takes them.
    parts: Mutex<Option<LoopParts>>,
}

/// State shared by the loops, the writers and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    cfg: SocketConfig,
    /// `cfg.max_connections`, changeable while running
    /// ([`SocketHandle::set_max_connections`]).
    max_connections: AtomicUsize,
    /// The application's sink, set once by [`BoundSockets::start`] before any loop
    /// runs (loops deliver nothing before).
    app: OnceLock<Sink<SocketEvent>>,
    conns: ConnTable,
    loops: Vec<LoopSlot>,
    stopping: AtomicBool,
    open: AtomicUsize,
    /// Loops running now.
    active: Mutex<usize>,
    idle: Condvar,
    /// Per event loop, see [`Counters`].
    counters: Box<[Counters]>,
    /// The backend the loops run (never `Auto`) and why it was chosen.
    backend: IoBackend,
    backend_reason: String,
}

impl Shared {
    fn command(&self, owner: usize, cmd: Cmd) {
        let Some(slot) = self.loops.get(owner) else {
            return;
        };
        slot.cmds.lock().push(cmd);
        if let Err(e) = slot.waker.wake() {
            tracing::warn!("cannot wake event loop {owner}: {e}");
        }
    }

    fn begin_stop(&self) {
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

    fn stopping(&self) -> bool {
        self.stopping.load(Acquire)
    }

    /// The counters of event loop `idx`.
    fn counters(&self, idx: usize) -> &Counters {
        &self.counters[idx % self.counters.len()]
    }

    /// A counter summed over the loops.
    fn total(&self, counter: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.counters.iter().map(|c| counter(c).load(Relaxed)).sum()
    }
}

/// The event of the event-loop stage: run event loop `.0` until the sockets stop.
#[derive(Debug)]
struct RunLoop(usize);

/// Entry point of the socket stages.
#[derive(Debug)]
pub struct Sockets;

impl Sockets {
    /// Binds the listeners, registers the event-loop stage in `rt` and returns the
    /// handle: [`Sockets::bind`] then [`BoundSockets::start`].
    ///
    /// Errors: an invalid configuration (`InvalidInput`), a bind failure, or the
    /// runtime refusing the stage (e.g. a duplicate stage name).
    pub fn start(
        rt: &Runtime,
        cfg: SocketConfig,
        app: Sink<SocketEvent>,
    ) -> io::Result<SocketHandle> {
        Sockets::bind(cfg)?.start(rt, app)
    }

    /// Binds the listeners without starting anything, so that the application can
    /// take a [`Writer`] (and the address) before it builds the stage the sockets
    /// deliver to. Raises the open-files limit to the hard limit first.
    ///
    /// Errors: an invalid configuration (`InvalidInput`) or a bind failure; the
    /// message of a bind failure names the address.
    pub fn bind(cfg: SocketConfig) -> io::Result<BoundSockets> {
        cfg.validate()?;
        if let Err(e) = crate::sys::raise_fd_limit() {
            tracing::warn!("cannot raise the open-files limit: {e}");
        }
        let n = cfg.event_loops;
        let named = |e: io::Error, addr: SocketAddr| {
            io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
        };
        crate::sys::check_free(cfg.listen).map_err(|e| named(e, cfg.listen))?;
        let first = crate::sys::listener(cfg.listen, n > 1, cfg.listen_backlog)
            .map_err(|e| named(e, cfg.listen))?;
        let local_addr = first.local_addr()?;
        let mut listeners = vec![first];
        for _ in 1..n {
            listeners.push(
                crate::sys::listener(local_addr, true, cfg.listen_backlog)
                    .map_err(|e| named(e, local_addr))?,
            );
        }
        let (backend, backend_reason) = choose_backend(cfg.backend)?;
        tracing::info!(
            backend = backend.as_str(),
            "seda-io sockets on {local_addr} use {backend}: {backend_reason}"
        );
        let mut loops = Vec::with_capacity(n);
        for l in listeners {
            let (parts, waker) = match backend {
                IoBackend::Uring => {
                    let (parts, fd) = uring::Parts::new(l)?;
                    (LoopParts::Uring(parts), Wake::Uring(fd))
                }
                _ => {
                    let (parts, waker) = epoll::Parts::new(l)?;
                    (LoopParts::Epoll(parts), Wake::Epoll(waker))
                }
            };
            loops.push(LoopSlot {
                cmds: Mutex::new(Vec::new()),
                waker,
                parts: Mutex::new(Some(parts)),
            });
        }
        let shared = Arc::new(Shared {
            max_connections: AtomicUsize::new(cfg.max_connections),
            cfg,
            app: OnceLock::new(),
            conns: ConnTable::new(),
            loops,
            stopping: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            active: Mutex::new(0),
            idle: Condvar::new(),
            counters: (0..n.max(1)).map(|_| Counters::default()).collect(),
            backend,
            backend_reason,
        });
        Ok(BoundSockets { shared, local_addr })
    }
}

/// Resolves the configured backend to the one that runs, with the reason in words
/// (for the log line and [`SocketHandle::backend_reason`]). `Uring` on a kernel
/// without it is an error that says why; `Auto` falls back to epoll.
fn choose_backend(want: IoBackend) -> io::Result<(IoBackend, String)> {
    match want {
        IoBackend::Epoll => Ok((IoBackend::Epoll, "configured".to_owned())),
        IoBackend::Uring => match uring::probe() {
            Ok(()) => Ok((IoBackend::Uring, "configured".to_owned())),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the io_uring backend is unavailable on this kernel: {e}"),
            )),
        },
        IoBackend::Auto if IoBackend::PREFERRED != IoBackend::Uring => Ok((
            IoBackend::Epoll,
            "auto: epoll measured faster here than io_uring".to_owned(),
        )),
        IoBackend::Auto => match uring::probe() {
            Ok(()) => Ok((
                IoBackend::Uring,
                "auto: io_uring is available here, and measured faster than epoll (1.2-1.4x the requests/s of a 1 KiB keep-alive load)".to_owned(),
            )),
            Err(e) => Ok((
                IoBackend::Epoll,
                format!("auto: io_uring is unavailable ({e})"),
            )),
        },
    }
}

/// Listeners bound by [`Sockets::bind`], not yet served. Dropping it closes them.
#[derive(Debug)]
pub struct BoundSockets {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl BoundSockets {
    /// The address the listeners are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The backend the loops will run ([`SocketConfig::backend`] resolved; never
    /// `Auto`).
    pub fn backend(&self) -> IoBackend {
        self.shared.backend
    }

    /// A writer for the connections these sockets will accept.
    pub fn writer(&self) -> Writer {
        Writer {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Registers the event-loop stage in `rt`, delivering to `app`. The loops run
    /// once the runtime runs (at once if it already does).
    ///
    /// Errors: the runtime refusing the stage (e.g. a duplicate stage name).
    pub fn start(self, rt: &Runtime, app: Sink<SocketEvent>) -> io::Result<SocketHandle> {
        let BoundSockets { shared, local_addr } = self;
        let _ = shared.app.set(app);
        let n = shared.cfg.event_loops;
        let for_loops = Arc::clone(&shared);
        let stage = rt
            .stage(
                &shared.cfg.stage_name,
                move |batch: Batch<'_, RunLoop>, _cx: &Context<'_>| {
                    for RunLoop(i) in batch {
                        run_loop(&for_loops, i);
                    }
                },
            )
            .capacity(n)
            // Always threads of its own, whatever the runtime's default: a loop never
            // returns, so on the shared model it would hold a shared worker for good.
            .thread_model(ThreadModel::PerStage)
            .fixed_threads(n)
            .batch(1)
            .build()
            .map_err(io::Error::other)?;
        for i in 0..n {
            stage
                .try_enqueue(RunLoop(i))
                .map_err(|e| io::Error::other(format!("cannot start event loop {i}: {e}")))?;
        }
        let watched = Arc::clone(&shared);
        let rt = rt.clone();
        let watcher = std::thread::Builder::new()
            .name("seda-io-watch".to_owned())
            .spawn(move || watch(&watched, &rt))?;
        Ok(SocketHandle {
            shared,
            local_addr,
            watcher: Some(watcher),
        })
    }
}

/// Runs event loop `idx` on the calling thread (a handler of the event-loop stage)
/// until the sockets stop, in the configured domain if any.
fn run_loop(shared: &Shared, idx: usize) {
    let Some(parts) = shared.loops.get(idx).and_then(|s| s.parts.lock().take()) else {
        return;
    };
    *shared.active.lock() += 1;
    let body = || match parts {
        LoopParts::Epoll(p) => epoll::run(shared, idx, p),
        LoopParts::Uring(p) => uring::run(shared, idx, p),
    };
    match shared.cfg.domain.clone() {
        Some(d) => d.enter(body),
        None => body(),
    }
    let mut active = shared.active.lock();
    *active -= 1;
    shared.idle.notify_all();
}

/// Notices the runtime shutting down ([`Runtime::is_draining`]), so the loops
/// (long-running handlers) stop and deliver their `Closed` events instead of holding
/// the drain until its deadline. Parks between checks; [`SocketHandle`]'s drop wakes
/// it.
fn watch(shared: &Shared, rt: &Runtime) {
    const PERIOD: Duration = Duration::from_millis(20);
    while !shared.stopping() {
        if rt.is_draining() {
            shared.begin_stop();
            return;
        }
        std::thread::park_timeout(PERIOD);
    }
}

/// The running socket stages. Dropping it stops them (as [`SocketHandle::stop`]).
#[derive(Debug)]
pub struct SocketHandle {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    watcher: Option<JoinHandle<()>>,
}

impl SocketHandle {
    /// The address the listeners are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A writer for the connections of these sockets.
    pub fn writer(&self) -> Writer {
        Writer {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The backend the loops run ([`SocketConfig::backend`] resolved; never `Auto`).
    pub fn backend(&self) -> IoBackend {
        self.shared.backend
    }

    /// Why that backend runs, in words: `configured`, or what `Auto` found (e.g.
    /// `auto: io_uring is unavailable (...)`).
    pub fn backend_reason(&self) -> &str {
        &self.shared.backend_reason
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Relaxed)
    }

    /// Changes [`SocketConfig::max_connections`] while the loops run (a reload):
    /// connections over a lower bound stay open, new ones are refused until the
    /// count is under it. At least 1.
    pub fn set_max_connections(&self, n: usize) {
        self.shared.max_connections.store(n.max(1), Relaxed);
    }

    /// Name of the event-loop stage.
    pub fn stage_name(&self) -> &str {
        &self.shared.cfg.stage_name
    }

    /// Counters since start.
    pub fn stats(&self) -> SocketStats {
        let s = &self.shared;
        SocketStats {
            backend: self.shared.backend,
            event_loops: self.shared.cfg.event_loops,
            accepted: s.total(|c| &c.accepted),
            refused: s.total(|c| &c.refused),
            connects: s.total(|c| &c.connects),
            connect_failures: s.total(|c| &c.connect_failures),
            open: self.shared.open.load(Relaxed),
            closed: s.total(|c| &c.closed),
            backlog_closes: s.total(|c| &c.backlog_closes),
            backlog_pauses: s.total(|c| &c.backlog_pauses),
            send_timeouts: s.total(|c| &c.send_timeouts),
            backlog_notices: s.total(|c| &c.backlog_notices),
            packets_read: s.total(|c| &c.packets_read),
            bytes_read: s.total(|c| &c.bytes_read),
            bytes_written: s.total(|c| &c.bytes_written),
            deferred_writes: s.total(|c| &c.deferred_writes),
            stalls: s.total(|c| &c.stalls),
            undelivered: s.total(|c| &c.undelivered),
        }
    }

    /// Stops accepting, closes every connection (one best-effort flush each) and
    /// delivers their `Closed { reason: Shutdown }`; returns when the loops have
    /// finished, or after 10 s. Idempotent.
    pub fn stop(&self) {
        self.shared.begin_stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut active = self.shared.active.lock();
        while *active > 0 {
            if self
                .shared
                .idle
                .wait_until(&mut active, deadline)
                .timed_out()
            {
                tracing::warn!(
                    loops = *active,
                    "socket event loops did not stop within 10 s"
                );
                break;
            }
        }
    }
}

impl Drop for SocketHandle {
    fn drop(&mut self) {
        self.stop();
        if let Some(w) = self.watcher.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}
