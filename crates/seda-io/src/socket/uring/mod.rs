//! One io_uring event loop: the same connections, events, bounds and counters as
//! the epoll loop (`super::epoll`), with completions instead of readiness.
//!
//! # How a turn goes
//! One `io_uring_enter` submits everything the previous turn queued (sends, receive
//! re-arms, cancellations) and waits for completions. The loop then reaps them all:
//! new connections from a multishot accept, bytes from each connection's multishot
//! receive (copied out of a provided buffer, which goes straight back to the ring),
//! finished sends. Handlers the loop runs inline ([`crate::SocketConfig::domain`])
//! send from this thread: their output is queued and the connection put on the
//! turn's send list (a thread-local, [`schedule_send`]), and at the end of the turn
//! one send operation per connection is queued for the next enter. Writers on other
//! threads write straight to the socket when nothing is queued (as under epoll) and
//! hand what the socket does not take to the loop (`Cmd::Flush`, through an
//! eventfd the loop keeps a read submitted on).
//!
//! # Invariants
//! - At most one receive, one send and one poll of each kind per connection are in
//!   flight (`LocalConn::recv`, `sending`, `polling`, `watching`); a connection's
//!   entry (and so its socket) lives until the last of them has completed, even
//!   after its `Closed` left the loop (`forgotten`).
//! - Reading stops by cancelling the receive. Bytes that arrive while reading is
//!   paused (by the application or a backed-up queue) are held (`held`), not
//!   delivered, and delivered in order once reading resumes, after `Resumed`: the
//!   application sees what it would see under epoll, and memory is bounded by the
//!   completions in flight when the cancel lands (a few buffers).
//! - While a connection has refused events (`pending`) or held reads, new reads
//!   queue behind them: a connection's events reach the application in order.
//! - `Closed` is queued exactly once per connection, by [`EventLoop::close`].
//! - No thread but the loop's ever submits to a ring, and no other thread is ever
//!   interrupted by one: the ring is built on the loop's thread with one issuer and
//!   deferred task work (`DEFER_TASKRUN`, Linux 6.1+: completions run when the loop
//!   enters the kernel, with no signal-like notification; older kernels notify the
//!   loop's own thread only), and the kernel probe
//!   ([`probe`]) builds and closes its ring on a thread of its own. (The kernel's
//!   teardown of a closed ring notifies every thread that submitted to it like a
//!   signal: a blocking socket call with a timeout on such a thread fails with
//!   `EINTR`.)
//! - Every provided buffer is back in the ring by the end of the turn that reaped
//!   it; at stop every operation is cancelled and reaped before the ring goes (else
//!   its memory is leaked, never freed under the kernel).

#[allow(unsafe_code)]
mod ring;

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use seda::Sink;

use super::conn::{Conn, WriteState};
use super::inbox::{
    ACCEPT_RETRY, Backlog, Bucket, IDLE_WAIT, Offer, RETRY, STOP_DELIVERY, admit_socket, offer,
    send_check_period,
};
use super::{CloseReason, Cmd, ConnId, ConnMap, Shared, SocketEvent};
use ring::{Completion, Kind, Ring};

/// Submission queue entries per ring (completions: 4x).
const RING_ENTRIES: u32 = 1024;
/// Most buffers one send operation carries (`sendmsg` with that many `iovec`s).
const MAX_IOV: usize = 64;
/// Provided buffers per ring: about this many bytes of them.
const BUFFER_BYTES: usize = 8 << 20;

/// Checks that this kernel offers what the backend uses.
pub(super) fn probe() -> io::Result<()> {
    ring::probe()
}

