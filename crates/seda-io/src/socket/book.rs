//! The connection bookkeeping both event loops (epoll and io_uring) share: what a
//! loop keeps of each connection besides its backend's own state ([`Base`]), the
//! loop's tables ([`Book`]), and what it does with them the same way on either
//! backend ([`Bookkeeping`]): events delivered in order with the refused ones held,
//! a connection's admission and teardown, an outbound connect's end, the commands
//! of other threads, the send timeout and the delivery at stop. A loop gives the
//! few hooks where the backends differ (how reading goes on, how output is flushed,
//! what a teardown releases) and gets the rest.
//!
//! # Invariants (both backends)
//! - A connection's events reach the application in the order they arose: while it
//!   has `pending` (refused) events, new ones queue behind them, and it is in
//!   `blocked` until they are taken.
//! - `Closed` is queued exactly once per connection, by [`Bookkeeping::close`],
//!   which marks it `dead`; the connection is forgotten ([`Bookkeeping::forget`])
//!   once its `Closed` has left the loop.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::time::{Duration, Instant};

use seda::Sink;

use super::conn::{Conn, WriteState};
use super::event::{CloseReason, ConnId, ConnState, SocketEvent};
use super::inbox::{Backlog, Bucket, IDLE_WAIT, Offer, RETRY, offer, send_check_period};
use super::shared::{Attach, Cmd, ConnMap, Counters, Delivery, Shared};
use super::slab::{Keyed, Slab};

/// What a loop keeps of a connection on either backend.
///
/// Every field counts: an idle connection pays for this record (bench/idle-memory,
/// issue 29.5), so what few connections have lives in one box ([`Rare`]).
#[derive(Debug)]
pub(super) struct Base {
    pub(super) conn: Arc<Conn>,
    /// The application's state of the connection (`SocketEvent::state`): made at
    /// admission, a clone in each event, taken out into `Closed`.
    pub(super) state: Option<ConnState>,
    /// Events the application refused, oldest first, with their `born`.
    pub(super) pending: Backlog<(SocketEvent, Instant)>,
    /// `None` for nearly every connection.
    rare: Option<Box<Rare>>,
    pub(super) dead: bool,
    /// The peer shut down its sending side and `ReadClosed` was delivered
    /// (`SocketConfig::half_close`).
    pub(super) read_eof: bool,
}

/// What few connections have: a read-rate bucket (only with
/// `SocketConfig::read_rate`) and an outbound connect's address (only until the
/// socket says whether it succeeded, [`Bookkeeping::finish_connect`]).
#[derive(Debug)]
struct Rare {
    bucket: Option<Bucket>,
    connecting: Option<SocketAddr>,
}

impl Base {
    pub(super) fn new(
        conn: Arc<Conn>,
        bucket: Option<Bucket>,
        connecting: Option<SocketAddr>,
    ) -> Base {
        let rare = (bucket.is_some() || connecting.is_some())
            .then(|| Box::new(Rare { bucket, connecting }));
        Base {
            conn,
            state: None,
            pending: Backlog::default(),
            rare,
            dead: false,
            read_eof: false,
        }
    }

    /// The read-rate bucket, if reads are rate limited.
    pub(super) fn bucket(&mut self) -> Option<&mut Bucket> {
        self.rare.as_mut()?.bucket.as_mut()
    }

    /// The address an outbound connect in progress goes to.
    pub(super) fn connecting(&self) -> Option<SocketAddr> {
        self.rare.as_ref()?.connecting
    }

    /// The connect in progress (if any) is over: established or failed. Whether
    /// one was.
    pub(super) fn end_connect(&mut self) -> bool {
        let Some(r) = self.rare.as_mut() else {
            return false;
        };
        let was = r.connecting.take().is_some();
        if r.bucket.is_none() {
            self.rare = None;
        }
        was
    }
}

/// A loop's per-connection entry: [`Base`] and the backend's own state, in the
/// slot its id names ([`Slab`]; the id is `base().conn.id`).
pub(super) trait Local: Keyed {
    fn base(&self) -> &Base;
    fn base_mut(&mut self) -> &mut Base;
}

