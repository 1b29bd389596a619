//! The sending side of an io_uring loop: at the end of each turn, one send
//! operation per connection with output queued (by handlers on the loop's thread,
//! commands and completions), files with `sendfile` and a `POLLOUT` poll when the
//! socket is full, and a send's completion (what it did not write goes back to the
//! front of the queue).

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::super::book::Bookkeeping;
use super::super::conn::WriteState;
use super::super::event::CloseReason;
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
    pub(super) fn start_send(&mut self, id: u64) {
        let threshold = self.book.shared.cfg.write_threshold;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        if lc.base.dead || lc.sending || lc.polling {
            return;
        }
        let conn = Arc::clone(&lc.base.conn);
        let mut o = conn.out.lock();
        o.batched = false;
        if o.state == WriteState::Closed {
            o.armed = false;
            return;
        }
        let written = &self.book.shared.counters(self.book.idx).bytes_written;
        match o.flush_files(&conn.stream, written) {
            Ok(true) => {}
            Ok(false) => {
                o.stalled_since.get_or_insert(self.book.now);
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
                self.book.resume_other(other);
            }
            if unpaused {
                self.unpark(id);
            }
            return;
        }
        o.stalled_since.get_or_insert(self.book.now);
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
    pub(super) fn on_sent(&mut self, c: Completion) {
        let id = c.key;
        let mut bufs = c.sent;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            self.ring.reuse_bufs(bufs);
            return;
        };
        lc.sending = false;
        let conn = Arc::clone(&lc.base.conn);
        let mut o = conn.out.lock();
        if lc.base.dead || o.state == WriteState::Closed {
            bufs.clear();
            drop(o);
            self.ring.reuse_bufs(bufs);
            self.settle(id);
            return;
        }
        let counters = self.book.shared.counters(self.book.idx);
        match c.res {
            n if n >= 0 => {
                let n = n as usize;
                let total: usize = bufs.iter().map(Bytes::len).sum();
                counters.bytes_written.fetch_add(n as u64, Relaxed);
                if n < total {
                    counters.deferred_writes.fetch_add(1, Relaxed);
                }
                if n > 0 {
                    o.stalled_since = Some(self.book.now);
                }
                o.sent(n, &mut bufs);
                let drained = o.drained();
                drop(o);
                self.ring.reuse_bufs(bufs);
                if let Some(other) = drained {
                    self.book.resume_other(other);
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
}
