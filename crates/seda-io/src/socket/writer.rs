//! [`Writer`]: output from any thread, written at once when nothing is queued
//! before it, the rest queued for the connection's loop (see the module docs of
//! `socket` for the bounds and the backlog actions).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::config::{BacklogAction, IoBackend};
use super::conn::{Conn, Segment, WriteState};
use super::event::{CloseReason, ConnId, Outgoing, WriteError};
use super::shared::{Cmd, Shared};
use super::uring;

/// Sends output on connections. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Writer {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

/// Output of one [`Writer::send`], borrowed where the caller keeps the container.
enum Put<'a> {
    Bufs(&'a mut [Bytes]),
    File {
        file: Arc<std::fs::File>,
        offset: u64,
        len: u64,
    },
}

impl Writer {
    /// Sends `out` on `conn`: writes at once from this thread (`writev`, `sendfile`)
    /// if nothing is queued before it, queues what the socket does not take, and the
    /// connection's event loop flushes the rest (on `EPOLLOUT`, or with a send
    /// operation of its ring). Under io_uring, output sent from the thread of the
    /// loop that owns the connection (a handler the loop runs inline) is queued and
    /// goes out with the loop's other sends in one system call at the end of its
    /// turn. Output of one connection goes out in the order of `send` calls.
    ///
    /// Past the write threshold the connection is closed (`Err(Backlog)`) or the
    /// application notified, per [`super::SocketConfig::on_backlog`].
    pub fn send(&self, conn: ConnId, out: Outgoing) -> Result<(), WriteError> {
        match out {
            Outgoing::Bytes(b) => self.put(conn, Put::Bufs(&mut [b])),
            Outgoing::Vectored(mut v) => self.put(conn, Put::Bufs(&mut v)),
            Outgoing::File { file, offset, len } => self.put(conn, Put::File { file, offset, len }),
        }
    }

    /// As [`Writer::send`] of `Outgoing::Vectored`, from the caller's vector: its
    /// buffers are taken and it is left empty with its capacity, so a caller that
    /// keeps one vector per connection allocates nothing per response.
    pub fn send_vectored(&self, conn: ConnId, bufs: &mut Vec<Bytes>) -> Result<(), WriteError> {
        let res = self.put(conn, Put::Bufs(bufs));
        bufs.clear();
        res
    }

    /// A writer bound to `conn` (`None` if it is not open): it sends without
    /// looking the connection up, for an application that keeps one per connection
    /// (taken on `Accepted`). It keeps the connection's socket open while held (the
    /// peer still sees the close at once: the loop shuts the socket down).
    pub fn bind(&self, conn: ConnId) -> Option<ConnWriter> {
        let c = self.shared.conns.get(conn)?;
        Some(ConnWriter {
            shared: Arc::clone(&self.shared),
            conn: c,
        })
    }

    fn put(&self, conn: ConnId, out: Put<'_>) -> Result<(), WriteError> {
        let c = self
            .shared
            .conns
            .get(conn)
            .ok_or(WriteError::NoConnection)?;
        put_on(&self.shared, &c, out)
    }
}

/// A [`Writer`] bound to one connection ([`Writer::bind`]). Output goes out as with
/// [`Writer::send`], in the order of calls, interleaved in call order with the
/// `Writer`'s own sends to the same connection.
#[derive(Clone)]
pub struct ConnWriter {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
}

impl fmt::Debug for ConnWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnWriter")
            .field("conn", &self.conn.id)
            .finish_non_exhaustive()
    }
}

impl ConnWriter {
    /// The connection.
    pub fn id(&self) -> ConnId {
        self.conn.id
    }

    /// As [`Writer::send_vectored`].
    pub fn send_vectored(&self, bufs: &mut Vec<Bytes>) -> Result<(), WriteError> {
        let res = put_on(&self.shared, &self.conn, Put::Bufs(bufs));
        bufs.clear();
        res
    }

    /// As [`Writer::send`].
    pub fn send(&self, out: Outgoing) -> Result<(), WriteError> {
        match out {
            Outgoing::Bytes(b) => put_on(&self.shared, &self.conn, Put::Bufs(&mut [b])),
            Outgoing::Vectored(mut v) => put_on(&self.shared, &self.conn, Put::Bufs(&mut v)),
            Outgoing::File { file, offset, len } => {
                put_on(&self.shared, &self.conn, Put::File { file, offset, len })
            }
        }
    }
}