/// Interrupts a loop's wait: one write to its eventfd.
pub(super) fn wake(fd: &OwnedFd) -> io::Result<()> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        // A full counter wakes the loop all the same.
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What a loop needs that is created before its thread runs (the ring itself is
/// built on the loop's thread: it has a single issuer).
#[derive(Debug)]
pub(super) struct Parts {
    listener: std::net::TcpListener,
    wake: Arc<OwnedFd>,
}

impl Parts {
    /// The parts of a loop serving `listener`, and the eventfd that wakes it.
    pub(super) fn new(listener: std::net::TcpListener) -> io::Result<(Parts, Arc<OwnedFd>)> {
        use rustix::event::{EventfdFlags, eventfd};
        let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
        Ok((
            Parts {
                listener,
                wake: Arc::clone(&wake),
            },
            wake,
        ))
    }
}

/// The loop running on this thread: which sockets (their `Shared`, by address),
/// which loop, and the connections whose output its inline handlers queued.
struct OnLoop {
    shared: usize,
    idx: usize,
    sends: Vec<u64>,
}

thread_local! {
    static ON_LOOP: RefCell<Option<OnLoop>> = const { RefCell::new(None) };
}

/// Called by a writer holding `c`'s output lock: if this thread runs the loop that
/// owns `c`, puts `c` on the loop's send list for this turn and returns true (the
/// writer then queues its output for the loop to send).
pub(super) fn schedule_send(shared: &Shared, c: &Conn) -> bool {
    let me = std::ptr::from_ref(shared) as usize;
    ON_LOOP
        .try_with(|l| match l.borrow_mut().as_mut() {
            Some(on) if on.shared == me && on.idx == c.owner => {
                on.sends.push(c.id.0);
                true
            }
            _ => false,
        })
        .unwrap_or(false)
}

/// A read's result, as delivered or held while reading is paused.
#[derive(Debug)]
enum Read {
    Data(Vec<u8>),
    Eof,
    Error(io::ErrorKind),
}

#[derive(Debug)]
struct LocalConn {
    conn: Arc<Conn>,
    /// Events the application refused, oldest first, with their `born`.
    pending: Backlog<(SocketEvent, Instant)>,
    /// Reads that completed while reading was paused, oldest first.
    held: Backlog<(Read, Instant)>,
    dead: bool,
    /// `Closed` left the loop: the entry goes once no operation is in flight.
    forgotten: bool,
    /// Boxed: only with a read rate (`SocketConfig::read_rate`).
    bucket: Option<Box<Bucket>>,
    /// Over its read rate: not read until the bucket refills.
    throttled: bool,
    /// A multishot receive is in flight, and whether its cancel was asked.
    recv: bool,
    recv_cancel: bool,
    /// A send operation is in flight.
    sending: bool,
    /// A `POLLOUT` poll is in flight (a file segment waits for room).
    polling: bool,
    /// A poll for a reset of a half-closed connection is in flight.
    watching: bool,
    /// The peer shut down its sending side and `ReadClosed` was delivered.
    read_eof: bool,
    /// An outbound connect in progress: the address it goes to, until a `POLLOUT`
    /// poll says whether it succeeded.
    /// Boxed: only outbound connections have one, and only until connected.
    connecting: Option<Box<std::net::SocketAddr>>,
}

impl LocalConn {
    fn idle(&self) -> bool {
        !(self.recv || self.sending || self.polling || self.watching)
    }

    /// Reads may be delivered now: not paused by the application or a backed-up
    /// queue, not over the read rate.
    fn may_read(&self) -> bool {
        !self.throttled && self.conn.readable()
    }
}

struct EventLoop<'a> {
    shared: &'a Shared,
    idx: usize,
    ring: Ring,
    listener: Option<std::net::TcpListener>,
    accept_armed: bool,
    wake: Arc<OwnedFd>,
    conns: ConnMap<LocalConn>,
    /// The sinks of outbound connections (the others deliver to the application's
    /// sink). Looked up only while it is not empty.
    sinks: ConnMap<Sink<SocketEvent>>,
    blocked: Vec<u64>,
    throttled: Vec<(Instant, u64)>,
    /// Connections whose receive may need arming or cancelling this turn.
    rearm: Vec<u64>,
    /// Connections whose output the loop sends this turn.
    sends: Vec<u64>,
    accept_retry: Option<Instant>,
    next_send_check: Option<Instant>,
    /// The clock, read once per turn after the wait.
    now: Instant,
    completions: Vec<Completion>,
}

/// Runs loop `idx` until the sockets stop. Called from the event-loop stage's handler.
pub(super) fn run(shared: &Shared, idx: usize, parts: Parts) {
    let cfg = &shared.cfg;
    let count = (BUFFER_BYTES / cfg.read_chunk).clamp(8, 4096);
    let count = 1u16 << (usize::BITS - 1 - count.leading_zeros());
    let ring = match Ring::new(RING_ENTRIES, count, cfg.read_chunk) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(
                event_loop = idx,
                "cannot set up io_uring: {e}; this loop does not run"
            );
            return;
        }
    };
    let mut l = EventLoop {
        shared,
        idx,
        ring,
        listener: Some(parts.listener),
        accept_armed: false,
        wake: parts.wake,
        conns: ConnMap::default(),
        sinks: ConnMap::default(),
        blocked: Vec::new(),
        throttled: Vec::new(),
        rearm: Vec::new(),
        sends: Vec::new(),
        accept_retry: None,
        next_send_check: cfg
            .send_timeout
            .map(|t| Instant::now() + send_check_period(t)),
        now: Instant::now(),
        completions: Vec::new(),
    };
    ON_LOOP.with(|on| {
        *on.borrow_mut() = Some(OnLoop {
            shared: std::ptr::from_ref(shared) as usize,
            idx,
            sends: Vec::new(),
        });
    });
    l.main();
    l.finish();
    ON_LOOP.with(|on| on.borrow_mut().take());
}

