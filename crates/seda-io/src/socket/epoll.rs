//! One epoll event loop: accepts, reads, flushes, tears connections down.
//! Writers write straight from their own thread; the loop flushes on `EPOLLOUT`.
//!
//! # Invariants
//! - A connection's events reach the application in the order they arose: while a
//!   connection has `pending` (refused) events, new ones queue behind them and the
//!   connection is not read.
//! - `Closed` is queued exactly once per connection, by [`EventLoop::close`], which
//!   marks it `dead`; a dead connection is forgotten once `pending` is empty.
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

use super::conn::{Conn, WriteState};
use super::inbox::{
    ACCEPT_RETRY, Backlog, Bucket, IDLE_WAIT, Offer, RETRY, STOP_DELIVERY, admit_socket, offer,
    send_check_period,
};
use super::{CloseReason, Cmd, ConnId, ConnMap, Shared, SocketEvent};

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
    conn: Arc<Conn>,
    /// Events the application refused, oldest first, with their `born`.
    pending: Backlog<(SocketEvent, Instant)>,
    dead: bool,
    /// Turn of the last read, so a connection is read at most once per turn.
    read_turn: u64,
    /// Boxed: only with a read rate (`SocketConfig::read_rate`).
    bucket: Option<Box<Bucket>>,
    /// A read was skipped because reading is paused: read again once it resumes.
    parked: bool,
    /// The peer shut down its sending side and `ReadClosed` was delivered
    /// (`SocketConfig::half_close`): reads only look for a reset now.
    read_eof: bool,
    /// Epoll reported the peer's FIN (`EPOLLRDHUP`): read until end of file even
    /// after a short read, since no further edge will come (with or without
    /// `half_close`: without, the end of file closes the connection).
    peer_fin: bool,
    /// An outbound connect in progress: the address it goes to, until the socket's
    /// first readiness says whether it succeeded.
    /// Boxed: only outbound connections have one, and only until connected.
    connecting: Option<Box<std::net::SocketAddr>>,
}

struct EventLoop<'a> {
    shared: &'a Shared,
    idx: usize,
    poll: Poll,
    listener: Option<TcpListener>,
    conns: ConnMap<LocalConn>,
    /// The sinks of outbound connections (the others deliver to the application's
    /// sink). Looked up only while it is not empty.
    sinks: ConnMap<Sink<SocketEvent>>,
    again: Vec<u64>,
    blocked: Vec<u64>,
    throttled: Vec<(Instant, u64)>,
    accept_retry: Option<Instant>,
    /// Next scan for connections past the send timeout.
    next_send_check: Option<Instant>,
    turn: u64,
    /// The clock, read once per turn after `epoll_wait`: the `born` of the turn's
    /// reads and the origin of the next wait's timeout (one clock read per turn,
    /// not one per event).
    now: Instant,
    buf: Vec<u8>,
}

