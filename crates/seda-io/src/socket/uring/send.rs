//! The sending side of an io_uring loop: at the end of each turn, one send
//! operation per connection with output queued (by handlers on the loop's thread,
//! commands and completions), files with `sendfile` and a `POLLOUT` poll when the
//! socket is full, and a send's completion (what it did not write goes back to the
//! front of the queue).

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::super::book::Bookkeeping;
use super::super::conn::{Conn, Out, WriteState};
use super::super::event::{CloseReason, ConnId};
use super::ring::{Completion, Kind};
use super::{EventLoop, MAX_IOV, ON_LOOP};

impl EventLoop<'_> {
    /// The end of a turn: sends the output queued this turn (by handlers on this
    /// thread, commands and completions) and arms or cancels receives, until
    /// nothing more is asked (a send that closes a connection may deliver an event
    /// whose handler sends again).
    pub(super) fn end_turn(&mut self) {
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
    ///
    /// The connection's record is borrowed from the loop's table, not cloned: an
    /// `Arc` clone and drop are two atomic operations, as costly here as the lock.
    pub(super) fn start_send(&mut self, id: u64) {
        let threshold = self.book.shared.cfg.write_threshold;
        let now = self.book.now;
        let written = &self.book.shared.counters(self.book.idx).bytes_written;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        if lc.base.dead || lc.sending || lc.polling {
            return;
        }
        let conn = &lc.base.conn;
        let mut o = conn.out.lock();
        o.batched = false;
        if o.state == WriteState::Closed {
            o.armed = false;
            return;
        }
        match o.flush_files(&conn.stream, written) {
            Ok(true) => {}
            Ok(false) => {
                o.stalled_since.get_or_insert(now);
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
            let done = emptied(conn, &mut o, threshold);
            drop(o);
            return self.after_emptied(id, done);
        }
        o.stalled_since.get_or_insert(now);
        o.armed = true;
        let mut bufs = self.ring.spare_bufs();
        o.take_bufs(MAX_IOV, &mut bufs);
        drop(o);
        match self.ring.send(conn.stream.as_fd(), id, bufs) {
            Ok(()) => lc.sending = true,
            Err(e) => self.close(id, CloseReason::Error(e.kind())),
        }
    }

    /// What the queue's end asks of the loop (see [`emptied`]).
    fn after_emptied(&mut self, id: u64, done: Emptied) {
        if done.close {
            return self.close(id, CloseReason::Local);
        }
        if let Some(other) = done.drained {
            self.book.resume_other(other);
        }
        if done.unpaused {
            self.unpark(id);
        }
    }

    /// A send completed: what it did not write goes back to the front of the queue,
    /// and the rest of the queue follows. A send that wrote everything queued ends
    /// the loop's responsibility here, under the one lock (no second pass through
    /// [`EventLoop::start_send`]).
    pub(super) fn on_sent(&mut self, c: Completion) {
        let id = c.key;
        let mut bufs = c.sent;
        let threshold = self.book.shared.cfg.write_threshold;
        let now = self.book.now;
        let counters = self.book.shared.counters(self.book.idx);
        let Some(lc) = self.book.conns.get_mut(&id) else {
            self.ring.reuse_bufs(bufs);
            return;
        };
        lc.sending = false;
        let conn = &lc.base.conn;
        let mut o = conn.out.lock();
        if lc.base.dead || o.state == WriteState::Closed {
            bufs.clear();
            drop(o);
            self.ring.reuse_bufs(bufs);
            self.settle(id);
            return;
        }
        match c.res {
            n if n >= 0 => {
                let n = n as usize;
                let total: usize = bufs.iter().map(Bytes::len).sum();
                self.tally.bytes_written += n as u64;
                if n < total {
                    counters.deferred_writes.fetch_add(1, Relaxed);
                }
                if n > 0 {
                    o.stalled_since = Some(now);
                }
                o.sent(n, &mut bufs);
                let drained = o.drained();
                let done = o.queue.is_empty().then(|| {
                    o.batched = false;
                    emptied(conn, &mut o, threshold)
                });
                drop(o);
                self.ring.reuse_bufs(bufs);
                if let Some(other) = drained {
                    self.book.resume_other(other);
                }
                match done {
                    Some(done) => self.after_emptied(id, done),
                    None => self.start_send(id),
                }
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
}

/// What the loop does once a connection's queue is empty (see [`emptied`]).
struct Emptied {
    /// The application closed the connection with output queued: close it now.
    close: bool,
    /// Reading was paused by a backed-up queue: resume it.
    unpaused: bool,
    /// The connection a drain watch resumes.
    drained: Option<ConnId>,
}

/// A connection's queue is empty: the loop is no longer responsible for it, its
/// buffer goes, and what that means for the connection (closing it, resuming
/// reading it or another) is handed back to do once the lock is released.
fn emptied(conn: &Conn, o: &mut Out, threshold: usize) -> Emptied {
    o.release_queue();
    o.armed = false;
    o.stalled_since = None;
    if o.queued <= threshold {
        o.notified = false;
    }
    if o.state == WriteState::Closing {
        o.state = WriteState::Closed;
        return Emptied {
            close: true,
            unpaused: false,
            drained: None,
        };
    }
    Emptied {
        close: false,
        unpaused: conn.backed_up.load(Relaxed) && conn.backed_up.swap(false, Relaxed),
        drained: o.drained(),
    }
}