/// A loop's tables and clocks, the same on both backends.
pub(super) struct Book<'a, L> {
    pub(super) shared: &'a Shared,
    pub(super) idx: usize,
    /// The application's sink (given by `BoundSockets::start`).
    pub(super) app: Sink<SocketEvent>,
    /// What makes a new connection's state, if the application gave one.
    pub(super) attach: Option<Arc<Attach>>,
    /// The loop's connections, by id: indexed by the slot the id names, not hashed.
    pub(super) conns: Slab<L>,
    /// The sinks of outbound connections (the others deliver to the application's
    /// sink). Looked up only while it is not empty.
    pub(super) sinks: ConnMap<Sink<SocketEvent>>,
    /// Connections with refused events to offer again.
    pub(super) blocked: Vec<u64>,
    /// Connections over their read rate, and when they may be read again.
    pub(super) throttled: Vec<(Instant, u64)>,
    pub(super) accept_retry: Option<Instant>,
    /// Next scan for connections past the send timeout.
    pub(super) next_send_check: Option<Instant>,
    /// The clock, read once per turn after the wait: the `born` of the turn's reads
    /// and the origin of the next wait's timeout (one clock read per turn, not one
    /// per event).
    pub(super) now: Instant,
}

impl<'a, L: Local> Book<'a, L> {
    pub(super) fn new(shared: &'a Shared, idx: usize, delivery: Delivery) -> Self {
        Book {
            shared,
            idx,
            app: delivery.app,
            attach: delivery.attach,
            conns: Slab::default(),
            sinks: ConnMap::default(),
            blocked: Vec::new(),
            throttled: Vec::new(),
            accept_retry: None,
            next_send_check: shared
                .cfg
                .send_timeout
                .map(|t| Instant::now() + send_check_period(t)),
            now: Instant::now(),
        }
    }

    /// The counters of this loop.
    pub(super) fn counters(&self) -> &'a Counters {
        self.shared.counters(self.idx)
    }

    /// The longest the next wait may last: until the earliest retry, throttle or
    /// send-timeout scan, at most [`IDLE_WAIT`]. From the turn's clock: a wait
    /// computed from it is at most the turn's work long.
    pub(super) fn timeout(&self) -> Duration {
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
        t
    }

    /// A slot of this loop's table for a connection it accepts (`None`: all taken).
    pub(super) fn new_id(&self) -> Option<ConnId> {
        self.shared.new_id(self.idx)
    }

    /// Connection `id` was never entered (refused, or its socket could not be
    /// registered): its slot is free again.
    pub(super) fn give_back(&self, id: ConnId) {
        self.shared.give_back(self.idx, id);
    }

    /// Takes connection `id`'s entry out of the table and frees its slot.
    pub(super) fn drop_entry(&mut self, id: u64) -> Option<L> {
        let entry = self.conns.remove(&id)?;
        self.give_back(ConnId(id));
        Some(entry)
    }

    /// Offers an event of connection `id` to its sink, an outbound connection's own
    /// or else the application's (see [`offer`]).
    pub(super) fn offer(&self, id: u64, event: SocketEvent, born: Instant) -> Offer {
        let sink = match self.sinks.is_empty() {
            true => &self.app,
            false => self.sinks.get(&id).unwrap_or(&self.app),
        };
        offer(self.shared, self.idx, sink, id, event, born)
    }

    /// Resumes reading `other` after a drain watch fired (it may be on any loop).
    pub(super) fn resume_other(&self, other: ConnId) {
        if let Some(c) = self.shared.conns.get(other)
            && c.read_paused.swap(false, Relaxed)
        {
            self.shared.command(c.owner, Cmd::Resume(other));
        }
    }

    /// A socket admitted by this loop ([`super::inbox::admit_socket`]) becomes
    /// connection `id`: in the shared table, counted open and accepted. The caller
    /// puts its entry in `conns` and announces it ([`Bookkeeping::announce`]).
    pub(super) fn enter(&self, id: ConnId, stream: mio::net::TcpStream) -> Arc<Conn> {
        let conn = Arc::new(Conn::new(id, self.idx, stream));
        self.shared.conns.insert(Arc::clone(&conn));
        self.shared.open.fetch_add(1, Relaxed);
        self.counters().accepted.fetch_add(1, Relaxed);
        conn
    }

    /// The read-rate bucket of a new connection (`SocketConfig::read_rate`).
    pub(super) fn bucket(&self) -> Option<Bucket> {
        let cfg = &self.shared.cfg;
        cfg.read_rate.map(|_| Bucket::new(cfg.read_chunk))
    }

    /// An outbound connection (already in the shared table:
    /// [`super::Writer::connect`] put it there) delivers to `sink`.
    pub(super) fn enter_outbound(&mut self, conn: &Conn, sink: Sink<SocketEvent>) {
        if self.shared.cfg.nodelay {
            let _ = conn.stream.set_nodelay(true);
        }
        self.sinks.insert(conn.id.0, sink);
    }

    /// Moves the throttled connections whose wait is over to `due`.
    pub(super) fn due_throttled(&mut self, due: &mut Vec<u64>) {
        if self.throttled.is_empty() {
            return;
        }
        let now = Instant::now();
        self.throttled.retain(|(at, id)| {
            if *at <= now {
                due.push(*id);
                false
            } else {
                true
            }
        });
    }

    /// The connections whose peer took none of their queued output for the send
    /// timeout, if a scan is due (counted as send timeouts: the caller closes them).
    fn stalled(&mut self) -> Vec<u64> {
        let (Some(at), Some(limit)) = (self.next_send_check, self.shared.cfg.send_timeout) else {
            return Vec::new();
        };
        let now = self.now;
        if now < at {
            return Vec::new();
        }
        self.next_send_check = Some(now + send_check_period(limit));
        let stalled: Vec<u64> = self
            .conns
            .iter()
            .map(|(id, lc)| (id, lc.base()))
            .filter(|(_, b)| !b.dead)
            .filter(|(_, b)| {
                b.conn
                    .out
                    .lock()
                    .stalled_since
                    .is_some_and(|t| now.saturating_duration_since(t) > limit)
            })
            .map(|(id, _)| id)
            .collect();
        self.counters()
            .send_timeouts
            .fetch_add(stalled.len() as u64, Relaxed);
        stalled
    }
}

