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
//! - `Closed` is queued exactly once per connection, by `Bookkeeping::close`
//!   (`super::book`, the bookkeeping both backends share).
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

mod read;
mod send;

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use seda::Sink;

use super::book::{Base, Book, Bookkeeping, Local};
use super::conn::{Conn, WriteState};
use super::event::{CloseReason, ConnId, SocketEvent};
use super::inbox::{ACCEPT_RETRY, Backlog, STOP_DELIVERY, admit_socket};
use super::shared::{Delivery, Shared};
use super::slab::Keyed;
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
    base: Base,
    /// Reads that completed while reading was paused, oldest first.
    held: Backlog<(Read, Instant)>,
    /// `Closed` left the loop: the entry goes once no operation is in flight.
    forgotten: bool,
    /// Over its read rate: not read until the bucket refills.
    throttled: bool,
    /// A multishot receive is in flight, and whether its cancel was asked.
    recv: bool,
    recv_cancel: bool,
    /// A send operation is in flight.
    sending: bool,
    /// A `POLLOUT` poll is in flight (a file segment waits for room, or an
    /// outbound connect for its end).
    polling: bool,
    /// A poll for a reset of a half-closed connection is in flight.
    watching: bool,
}

impl Keyed for LocalConn {
    fn key(&self) -> u64 {
        self.base.conn.id.0
    }
}

impl Local for LocalConn {
    fn base(&self) -> &Base {
        &self.base
    }
    fn base_mut(&mut self) -> &mut Base {
        &mut self.base
    }
}

impl LocalConn {
    fn new(base: Base) -> LocalConn {
        LocalConn {
            base,
            held: Backlog::default(),
            forgotten: false,
            throttled: false,
            recv: false,
            recv_cancel: false,
            sending: false,
            polling: false,
            watching: false,
        }
    }

    fn idle(&self) -> bool {
        !(self.recv || self.sending || self.polling || self.watching)
    }

    /// Reads may be delivered now: not paused by the application or a backed-up
    /// queue, not over the read rate.
    fn may_read(&self) -> bool {
        !self.throttled && self.base.conn.readable()
    }
}

struct EventLoop<'a> {
    book: Book<'a, LocalConn>,
    ring: Ring,
    listener: Option<std::net::TcpListener>,
    accept_armed: bool,
    wake: Arc<OwnedFd>,
    /// Connections whose receive may need arming or cancelling this turn.
    rearm: Vec<u64>,
    /// Connections whose output the loop sends this turn.
    sends: Vec<u64>,
    completions: Vec<Completion>,
    /// The turn's reads and sends, counted here and added to the loop's shared
    /// counters once at the end of the turn ([`EventLoop::publish_tally`]): an
    /// atomic add per completion cost as much as the rest of its bookkeeping.
    tally: Tally,
}

/// What a turn read and sent (see `EventLoop::tally`).
#[derive(Debug, Default)]
struct Tally {
    bytes_read: u64,
    packets_read: u64,
    bytes_written: u64,
}

