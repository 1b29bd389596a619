//! The io_uring ceiling: the least a completion-based server can do per request. One
//! ring per thread (single issuer, deferred task work), a multishot accept on the
//! thread's `SO_REUSEPORT` listener, one multishot receive per connection into a ring
//! of provided buffers, and per read one send of the canned reply (the static reply
//! itself for one request, a copy for several), every send of a turn submitted with
//! the next wait in one `io_uring_enter`. No parsing beyond counting `\r\n\r\n`.
//!
//! # Safety
//! The only memory the kernel is given: the provided buffers and their ring (leaked:
//! they live as long as the process), the static reply, and a connection's pipelined
//! reply copy, which stays in `Conn::inflight` until its send completes.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{IoUring, cqueue, opcode, types};

const ACCEPT: u64 = u64::MAX;
const SEND: u64 = 1 << 62;
const BUFS: u16 = 4096;
const BUF_LEN: usize = 4096;

struct Conn {
    fd: OwnedFd,
    pending: Vec<u8>,
    /// A reply copy the kernel is sending (several pipelined requests).
    inflight: Option<Vec<u8>>,
    /// What the send in flight sends: start, length, bytes already sent.
    out: (*const u8, usize, usize),
    sending: bool,
    /// Requests read while a send was in flight, answered when it completes.
    owed: usize,
    closing: bool,
}

impl Conn {
    /// Sends `n` replies (or the rest of the current send).
    fn send(&mut self, ring: &mut IoUring, id: u64, reply: &'static [u8], n: usize) -> io::Result<()> {
        if n > 0 {
            self.out = if n == 1 {
                self.inflight = None;
                (reply.as_ptr(), reply.len(), 0)
            } else {
                let copy = reply.repeat(n);
                let out = (copy.as_ptr(), copy.len(), 0);
                self.inflight = Some(copy);
                out
            };
        }
        let (p, len, off) = self.out;
        // SAFETY: `off < len`, inside the static reply or `inflight`.
        let at = unsafe { p.add(off) };
        let e = opcode::Send::new(types::Fd(self.fd.as_raw_fd()), at, (len - off) as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(SEND | id);
        push(ring, e)?;
        self.sending = true;
        Ok(())
    }
}

/// The provided buffers: `BUFS` buffers of `BUF_LEN` bytes and their ring.
struct Bufs {
    ring: *mut types::BufRingEntry,
    slab: &'static mut [u8],
    tail: u16,
}

impl Bufs {
    fn recycle(&mut self, bid: u16) {
        let i = usize::from(self.tail & (BUFS - 1));
        let addr = self.slab[usize::from(bid) * BUF_LEN..].as_mut_ptr();
        // SAFETY: `i < BUFS`, inside the ring; the slot at our (unpublished) tail is
        // not the kernel's (at most BUFS buffers exist).
        let e = unsafe { &mut *self.ring.add(i) };
        e.set_addr(addr as u64);
        e.set_len(BUF_LEN as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of entry 0, inside the ring; release makes the
        // entries visible before the tail.
        unsafe {
            let t = types::BufRingEntry::tail(self.ring) as *const AtomicU16;
            (*t).store(self.tail, Ordering::Release);
        }
    }
}

fn push(ring: &mut IoUring, e: io_uring::squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: entries point only at the leaked buffers, the static reply or a
        // connection's `inflight` copy, all alive until the operation completes.
        if unsafe { ring.submission().push(&e) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}

pub fn serve(l: std::net::TcpListener, reply: &'static [u8]) -> io::Result<()> {
    let mut ring: IoUring = IoUring::builder()
        .setup_cqsize(16384)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(4096)?;
    let layout = std::alloc::Layout::from_size_align(usize::from(BUFS) * 16, 4096)
        .map_err(io::Error::other)?;
    // SAFETY: non-zero size; zeroed `io_uring_buf`s are valid. Leaked: lives forever.
    let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
    let mut bufs = Bufs {
        ring: entries,
        slab: Box::leak(vec![0u8; usize::from(BUFS) * BUF_LEN].into_boxed_slice()),
        tail: 0,
    };
    // SAFETY: the ring memory is BUFS entries, page aligned, never freed.
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(entries as u64, BUFS, 0, 0)?;
    }
    for b in 0..BUFS {
        bufs.recycle(b);
    }
    bufs.publish();
    let accept = |ring: &mut IoUring| {
        let e = opcode::AcceptMulti::new(types::Fd(l.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(ACCEPT);
        push(ring, e)
    };
    accept(&mut ring)?;
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next = 0u64;
    let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        done.extend(ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        for (ud, res, flags) in done.drain(..) {
            if ud == ACCEPT {
                if res >= 0 {
                    // SAFETY: a new descriptor nobody else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
                    next += 1;
                    let e = opcode::RecvMulti::new(types::Fd(fd.as_raw_fd()), 0)
                        .build()
                        .user_data(next);
                    push(&mut ring, e)?;
                    conns.insert(
                        next,
                        Conn {
                            fd,
                            pending: Vec::new(),
                            inflight: None,
                            out: (std::ptr::null(), 0, 0),
                            sending: false,
                            owed: 0,
                            closing: false,
                        },
                    );
                }
                if !cqueue::more(flags) {
                    accept(&mut ring)?;
                }
                continue;
            }
            if ud & SEND != 0 {
                let id = ud & !SEND;
                let Some(c) = conns.get_mut(&id) else { continue };
                c.sending = false;
                if res > 0 && !c.closing {
                    c.out.2 += res as usize;
                    if c.out.2 < c.out.1 {
                        c.send(&mut ring, id, reply, 0)?;
                        continue;
                    }
                    let owed = std::mem::take(&mut c.owed);
                    if owed > 0 {
                        c.send(&mut ring, id, reply, owed)?;
                        continue;
                    }
                }
                c.inflight = None;
                if c.closing || res <= 0 {
                    conns.remove(&id);
                }
                continue;
            }
            let id = ud;
            let bid = cqueue::buffer_select(flags);
            let Some(c) = conns.get_mut(&id) else {
                if let Some(b) = bid {
                    bufs.recycle(b);
                }
                continue;
            };
            if res > 0 {
                let b = bid.expect("a receive with data has a buffer");
                let start = usize::from(b) * BUF_LEN;
                c.pending.extend_from_slice(&bufs.slab[start..start + res as usize]);
                bufs.recycle(b);
                let n = super::complete_heads(&mut c.pending);
                if c.sending {
                    c.owed += n;
                } else if n > 0 {
                    c.send(&mut ring, id, reply, n)?;
                }
                if !cqueue::more(flags) {
                    let e = opcode::RecvMulti::new(types::Fd(c.fd.as_raw_fd()), 0)
                        .build()
                        .user_data(id);
                    push(&mut ring, e)?;
                }
            } else if res == -libc::ENOBUFS {
                let e = opcode::RecvMulti::new(types::Fd(c.fd.as_raw_fd()), 0)
                    .build()
                    .user_data(id);
                push(&mut ring, e)?;
            } else if !cqueue::more(flags) {
                // End of file or an error: close once no send is in flight.
                if c.sending {
                    c.closing = true;
                } else {
                    conns.remove(&id);
                }
            }
        }
        bufs.publish();
    }
}