/// Sends `out` on `c` (see [`Writer::send`]).
fn put_on(shared: &Shared, c: &Conn, out: Put<'_>) -> Result<(), WriteError> {
    let conn = c.id;
    if let Put::File { file, offset, len } = &out {
        let size = file.metadata().map_err(|e| WriteError::Io(e.kind()))?.len();
        if offset.checked_add(*len).is_none_or(|end| end > size) {
            return Err(WriteError::InvalidRange);
        }
    }
    let counters = shared.counters(c.owner);
    let mut o = c.out.lock();
    if o.state != WriteState::Open {
        return Err(WriteError::Closed);
    }
    // Nothing queued or in flight, and connected (an outbound connect in progress
    // queues its output; the loop flushes it once connected).
    let idle = o.idle() && c.is_connected();
    let mut flush_cmd = false;
    let flushed = if idle && shared.backend == IoBackend::Uring && uring::schedule_send(shared, c) {
        // The owning loop's own thread (a handler it ran inline): the output joins
        // the loop's sends of this turn, submitted with its next wait.
        o.armed = true;
        o.batched = true;
        match out {
            Put::Bufs(bufs) => {
                for b in bufs.iter_mut().filter(|b| !b.is_empty()) {
                    o.push(Segment::Bytes(std::mem::take(b)));
                }
            }
            Put::File { len: 0, .. } => {}
            Put::File { file, offset, len } => o.push(Segment::File {
                file,
                offset,
                remaining: len,
            }),
        }
        None
    } else {
        match out {
            // Nothing queued before: straight from the caller's buffers.
            Put::Bufs(bufs) if idle => Some(o.write_now(&c.stream, bufs, &counters.bytes_written)),
            Put::Bufs(bufs) => {
                for b in bufs.iter_mut().filter(|b| !b.is_empty()) {
                    o.push(Segment::Bytes(std::mem::take(b)));
                }
                None
            }
            Put::File { len: 0, .. } => None,
            Put::File { file, offset, len } => {
                o.push(Segment::File {
                    file,
                    offset,
                    remaining: len,
                });
                idle.then(|| o.flush(&c.stream, &counters.bytes_written))
            }
        }
    };
    match flushed {
        None => {}
        Some(Ok(true)) => return Ok(()),
        Some(Ok(false)) => {
            counters.deferred_writes.fetch_add(1, Relaxed);
            if shared.backend == IoBackend::Uring {
                // No `EPOLLOUT` under io_uring: the loop sends the rest.
                o.armed = true;
                flush_cmd = true;
            }
        }
        Some(Err(e)) => {
            o.state = WriteState::Closed;
            o.clear();
            drop(o);
            shared.command(c.owner, Cmd::Close(conn, CloseReason::Error(e.kind())));
            return Err(WriteError::Io(e.kind()));
        }
    }
    let res = backlog(shared, c, o);
    if flush_cmd {
        shared.command(c.owner, Cmd::Flush(conn));
    }
    res
}

/// Applies [`super::SocketConfig::on_backlog`] if the queue is past the threshold.
fn backlog(
    shared: &Shared,
    c: &Conn,
    mut o: parking_lot::MutexGuard<'_, super::conn::Out>,
) -> Result<(), WriteError> {
    let conn = c.id;
    let counters = shared.counters(c.owner);
    if o.queued > shared.cfg.write_threshold {
        match shared.cfg.on_backlog {
            BacklogAction::Pause => {
                if !c.backed_up.swap(true, Relaxed) {
                    counters.backlog_pauses.fetch_add(1, Relaxed);
                }
            }
            BacklogAction::Close => {
                o.state = WriteState::Closed;
                o.clear();
                drop(o);
                counters.backlog_closes.fetch_add(1, Relaxed);
                shared.command(c.owner, Cmd::Close(conn, CloseReason::Backlog));
                return Err(WriteError::Backlog);
            }
            BacklogAction::Notify if !o.notified => {
                o.notified = true;
                let queued = o.queued;
                drop(o);
                counters.backlog_notices.fetch_add(1, Relaxed);
                shared.command(c.owner, Cmd::Backlog(conn, queued));
            }
            BacklogAction::Notify => {}
        }
    }
    Ok(())
}

