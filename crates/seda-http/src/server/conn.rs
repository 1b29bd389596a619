//! Per-connection state, and the response slot every parsed request owns.
//!
//! A connection has two halves, each behind its own lock so that parsing and
//! sending do not contend: [`RecvState`] (the parse buffer and where the parser is,
//! used by HttpParse and the timeout sweeper) and the send half (the reorder buffer
//! that keeps responses in request order, used by HttpSend).
//!
//! # Invariants
//! - Requests of a connection are numbered `0, 1, 2, ...` in arrival order
//!   (`parsed`); responses leave in the same order (`sent` counts those finished),
//!   whichever stage produced them and in whatever order they finished. A response
//!   finished early waits, parked (`SendState::park`).
//! - Each number belongs to exactly one [`Exchange`], which must be consumed by
//!   HttpSend (a response) or cancelled (the connection is gone); an `Exchange`
//!   dropped otherwise (a panic, an event lost at shutdown) answers `500` and closes
//!   the connection itself, so a pipelined successor never waits forever.
//! - Output is handed to the writer while the send half is locked, so two stages
//!   finishing consecutive responses cannot interleave them on the socket.
//! - Once `gone`, nothing more is written, no further request is parsed, and work
//!   still queued for the connection is cancelled where it is found.
//! - No lock of a connection is held while enqueueing to a stage (an enqueue may
//!   run the next stage inline, which may take the same lock).
//! - A request whose work has effects outside the server (a dynamic handler) is
//!   marked `running` ([`Exchange::begin`]) before that work starts, under the send
//!   half's lock, until its response is handed over; [`Conn::cut`] (the end of the
//!   shutdown grace) answers `503` only to a request not marked so. A request is
//!   therefore either answered `503` and never started, or started and never
//!   answered `503`.

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use seda_io::{ConnId, ConnState, Link, Outgoing, WriteError};

use super::peer::Peer;
use super::send_half::SendState;
pub(crate) use super::send_half::{Body, Reply};
use crate::access_log::events::RequestRecord;

/// `Connection` lines and the blank line that ends a head.
pub(crate) static KEEP_ALIVE: Bytes = Bytes::from_static(b"Connection: keep-alive\r\n\r\n");
pub(crate) static CLOSE: Bytes = Bytes::from_static(b"Connection: close\r\n\r\n");
/// The interim response to `Expect: 100-continue`.
static CONTINUE: Bytes = Bytes::from_static(b"HTTP/1.1 100 Continue\r\n\r\n");