/// What both loops do the same way, given their hooks.
pub(super) trait Bookkeeping<'a> {
    type Local: Local;

    fn book(&mut self) -> &mut Book<'a, Self::Local>;

    // ---- hooks: where the backends differ

    /// Takes connection `id` into the loop (`adopted`: opened by the application,
    /// [`super::Writer::adopt`]).
    fn admit_as(
        &mut self,
        id: ConnId,
        stream: mio::net::TcpStream,
        peer: SocketAddr,
        adopted: bool,
    );
    /// Takes an outbound connection whose connect is in progress into the loop.
    fn start_connect(&mut self, conn: Arc<Conn>, peer: SocketAddr, sink: Sink<SocketEvent>);
    /// Sends what a writer on another thread left queued on `id` (`Cmd::Flush`).
    fn flush(&mut self, id: u64);
    /// Reading of `id` may go on (a pause ended).
    fn unpark(&mut self, id: u64);
    /// `id`'s refused events were all taken: reading may go on.
    fn unblocked(&mut self, id: u64);
    /// An event of `id` was refused (it is pending now).
    fn refused(&mut self, _id: u64) {}
    /// `id` is being closed: release what the backend holds for it (registration,
    /// operations in flight). Its output is already dropped.
    fn teardown(&mut self, id: u64, conn: &Conn);
    /// `Closed` of `id` left the loop: drop its entry (now or once idle).
    fn forget_local(&mut self, id: u64);
    /// `id`'s connect has not finished yet (a spurious readiness).
    fn connect_pending(&mut self, _id: u64) {}
    /// `id`'s connect finished and `Connected` was delivered: send what was queued
    /// meanwhile, start reading.
    fn connected(&mut self, id: u64);

    // ---- the same on both backends

    /// Delivers an event of connection `id`, or keeps it (and stops reading the
    /// connection) if the application refuses it.
    fn deliver(&mut self, id: u64, event: SocketEvent, born: Instant) {
        let Some(lc) = self.book().conns.get_mut(&id) else {
            return;
        };
        let pending = &mut lc.base_mut().pending;
        if !pending.is_empty() {
            pending.push_back((event, born));
            return;
        }
        self.offer_now(id, event, born);
    }

    /// [`Bookkeeping::deliver`] for a connection known to have no pending events (a
    /// read checks that first), without looking the connection up again.
    fn offer_now(&mut self, id: u64, event: SocketEvent, born: Instant) {
        let closed = matches!(event, SocketEvent::Closed { .. });
        match self.book().offer(id, event, born) {
            Offer::Taken if closed => self.forget(id, true),
            Offer::Gone if closed => self.forget(id, false),
            Offer::Taken | Offer::Gone => {}
            Offer::Refused(event) => {
                let b = self.book();
                b.counters().stalls.fetch_add(1, Relaxed);
                if let Some(lc) = b.conns.get_mut(&id) {
                    lc.base_mut().pending.push_back((event, born));
                }
                b.blocked.push(id);
                self.refused(id);
            }
        }
    }

    /// A connection's `Closed` event left the loop (`delivered`, or the application
    /// stage is gone): forget the connection.
    fn forget(&mut self, id: u64, delivered: bool) {
        let b = self.book();
        if delivered {
            b.counters().closed.fetch_add(1, Relaxed);
        }
        b.sinks.remove(&id);
        self.forget_local(id);
    }

    /// Offers every blocked connection's pending events again, in order.
    fn retry_blocked(&mut self) {
        if self.book().blocked.is_empty() {
            return;
        }
        for id in std::mem::take(&mut self.book().blocked) {
            let b = self.book();
            let Some(mut pending) = b
                .conns
                .get_mut(&id)
                .map(|lc| std::mem::take(&mut lc.base_mut().pending))
            else {
                continue;
            };
            let mut closed = None;
            while let Some((event, born)) = pending.pop_front() {
                let is_closed = matches!(event, SocketEvent::Closed { .. });
                match b.offer(id, event, born) {
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
            let b = self.book();
            let Some(lc) = b.conns.get_mut(&id) else {
                continue;
            };
            let base = lc.base_mut();
            base.pending = pending;
            if !base.pending.is_empty() {
                b.blocked.push(id);
            } else {
                self.unblocked(id);
            }
        }
    }

    /// Runs the commands other threads left for this loop.
    fn commands(&mut self) {
        let (shared, idx) = (self.book().shared, self.book().idx);
        let Some(slot) = shared.loops.get(idx) else {
            return;
        };
        let cmds = std::mem::take(&mut *slot.cmds.lock());
        for cmd in cmds {
            match cmd {
                Cmd::Close(conn, reason) => self.close(conn.0, reason),
                Cmd::Adopt(conn, stream, peer) => self.admit_as(conn, stream, peer, true),
                Cmd::Connect { conn, peer, sink } => self.start_connect(conn, peer, sink),
                Cmd::Flush(conn) => self.flush(conn.0),
                Cmd::Resume(conn) => {
                    if self.is_live(conn.0) {
                        let state = self.state_of(conn.0);
                        self.deliver(conn.0, SocketEvent::Resumed { conn, state }, Instant::now());
                        self.unpark(conn.0);
                    }
                }
                Cmd::Backlog(conn, queued) => {
                    if self.is_live(conn.0) {
                        let state = self.state_of(conn.0);
                        self.deliver(
                            conn.0,
                            SocketEvent::WriteBacklog {
                                conn,
                                queued,
                                state,
                            },
                            Instant::now(),
                        );
                    }
                }
            }
        }
    }

    /// Connection `id` is in the loop and not closed.
    fn is_live(&mut self, id: u64) -> bool {
        self.book().conns.get(&id).is_some_and(|lc| !lc.base().dead)
    }

    /// The application's state of connection `id`, a clone for an event.
    fn state_of(&mut self, id: u64) -> Option<ConnState> {
        self.book().conns.get(&id)?.base().state.clone()
    }

    /// Delivers a new connection's first event, `Accepted` or `Adopted`, with the
    /// state the application's attach function made for it, if it gave one
    /// ([`super::BoundSockets::start_attached`]).
    fn announce(&mut self, id: ConnId, peer: SocketAddr, adopted: bool) {
        let b = self.book();
        let state = b.attach.as_ref().and_then(|f| (f.0)(id, peer));
        if let Some(lc) = b.conns.get_mut(&id.0) {
            lc.base_mut().state.clone_from(&state);
        }
        let first = if adopted {
            SocketEvent::Adopted {
                conn: id,
                peer,
                state,
            }
        } else {
            SocketEvent::Accepted {
                conn: id,
                peer,
                state,
            }
        };
        self.deliver(id.0, first, Instant::now());
    }

    /// The socket of connecting `id` is ready (or failed): established (deliver
    /// `Connected`, then [`Bookkeeping::connected`]) or failed (close with the
    /// socket's error).
    fn finish_connect(&mut self, id: u64) {
        let Some(lc) = self.book().conns.get_mut(&id) else {
            return;
        };
        let base = lc.base_mut();
        let Some(peer) = base.connecting() else {
            return;
        };
        if base.dead {
            return;
        }
        let conn = Arc::clone(&base.conn);
        let failure = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => None,
                // Not yet: the handshake's end is still to come.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    return self.connect_pending(id);
                }
                Err(e) => Some(e),
            },
        };
        if let Some(e) = failure {
            return self.close(id, CloseReason::Error(e.kind()));
        }
        base.end_connect();
        conn.connected.store(true, Release);
        self.book().counters().connects.fetch_add(1, Relaxed);
        self.deliver(
            id,
            SocketEvent::Connected {
                conn: ConnId(id),
                peer,
            },
            Instant::now(),
        );
        self.connected(id);
    }

    /// Tears connection `id` down and queues its one `Closed` event.
    fn close(&mut self, id: u64, reason: CloseReason) {
        let Some(lc) = self.book().conns.get_mut(&id) else {
            return;
        };
        let base = lc.base_mut();
        if base.dead {
            return;
        }
        base.dead = true;
        // The socket stages' last hold of the application's state: it goes with
        // `Closed`.
        let state = base.state.take();
        let failed_connect = base.end_connect();
        let conn = Arc::clone(&base.conn);
        let watcher = {
            let mut o = conn.out.lock();
            o.state = WriteState::Closed;
            o.clear();
            o.armed = false;
            o.drain_watch.take()
        };
        self.teardown(id, &conn);
        let b = self.book();
        if let Some(&(_, other)) = watcher.as_deref() {
            // Nothing will drain any more: let the paused side see it.
            b.resume_other(other);
        }
        if failed_connect {
            b.counters().connect_failures.fetch_add(1, Relaxed);
        }
        // Writers may still hold the `Arc` for a moment; shut the socket now so the
        // peer sees the close at once.
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        b.shared.conns.remove(conn.id);
        b.shared.open.fetch_sub(1, Relaxed);
        self.deliver(
            id,
            SocketEvent::Closed {
                conn: conn.id,
                reason,
                state,
            },
            Instant::now(),
        );
    }

    /// Closes every connection whose peer took none of its queued output for the
    /// send timeout.
    fn check_send_timeouts(&mut self) {
        for id in self.book().stalled() {
            self.close(id, CloseReason::Error(io::ErrorKind::TimedOut));
        }
    }

    /// At stop, after every connection was closed: offers the refused events (the
    /// `Closed` ones) until they are taken or `deadline` (the stop's start plus
    /// [`super::inbox::STOP_DELIVERY`]) has passed, counts the rest as undelivered, and empties
    /// the table.
    fn deliver_at_stop(&mut self, deadline: Instant) {
        while !self.book().blocked.is_empty() && Instant::now() < deadline {
            std::thread::sleep(RETRY);
            self.retry_blocked();
        }
        let b = self.book();
        let lost: usize = b.conns.values().map(|lc| lc.base().pending.len()).sum();
        if lost > 0 {
            tracing::warn!(
                event_loop = b.idx,
                lost,
                "the application took no events for 2 s at stop"
            );
            b.counters().undelivered.fetch_add(lost as u64, Relaxed);
        }
        b.conns.drain().for_each(drop);
    }

    /// At stop: the live connections, whose queued output the loop writes out as
    /// far as the sockets take it before closing them.
    fn live(&mut self) -> Vec<u64> {
        self.book()
            .conns
            .iter()
            .filter(|(_, lc)| !lc.base().dead)
            .map(|(id, _)| id)
            .collect()
    }
}