/// Runs loop `idx` until the sockets stop. Called from the event-loop stage's handler.
pub(super) fn run(shared: &Shared, idx: usize, parts: Parts, delivery: Delivery) {
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
        book: Book::new(shared, idx, delivery),
        ring,
        listener: Some(parts.listener),
        accept_armed: false,
        wake: parts.wake,
        rearm: Vec::new(),
        sends: Vec::new(),
        completions: Vec::new(),
        tally: Tally::default(),
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
        while !self.book.shared.stopping() {
            let timeout = self.timeout();
            if let Err(e) = self.ring.submit_and_wait(Some(timeout)) {
                tracing::error!(
                    event_loop = self.book.idx,
                    "io_uring_enter failed: {e}; stopping this loop"
                );
                return;
            }
            self.book.now = Instant::now();
            self.reap();
            // Commands arrive with a wake-up, but are looked for every turn: a lock
            // of an empty list costs less than a command left waiting.
            self.commands();
            if self.book.accept_retry.is_some_and(|t| t <= self.book.now) {
                self.arm_accept();
            }
            self.retry_blocked();
            self.release_throttled();
            self.check_send_timeouts();
            self.end_turn();
            self.publish_tally();
        }
    }

    /// Adds the turn's reads and sends to the loop's counters (before the loop
    /// waits: what a reader of the stats sees is at most one turn behind).
    fn publish_tally(&mut self) {
        let t = std::mem::take(&mut self.tally);
        let counters = self.book.shared.counters(self.book.idx);
        if t.packets_read > 0 {
            counters.bytes_read.fetch_add(t.bytes_read, Relaxed);
            counters.packets_read.fetch_add(t.packets_read, Relaxed);
        }
        if t.bytes_written > 0 {
            counters.bytes_written.fetch_add(t.bytes_written, Relaxed);
        }
    }

    fn timeout(&self) -> Duration {
        // A zero timeout would not wait at all; a microsecond keeps one code path.
        self.book.timeout().max(Duration::from_micros(1))
    }

    fn reap(&mut self) {
        let mut done = std::mem::take(&mut self.completions);
        self.ring.complete(&mut done);
        for c in done.drain(..) {
            self.on_completion(c);
        }
        self.completions = done;
    }

    fn on_completion(&mut self, mut c: Completion) {
        if matches!(
            c.kind,
            Kind::Recv | Kind::Send | Kind::PollOut | Kind::PollErr
        ) {
            // The key is the id's low 56 bits: the slot they name holds the whole
            // id (a completion of a connection already gone finds none, or another
            // connection's, whose id differs in those bits, and is handled as of an
            // unknown connection).
            c.key = self
                .book
                .conns
                .id_of(c.key, ring::KEY_MASK)
                .unwrap_or(u64::MAX);
        }
        match c.kind {
            Kind::Accept => self.on_accept(c),
            // The turn looks at the commands after reaping.
            Kind::Wake => self.arm_wake(),
            Kind::Recv => self.on_recv(c),
            Kind::Send => self.on_sent(c),
            Kind::PollOut => {
                if let Some(lc) = self.book.conns.get_mut(&c.key) {
                    lc.polling = false;
                    if lc.base.connecting().is_some() {
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
        self.book.accept_retry = None;
        if self.accept_armed || self.book.shared.stopping() {
            return;
        }
        let Some(l) = &self.listener else { return };
        match self.ring.accept(l.as_fd()) {
            Ok(()) => self.accept_armed = true,
            Err(e) => {
                tracing::warn!(
                    event_loop = self.book.idx,
                    "cannot submit accept: {e}; retrying in 10 ms"
                );
                self.book.accept_retry = Some(self.book.now + ACCEPT_RETRY);
            }
        }
    }

    fn arm_wake(&mut self) {
        if self.book.shared.stopping() {
            return;
        }
        let wake = Arc::clone(&self.wake);
        if let Err(e) = self.ring.read_wake(wake.as_fd()) {
            tracing::error!(
                event_loop = self.book.idx,
                "cannot submit the wake-up read: {e}"
            );
        }
    }

    fn on_accept(&mut self, c: Completion) {
        if !c.more {
            self.accept_armed = false;
        }
        if let Some(fd) = c.accepted {
            let stream = std::net::TcpStream::from(fd);
            if !self.book.shared.stopping()
                && let Ok(peer) = stream.peer_addr()
            {
                let stream = mio::net::TcpStream::from_std(stream);
                match self.book.new_id() {
                    Some(id) => self.admit(id, stream, peer, false),
                    // Every slot of the table taken: refused (the stream closes).
                    None => {
                        self.book.counters().refused.fetch_add(1, Relaxed);
                    }
                }
            }
        } else if c.res < 0 {
            // Our own cancel at stop ends the multishot accept with ECANCELED: a
            // clean stop, not a failure to report (nor to retry).
            if self.book.shared.stopping() {
                return;
            }
            let e = io::Error::from_raw_os_error(-c.res);
            if c.res != -libc::ECANCELED
                && !matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                )
                && !c.more
            {
                // EMFILE, ENFILE, ENOBUFS: try again soon.
                tracing::warn!(
                    event_loop = self.book.idx,
                    "accept failed: {e}; retrying in 10 ms"
                );
                self.book.accept_retry = Some(self.book.now + ACCEPT_RETRY);
                return;
            }
        }
        if !self.accept_armed && self.book.accept_retry.is_none() {
            self.arm_accept();
        }
    }

    /// Takes a connection into the loop; `adopted`: opened by the application
    /// ([`super::super::Writer::adopt`]), announced as `Adopted`, not `Accepted`.
    fn admit(
        &mut self,
        id: ConnId,
        stream: mio::net::TcpStream,
        peer: std::net::SocketAddr,
        adopted: bool,
    ) {
        let Some(stream) = admit_socket(self.book.shared, self.book.idx, stream) else {
            return self.book.give_back(id);
        };
        let conn = self.book.enter(id, stream);
        let base = Base::new(conn, self.book.bucket(), None);
        self.book.conns.insert(LocalConn::new(base));
        self.announce(id, peer, adopted);
        self.rearm.push(id.0);
    }

    fn release_throttled(&mut self) {
        let mut due = Vec::new();
        self.book.due_throttled(&mut due);
        for id in due {
            if let Some(lc) = self.book.conns.get_mut(&id) {
                lc.throttled = false;
                self.unpark(id);
            }
        }
    }

    /// Removes a forgotten connection whose last operation completed.
    fn settle(&mut self, id: u64) {
        if self
            .book
            .conns
            .get(&id)
            .is_some_and(|lc| lc.forgotten && lc.idle())
        {
            self.book.drop_entry(id);
        }
    }

    fn poll_connect(&mut self, id: u64) {
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        let conn = Arc::clone(&lc.base.conn);
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

    /// The loop is stopping: stop accepting, flush and close every connection,
    /// cancel and reap every operation, and deliver the `Closed` events (waiting a
    /// bounded time for a full application).
    fn finish(&mut self) {
        self.commands();
        let written = &self.book.shared.counters(self.book.idx).bytes_written;
        for id in self.live() {
            if let Some(lc) = self.book.conns.get(&id)
                && !lc.sending
            {
                let conn = Arc::clone(&lc.base.conn);
                let mut o = conn.out.lock();
                if !o.queue.is_empty() && o.state != WriteState::Closed {
                    let _ = o.flush(&conn.stream, written);
                }
            }
            self.close(id, CloseReason::Shutdown);
        }
        if let Err(e) = self.ring.cancel_all() {
            tracing::warn!(
                event_loop = self.book.idx,
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
            self.book.now = Instant::now();
            self.reap();
        }
        self.listener = None;
        self.publish_tally();
        self.deliver_at_stop(deadline);
    }
}

impl<'a> Bookkeeping<'a> for EventLoop<'a> {
    type Local = LocalConn;

    fn book(&mut self) -> &mut Book<'a, LocalConn> {
        &mut self.book
    }

    fn admit_as(
        &mut self,
        id: ConnId,
        stream: mio::net::TcpStream,
        peer: std::net::SocketAddr,
        adopted: bool,
    ) {
        self.admit(id, stream, peer, adopted);
    }

    /// Takes an outbound connection whose connect is in progress and polls it for
    /// the handshake's end.
    fn start_connect(
        &mut self,
        conn: Arc<Conn>,
        peer: std::net::SocketAddr,
        sink: Sink<SocketEvent>,
    ) {
        let id = conn.id.0;
        self.book.enter_outbound(&conn, sink);
        let base = Base::new(conn, None, Some(peer));
        self.book.conns.insert(LocalConn::new(base));
        self.poll_connect(id);
    }

    fn flush(&mut self, id: u64) {
        self.sends.push(id);
    }

    fn unpark(&mut self, id: u64) {
        self.unpark_reads(id);
    }

    fn unblocked(&mut self, id: u64) {
        self.rearm.push(id);
    }

    fn refused(&mut self, id: u64) {
        self.rearm.push(id);
    }

    /// Cancels the connection's operations in flight (the entry stays until they
    /// complete) and drops its held reads; the socket's shutdown then ends what is
    /// still in flight.
    fn teardown(&mut self, id: u64, _conn: &Conn) {
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        lc.held.clear();
        let ops = [
            (lc.recv && !lc.recv_cancel, Kind::Recv),
            (lc.sending, Kind::Send),
            (lc.polling, Kind::PollOut),
            (lc.watching, Kind::PollErr),
        ];
        for kind in ops.iter().filter(|(on, _)| *on).map(|(_, k)| *k) {
            if let Err(e) = self.ring.cancel(kind, id) {
                tracing::debug!("cannot cancel an operation of a closing connection: {e}");
            }
        }
    }

    /// The entry goes once its operations are done.
    fn forget_local(&mut self, id: u64) {
        if let Some(lc) = self.book.conns.get_mut(&id) {
            lc.forgotten = true;
        }
        self.settle(id);
    }

    fn connect_pending(&mut self, id: u64) {
        self.poll_connect(id);
    }

    fn connected(&mut self, id: u64) {
        self.sends.push(id);
        self.rearm.push(id);
    }
}

#[cfg(test)]
mod tests {
    /// As epoll's loop entry (see its test): an idle connection's cost.
    #[test]
    fn an_idle_connection_costs_little() {
        let sizes = (
            std::mem::size_of::<Option<super::LocalConn>>(),
            std::mem::size_of::<super::LocalConn>(),
        );
        assert!(sizes.0 == sizes.1 && sizes.1 <= 64, "{sizes:?}");
    }
}
