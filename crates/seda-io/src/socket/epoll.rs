//! One epoll event loop: accepts, reads, flushes, tears connections down.
//! Writers write straight from their own thread; the loop flushes on `EPOLLOUT`.
//!
//! # Invariants
//! - Those of `super::book` (events in order, one `Closed`); a connection with
//!   `pending` (refused) events is not read, and a dead one is forgotten once
//!   `pending` is empty.
//! - Registration is edge-triggered for reads and writes: a connection whose last
//!   read filled the chunk (more may be waiting) is in `again`, one with refused
//!   events is in `blocked`, one over its read rate is in `throttled`, one not read
//!   because reading is paused (by the application or a backed-up queue) is marked
//!   `parked` and goes to `again` when reading resumes; no edge is lost.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use rustix::buffer::spare_capacity;
use seda::Sink;

use super::book::{Base, Book, Bookkeeping, Local};
use super::conn::{Conn, WriteState};
use super::event::{CloseReason, ConnId, SocketEvent};
use super::inbox::{ACCEPT_RETRY, STOP_DELIVERY, admit_socket};
use super::shared::{Delivery, Shared};
use super::slab::Keyed;

const WAKER: Token = Token(usize::MAX);
const LISTENER: Token = Token(usize::MAX - 1);

/// What a loop needs that is created before its thread runs.
#[derive(Debug)]
pub(super) struct Parts {
    poll: Poll,
    listener: Option<TcpListener>,
}

impl Parts {
    /// A poller with `listener` and a waker registered.
    pub(super) fn new(listener: std::net::TcpListener) -> io::Result<(Parts, Waker)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let mut listener = TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok((
            Parts {
                poll,
                listener: Some(listener),
            },
            waker,
        ))
    }
}

#[derive(Debug)]
struct LocalConn {
    base: Base,
    /// Turn of the last read, so a connection is read at most once per turn.
    read_turn: u64,
    /// A read was skipped because reading is paused: read again once it resumes.
    parked: bool,
    /// Epoll reported the peer's FIN (`EPOLLRDHUP`): read until end of file even
    /// after a short read, since no further edge will come (with or without
    /// `half_close`: without, the end of file closes the connection). After
    /// `ReadClosed` (`base.read_eof`), reads only look for a reset.
    peer_fin: bool,
}

impl LocalConn {
    fn new(base: Base) -> LocalConn {
        LocalConn {
            base,
            read_turn: 0,
            parked: false,
            peer_fin: false,
        }
    }
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

struct EventLoop<'a> {
    book: Book<'a, LocalConn>,
    poll: Poll,
    listener: Option<TcpListener>,
    again: Vec<u64>,
    turn: u64,
    buf: Vec<u8>,
}

/// Runs loop `idx` until the sockets stop. Called from the event-loop stage's handler.
pub(super) fn run(shared: &Shared, idx: usize, parts: Parts, delivery: Delivery) {
    let mut l = EventLoop {
        book: Book::new(shared, idx, delivery),
        poll: parts.poll,
        listener: parts.listener,
        again: Vec::new(),
        turn: 0,
        buf: Vec::with_capacity(shared.cfg.read_chunk),
    };
    l.main();
    l.finish();
}