thread_local! {
    /// Each thread's list of the buffers it is writing, reused (empty between uses):
    /// a response allocates no vector, and an idle connection holds none (it was a
    /// vector per connection, 128 bytes each of 2,000 idle ones).
    static OUT: std::cell::Cell<Vec<Bytes>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's buffer list (see [`OUT`]), left empty after.
fn with_out<R>(f: impl FnOnce(&mut Vec<Bytes>) -> R) -> R {
    let mut out = OUT.take();
    let r = f(&mut out);
    out.clear();
    OUT.with(|c| c.set(out));
    r
}

/// A request whose head is parsed and whose body is still arriving (or being
/// skipped). How a body is read is HttpParse's business (`parse.rs`); the connection
/// only keeps it, and the timeout sweeper may take the response slot of the request
/// that waits for it (to answer `408`).
pub(crate) trait PendingBody: Send + fmt::Debug {
    /// The slot of the request waiting for this body, if one waits.
    fn take_waiting(&mut self) -> Option<Exchange>;
    /// For HttpParse to get its own type back.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// For HttpParse to get its own type back, owned.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// A reading of the runtime's clock ([`seda::clock`], nanoseconds; an event's
/// `born` is one), never 0: an `Option<Ns>` takes 8 bytes where an
/// `Option<Instant>` takes 16, and two readings subtract as integers.
pub(crate) type Ns = std::num::NonZeroU64;

/// The reading `ns` as an [`Ns`] (0, a time before the clock's epoch, reads as 1).
#[inline]
pub(crate) fn ns(ns: u64) -> Ns {
    Ns::new(ns).unwrap_or(Ns::MIN)
}

/// The parse half of a connection (HttpParse and the sweeper).
#[derive(Debug, Default)]
pub(crate) struct RecvState {
    /// Bytes received and not yet consumed.
    pub(crate) buf: BytesMut,
    /// When the first byte of the incomplete request (head or body) arrived.
    pub(crate) head_started: Option<Ns>,
    /// Parse nothing more (a request asked to close, or the stream is broken).
    pub(crate) closing: bool,
    /// The body of the request being read, if its head is parsed.
    pub(crate) body: Option<Box<dyn PendingBody>>,
    /// `born` of the request at the front of `buf`: when its first byte was read
    /// (the connection's accept, for its first request). `None` when nothing of the
    /// next request has arrived.
    pub(crate) born: Option<Ns>,
    /// When the last read happened (what remains of `buf` after a request, if no
    /// longer than `last_read_len`, arrived then).
    pub(crate) last_read: Option<Ns>,
    /// How many bytes the last read brought (saturated at `u32::MAX`; a read is
    /// at most `read_chunk`, 64 MiB): apart from `last_read` so that the half
    /// takes 8 bytes less (a tuple would pad the `u32` to 8).
    last_read_len: u32,
    /// The client shut down its sending side: `buf` is all it will send. Once
    /// every request in it is answered, the connection closes.
    pub(crate) peer_done: bool,
    /// The last request must be alone in flight (a proxied one): parse nothing more
    /// until every response is out.
    pub(crate) solo: bool,
}

impl RecvState {
    /// Parse nothing more on this connection (drops a request waiting for its body).
    pub(crate) fn stop(&mut self) {
        self.closing = true;
        self.buf = BytesMut::new();
        self.body = None;
        self.head_started = None;
        self.born = None;
    }

    /// Bytes read at `at` arrived. The request they begin, if `buf` held nothing,
    /// was born then (unless the accept already set it).
    pub(crate) fn arrived(&mut self, at: Ns, len: usize) {
        if self.buf.is_empty() && self.body.is_none() && self.born.is_none() {
            self.born = Some(at);
        }
        self.last_read = Some(at);
        self.last_read_len = u32::try_from(len).unwrap_or(u32::MAX);
    }

    /// The request at the front of `buf` has been taken whole: returns its `born`
    /// (`fallback` if unknown) and moves `born` to the next request's first byte.
    pub(crate) fn take_born(&mut self, fallback: Ns) -> Ns {
        let born = self.born.unwrap_or(fallback);
        self.born = match self.last_read {
            _ if self.buf.is_empty() => None,
            Some(at) if self.buf.len() <= self.last_read_len as usize => Some(at.max(born)),
            _ => Some(born),
        };
        born
    }

    /// The first `n` bytes of `buf`, split off. The whole buffer (one request per
    /// read, the common case) is taken as it is: `split_to` would first turn the
    /// read's vector into a shared buffer, an allocation per request.
    pub(crate) fn take_front(&mut self, n: usize) -> Bytes {
        if n == self.buf.len() {
            std::mem::take(&mut self.buf).freeze()
        } else {
            self.buf.split_to(n).freeze()
        }
    }

    /// Frees the receive buffer once everything in it is consumed: a buffer
    /// advanced to its end (a skipped body, an empty line) still holds its
    /// allocation, up to a read chunk (16 KiB), for as long as the connection idles.
    pub(crate) fn release_empty_buffer(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            self.buf = BytesMut::new();
        }
    }

    /// Bytes the receive buffer holds (its capacity).
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// Nothing is buffered or half read.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.body.is_none()
    }
}

/// What [`Conn::cut`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Nothing in flight, or the connection is gone already.
    Idle,
    /// The next response's request had not started: it got the `503`, and the
    /// connection closes after it.
    Refused,
    /// The next response's request is running in a handler: nothing was written
    /// (the connection is cut when the sockets stop).
    Running,
}

/// An open connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    peer: Peer,
    /// The connection's output, plain or TLS (no lookup per response); `None` if
    /// the socket layer had already closed it when it was accepted here.
    link: Option<Link>,
    /// The client is gone, or the connection closes after a response already sent.
    gone: AtomicBool,
    /// Requests numbered so far.
    parsed: AtomicU64,
    /// Responses finished (sent, or dropped with the connection).
    sent: AtomicU64,
    /// HttpParse stopped reading until at most this many requests are in flight
    /// (`u64::MAX`: reading is not stopped): half of `max_pipelined`, or 0 around a
    /// request that must be alone in flight (a proxied one).
    resume_at: AtomicU64,
    /// The client sends nothing more and every request it sent is parsed: close
    /// once all are answered.
    close_when_answered: AtomicBool,
    /// Milliseconds since the server's epoch of the last request byte or response.
    last_active_ms: AtomicU64,
    /// Where the connection is in its shard's list
    /// ([`ConnList`](super::conn_list::ConnList)).
    pub(super) at: AtomicU32,
    pub(crate) rx: Mutex<RecvState>,
    tx: Mutex<SendState>,
}