impl EventLoop<'_> {
    fn main(&mut self) {
        self.arm_accept();
        self.arm_wake();
        while !self.shared.stopping() {
            let timeout = self.timeout();
            if let Err(e) = self.ring.submit_and_wait(Some(timeout)) {
                tracing::error!(
                    event_loop = self.idx,
                    "io_uring_enter failed: {e}; stopping this loop"
                );
                return;
            }
            self.now = Instant::now();
            self.reap();
            // Commands arrive with a wake-up, but are looked for every turn: a lock
            // of an empty list costs less than a command left waiting.
            self.commands();
            if self.accept_retry.is_some_and(|t| t <= self.now) {
                self.arm_accept();
            }
            self.retry_blocked();
            self.release_throttled();
            self.check_send_timeouts();
            self.end_turn();
        }
    }

    fn timeout(&self) -> Duration {
        let now = self.now;
        let mut t = IDLE_WAIT;
        if !self.blocked.is_empty() {
            t = t.min(RETRY);
        }
        for at in [self.accept_retry, self.next_send_check]
            .into_iter()
            .flatten()
            .chain(self.throttled.iter().map(|(at, _)| *at))
        {
            t = t.min(at.saturating_duration_since(now));
        }
        // A zero timeout would not wait at all; a microsecond keeps one code path.
        t.max(Duration::from_micros(1))
    }

    fn reap(&mut self) {
        let mut done = std::mem::take(&mut self.completions);
        self.ring.complete(&mut done);
        for c in done.drain(..) {
            self.on_completion(c);
        }
        self.completions = done;
    }

    fn on_completion(&mut self, c: Completion) {
        match c.kind {
            Kind::Accept => self.on_accept(c),
            // The turn looks at the commands after reaping.
            Kind::Wake => self.arm_wake(),
            Kind::Recv => self.on_recv(c),
            Kind::Send => self.on_sent(c),
            Kind::PollOut => {
                if let Some(lc) = self.conns.get_mut(&c.key) {
                    lc.polling = false;
                    if lc.connecting.is_some() {
                        self.finish_connect(c.key);
                    } else {
                        self.sends.push(c.key);
                    }
                }
                self.settle(c.key);
            }
            Kind::PollErr => self.on_watch(c),
            Kind::Cancel => {}
        }
    }

    fn arm_accept(&mut self) {
        self.accept_retry = None;
        if self.accept_armed || self.shared.stopping() {
            return;
        }
        let Some(l) = &self.listener else { return };
        match self.ring.accept(l.as_fd()) {
            Ok(()) => self.accept_armed = true,
            Err(e) => {
                tracing::warn!(
                    event_loop = self.idx,
                    "cannot submit accept: {e}; retrying in 10 ms"
                );
                self.accept_retry = Some(self.now + ACCEPT_RETRY);
            }
        }
    }

    fn arm_wake(&mut self) {
        if self.shared.stopping() {
            return;
        }
        let wake = Arc::clone(&self.wake);
        if let Err(e) = self.ring.read_wake(wake.as_fd()) {
            tracing::error!(event_loop = self.idx, "cannot submit the wake-up read: {e}");
        }
    }

    fn on_accept(&mut self, c: Completion) {
        if !c.more {
            self.accept_armed = false;
        }
        if let Some(fd) = c.accepted {
            let stream = std::net::TcpStream::from(fd);
            if !self.shared.stopping()
                && let Ok(peer) = stream.peer_addr()
            {
                let stream = mio::net::TcpStream::from_std(stream);
                self.admit_as(ConnId::next(), stream, peer, false);
            }
        } else if c.res < 0 {
            let e = io::Error::from_raw_os_error(-c.res);
            if !matches!(
                e.kind(),
                io::ErrorKind::Interrupted
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::ConnectionReset
            ) && !c.more
            {
                // EMFILE, ENFILE, ENOBUFS: try again soon.
                tracing::warn!(
                    event_loop = self.idx,
                    "accept failed: {e}; retrying in 10 ms"
                );
                self.accept_retry = Some(self.now + ACCEPT_RETRY);
                return;
            }
        }
        if !self.accept_armed && self.accept_retry.is_none() {
            self.arm_accept();
        }
    }

    fn commands(&mut self) {
        let Some(slot) = self.shared.loops.get(self.idx) else {
            return;
        };
        let cmds = std::mem::take(&mut *slot.cmds.lock());
        for cmd in cmds {
            match cmd {
                Cmd::Close(conn, reason) => self.close(conn.0, reason),
                Cmd::Adopt(conn, stream, peer) => self.admit_as(conn, stream, peer, true),
                Cmd::Flush(conn) => self.sends.push(conn.0),
                Cmd::Connect { conn, peer, sink } => self.start_connect(conn, peer, sink),
                Cmd::Resume(conn) => {
                    if self.conns.get(&conn.0).is_some_and(|lc| !lc.dead) {
                        self.deliver(conn.0, SocketEvent::Resumed { conn }, Instant::now());
                        self.unpark(conn.0);
                    }
                }
                Cmd::Backlog(conn, queued) => {
                    if self.conns.get(&conn.0).is_some_and(|lc| !lc.dead) {
                        self.deliver(
                            conn.0,
                            SocketEvent::WriteBacklog { conn, queued },
                            Instant::now(),
                        );
                    }
                }
            }
        }
    }

    /// Takes a connection into the loop; `adopted`: opened by the application
    /// ([`super::super::Writer::adopt`]), announced as `Adopted`, not `Accepted`.
    fn admit_as(
        &mut self,
        id: ConnId,
        stream: mio::net::TcpStream,
        peer: std::net::SocketAddr,
        adopted: bool,
    ) {
        let shared = self.shared;
        let Some(stream) = admit_socket(shared, self.idx, stream) else {
            return;
        };
        let conn = Arc::new(Conn::new(id, self.idx, stream));
        shared.conns.insert(Arc::clone(&conn));
        shared.open.fetch_add(1, Relaxed);
        shared.counters(self.idx).accepted.fetch_add(1, Relaxed);
        let cfg = &shared.cfg;
        self.conns.insert(
            id.0,
            LocalConn {
                conn,
                pending: Backlog::default(),
                held: Backlog::default(),
                dead: false,
                forgotten: false,
                bucket: cfg.read_rate.map(|_| Box::new(Bucket::new(cfg.read_chunk))),
                throttled: false,
                recv: false,
                recv_cancel: false,
                sending: false,
                polling: false,
                watching: false,
                read_eof: false,
                connecting: None,
            },
        );
        let first = if adopted {
            SocketEvent::Adopted { conn: id, peer }
        } else {
            SocketEvent::Accepted { conn: id, peer }
        };
        self.deliver(id.0, first, Instant::now());
        self.rearm.push(id.0);
    }

    fn on_recv(&mut self, c: Completion) {
        let id = c.key;
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if !c.more {
            lc.recv = false;
            lc.recv_cancel = false;
            self.rearm.push(id);
        }
        if lc.dead {
            self.settle(id);
            return;
        }
        let read = match c.res {
            n if n > 0 => {
                let counters = self.shared.counters(self.idx);
                counters.bytes_read.fetch_add(n as u64, Relaxed);
                counters.packets_read.fetch_add(1, Relaxed);
                Read::Data(c.data)
            }
            0 => match self.confirm_eof(id) {
                Some(read) => read,
                // Not the end: bytes or nothing to read yet; the receive is re-armed.
                None => return,
            },
            e => match -e {
                // Out of provided buffers, cancelled, interrupted: re-armed this turn.
                libc::ENOBUFS | libc::ECANCELED | libc::EINTR | libc::EAGAIN => return,
                e => Read::Error(io::Error::from_raw_os_error(e).kind()),
            },
        };
        let lc = self.conns.get_mut(&id).expect("looked up above");
        if !lc.held.is_empty() || !lc.may_read() {
            lc.held.push_back((read, self.now));
            self.rearm.push(id);
            return;
        }
        self.process_read(id, read, self.now);
    }

    /// A receive completed with 0 bytes: checks with a non-blocking peek that the
    /// peer really shut down its side before it is taken for end of file (`None`:
    /// not the end, read on).
    fn confirm_eof(&self, id: u64) -> Option<Read> {
        use rustix::net::{RecvFlags, recv};
        let lc = self.conns.get(&id)?;
        let mut probe = [0u8; 1];
        match recv(
            &lc.conn.stream,
            &mut probe,
            RecvFlags::PEEK | RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => Some(Read::Eof),
            Ok(_) | Err(rustix::io::Errno::AGAIN) => {
                tracing::debug!(conn = id, "a receive ended with 0 bytes before end of file");
                None
            }
            Err(e) => Some(Read::Error(io::Error::from(e).kind())),
        }
    }

    /// Delivers one read of connection `id` (reading is not paused).
    fn process_read(&mut self, id: u64, read: Read, born: Instant) {
        let cfg = &self.shared.cfg;
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        match read {
            Read::Data(bytes) => {
                if let Some(b) = lc.bucket.as_mut() {
                    b.take(bytes.len());
                    if let (Some(rate), false) = (cfg.read_rate, lc.throttled)
                        && let Some(wait) = b.wait(rate, cfg.read_chunk)
                    {
                        lc.throttled = true;
                        self.throttled.push((Instant::now() + wait, id));
                        self.rearm.push(id);
                    }
                }
                let event = SocketEvent::Data {
                    conn: ConnId(id),
                    bytes,
                };
                self.deliver(id, event, born);
            }
            Read::Eof if lc.read_eof => {}
            Read::Eof if cfg.half_close => {
                lc.read_eof = true;
                if !lc.watching {
                    let conn = Arc::clone(&lc.conn);
                    match self.ring.poll(
                        conn.stream.as_fd(),
                        id,
                        Kind::PollErr,
                        (libc::POLLERR | libc::POLLHUP) as u32,
                    ) {
                        Ok(()) => lc.watching = true,
                        Err(e) => tracing::debug!("cannot watch a half-closed connection: {e}"),
                    }
                }
                self.deliver(
                    id,
                    SocketEvent::ReadClosed { conn: ConnId(id) },
                    Instant::now(),
                );
            }
            Read::Eof => self.close(id, CloseReason::PeerClosed),
            Read::Error(kind) => self.close(id, CloseReason::Error(kind)),
        }
    }

    /// The poll of a half-closed connection fired: a reset closes it.
    fn on_watch(&mut self, c: Completion) {
        let id = c.key;
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        lc.watching = false;
        if !lc.dead && c.res > 0 {
            let mut probe = [0u8; 1];
            if let Err(e) = rustix::io::read(&lc.conn.stream, &mut probe)
                && e != rustix::io::Errno::AGAIN
            {
                self.close(id, CloseReason::Error(io::Error::from(e).kind()));
            }
        }
        self.settle(id);
    }

    /// Arms or cancels connection `id`'s receive to match whether it may be read.
    fn reconcile(&mut self, id: u64) {
        let stopping = self.shared.stopping();
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        let want = !lc.dead
            && !stopping
            && lc.pending.is_empty()
            && lc.held.is_empty()
            && !lc.read_eof
            && lc.connecting.is_none()
            && lc.may_read();
        if want && !lc.recv {
            let conn = Arc::clone(&lc.conn);
            match self.ring.recv(conn.stream.as_fd(), id) {
                Ok(()) => lc.recv = true,
                Err(e) => {
                    tracing::warn!(event_loop = self.idx, "cannot submit a receive: {e}");
                    self.close(id, CloseReason::Error(e.kind()));
                }
            }
        } else if !want && lc.recv && !lc.recv_cancel {
            lc.recv_cancel = true;
            if let Err(e) = self.ring.cancel(Kind::Recv, id) {
                tracing::debug!("cannot cancel a receive: {e}");
                lc.recv_cancel = false;
            }
        }
    }

    /// Reading of `id` may go on: deliver what was held, then read again.
    fn unpark(&mut self, id: u64) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        let mut held = std::mem::take(&mut lc.held);
        while let Some((read, born)) = held.pop_front() {
            match self.conns.get(&id) {
                Some(lc) if !lc.dead && lc.may_read() => self.process_read(id, read, born),
                Some(_) => {
                    held.push_front((read, born));
                    break;
                }
                None => return,
            }
        }
        if let Some(lc) = self.conns.get_mut(&id)
            && !lc.dead
        {
            held.append(&mut lc.held);
            lc.held = held;
        }
        self.rearm.push(id);
    }

    fn offer(&self, id: u64, event: SocketEvent, born: Instant) -> Offer {
        let own = match self.sinks.is_empty() {
            true => None,
            false => self.sinks.get(&id),
        };
        offer(self.shared, self.idx, own, id, event, born)
    }

    /// Registers an outbound connection whose connect is in progress (already in
    /// the shared table: [`super::super::Writer::connect`] put it there) and polls
    /// it for the handshake's end.
    fn start_connect(
        &mut self,
        conn: Arc<Conn>,
        peer: std::net::SocketAddr,
        sink: Sink<SocketEvent>,
    ) {
        let id = conn.id.0;
        if self.shared.cfg.nodelay {
            let _ = conn.stream.set_nodelay(true);
        }
        self.sinks.insert(id, sink);
        self.conns.insert(
            id,
            LocalConn {
                conn: Arc::clone(&conn),
                pending: Backlog::default(),
                held: Backlog::default(),
                dead: false,
                forgotten: false,
                bucket: None,
                throttled: false,
                recv: false,
                recv_cancel: false,
                sending: false,
                polling: false,
                watching: false,
                read_eof: false,
                connecting: Some(Box::new(peer)),
            },
        );
        self.poll_connect(id);
    }

    fn poll_connect(&mut self, id: u64) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        let conn = Arc::clone(&lc.conn);
        match self
            .ring
            .poll(conn.stream.as_fd(), id, Kind::PollOut, libc::POLLOUT as u32)
        {
            Ok(()) => lc.polling = true,
            Err(e) => {
                tracing::warn!("cannot poll an outbound socket: {e}");
                self.close(id, CloseReason::Error(e.kind()));
            }
        }
    }

    /// The connecting socket is writable (or failed): established (deliver
    /// `Connected`, send what was queued meanwhile, start reading) or failed (close
    /// with the socket's error).
    fn finish_connect(&mut self, id: u64) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(peer) = lc.connecting.as_deref().copied() else {
            return;
        };
        if lc.dead {
            return;
        }
        let conn = Arc::clone(&lc.conn);
        let failure = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => None,
                // Not yet: poll again.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    return self.poll_connect(id);
                }
                Err(e) => Some(e),
            },
        };
        if let Some(e) = failure {
            return self.close(id, CloseReason::Error(e.kind()));
        }
        lc.connecting = None;
        conn.connected
            .store(true, std::sync::atomic::Ordering::Release);
        self.shared
            .counters(self.idx)
            .connects
            .fetch_add(1, Relaxed);
        self.deliver(
            id,
            SocketEvent::Connected {
                conn: ConnId(id),
                peer,
            },
            Instant::now(),
        );
        self.sends.push(id);
        self.rearm.push(id);
    }

    /// Resumes reading `other` after a drain watch fired (it may be on any loop).
    fn resume_other(&self, other: ConnId) {
        if let Some(c) = self.shared.conns.get(other)
            && c.read_paused.swap(false, Relaxed)
        {
            self.shared.command(c.owner, Cmd::Resume(other));
        }
    }

    /// Delivers an event of connection `id`, or keeps it (and stops reading the
    /// connection) if the application refuses it.
    fn deliver(&mut self, id: u64, event: SocketEvent, born: Instant) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if !lc.pending.is_empty() {
            lc.pending.push_back((event, born));
            return;
        }
        let closed = matches!(event, SocketEvent::Closed { .. });
        match self.offer(id, event, born) {
            Offer::Taken if closed => self.forget(id, true),
            Offer::Gone if closed => self.forget(id, false),
            Offer::Taken | Offer::Gone => {}
            Offer::Refused(event) => {
                self.shared.counters(self.idx).stalls.fetch_add(1, Relaxed);
                if let Some(lc) = self.conns.get_mut(&id) {
                    lc.pending.push_back((event, born));
                }
                self.blocked.push(id);
                self.rearm.push(id);
            }
        }
    }

    /// A connection's `Closed` event left the loop (`delivered`, or the application
    /// stage is gone): forget the connection once its operations are done.
    fn forget(&mut self, id: u64, delivered: bool) {
        if delivered {
            self.shared.counters(self.idx).closed.fetch_add(1, Relaxed);
        }
        if let Some(lc) = self.conns.get_mut(&id) {
            lc.forgotten = true;
        }
        self.sinks.remove(&id);
        self.settle(id);
    }

    /// Removes a forgotten connection whose last operation completed.
    fn settle(&mut self, id: u64) {
        if self
            .conns
            .get(&id)
            .is_some_and(|lc| lc.forgotten && lc.idle())
        {
            self.conns.remove(&id);
        }
    }

    /// Offers every blocked connection's pending events again, in order.
    fn retry_blocked(&mut self) {
        if self.blocked.is_empty() {
            return;
        }
        for id in std::mem::take(&mut self.blocked) {
            let Some(mut pending) = self
                .conns
                .get_mut(&id)
                .map(|lc| std::mem::take(&mut lc.pending))
            else {
                continue;
            };
            let mut closed = None;
            while let Some((event, born)) = pending.pop_front() {
                let is_closed = matches!(event, SocketEvent::Closed { .. });
                match self.offer(id, event, born) {
                    Offer::Taken if is_closed => closed = Some(true),
                    Offer::Gone if is_closed => closed = Some(false),
                    Offer::Taken | Offer::Gone => {}
                    Offer::Refused(event) => {
                        pending.push_front((event, born));
                        break;
                    }
                }
            }
            if let Some(delivered) = closed {
                debug_assert!(pending.is_empty(), "events after Closed");
                self.forget(id, delivered);
                continue;
            }
            let Some(lc) = self.conns.get_mut(&id) else {
                continue;
            };
            lc.pending = pending;
            if !lc.pending.is_empty() {
                self.blocked.push(id);
            } else {
                self.rearm.push(id);
            }
        }
    }

    fn release_throttled(&mut self) {
        if self.throttled.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        self.throttled.retain(|(at, id)| {
            if *at <= now {
                due.push(*id);
                false
            } else {
                true
            }
        });
        for id in due {
            if let Some(lc) = self.conns.get_mut(&id) {
                lc.throttled = false;
                self.unpark(id);
            }
        }
    }

    /// Closes every connection whose peer took none of its queued output for the
    /// send timeout.
    fn check_send_timeouts(&mut self) {
        let (Some(at), Some(limit)) = (self.next_send_check, self.shared.cfg.send_timeout) else {
            return;
        };
        let now = self.now;
        if now < at {
            return;
        }
        self.next_send_check = Some(now + send_check_period(limit));
        let stalled: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, lc)| !lc.dead)
            .filter(|(_, lc)| {
                lc.conn
                    .out
                    .lock()
                    .stalled_since
                    .is_some_and(|t| now.saturating_duration_since(t) > limit)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stalled {
            self.shared
                .counters(self.idx)
                .send_timeouts
                .fetch_add(1, Relaxed);
            self.close(id, CloseReason::Error(io::ErrorKind::TimedOut));
        }
    }

    /// The end of a turn: sends the output queued this turn (by handlers on this
    /// thread, commands and completions) and arms or cancels receives, until
    /// nothing more is asked (a send that closes a connection may deliver an event
    /// whose handler sends again).
    fn end_turn(&mut self) {
        loop {
            ON_LOOP.with(|on| {
                if let Some(on) = on.borrow_mut().as_mut() {
                    self.sends.append(&mut on.sends);
                }
            });
            if self.sends.is_empty() && self.rearm.is_empty() {
                return;
            }
            for id in std::mem::take(&mut self.sends) {
                self.start_send(id);
            }
            let mut rearm = std::mem::take(&mut self.rearm);
            rearm.sort_unstable();
            rearm.dedup();
            for id in rearm {
                self.reconcile(id);
            }
        }
    }

    /// Sends connection `id`'s queue: files with `sendfile` (a `POLLOUT` poll when
    /// the socket is full), memory with one send operation; when the queue is empty,
    /// ends the loop's responsibility for it (and closes a closing connection).
    fn start_send(&mut self, id: u64) {
        let threshold = self.shared.cfg.write_threshold;
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if lc.dead || lc.sending || lc.polling {
            return;
        }
        let conn = Arc::clone(&lc.conn);
        let mut o = conn.out.lock();
        o.batched = false;
        if o.state == WriteState::Closed {
            o.armed = false;
            return;
        }
        let written = &self.shared.counters(self.idx).bytes_written;
        match o.flush_files(&conn.stream, written) {
            Ok(true) => {}
            Ok(false) => {
                o.stalled_since.get_or_insert(self.now);
                o.armed = true;
                drop(o);
                let events = libc::POLLOUT as u32;
                match self
                    .ring
                    .poll(conn.stream.as_fd(), id, Kind::PollOut, events)
                {
                    Ok(()) => lc.polling = true,
                    Err(e) => self.close(id, CloseReason::Error(e.kind())),
                }
                return;
            }
            Err(e) => {
                drop(o);
                self.close(id, CloseReason::Error(e.kind()));
                return;
            }
        }
        if o.queue.is_empty() {
            o.release_queue();
            o.armed = false;
            o.stalled_since = None;
            if o.queued <= threshold {
                o.notified = false;
            }
            if o.state == WriteState::Closing {
                o.state = WriteState::Closed;
                drop(o);
                self.close(id, CloseReason::Local);
                return;
            }
            let unpaused = conn.backed_up.load(Relaxed) && conn.backed_up.swap(false, Relaxed);
            let drained = o.drained();
            drop(o);
            if let Some(other) = drained {
                self.resume_other(other);
            }
            if unpaused {
                self.unpark(id);
            }
            return;
        }
        o.stalled_since.get_or_insert(self.now);
        o.armed = true;
        let mut bufs = self.ring.spare_bufs();
        o.take_bufs(MAX_IOV, &mut bufs);
        drop(o);
        match self.ring.send(conn.stream.as_fd(), id, bufs) {
            Ok(()) => lc.sending = true,
            Err(e) => self.close(id, CloseReason::Error(e.kind())),
        }
    }

    /// A send completed: what it did not write goes back to the front of the queue,
    /// and the rest of the queue follows.
    fn on_sent(&mut self, c: Completion) {
        let id = c.key;
        let mut bufs = c.sent;
        let Some(lc) = self.conns.get_mut(&id) else {
            self.ring.reuse_bufs(bufs);
            return;
        };
        lc.sending = false;
        let conn = Arc::clone(&lc.conn);
        let mut o = conn.out.lock();
        if lc.dead || o.state == WriteState::Closed {
            bufs.clear();
            drop(o);
            self.ring.reuse_bufs(bufs);
            self.settle(id);
            return;
        }
        let counters = self.shared.counters(self.idx);
        match c.res {
            n if n >= 0 => {
                let n = n as usize;
                let total: usize = bufs.iter().map(Bytes::len).sum();
                counters.bytes_written.fetch_add(n as u64, Relaxed);
                if n < total {
                    counters.deferred_writes.fetch_add(1, Relaxed);
                }
                if n > 0 {
                    o.stalled_since = Some(self.now);
                }
                o.sent(n, &mut bufs);
                let drained = o.drained();
                drop(o);
                self.ring.reuse_bufs(bufs);
                if let Some(other) = drained {
                    self.resume_other(other);
                }
                self.start_send(id);
            }
            e if -e == libc::EINTR || -e == libc::EAGAIN => {
                o.sent(0, &mut bufs);
                drop(o);
                self.ring.reuse_bufs(bufs);
                self.sends.push(id);
            }
            e => {
                o.state = WriteState::Closed;
                o.clear();
                bufs.clear();
                drop(o);
                self.ring.reuse_bufs(bufs);
                self.close(
                    id,
                    CloseReason::Error(io::Error::from_raw_os_error(-e).kind()),
                );
            }
        }
    }

    /// Tears connection `id` down and queues its one `Closed` event; its operations
    /// in flight are cancelled (the entry stays until they complete).
    fn close(&mut self, id: u64, reason: CloseReason) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if lc.dead {
            return;
        }
        lc.dead = true;
        lc.held.clear();
        let failed_connect = lc.connecting.take().is_some();
        let conn = Arc::clone(&lc.conn);
        let watcher = {
            let mut o = conn.out.lock();
            o.state = WriteState::Closed;
            o.clear();
            o.armed = false;
            o.drain_watch.take()
        };
        let ops = [
            (lc.recv && !lc.recv_cancel, Kind::Recv),
            (lc.sending, Kind::Send),
            (lc.polling, Kind::PollOut),
            (lc.watching, Kind::PollErr),
        ];
        for (kind, _) in ops.iter().filter(|(on, _)| *on).map(|(_, k)| (*k, ())) {
            if let Err(e) = self.ring.cancel(kind, id) {
                tracing::debug!("cannot cancel an operation of a closing connection: {e}");
            }
        }
        if let Some(&(_, other)) = watcher.as_deref() {
            // Nothing will drain any more: let the paused side see it.
            self.resume_other(other);
        }
        if failed_connect {
            self.shared
                .counters(self.idx)
                .connect_failures
                .fetch_add(1, Relaxed);
        }
        // Writers may still hold the `Arc` for a moment; shut the socket now so the
        // peer sees the close at once (and operations still in flight end).
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.shared.conns.remove(conn.id);
        self.shared.open.fetch_sub(1, Relaxed);
        self.deliver(
            id,
            SocketEvent::Closed {
                conn: conn.id,
                reason,
            },
            Instant::now(),
        );
    }

    /// The loop is stopping: stop accepting, flush and close every connection,
    /// cancel and reap every operation, and deliver the `Closed` events (waiting a
    /// bounded time for a full application).
    fn finish(&mut self) {
        self.commands();
        let ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, lc)| !lc.dead)
            .map(|(id, _)| *id)
            .collect();
        let written = &self.shared.counters(self.idx).bytes_written;
        for id in ids {
            if let Some(lc) = self.conns.get(&id)
                && !lc.sending
            {
                let conn = Arc::clone(&lc.conn);
                let mut o = conn.out.lock();
                if !o.queue.is_empty() && o.state != WriteState::Closed {
                    let _ = o.flush(&conn.stream, written);
                }
            }
            self.close(id, CloseReason::Shutdown);
        }
        if let Err(e) = self.ring.cancel_all() {
            tracing::warn!(
                event_loop = self.idx,
                "cannot cancel operations at stop: {e}"
            );
        }
        let deadline = Instant::now() + STOP_DELIVERY;
        while self.ring.in_flight() > 0 && Instant::now() < deadline {
            if self
                .ring
                .submit_and_wait(Some(Duration::from_millis(10)))
                .is_err()
            {
                break;
            }
            self.now = Instant::now();
            self.reap();
        }
        self.listener = None;
        while !self.blocked.is_empty() && Instant::now() < deadline {
            std::thread::sleep(RETRY);
            self.retry_blocked();
        }
        let lost: usize = self.conns.values().map(|lc| lc.pending.len()).sum();
        if lost > 0 {
            tracing::warn!(
                event_loop = self.idx,
                lost,
                "the application took no events for 2 s at stop"
            );
            self.shared
                .counters(self.idx)
                .undelivered
                .fetch_add(lost as u64, Relaxed);
        }
        self.conns.clear();
    }
}

#[cfg(test)]
mod tests {
    /// As epoll's loop entry (see its test): an idle connection's cost.
    #[test]
    fn an_idle_connection_costs_little() {
        let size = std::mem::size_of::<super::LocalConn>();
        assert!(size <= 56, "{size}");
    }
}
