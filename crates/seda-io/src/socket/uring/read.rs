//! The reading side of an io_uring loop: a connection's multishot receive armed,
//! cancelled and re-armed to follow whether it may be read, its completions
//! delivered (or held while reading is paused), the end of file confirmed, the
//! reset of a half-closed connection watched.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use super::super::book::Bookkeeping;
use super::super::event::{CloseReason, ConnId, SocketEvent};
use super::ring::{Completion, Kind};
use super::{EventLoop, Read};

impl EventLoop<'_> {
    pub(super) fn on_recv(&mut self, c: Completion) {
        let id = c.key;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        if !c.more {
            lc.recv = false;
            lc.recv_cancel = false;
            self.rearm.push(id);
        }
        if lc.base.dead {
            self.settle(id);
            return;
        }
        let read = match c.res {
            n if n > 0 => {
                self.tally.bytes_read += n as u64;
                self.tally.packets_read += 1;
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
        let lc = self.book.conns.get_mut(&id).expect("looked up above");
        if !lc.held.is_empty() || !lc.may_read() {
            lc.held.push_back((read, self.book.now));
            self.rearm.push(id);
            return;
        }
        self.process_read(id, read, self.book.now);
    }

    /// A receive completed with 0 bytes: checks with a non-blocking peek that the
    /// peer really shut down its side before it is taken for end of file (`None`:
    /// not the end, read on).
    fn confirm_eof(&self, id: u64) -> Option<Read> {
        use rustix::net::{RecvFlags, recv};
        let lc = self.book.conns.get(&id)?;
        let mut probe = [0u8; 1];
        match recv(
            &lc.base.conn.stream,
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
    pub(super) fn process_read(&mut self, id: u64, read: Read, born: Instant) {
        let cfg = &self.book.shared.cfg;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        match read {
            Read::Data(bytes) => {
                if let Some(b) = lc.base.bucket() {
                    b.take(bytes.len());
                    if let (Some(rate), false) = (cfg.read_rate, lc.throttled)
                        && let Some(wait) = b.wait(rate, cfg.read_chunk)
                    {
                        lc.throttled = true;
                        self.book.throttled.push((Instant::now() + wait, id));
                        self.rearm.push(id);
                    }
                }
                let event = SocketEvent::Data {
                    conn: ConnId(id),
                    bytes,
                    state: lc.base.state.clone(),
                };
                self.deliver(id, event, born);
            }
            Read::Eof if lc.base.read_eof => {}
            Read::Eof if cfg.half_close => {
                lc.base.read_eof = true;
                if !lc.watching {
                    let conn = Arc::clone(&lc.base.conn);
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
            Read::Eof => self.close(id, CloseReason::PeerClosed),
            Read::Error(kind) => self.close(id, CloseReason::Error(kind)),
        }
    }

    /// The poll of a half-closed connection fired: a reset closes it.
    pub(super) fn on_watch(&mut self, c: Completion) {
        let id = c.key;
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        lc.watching = false;
        if !lc.base.dead && c.res > 0 {
            let mut probe = [0u8; 1];
            if let Err(e) = rustix::io::read(&lc.base.conn.stream, &mut probe)
                && e != rustix::io::Errno::AGAIN
            {
                self.close(id, CloseReason::Error(io::Error::from(e).kind()));
            }
        }
        self.settle(id);
    }

    /// Arms or cancels connection `id`'s receive to match whether it may be read.
    pub(super) fn reconcile(&mut self, id: u64) {
        let stopping = self.book.shared.stopping();
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        let want = !lc.base.dead
            && !stopping
            && lc.base.pending.is_empty()
            && lc.held.is_empty()
            && !lc.base.read_eof
            && lc.base.connecting().is_none()
            && lc.may_read();
        if want && !lc.recv {
            let conn = Arc::clone(&lc.base.conn);
            match self.ring.recv(conn.stream.as_fd(), id) {
                Ok(()) => lc.recv = true,
                Err(e) => {
                    tracing::warn!(event_loop = self.book.idx, "cannot submit a receive: {e}");
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
    pub(super) fn unpark_reads(&mut self, id: u64) {
        let Some(lc) = self.book.conns.get_mut(&id) else {
            return;
        };
        let mut held = std::mem::take(&mut lc.held);
        while let Some((read, born)) = held.pop_front() {
            match self.book.conns.get(&id) {
                Some(lc) if !lc.base.dead && lc.may_read() => self.process_read(id, read, born),
                Some(_) => {
                    held.push_front((read, born));
                    break;
                }
                None => return,
            }
        }
        if let Some(lc) = self.book.conns.get_mut(&id)
            && !lc.base.dead
        {
            held.append(&mut lc.held);
            lc.held = held;
        }
        self.rearm.push(id);
    }
}
