//! Socket stages over epoll (SEDA SOSP'01 section 4.1).
//!
//! # How the epoll loops map onto stages
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
//! a connection stays on the core that accepted it), reads (edge-triggered, at most
//! [`SocketConfig::read_chunk`] bytes per connection per turn, ready sockets served
//! in random order) and writes (flushes outgoing queues on `EPOLLOUT`). Its counters
//! are in [`SocketHandle::stats`]; the stage's own statistics show its threads.
//!
//! With [`SocketConfig::domain`] the loops join a thread-pool domain, so that
//! delivering to an application stage of that domain may run its handler right on
//! the loop thread (SEDA's retrospective: a queue only where load is conditioned).
//!
//! Writers do not hop through a queue: [`Writer::send`] writes from the caller's
//! thread with `writev`/`sendfile` when the connection's outgoing queue is empty and
//! queues only what the socket would not take; the owning loop flushes the rest.
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

mod conn;
mod connect;
mod event_loop;
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
use mio::{Interest, Poll, Token, Waker};
use parking_lot::{Condvar, Mutex, RwLock};
use seda::{Batch, Context, Runtime, Sink, ThreadModel};
use serde::{Deserialize, Serialize};

use conn::Conn;
use event_loop::{Cmd, LoopParts};
pub use writer::{ConnWriter, Writer};

pub(crate) const WAKER: Token = Token(usize::MAX);
pub(crate) const LISTENER: Token = Token(usize::MAX - 1);

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

/// What to do when a connection's outgoing queue passes its threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BacklogAction {
    /// Stop reading the connection until its queue drains below half the threshold:
    /// the peer cannot send more work until it reads what it asked for, so its
    /// output stays bounded by what its requests in flight produce.
    #[default]
    Pause,
    /// Close the connection (`Closed { reason: Backlog }`): a slow reader cannot
    /// grow memory.
    Close,
    /// Keep queueing and send the application a `WriteBacklog` event.
    Notify,
}

/// Configuration of the socket stages.
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// Address to listen on (port 0: an ephemeral port, see
    /// [`SocketHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Event loops, one thread each. Default: the number of cores. At least 1.
    pub event_loops: usize,
    /// Most bytes read from one connection per readiness event. Default 16 KiB.
    pub read_chunk: usize,
    /// Outgoing bytes queued per connection beyond which [`Self::on_backlog`]
    /// applies. Default 1 MiB. At least 1.
    pub write_threshold: usize,
    /// What to do past the write threshold. Default [`BacklogAction::Pause`].
    pub on_backlog: BacklogAction,
    /// Close a connection whose peer takes none of its queued output for this long.
    /// Default: none (never). At least 10 ms.
    pub send_timeout: Option<Duration>,
    /// Most open connections; further ones are closed on accept. Default 100,000.
    pub max_connections: usize,
    /// Bytes written (best effort, without blocking) to a connection refused because
    /// `max_connections` are open, before it is closed: e.g. an HTTP `503`. Default:
    /// none (closed silently).
    pub refusal: Option<Bytes>,
    /// Optional read-rate controller: a token bucket per connection, bytes per
    /// second, depth `read_chunk`. A connection over its rate is not read until its
    /// bucket refills. Default: none.
    pub read_rate: Option<f64>,
    /// `listen(2)` backlog. Default 1,024.
    pub listen_backlog: i32,
    /// `SO_SNDBUF` of accepted sockets; default: the kernel's.
    pub send_buffer: Option<usize>,
    /// Set `TCP_NODELAY` on accepted sockets. Default true.
    pub nodelay: bool,
    /// On end of file from the peer, deliver [`SocketEvent::ReadClosed`] and keep the
    /// connection open for output (a client that sends its requests and then
    /// half-closes, as `nc -N` or a health check does, still gets its responses);
    /// the application closes it. Default false: end of file closes the connection
    /// (`Closed { reason: PeerClosed }`).
    pub half_close: bool,
    /// Name of the event-loop stage. Default `sock-io`.
    pub stage_name: String,
    /// A thread-pool domain the event loops join ([`seda::Domain::enter`]): the
    /// application's stage, if it is in the same domain, may then run inline on the
    /// loop thread when its queue is empty and its admission admits (the runtime
    /// counts the event as a queued one). Default: none (every event is queued).
    pub domain: Option<seda::Domain>,
}

/// Default name of the event-loop stage.
pub const DEFAULT_STAGE: &str = "sock-io";

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            event_loops: std::thread::available_parallelism().map_or(2, |n| n.get()),
            read_chunk: 16 * 1024,
            write_threshold: 1 << 20,
            on_backlog: BacklogAction::Pause,
            send_timeout: None,
            max_connections: 100_000,
            refusal: None,
            read_rate: None,
            listen_backlog: 1024,
            send_buffer: None,
            nodelay: true,
            half_close: false,
            stage_name: DEFAULT_STAGE.to_owned(),
            domain: None,
        }
    }
}

impl SocketConfig {
    /// Defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        SocketConfig {
            listen,
            ..SocketConfig::default()
        }
    }

    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        if self.event_loops == 0 || self.event_loops > 1024 {
            return bad(format!(
                "event_loops must be in 1..=1024, got {}",
                self.event_loops
            ));
        }
        if self.read_chunk == 0 || self.read_chunk > 64 << 20 {
            return bad(format!(
                "read_chunk must be in 1..=64 MiB, got {}",
                self.read_chunk
            ));
        }
        if self.write_threshold == 0 {
            return bad("write_threshold must be at least 1 byte".to_owned());
        }
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".to_owned());
        }
        if let Some(t) = self.send_timeout
            && t < Duration::from_millis(10)
        {
            return bad(format!("send_timeout must be at least 10 ms, got {t:?}"));
        }
        if let Some(r) = self.read_rate
            && !(r.is_finite() && r > 0.0)
        {
            return bad(format!(
                "read_rate must be a positive number of bytes per second, got {r}"
            ));
        }
        if self.listen_backlog <= 0 {
            return bad(format!(
                "listen_backlog must be positive, got {}",
                self.listen_backlog
            ));
        }
        if self.stage_name.is_empty() {
            return bad("stage_name must not be empty".to_owned());
        }
        Ok(())
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
    /// Sends that could not be written at once and were queued for `EPOLLOUT`.
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

/// One loop's mailbox: commands from writers, and the waker that interrupts its
/// `epoll_wait`.
#[derive(Debug)]
struct LoopSlot {
    cmds: Mutex<Vec<Cmd>>,
    waker: Waker,
    /// The loop's poller and listener until its thread takes them.
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
        let mut loops = Vec::with_capacity(n);
        for l in listeners {
            let poll = Poll::new()?;
            let waker = Waker::new(poll.registry(), WAKER)?;
            let mut listener = mio::net::TcpListener::from_std(l);
            poll.registry()
                .register(&mut listener, LISTENER, Interest::READABLE)?;
            loops.push(LoopSlot {
                cmds: Mutex::new(Vec::new()),
                waker,
                parts: Mutex::new(Some(LoopParts {
                    poll,
                    listener: Some(listener),
                })),
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
        });
        Ok(BoundSockets { shared, local_addr })
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
                        event_loop::run(&for_loops, i);
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
