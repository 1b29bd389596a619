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
//! why in one log line ([`SocketHandle::backend_reason`]). The bookkeeping of
//! connections both loops do alike (events in order with the refused ones held,
//! admission, teardown, outbound connects, commands, the send timeout, the stop) is
//! written once (`book`); each backend adds only its system calls and their state
//! (`epoll`, `uring/`). A loop finds a connection's entry by indexing, not hashing:
//! a [`ConnId`] names the slot of its entry in its loop's table (`slab`), and a
//! stale id finds nothing, even once its slot is taken again.
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
//! # Attached state
//! An application that keeps a record per connection attaches it instead of keeping
//! a table of its own ([`BoundSockets::start_attached`]): a function it gives makes
//! the record when a connection is admitted, on the loop's thread, before the first
//! event; the loop keeps it in its entry for the connection and hands a clone over
//! with every event of that connection ([`SocketEvent::state`], a [`ConnState`]),
//! so no event needs a lookup by id. Invariants: a connection's state is made
//! exactly once, before `Accepted` (or `Adopted`), which carries it; the loop
//! gives up its hold when it queues `Closed`, which carries the state out, so the
//! socket stages drop it exactly once and hold none after `Closed`; a state is
//! reached only through its own connection's entry (the slot an id names, the whole
//! id compared), so an event never carries another connection's state, and a stale
//! id reaches none. Outbound connections ([`Writer::connect`]) have no state.
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

mod book;
mod config;
mod conn;
mod connect;
mod epoll;
mod event;
mod inbox;
mod shared;
mod slab;
mod uring;
mod writer;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use seda::{Batch, Context, Runtime, Sink, ThreadModel};
use serde::{Deserialize, Serialize};

pub use config::{BacklogAction, DEFAULT_STAGE, IoBackend, SocketConfig};
pub use event::{CloseReason, ConnId, ConnState, Outgoing, SocketEvent, WriteError};
use shared::{Attach, ConnTable, Counters, Delivery, LoopRun, LoopSlot, Shared, Wake};
pub use writer::{ConnWriter, Writer};

/// Counters of the socket stages since start.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
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
            let (parts, waker): (LoopRun, Wake) = match backend {
                IoBackend::Uring => {
                    let (parts, fd) = uring::Parts::new(l)?;
                    let run = move |s: &Shared, i: usize, d: Delivery| uring::run(s, i, parts, d);
                    (Box::new(run), Wake::Uring(fd))
                }
                _ => {
                    let (parts, waker) = epoll::Parts::new(l)?;
                    let run = move |s: &Shared, i: usize, d: Delivery| epoll::run(s, i, parts, d);
                    (Box::new(run), Wake::Epoll(waker))
                }
            };
            loops.push(LoopSlot {
                cmds: Mutex::new(Vec::new()),
                waker,
                slots: Mutex::new(Default::default()),
                parts: Mutex::new(Some(parts)),
            });
        }
        let shared = Arc::new(Shared {
            max_connections: AtomicUsize::new(cfg.max_connections),
            cfg,
            conns: ConnTable::new(),
            loops,
            next_owner: AtomicUsize::new(0),
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
                "auto: io_uring is available here, and measured faster than epoll (1.02-1.39x the requests/s of a 1 KiB keep-alive load in two runs)".to_owned(),
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
        self.start_with(rt, app, None)
    }

    /// As [`BoundSockets::start`], and each accepted or adopted connection gets the
    /// state `attach` makes for it (`None`: no state), on its event loop's thread
    /// before its first event; every event of the connection then carries it
    /// ([`SocketEvent::state`]), so the application finds its record of the
    /// connection without a table of its own. See "Attached state" in the module
    /// docs. `attach` runs on the loop: it must be quick and must not block.
    ///
    /// Errors: as [`BoundSockets::start`].
    pub fn start_attached(
        self,
        rt: &Runtime,
        app: Sink<SocketEvent>,
        attach: impl Fn(ConnId, SocketAddr) -> Option<ConnState> + Send + Sync + 'static,
    ) -> io::Result<SocketHandle> {
        self.start_with(rt, app, Some(Attach(Box::new(attach))))
    }

    fn start_with(
        self,
        rt: &Runtime,
        app: Sink<SocketEvent>,
        attach: Option<Attach>,
    ) -> io::Result<SocketHandle> {
        let BoundSockets { shared, local_addr } = self;
        let delivery = Delivery {
            app,
            attach: attach.map(Arc::new),
        };
        let n = shared.cfg.event_loops;
        let for_loops = Arc::clone(&shared);
        let stage = rt
            .stage(
                &shared.cfg.stage_name,
                move |batch: Batch<'_, RunLoop>, _cx: &Context<'_>| {
                    for RunLoop(i) in batch {
                        run_loop(&for_loops, i, delivery.clone());
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
fn run_loop(shared: &Shared, idx: usize, delivery: Delivery) {
    let Some(run) = shared.loops.get(idx).and_then(|s| s.parts.lock().take()) else {
        return;
    };
    *shared.active.lock() += 1;
    let body = || run(shared, idx, delivery);
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