impl Conn {
    pub(crate) fn new(id: ConnId, peer: SocketAddr, link: Option<Link>, now_ms: u64) -> Self {
        Conn {
            id,
            peer: Peer::new(peer),
            link,
            gone: AtomicBool::new(false),
            parsed: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            resume_at: AtomicU64::new(u64::MAX),
            close_when_answered: AtomicBool::new(false),
            last_active_ms: AtomicU64::new(now_ms),
            at: AtomicU32::new(u32::MAX),
            rx: Mutex::new(RecvState::default()),
            tx: Mutex::new(SendState::default()),
        }
    }

    /// The connection an event of the socket layer hands over
    /// ([`seda_io::SocketEvent::state`]; `None` if it carries none, or not ours).
    pub(crate) fn of(state: Option<ConnState>) -> Option<Arc<Conn>> {
        state?.downcast::<Conn>().ok()
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer.get()
    }

    /// Closes the connection once its output is out (a TLS one says
    /// `close_notify` first).
    pub(crate) fn close(&self) {
        if let Some(l) = &self.link {
            l.close();
        }
    }

    /// Closes the connection now.
    pub(crate) fn abort(&self) {
        if let Some(l) = &self.link {
            l.abort();
        }
    }

    fn pause_reading(&self) {
        if let Some(l) = &self.link {
            l.pause_reading();
        }
    }

    fn resume_reading(&self) {
        if let Some(l) = &self.link {
            l.resume_reading();
        }
    }

    /// Bytes of output waiting to go out.
    pub(crate) fn queued(&self) -> usize {
        self.link.as_ref().map_or(0, Link::queued)
    }