impl Writer {
    /// Hands an already connected stream (an outgoing connection the application
    /// opened itself) to the event loops. From then on it is a connection like an
    /// accepted one, except that its first event is `Adopted { conn, peer }` (not
    /// `Accepted`); `Closed` is its last. A stream the loop cannot take (at
    /// `max_connections`, or one it cannot register) is closed without any event.
    /// The id is returned before the loop announces the connection. Errors: the
    /// sockets are stopping, or the stream's peer address cannot be read.
    pub fn adopt(&self, stream: std::net::TcpStream) -> io::Result<ConnId> {
        if self.shared.stopping() {
            return Err(io::Error::other("socket stages are stopping"));
        }
        let peer = stream.peer_addr()?;
        stream.set_nonblocking(true)?;
        let owner = self.shared.next_owner();
        let id = self
            .shared
            .new_id(owner)
            .ok_or_else(|| io::Error::other("every slot of the event loop's table is taken"))?;
        let stream = mio::net::TcpStream::from_std(stream);
        self.shared.command(owner, Cmd::Adopt(id, stream, peer));
        Ok(id)
    }

    /// Stops reading `conn` until [`Writer::resume_reading`]: the peer's further
    /// bytes wait in the kernel (TCP flow control slows it). Events already read are
    /// still delivered. No-op for an unknown connection.
    pub fn pause_reading(&self, conn: ConnId) {
        if let Some(c) = self.shared.conns.get(conn) {
            c.read_paused.store(true, Relaxed);
        }
    }

    /// Starts reading `conn` again after [`Writer::pause_reading`]; the application
    /// then gets one `Resumed` event (after the connection's earlier events). No-op
    /// if reading was not paused or the connection is unknown.
    pub fn resume_reading(&self, conn: ConnId) {
        if let Some(c) = self.shared.conns.get(conn)
            && c.read_paused.swap(false, Relaxed)
        {
            self.shared.command(c.owner, Cmd::Resume(conn));
        }
    }

    /// Closes `conn` once its queued output is flushed (at once if none is). No-op
    /// for an unknown or already closing connection.
    pub fn close(&self, conn: ConnId) {
        let Some(c) = self.shared.conns.get(conn) else {
            return;
        };
        let mut o = c.out.lock();
        match o.state {
            WriteState::Open if !o.idle() => o.state = WriteState::Closing,
            WriteState::Open => {
                o.state = WriteState::Closed;
                drop(o);
                self.shared
                    .command(c.owner, Cmd::Close(conn, CloseReason::Local));
            }
            WriteState::Closing | WriteState::Closed => {}
        }
    }

    /// Closes `conn` now, dropping queued output: what the socket has not taken.
    /// Output the connection's loop would have sent at the end of its turn
    /// (io_uring, sent from a handler the loop runs inline) is written first, as
    /// far as the socket takes it at once, as it would have been under epoll.
    pub fn abort(&self, conn: ConnId) {
        let Some(c) = self.shared.conns.get(conn) else {
            return;
        };
        let mut o = c.out.lock();
        if o.state == WriteState::Closed {
            return;
        }
        if o.batched {
            // No send of this connection is in flight (`Out::batched`): write it
            // now, without waiting for room.
            let _ = o.flush(&c.stream, &self.shared.counters(c.owner).bytes_written);
        }
        o.state = WriteState::Closed;
        o.clear();
        drop(o);
        self.shared
            .command(c.owner, Cmd::Close(conn, CloseReason::Local));
    }

    /// Bytes queued on `conn` waiting for the socket (`None` if it is not open).
    pub fn queued(&self, conn: ConnId) -> Option<usize> {
        self.shared.conns.get(conn).map(|c| c.out.lock().queued)
    }

    /// The index of the event loop that owns `conn` (`None` if it is not open): a
    /// relay that keeps connections for reuse (a proxy's upstream pool) gives a
    /// client one owned by the client's loop, so both sides run on one core (see
    /// [`Writer::connect_near`]).
    pub fn event_loop_of(&self, conn: ConnId) -> Option<usize> {
        self.shared.conns.get(conn).map(|c| c.owner)
    }
}