/// Runs loop `idx` until the sockets stop. Called from the event-loop stage's handler.
pub(super) fn run(shared: &Shared, idx: usize, parts: Parts) {
    let mut l = EventLoop {
        shared,
        idx,
        poll: parts.poll,
        listener: parts.listener,
        conns: ConnMap::default(),
        sinks: ConnMap::default(),
        again: Vec::new(),
        blocked: Vec::new(),
        throttled: Vec::new(),
        accept_retry: None,
        next_send_check: shared
            .cfg
            .send_timeout
            .map(|t| Instant::now() + send_check_period(t)),
        turn: 0,
        now: Instant::now(),
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
        while !self.shared.stopping() {
            let timeout = self.timeout();
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!(
                    event_loop = self.idx,
                    "epoll_wait failed: {e}; stopping this loop"
                );
                return;
            }
            self.turn += 1;
            self.now = Instant::now();
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
                            && let Some(lc) = self.conns.get_mut(&(t as u64))
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
            if accept || self.accept_retry.is_some_and(|t| t <= self.now) {
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
        // The turn's clock: a wait computed from it is at most the turn's work long.
        let now = self.now;
        let mut t = IDLE_WAIT;
        if !self.blocked.is_empty() {
            t = t.min(RETRY);
        }
        if let Some(at) = self.accept_retry {
            t = t.min(at.saturating_duration_since(now));
        }
        if let Some(at) = self.next_send_check {
            t = t.min(at.saturating_duration_since(now));
        }
        if let Some(at) = self.throttled.iter().map(|(at, _)| *at).min() {
            t = t.min(at.saturating_duration_since(now));
        }
        t
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
                Cmd::Connect { conn, peer, sink } => self.start_connect(conn, peer, sink),
                Cmd::Flush(conn) => self.on_writable(conn.0),
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

    fn accept(&mut self) {
        self.accept_retry = None;
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
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
                        event_loop = self.idx,
                        "accept failed: {e}; retrying in 10 ms"
                    );
                    self.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: mio::net::TcpStream, peer: std::net::SocketAddr) {
        self.admit_as(ConnId::next(), stream, peer, false);
    }

    /// Takes a connection into the loop; `adopted`: opened by the application
    /// ([`super::Writer::adopt`]), announced as `Adopted` instead of `Accepted`.
    fn admit_as(
        &mut self,
        id: ConnId,
        stream: mio::net::TcpStream,
        peer: std::net::SocketAddr,
        adopted: bool,
    ) {
        let shared = self.shared;
        let cfg = &shared.cfg;
        let Some(stream) = admit_socket(shared, self.idx, stream) else {
            return;
        };
        let fd = stream.as_raw_fd();
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(id.0 as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register an accepted socket: {e}");
            return;
        }
        let conn = Arc::new(Conn::new(id, self.idx, stream));
        shared.conns.insert(Arc::clone(&conn));
        shared.open.fetch_add(1, Relaxed);
        shared.counters(self.idx).accepted.fetch_add(1, Relaxed);
        let bucket = cfg.read_rate.map(|_| Box::new(Bucket::new(cfg.read_chunk)));
        self.conns.insert(
            id.0,
            LocalConn {
                conn,
                pending: Backlog::default(),
                dead: false,
                read_turn: 0,
                bucket,
                parked: false,
                read_eof: false,
                peer_fin: false,
                connecting: None,
            },
        );
        let first = if adopted {
            SocketEvent::Adopted { conn: id, peer }
        } else {
            SocketEvent::Accepted { conn: id, peer }
        };
        self.deliver(id.0, first, Instant::now());
    }

    /// Reads one chunk from connection `id` and delivers it.
    fn read(&mut self, id: u64) {
        let turn = self.turn;
        let rate = self.shared.cfg.read_rate;
        let chunk = self.shared.cfg.read_chunk;
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if lc.connecting.is_some() {
            return self.finish_connect(id);
        }
        if lc.dead || !lc.pending.is_empty() || lc.read_turn == turn {
            return;
        }
        if !lc.conn.readable() {
            lc.parked = true;
            return;
        }
        if let (Some(b), Some(rate)) = (lc.bucket.as_mut(), rate)
            && let Some(wait) = b.wait(rate, chunk)
        {
            self.throttled.push((Instant::now() + wait, id));
            return;
        }
        lc.read_turn = turn;
        // Read into the buffer's spare capacity: no zeroing of a fresh 16 KB buffer
        // per read (memset and page faults were ~6% of the loop's CPU in Fig. 11).
        self.buf.clear();
        let res = rustix::io::read(&lc.conn.stream, spare_capacity(&mut self.buf))
            .map_err(io::Error::from);
        match res {
            Ok(0) if lc.read_eof => {}
            Ok(0) if self.shared.cfg.half_close => {
                lc.read_eof = true;
                self.deliver(
                    id,
                    SocketEvent::ReadClosed { conn: ConnId(id) },
                    Instant::now(),
                );
            }
            Ok(0) => self.close(id, CloseReason::PeerClosed),
            Ok(n) => {
                if let Some(b) = lc.bucket.as_mut() {
                    b.take(n);
                }
                let counters = self.shared.counters(self.idx);
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
                };
                // A full chunk may leave more in the socket, and edge-triggered epoll
                // will not say so again: come back next turn. A short read drained it,
                // but for the end of file behind it (no edge of its own).
                if n == chunk || lc.peer_fin {
                    self.again.push(id);
                }
                self.offer_now(id, event, self.now);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => self.again.push(id),
            Err(e) => self.close(id, CloseReason::Error(e.kind())),
        }
    }

    fn offer(&self, id: u64, event: SocketEvent, born: Instant) -> Offer {
        let own = match self.sinks.is_empty() {
            true => None,
            false => self.sinks.get(&id),
        };
        offer(self.shared, self.idx, own, id, event, born)
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
        self.offer_now(id, event, born);
    }

    /// [`EventLoop::deliver`] for a connection known to have no pending events (a
    /// read checks that first), without looking the connection up again.
    fn offer_now(&mut self, id: u64, event: SocketEvent, born: Instant) {
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
            }
        }
    }

    /// A connection's `Closed` event left the loop (`delivered`, or the application
    /// stage is gone): forget the connection.
    fn forget(&mut self, id: u64, delivered: bool) {
        if delivered {
            self.shared.counters(self.idx).closed.fetch_add(1, Relaxed);
        }
        self.conns.remove(&id);
        self.sinks.remove(&id);
    }

    /// Offers every blocked connection's pending events again, in order.
    fn retry_blocked(&mut self) {
        if self.blocked.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.blocked);
        for id in list {
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
            } else if !lc.dead {
                // Reading stopped while blocked; the socket may hold data.
                self.again.push(id);
            }
        }
    }

    /// Reading of `id` may go on: if a read was skipped while it was paused, read
    /// next turn (the edge that announced the data is spent).
    fn unpark(&mut self, id: u64) {
        if let Some(lc) = self.conns.get_mut(&id)
            && std::mem::take(&mut lc.parked)
            && !lc.dead
        {
            self.again.push(id);
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

    fn release_throttled(&mut self) {
        if self.throttled.is_empty() {
            return;
        }
        let now = Instant::now();
        let again = &mut self.again;
        self.throttled.retain(|(at, id)| {
            if *at <= now {
                again.push(*id);
                false
            } else {
                true
            }
        });
    }

    /// `EPOLLOUT`: flush the connection's queue; close it if it was closing.
    fn on_writable(&mut self, id: u64) {
        let Some(lc) = self.conns.get(&id) else {
            return;
        };
        if lc.connecting.is_some() {
            return self.finish_connect(id);
        }
        if lc.dead {
            return;
        }
        let conn = Arc::clone(&lc.conn);
        let threshold = self.shared.cfg.write_threshold;
        let mut o = conn.out.lock();
        if o.queue.is_empty() || o.state == WriteState::Closed {
            return;
        }
        match o.flush(&conn.stream, &self.shared.counters(self.idx).bytes_written) {
            Ok(done) => {
                if o.queued <= threshold {
                    o.notified = false;
                }
                let unpaused = o.queued <= threshold / 2 && conn.backed_up.swap(false, Relaxed);
                if let Some(other) = o.drained() {
                    self.resume_other(other);
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

    /// Resumes reading `other` after a drain watch fired (it may be on any loop).
    fn resume_other(&self, other: ConnId) {
        if let Some(c) = self.shared.conns.get(other)
            && c.read_paused.swap(false, Relaxed)
        {
            self.shared.command(c.owner, Cmd::Resume(other));
        }
    }

    /// Registers an outbound connection whose connect is in progress (already in
    /// the shared table: [`super::Writer::connect`] put it there).
    fn start_connect(
        &mut self,
        conn: Arc<Conn>,
        peer: std::net::SocketAddr,
        sink: Sink<SocketEvent>,
    ) {
        let shared = self.shared;
        let id = conn.id;
        if shared.cfg.nodelay {
            let _ = conn.stream.set_nodelay(true);
        }
        self.sinks.insert(id.0, sink);
        self.conns.insert(
            id.0,
            LocalConn {
                conn: Arc::clone(&conn),
                pending: Backlog::default(),
                dead: false,
                read_turn: 0,
                bucket: None,
                parked: false,
                read_eof: false,
                peer_fin: false,
                connecting: Some(Box::new(peer)),
            },
        );
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

    /// The first readiness of a connecting socket: established (deliver `Connected`,
    /// flush what was queued meanwhile) or failed (close with the socket's error).
    fn finish_connect(&mut self, id: u64) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(peer) = lc.connecting.as_deref().copied() else {
            return;
        };
        let conn = Arc::clone(&lc.conn);
        let failure = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => None,
                // Not yet: a spurious wake-up; the handshake's edge is still to come.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
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
        // Output queued while connecting, and bytes that may have come with the
        // handshake (their edge may be spent).
        self.on_writable(id);
        self.again.push(id);
    }

    /// Tears connection `id` down and queues its one `Closed` event.
    fn close(&mut self, id: u64, reason: CloseReason) {
        let Some(lc) = self.conns.get_mut(&id) else {
            return;
        };
        if lc.dead {
            return;
        }
        lc.dead = true;
        let failed_connect = lc.connecting.take().is_some();
        let conn = Arc::clone(&lc.conn);
        let watcher = {
            let mut o = conn.out.lock();
            o.state = WriteState::Closed;
            o.clear();
            o.drain_watch.take()
        };
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
        let fd = conn.stream.as_raw_fd();
        if let Err(e) = self.poll.registry().deregister(&mut SourceFd(&fd)) {
            tracing::debug!("deregister failed: {e}");
        }
        // Writers may still hold the `Arc` for a moment; shut the socket now so the
        // peer sees the close at once.
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

    /// The loop is stopping: close the listener and every connection, and deliver
    /// the `Closed` events (waiting a bounded time for a full application).
    fn finish(&mut self) {
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.commands();
        let ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, lc)| !lc.dead)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(lc) = self.conns.get(&id) {
                let conn = Arc::clone(&lc.conn);
                let mut o = conn.out.lock();
                if !o.queue.is_empty() && o.state != WriteState::Closed {
                    let _ = o.flush(&conn.stream, &self.shared.counters(self.idx).bytes_written);
                }
            }
            self.close(id, CloseReason::Shutdown);
        }
        let deadline = Instant::now() + STOP_DELIVERY;
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
    use std::collections::VecDeque;

    use super::super::conn::{FILE_SEGMENT_COST, Segment};
    use super::*;

    /// The loop's entry and the shared record are what an idle connection costs
    /// (bench/idle-memory, issue 29.5): a field added to either is paid by every
    /// idle client; rarely used parts are boxed.
    #[test]
    fn an_idle_connection_costs_little() {
        let sizes = (
            std::mem::size_of::<LocalConn>(),
            std::mem::size_of::<Conn>(),
        );
        assert!(sizes.0 <= 48 && sizes.1 <= 120, "{sizes:?}");
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