    /// Whether work for this connection is wasted (see the invariants).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Relaxed)
    }

    /// The client is gone: stop writing, cancel what is queued for it.
    pub(crate) fn mark_gone(&self) {
        self.gone.store(true, Relaxed);
        let mut tx = self.tx.lock();
        tx.dead = true;
        tx.drop_parked();
    }

    /// Numbers the next request. Call with the receive half locked.
    pub(crate) fn next_seq(&self) -> u64 {
        self.parsed.fetch_add(1, SeqCst)
    }

    /// Requests parsed whose responses are not finished.
    pub(crate) fn in_flight(&self) -> u64 {
        self.parsed
            .load(SeqCst)
            .saturating_sub(self.sent.load(SeqCst))
    }

    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_active_ms.store(now_ms, Relaxed);
    }

    pub(crate) fn last_active_ms(&self) -> u64 {
        self.last_active_ms.load(Relaxed)
    }

    /// HttpParse: too many requests in flight; stop reading until HttpSend has
    /// finished half of them. Returns false if they finished meanwhile (go on).
    pub(crate) fn pause_pipeline(&self, limit: u64) -> bool {
        self.pause_until(limit / 2, |n| n >= limit)
    }

    /// HttpParse, before a request that must be alone in flight (a proxied one, whose
    /// response streams) or after it: stop reading until every response is out.
    /// Returns false if they are out already (go on).
    pub(crate) fn pause_until_idle(&self) -> bool {
        self.pause_until(0, |n| n > 0)
    }

    fn pause_until(&self, resume_at: u64, busy: impl Fn(u64) -> bool) -> bool {
        self.resume_at.store(resume_at, SeqCst);
        self.pause_reading();
        if busy(self.in_flight()) {
            return true;
        }
        // HttpSend may have looked before the mark was set: undo it here.
        if self.resume_at.swap(u64::MAX, SeqCst) != u64::MAX {
            self.resume_reading();
        }
        false
    }

    /// HttpSend, after finishing responses: resume a paused pipeline once at most
    /// the mark's count of requests is in flight. Reading resumes with a `Resumed`
    /// event, on which HttpParse parses what it held back.
    fn resume_pipeline(&self) {
        let at = self.resume_at.load(SeqCst);
        if at != u64::MAX
            && self.in_flight() <= at
            && self.resume_at.swap(u64::MAX, SeqCst) != u64::MAX
        {
            self.resume_reading();
        }
    }

    /// HttpParse, once a client that shut down its sending side has no request left
    /// to parse: close the connection when every response is out (now, if they
    /// are). HttpSend checks after each response; with both sides' `SeqCst`
    /// accesses (flag then counts here, counts then flag there) one of them sees
    /// the last response finished and the flag set.
    pub(crate) fn close_when_answered(&self) {
        self.close_when_answered.store(true, SeqCst);
        if self.in_flight() == 0 {
            self.close();
        }
    }

    /// Request `seq` waits for `100 Continue`: send it now if every earlier response
    /// is out, else when its turn comes.
    pub(crate) fn send_continue(&self, seq: u64) {
        let mut tx = self.tx.lock();
        if tx.dead {
            return;
        }
        if tx.next == seq {
            self.write(&mut tx, Outgoing::Bytes(CONTINUE.clone()));
        } else {
            tx.defer_continue(seq);
        }
    }

    /// Hands `reply` for request `seq` to the connection: sends it (and any responses
    /// it unblocks) if it is its turn, else parks it. Returns whether the connection
    /// is still open for writing.
    pub(crate) fn deliver(&self, seq: u64, reply: Reply) -> bool {
        let mut tx = self.tx.lock();
        tx.running.remove(seq);
        if tx.dead {
            return false;
        }
        if seq != tx.next {
            debug_assert!(seq > tx.next, "response {seq} after {} was sent", tx.next);
            tx.park(seq, reply);
            return true;
        }
        let open = with_out(|out| {
            let mut next = Some(reply);
            while let Some(r) = next.take() {
                tx.next += 1;
                self.sent.fetch_add(1, SeqCst);
                self.emit(&mut tx, r, out);
                if tx.dead {
                    tx.drop_parked();
                    return false;
                }
                let at = tx.next;
                if tx.take_continue(at) {
                    out.push(CONTINUE.clone());
                }
                next = tx.take_parked(at);
            }
            self.flush(&mut tx, out);
            true
        });
        if !open {
            return false;
        }
        drop(tx);
        self.answered();
        true
    }

    /// After responses finished: close a half-closed client's connection once all
    /// are out, resume a paused pipeline.
    fn answered(&self) {
        if self.close_when_answered.load(SeqCst) && self.in_flight() == 0 {
            // Closes once the output is flushed; the client reads to the end.
            self.close();
        }
        self.resume_pipeline();
    }

    /// Marks request `seq` as begun by a handler (module invariants). False if the
    /// connection is gone or was cut: the work must not start.
    pub(crate) fn begin(&self, seq: u64) -> bool {
        let mut tx = self.tx.lock();
        if tx.dead {
            return false;
        }
        tx.running.push(seq);
        true
    }

    /// The end of the shutdown grace: if a request is in flight and the one whose
    /// response is due next has not begun, answers it with `reply` (a `503` that
    /// closes) and closes the connection after it; the requests behind it on the
    /// connection get nothing, as the `Connection: close` tells the client. If that
    /// request is running, writes nothing.
    pub(crate) fn cut(&self, reply: Reply) -> Cut {
        debug_assert!(reply.close, "a cut closes the connection");
        let mut tx = self.tx.lock();
        if tx.dead || self.in_flight() == 0 {
            return Cut::Idle;
        }
        if tx.running.contains(tx.next) {
            return Cut::Running;
        }
        tx.next += 1;
        self.sent.fetch_add(1, SeqCst);
        with_out(|out| self.emit(&mut tx, reply, out));
        tx.drop_parked();
        Cut::Refused
    }

    fn emit(&self, tx: &mut SendState, r: Reply, out: &mut Vec<Bytes>) {
        out.push(r.head);
        if let Some(date) = r.date {
            out.push(date);
            out.push(if r.close {
                CLOSE.clone()
            } else {
                KEEP_ALIVE.clone()
            });
        }
        match r.body {
            Body::None => {}
            Body::Bytes(b) => out.push(b),
            Body::File { file, offset, len } => {
                self.flush(tx, out);
                self.write(tx, Outgoing::File { file, offset, len });
            }
        }
        if r.close {
            self.flush(tx, out);
            self.close();
            tx.dead = true;
            self.gone.store(true, Relaxed);
        }
    }

    fn flush(&self, tx: &mut SendState, out: &mut Vec<Bytes>) {
        if out.is_empty() || tx.dead {
            out.clear();
            return;
        }
        let sent = match &self.link {
            Some(w) => w.send_vectored(out),
            None => Err(WriteError::NoConnection),
        };
        if sent.is_err() {
            tx.dead = true;
            self.gone.store(true, Relaxed);
        }
    }

    fn write(&self, tx: &mut SendState, o: Outgoing) {
        if tx.dead {
            return;
        }
        let sent = match &self.link {
            Some(w) => w.send(o),
            None => Err(WriteError::NoConnection),
        };
        if sent.is_err() {
            tx.dead = true;
            self.gone.store(true, Relaxed);
        }
    }
}

