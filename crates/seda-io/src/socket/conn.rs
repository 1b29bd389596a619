//! One connection as the writers and its event loop share it: the socket and the
//! bounded outgoing queue.
//!
//! # Invariants
//! - `Out::queued` is the sum of the costs of the segments in `Out::queue` (bytes for
//!   memory segments, [`FILE_SEGMENT_COST`] per file segment), plus, under io_uring,
//!   the bytes of the send operation in flight (taken off the queue, not yet sent).
//! - epoll: the queue is non-empty only if the last write attempt on the socket saw
//!   `WouldBlock`, so an `EPOLLOUT` edge is still to come and the loop will flush it.
//!   io_uring: the queue is non-empty or a send is in flight only while `armed`, i.e.
//!   while the owning loop has the connection on its list of sends for this turn, a
//!   `Flush` command is on its way to it, or an operation of the connection is in
//!   flight; the loop clears `armed` only once both are empty. A writer writes
//!   straight to the socket only when the connection is [`Out::idle`].
//!   Every flush and every change of the queue runs under the `out` lock, so a writer
//!   and the loop never interleave bytes.
//! - Once `state` is `Closed` it never changes again and the queue stays empty.
//! - `Out::stalled_since` is `None` exactly when the queue is empty; otherwise it is
//!   when the peer last took a byte (or when the queue filled), the clock of
//!   the send timeout.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed};
use std::time::Instant;

use bytes::{Buf, Bytes};
use mio::net::TcpStream;
use parking_lot::Mutex;

use super::event::ConnId;
use crate::sys;

/// What a queued file segment counts toward the write threshold: its bytes are not
/// in memory, but its bookkeeping is, and a client that pipelines requests without
/// reading must still hit the bound.
pub(crate) const FILE_SEGMENT_COST: usize = 256;
/// Largest `sendfile` per call, so one big file does not hog the loop.
const MAX_SENDFILE: u64 = 1 << 20;
/// Largest number of buffers per `writev`.
const MAX_IOV: usize = 64;
/// Buffers per `writev` of a direct write ([`Out::write_now`]).
const DIRECT_IOV: usize = 8;

/// The write side's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteState {
    /// Accepting output.
    Open,
    /// `close` was asked with output queued: close once the queue is flushed.
    Closing,
    /// Closed or being torn down: no more output.
    Closed,
}

#[derive(Debug)]
pub(crate) enum Segment {
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        remaining: u64,
    },
}

#[derive(Debug)]
pub(crate) struct Out {
    pub(crate) queue: VecDeque<Segment>,
    pub(crate) queued: usize,
    pub(crate) state: WriteState,
    /// A `WriteBacklog` notice was sent and the queue has not drained below the
    /// threshold since.
    pub(crate) notified: bool,
    /// Since when the peer has taken nothing of a non-empty queue (see invariants).
    pub(crate) stalled_since: Option<Instant>,
    /// [`super::Writer::resume_on_drain`]: once `queued` is at most `.0`, resume
    /// reading connection `.1` (taken when it fires, or when this one closes).
    /// Boxed: rarely set (a proxy's upstream paused behind a slow client), and an
    /// idle connection's record stays small.
    pub(crate) drain_watch: Option<Box<(usize, ConnId)>>,
    /// io_uring: the owning loop is responsible for sending the queue (see the
    /// invariants). Always false under epoll.
    pub(crate) armed: bool,
    /// io_uring: the queue was empty with nothing in flight when the owning loop's
    /// own thread (a handler it runs inline) queued output to it this turn; the
    /// loop's end of turn sends it (and clears this). While it is set no send of the
    /// connection is in flight, so the holder of the lock may write the queue
    /// straight out: [`super::Writer::abort`] does, and so keeps what epoll would
    /// have written at once. Always false under epoll.
    pub(crate) batched: bool,
}

impl Out {
    pub(crate) fn push(&mut self, seg: Segment) {
        self.queued += match &seg {
            Segment::Bytes(b) => b.len(),
            Segment::File { .. } => FILE_SEGMENT_COST,
        };
        self.queue.push_back(seg);
    }

    /// Frees the drained queue's allocation: an idle connection keeps none (a
    /// burst of output grows it to hundreds of segments). Both backends call it
    /// when a flush leaves the queue empty.
    pub(crate) fn release_queue(&mut self) {
        debug_assert!(self.queue.is_empty());
        self.queue = VecDeque::new();
    }

    pub(crate) fn clear(&mut self) {
        self.queue = VecDeque::new();
        self.queued = 0;
        self.stalled_since = None;
        self.batched = false;
    }