impl EventLoop<'_> {
    fn main(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<u64> = Vec::with_capacity(1024);
        let mut writable: Vec<u64> = Vec::with_capacity(1024);
        while !self.book.shared.stopping() {
            let timeout = self.timeout();
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!(
                    event_loop = self.book.idx,
                    "epoll_wait failed: {e}; stopping this loop"
                );
                return;
            }
            self.turn += 1;
            self.book.now = Instant::now();
            let (mut wake, mut accept) = (false, false);
            for ev in events.iter() {
                match ev.token() {
                    WAKER => wake = true,
                    LISTENER => accept = true,
                    Token(t) => {
                        if ev.is_writable() {
                            writable.push(t as u64);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            ready.push(t as u64);
                        }
                        if ev.is_read_closed()
                            && let Some(lc) = self.book.conns.get_mut(&(t as u64))
                        {
                            lc.peer_fin = true;
                        }
                    }
                }
            }
            if wake {
                self.commands();
            }
            for id in writable.drain(..) {
                self.on_writable(id);
            }
            if accept || self.book.accept_retry.is_some_and(|t| t <= self.book.now) {
                self.accept();
            }
            self.retry_blocked();
            self.release_throttled();
            self.check_send_timeouts();
            ready.append(&mut self.again);
            fastrand::shuffle(&mut ready);
            for id in ready.drain(..) {
                self.read(id);
            }
        }
    }

    fn timeout(&self) -> Duration {
        if !self.again.is_empty() {
            return Duration::ZERO;
        }
        self.book.timeout()
    }

    fn accept(&mut self) {
        self.book.accept_retry = None;
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => match self.book.new_id() {
                    Some(id) => self.admit(id, stream, peer, false),
                    // Every slot of the table taken: refused (the stream closes).
                    None => {
                        self.book.counters().refused.fetch_add(1, Relaxed);
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS: the edge is spent, so try again soon.
                    tracing::warn!(
                        event_loop = self.book.idx,
                        "accept failed: {e}; retrying in 10 ms"
                    );
                    self.book.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// Takes a connection into the loop; `adopted`: opened by the application
    /// ([`super::Writer::adopt`]), announced as `Adopted` instead of `Accepted`.
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
        let fd = stream.as_raw_fd();
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(id.0 as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register an accepted socket: {e}");
            return self.book.give_back(id);
        }
        let conn = self.book.enter(id, stream);
        let base = Base::new(conn, self.book.bucket(), None);
        self.book.conns.insert(LocalConn::new(base));
        self.announce(id, peer, adopted);
    }

    /// Reads one chunk from connection `id` and delivers it.
    fn read(&mut self, id: u64) {
        let turn = self.turn;
        let rate = self.book.shared.cfg.read_rate;
        let chunk = self.book.shared.cfg.read_chunk;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        if lc.base.connecting().is_some() {
            return self.finish_connect(id);
        }
        if lc.base.dead || !lc.base.pending.is_empty() || lc.read_turn == turn {
            return;
        }
        if !lc.base.conn.readable() {
            lc.parked = true;
            return;
        }
        if let (Some(b), Some(rate)) = (lc.base.bucket(), rate)
            && let Some(wait) = b.wait(rate, chunk)
        {
            self.book.throttled.push((Instant::now() + wait, id));
            return;
        }
        lc.read_turn = turn;
        // Read into the buffer's spare capacity: no zeroing of a fresh 16 KB buffer
        // per read (memset and page faults were ~6% of the loop's CPU in Fig. 11).
        self.buf.clear();
        let res = rustix::io::read(&lc.base.conn.stream, spare_capacity(&mut self.buf))
            .map_err(io::Error::from);
        match res {
            Ok(0) if lc.base.read_eof => {}
            Ok(0) if self.book.shared.cfg.half_close => {
                lc.base.read_eof = true;
                let state = lc.base.state.clone();
                self.deliver(
                    id,
                    SocketEvent::ReadClosed {
                        conn: ConnId(id),
                        state,
                    },
                    Instant::now(),
                );
            }
            Ok(0) => self.close(id, CloseReason::PeerClosed),
            Ok(n) => {
                if let Some(b) = lc.base.bucket() {
                    b.take(n);
                }
                let counters = self.book.shared.counters(self.book.idx);
                counters.bytes_read.fetch_add(n as u64, Relaxed);
                counters.packets_read.fetch_add(1, Relaxed);
                // At least half a chunk: hand the read buffer itself over (no copy,
                // at most 2x memory) and start a fresh one; less: copy out exactly.
                let bytes = if n >= chunk / 2 {
                    std::mem::replace(&mut self.buf, Vec::with_capacity(chunk))
                } else {
                    self.buf[..n].to_vec()
                };
                let event = SocketEvent::Data {
                    conn: ConnId(id),
                    bytes,
                    state: lc.base.state.clone(),
                };
                // A full chunk may leave more in the socket, and edge-triggered epoll
                // will not say so again: come back next turn. A short read drained it,
                // but for the end of file behind it (no edge of its own).
                if n == chunk || lc.peer_fin {
                    self.again.push(id);
                }
                self.offer_now(id, event, self.book.now);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => self.again.push(id),
            Err(e) => self.close(id, CloseReason::Error(e.kind())),
        }
    }

    fn release_throttled(&mut self) {
        self.book.due_throttled(&mut self.again);
    }

    /// `EPOLLOUT`: flush the connection's queue; close it if it was closing.
    fn on_writable(&mut self, id: u64) {
        let Some(lc) = self.book.conns.get(&id) else {
            return;
        };
        if lc.base.connecting().is_some() {
            return self.finish_connect(id);
        }
        if lc.base.dead {
            return;
        }
        let conn = Arc::clone(&lc.base.conn);
        let threshold = self.book.shared.cfg.write_threshold;
        let mut o = conn.out.lock();
        if o.queue.is_empty() || o.state == WriteState::Closed {
            return;
        }
        match o.flush(
            &conn.stream,
            &self.book.shared.counters(self.book.idx).bytes_written,
        ) {
            Ok(done) => {
                if o.queued <= threshold {
                    o.notified = false;
                }
                let unpaused = o.queued <= threshold / 2 && conn.backed_up.swap(false, Relaxed);
                if let Some(other) = o.drained() {
                    self.book.resume_other(other);
                }
                if done && o.state == WriteState::Closing {
                    o.state = WriteState::Closed;
                    drop(o);
                    self.close(id, CloseReason::Local);
                } else if unpaused {
                    drop(o);
                    self.unpark(id);
                }
            }
            Err(e) => {
                o.state = WriteState::Closed;
                o.clear();
                drop(o);
                self.close(id, CloseReason::Error(e.kind()));
            }
        }
    }

    /// The loop is stopping: close the listener and every connection, and deliver
    /// the `Closed` events (waiting a bounded time for a full application).
    fn finish(&mut self) {
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.commands();
        for id in self.live() {
            if let Some(lc) = self.book.conns.get(&id) {
                let conn = Arc::clone(&lc.base.conn);
                let mut o = conn.out.lock();
                if !o.queue.is_empty() && o.state != WriteState::Closed {
                    let _ = o.flush(
                        &conn.stream,
                        &self.book.shared.counters(self.book.idx).bytes_written,
                    );
                }
            }
            self.close(id, CloseReason::Shutdown);
        }
        self.deliver_at_stop(Instant::now() + STOP_DELIVERY);
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

    /// Registers an outbound connection whose connect is in progress; its first
    /// readiness says how it went ([`Bookkeeping::finish_connect`]).
    fn start_connect(
        &mut self,
        conn: Arc<Conn>,
        peer: std::net::SocketAddr,
        sink: Sink<SocketEvent>,
    ) {
        let id = conn.id;
        self.book.enter_outbound(&conn, sink);
        let base = Base::new(Arc::clone(&conn), None, Some(peer));
        self.book.conns.insert(LocalConn::new(base));
        let fd = conn.stream.as_raw_fd();
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(id.0 as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register an outbound socket: {e}");
            self.close(id.0, CloseReason::Error(e.kind()));
        }
    }

    fn flush(&mut self, id: u64) {
        self.on_writable(id);
    }

    /// If a read was skipped while reading was paused, read next turn (the edge
    /// that announced the data is spent).
    fn unpark(&mut self, id: u64) {
        if let Some(lc) = self.book.conns.get_mut(&id)
            && std::mem::take(&mut lc.parked)
            && !lc.base.dead
        {
            self.again.push(id);
        }
    }

    fn unblocked(&mut self, id: u64) {
        // Reading stopped while blocked; the socket may hold data.
        if self.book.conns.get(&id).is_some_and(|lc| !lc.base.dead) {
            self.again.push(id);
        }
    }

    fn teardown(&mut self, _id: u64, conn: &Conn) {
        let fd = conn.stream.as_raw_fd();
        if let Err(e) = self.poll.registry().deregister(&mut SourceFd(&fd)) {
            tracing::debug!("deregister failed: {e}");
        }
    }

    fn forget_local(&mut self, id: u64) {
        self.book.drop_entry(id);
    }

    /// Output queued while connecting, and bytes that may have come with the
    /// handshake (their edge may be spent).
    fn connected(&mut self, id: u64) {
        self.on_writable(id);
        self.again.push(id);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::super::conn::{FILE_SEGMENT_COST, Segment};
    use super::*;

    /// The loop's entry and the shared record are what an idle connection costs
    /// (bench/idle-memory, issue 29.5): a field added to either is paid by every
    /// idle client; rarely used parts are boxed. The entry is 64 bytes with the
    /// application's state (16: it replaced the application's own table of ~35
    /// bytes per connection), in a slot of its loop's table that adds nothing to
    /// it (an empty slot is the entry's niche; the table's pages add at most one
    /// page of slots, where a hash map at the load a power-of-two table leaves
    /// took ~117 bytes per 48-byte entry).
    #[test]
    fn an_idle_connection_costs_little() {
        let sizes = (
            std::mem::size_of::<Option<LocalConn>>(),
            std::mem::size_of::<LocalConn>(),
            std::mem::size_of::<Conn>(),
        );
        assert!(
            sizes.0 == sizes.1 && sizes.1 <= 64 && sizes.2 <= 120,
            "{sizes:?}"
        );
    }

    #[test]
    fn file_segments_count_toward_the_threshold() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        let seg = Segment::File {
            file: f,
            offset: 0,
            remaining: 10,
        };
        let mut out = super::super::conn::Out {
            queue: VecDeque::new(),
            queued: 0,
            state: WriteState::Open,
            notified: false,
            stalled_since: None,
            drain_watch: None,
            armed: false,
            batched: false,
        };
        out.push(seg);
        assert_eq!(out.queued, FILE_SEGMENT_COST);
    }
}