/// The slot of one request's one response. See the module invariants.
#[derive(Debug)]
pub(crate) struct Exchange {
    slot: Option<Slot>,
}

/// What the response to a request needs to know of it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) conn: Arc<Conn>,
    pub(crate) seq: u64,
    /// The request was a HEAD: a response never has a body.
    pub(crate) head_only: bool,
    /// The client keeps the connection (HTTP/1.1 default, `Connection` header).
    pub(crate) keep_alive: bool,
    /// What the access log keeps of the request (only when the log is on).
    pub(crate) log: Option<Box<RequestRecord>>,
}

impl Exchange {
    pub(crate) fn new(conn: Arc<Conn>, seq: u64, head_only: bool, keep_alive: bool) -> Self {
        Exchange {
            slot: Some(Slot {
                conn,
                seq,
                head_only,
                keep_alive,
                log: None,
            }),
        }
    }

    /// Keeps `rec` for the access log line of this request's response.
    pub(crate) fn log(&mut self, rec: RequestRecord) {
        if let Some(s) = self.slot.as_mut() {
            s.log = Some(Box::new(rec));
        }
    }

    fn slot(&self) -> &Slot {
        self.slot
            .as_ref()
            .expect("an Exchange holds its slot until consumed")
    }

    /// The request's sequence number on its connection.
    pub(crate) fn seq(&self) -> u64 {
        self.slot().seq
    }

    /// The connection is gone: the response would be wasted.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.slot().conn.is_gone()
    }

    /// The client's connection.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.slot().conn.id
    }

    /// The connection closes after this response (the client asked, or a
    /// parse-level error made it so; the server's draining is the framer's).
    pub(crate) fn closes(&self) -> bool {
        !self.slot().keep_alive
    }

    /// Sends the interim `100 Continue` the request's `Expect` asked for, in turn.
    pub(crate) fn send_continue(&self) {
        let s = self.slot();
        s.conn.send_continue(s.seq);
    }

    /// Call before work with effects outside the server (a dynamic handler) starts:
    /// false if the connection is gone or the shutdown cut it (its client got a
    /// `503` for this request, so the work must not run). See the module invariants.
    pub(crate) fn begin(&self) -> bool {
        let s = self.slot();
        s.conn.begin(s.seq)
    }

    /// Close the connection after this response.
    pub(crate) fn close_after(&mut self) {
        if let Some(s) = self.slot.as_mut() {
            s.keep_alive = false;
        }
    }

    /// Consumes the slot to answer it (HttpSend).
    pub(crate) fn take(mut self) -> Slot {
        self.slot
            .take()
            .expect("an Exchange holds its slot until consumed")
    }

    /// Consumes the slot of a request whose connection is gone, without a response.
    pub(crate) fn cancel(mut self) {
        self.slot = None;
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        if slot.conn.is_gone() {
            return;
        }
        tracing::warn!(conn = %slot.conn.id, seq = slot.seq, "a request lost its response; answering 500 and closing");
        let reply = Reply {
            head: Bytes::from(format!(
                "HTTP/1.1 500 Internal Server Error\r\nServer: seda\r\nContent-Length: 0\r\nDate: {}\r\nConnection: close\r\n\r\n",
                crate::proto::http_date(std::time::SystemTime::now())
            )),
            date: None,
            body: Body::None,
            close: true,
        };
        slot.conn.deliver(slot.seq, reply);
    }
}

pub(super) mod stream;

#[cfg(test)]
mod tests;