    /// The connection to resume now that the queue has drained to its watch's
    /// low-water mark, if it has one (see [`Out::drain_watch`]).
    pub(crate) fn drained(&mut self) -> Option<ConnId> {
        match self.drain_watch.as_deref() {
            Some(&(low, other)) if self.queued <= low => {
                self.drain_watch = None;
                Some(other)
            }
            _ => None,
        }
    }

    /// Nothing is queued or in flight: a write may go straight to the socket.
    pub(crate) fn idle(&self) -> bool {
        self.queue.is_empty() && !self.armed
    }

    /// Takes the leading memory segments off the queue, at most `max` of them, for
    /// a send operation (io_uring). They stay counted in `queued` until [`Out::sent`].
    pub(crate) fn take_bufs(&mut self, max: usize, into: &mut Vec<Bytes>) {
        while into.len() < max {
            match self.queue.front() {
                Some(Segment::Bytes(_)) => {
                    if let Some(Segment::Bytes(b)) = self.queue.pop_front() {
                        into.push(b);
                    }
                }
                _ => break,
            }
        }
    }

    /// A send operation of `bufs` (from [`Out::take_bufs`]) wrote `n` bytes: what it
    /// did not write goes back to the front of the queue, in order.
    pub(crate) fn sent(&mut self, mut n: usize, bufs: &mut Vec<Bytes>) {
        self.queued = self.queued.saturating_sub(n);
        let mut rest = Vec::new();
        for mut b in bufs.drain(..) {
            if n >= b.len() {
                n -= b.len();
            } else {
                b.advance(n);
                n = 0;
                rest.push(b);
            }
        }
        for b in rest.into_iter().rev() {
            self.queue.push_front(Segment::Bytes(b));
        }
    }

    /// Sends the file segments at the front of the queue with `sendfile` (io_uring:
    /// the loop sends memory segments with an operation of the ring). `Ok(true)` when
    /// the front is no file segment any more, `Ok(false)` when the socket would block.
    pub(crate) fn flush_files(
        &mut self,
        stream: &TcpStream,
        written: &AtomicU64,
    ) -> io::Result<bool> {
        let mut wrote = 0usize;
        let res = self.write_files(stream, &mut wrote);
        written.fetch_add(wrote as u64, Relaxed);
        if wrote > 0 {
            self.stalled_since = Some(Instant::now());
        }
        res
    }

    /// Writes as much of the queue as the socket takes. `Ok(true)` when the queue is
    /// empty, `Ok(false)` when the socket would block.
    pub(crate) fn flush(&mut self, stream: &TcpStream, written: &AtomicU64) -> io::Result<bool> {
        let mut wrote = 0usize;
        let res = self.write_out(stream, &mut wrote);
        written.fetch_add(wrote as u64, Relaxed);
        match res {
            Ok(true) => {
                self.stalled_since = None;
                self.release_queue();
            }
            Ok(false) if wrote > 0 || self.stalled_since.is_none() => {
                self.stalled_since = Some(Instant::now());
            }
            Ok(false) | Err(_) => {}
        }
        res
    }

    /// Sends the leading file segments with `sendfile`: `Ok(true)` when none is left
    /// at the front (the queue is empty or starts with memory), `Ok(false)` when the
    /// socket would block.
    fn write_files(&mut self, stream: &TcpStream, wrote: &mut usize) -> io::Result<bool> {
        loop {
            match self.queue.front() {
                Some(Segment::File { .. }) => {}
                _ => return Ok(true),
            }
            match self.sendfile_front(stream)? {
                Some(n) => *wrote += n,
                None => return Ok(false),
            }
        }
    }

    /// One `sendfile` of the front file segment: `Some(bytes)` (0 after `EINTR`),
    /// `None` if the socket would block.
    fn sendfile_front(&mut self, stream: &TcpStream) -> io::Result<Option<usize>> {
        let Some(Segment::File {
            file,
            offset,
            remaining,
        }) = self.queue.front_mut()
        else {
            return Ok(Some(0));
        };
        let want = (*remaining).min(MAX_SENDFILE) as usize;
        match sys::sendfile(stream, file, offset, want) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file ended before the range queued for sending",
            )),
            Ok(n) => {
                *remaining -= n as u64;
                if *remaining == 0 {
                    self.queue.pop_front();
                    self.queued -= FILE_SEGMENT_COST;
                }
                Ok(Some(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Some(0)),
            Err(e) => Err(e),
        }
    }

    fn write_out(&mut self, stream: &TcpStream, wrote: &mut usize) -> io::Result<bool> {
        loop {
            let n = match self.queue.front_mut() {
                None => return Ok(true),
                Some(Segment::File { .. }) => match self.sendfile_front(stream)? {
                    Some(n) => n,
                    None => return Ok(false),
                },
                Some(Segment::Bytes(_)) => {
                    let res = {
                        let mut iov = [IoSlice::new(&[]); MAX_IOV];
                        let mut k = 0;
                        for seg in self.queue.iter() {
                            match seg {
                                Segment::Bytes(b) if k < MAX_IOV => {
                                    iov[k] = IoSlice::new(b);
                                    k += 1;
                                }
                                _ => break,
                            }
                        }
                        (&*stream).write_vectored(&iov[..k])
                    };
                    match res {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            self.consume(n);
                            n
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            *wrote += n;
        }
    }

    /// Writes `bufs` straight from the caller's buffers while nothing is queued (no
    /// queueing on the common path: one `writev`), and queues what the socket does
    /// not take. Every element of `bufs` is taken (left empty). `Ok(true)` when all
    /// was written, `Ok(false)` when the rest is queued for `EPOLLOUT`.
    pub(crate) fn write_now(
        &mut self,
        stream: &TcpStream,
        bufs: &mut [Bytes],
        written: &AtomicU64,
    ) -> io::Result<bool> {
        debug_assert!(self.idle(), "a direct write behind queued output");
        let mut wrote = 0usize;
        let mut first = 0;
        let res = loop {
            while first < bufs.len() && bufs[first].is_empty() {
                first += 1;
            }
            if first == bufs.len() {
                break Ok(true);
            }
            let res = {
                // A short array: a response is a few buffers, and a longer list
                // takes another turn of the loop.
                let mut iov = [IoSlice::new(&[]); DIRECT_IOV];
                let k = (bufs.len() - first).min(DIRECT_IOV);
                for (slot, b) in iov.iter_mut().zip(&bufs[first..first + k]) {
                    *slot = IoSlice::new(b);
                }
                (&*stream).write_vectored(&iov[..k])
            };
            match res {
                Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    wrote += n;
                    while n > 0 {
                        let b = &mut bufs[first];
                        let take = n.min(b.len());
                        b.advance(take);
                        n -= take;
                        if b.is_empty() {
                            first += 1;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        written.fetch_add(wrote as u64, Relaxed);
        if let Ok(false) = res {
            for b in &mut bufs[first..] {
                if !b.is_empty() {
                    self.push(Segment::Bytes(std::mem::take(b)));
                }
            }
            self.stalled_since = Some(Instant::now());
        }
        res
    }

    /// Drops `n` written bytes from the front memory segments.
    fn consume(&mut self, mut n: usize) {
        self.queued -= n;
        while n > 0 {
            let Some(Segment::Bytes(b)) = self.queue.front_mut() else {
                debug_assert!(false, "wrote more bytes than the memory segments hold");
                return;
            };
            if b.len() <= n {
                n -= b.len();
                self.queue.pop_front();
            } else {
                b.advance(n);
                n = 0;
            }
        }
    }
}

/// A connection: shared by its event loop (reads, `EPOLLOUT` flushes, teardown) and
/// every [`super::Writer`] (direct writes).
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    /// Index of the event loop that owns the connection.
    pub(crate) owner: usize,
    pub(crate) stream: TcpStream,
    pub(crate) out: Mutex<Out>,
    /// The application asked the loop not to read ([`super::Writer::pause_reading`]).
    pub(crate) read_paused: AtomicBool,
    /// The outgoing queue passed the threshold under [`super::BacklogAction::Pause`]
    /// and has not drained below half of it since: the loop does not read.
    pub(crate) backed_up: AtomicBool,
    /// The socket is connected: false only while an outbound connect is in progress
    /// (output is queued until then, never written).
    pub(crate) connected: AtomicBool,
}

impl Conn {
    /// Whether the loop may read the connection now.
    pub(crate) fn readable(&self) -> bool {
        !self.read_paused.load(Relaxed) && !self.backed_up.load(Relaxed)
    }

    /// Whether output may be written to the socket (not while connecting).
    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Acquire)
    }
}

impl Conn {
    /// A connection whose socket is connected (accepted, or adopted).
    pub(crate) fn new(id: ConnId, owner: usize, stream: TcpStream) -> Self {
        Self::with_state(id, owner, stream, true)
    }

    /// A connection whose outbound connect is in progress.
    pub(crate) fn connecting(id: ConnId, owner: usize, stream: TcpStream) -> Self {
        Self::with_state(id, owner, stream, false)
    }

    fn with_state(id: ConnId, owner: usize, stream: TcpStream, connected: bool) -> Self {
        Conn {
            id,
            owner,
            stream,
            out: Mutex::new(Out {
                queue: VecDeque::new(),
                queued: 0,
                state: WriteState::Open,
                notified: false,
                stalled_since: None,
                drain_watch: None,
                armed: false,
                batched: false,
            }),
            read_paused: AtomicBool::new(false),
            backed_up: AtomicBool::new(false),
            connected: AtomicBool::new(connected),
        }
    }
}
