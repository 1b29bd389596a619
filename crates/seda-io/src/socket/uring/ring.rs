//! One event loop's io_uring: the only `unsafe` code of seda-io (the crate denies
//! `unsafe_code`; this module alone allows it).
//!
//! # What it owns, and the rule that keeps it sound
//! An operation submitted to the kernel may read or write user memory until its last
//! completion (the one without `IORING_CQE_F_MORE`). Every piece of memory an
//! operation points at is owned here, never by the caller, and lives until that
//! completion has been reaped:
//! - the provided-buffer ring and its buffers ([`BufRing`]), used by multishot
//!   receives, live as long as the ring;
//! - a send's buffers, its `iovec` array and its `msghdr` ([`SendOp`], boxed so their
//!   addresses never move) are held in `sends` until the send completes, then handed
//!   back to the caller in the [`Completion`];
//! - the eventfd read's 8-byte buffer is boxed and lives as long as the ring.
//!
//! `in_flight` counts operations whose last completion has not been reaped; if the
//! ring is dropped with any (a loop that could not drain them in time), the memory
//! they may touch is leaked instead of freed.
//!
//! File descriptors are passed by number: the caller keeps each socket open until
//! every operation on it has completed (a closed and reused number would aim an
//! operation at another socket: a logic error, not a memory one, since no operation
//! here writes memory the ring does not own).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use bytes::Bytes;
use io_uring::{IoUring, cqueue, opcode, squeue, types};

/// The provided-buffer group of a ring's receives (one group per ring).
const BGID: u16 = 0;
/// `user_data` layout: the operation's kind in the top byte, its key below: the low
/// 56 bits of a connection id, which name its slot (the loop finds the whole id
/// there, `Slab::id_of`).
const KIND_SHIFT: u32 = 56;
pub(super) const KEY_MASK: u64 = (1 << KIND_SHIFT) - 1;

/// What an operation is, recovered from a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Multishot accept on the listener (key 0).
    Accept = 1,
    /// Multishot receive of a connection.
    Recv = 2,
    /// A send of a connection.
    Send = 3,
    /// One-shot poll for `POLLOUT` (a file segment waits for room).
    PollOut = 4,
    /// One-shot poll for an error or hang-up (a half-closed connection's reset).
    PollErr = 5,
    /// The read on the loop's eventfd (key 0).
    Wake = 6,
    /// An `ASYNC_CANCEL` request.
    Cancel = 7,
}

impl Kind {
    fn from_tag(tag: u64) -> Option<Kind> {
        Some(match tag {
            1 => Kind::Accept,
            2 => Kind::Recv,
            3 => Kind::Send,
            4 => Kind::PollOut,
            5 => Kind::PollErr,
            6 => Kind::Wake,
            7 => Kind::Cancel,
            _ => return None,
        })
    }
}

fn user_data(kind: Kind, key: u64) -> u64 {
    ((kind as u64) << KIND_SHIFT) | (key & KEY_MASK)
}

/// One reaped completion, with what it hands back.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) kind: Kind,
    /// The connection id (0 for the listener and the eventfd).
    pub(crate) key: u64,
    /// The operation's result: bytes, a descriptor, poll bits, or `-errno`.
    pub(crate) res: i32,
    /// More completions of this operation will follow (multishot).
    pub(crate) more: bool,
    /// A receive's bytes, copied out of its provided buffer (already recycled).
    pub(crate) data: Vec<u8>,
    /// A send's buffers, handed back once the kernel is done with them.
    pub(crate) sent: Vec<Bytes>,
    /// An accept's new socket.
    pub(crate) accepted: Option<OwnedFd>,
}

/// A send in flight: its buffers and the `msghdr`/`iovec`s that point at them.
struct SendOp {
    hdr: libc::msghdr,
    iov: Vec<libc::iovec>,
    bufs: Vec<Bytes>,
}

/// The provided-buffer ring (`IORING_REGISTER_PBUF_RING`): `count` buffers of `len`
/// bytes the kernel picks from for multishot receives.
struct BufRing {
    /// The ring of `io_uring_buf` entries, page aligned as the kernel requires.
    entries: *mut types::BufRingEntry,
    layout: std::alloc::Layout,
    /// The buffers, one slab: buffer `i` is `slab[i * len..(i + 1) * len]`.
    slab: Box<[u8]>,
    len: usize,
    count: u16,
    /// Our copy of the tail (the kernel reads the published one).
    tail: u16,
}

/// One loop's io_uring with its provided buffers and the memory of its operations.
pub(crate) struct Ring {
    ring: IoUring,
    /// Freed in `drop` only if no operation is in flight (else leaked).
    bufs: std::mem::ManuallyDrop<BufRing>,
    sends: HashMap<u64, Box<SendOp>, foldhash::fast::RandomState>,
    /// Finished sends' boxes, reused: a box's address is what an entry points at.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<SendOp>>,
    /// Emptied buffer lists of finished sends, to fill the next ones.
    spare_bufs: Vec<Vec<Bytes>>,
    wake_buf: Box<[u8; 8]>,
    /// Operations submitted (or queued for submission) whose last completion has
    /// not been reaped.
    in_flight: usize,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.in_flight)
            .field("sends", &self.sends.len())
            .finish_non_exhaustive()
    }
}

/// Builds a ring, preferring the setup that wakes the loop least: completions run
/// only when the loop enters the kernel (`DEFER_TASKRUN`, one issuer), else
/// cooperative task work, else the default.
fn build_ring(entries: u32) -> io::Result<IoUring> {
    let cq = entries * 4;
    let first = IoUring::builder()
        .setup_cqsize(cq)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries);
    match first {
        Ok(r) => Ok(r),
        Err(_) => match IoUring::builder()
            .setup_cqsize(cq)
            .setup_coop_taskrun()
            .build(entries)
        {
            Ok(r) => Ok(r),
            Err(_) => IoUring::builder().setup_cqsize(cq).build(entries),
        },
    }
}

impl BufRing {
    fn new(count: u16, len: usize) -> io::Result<BufRing> {
        assert!(
            count.is_power_of_two() && count <= 32768,
            "buffer count {count}"
        );
        let bytes = usize::from(count) * std::mem::size_of::<types::BufRingEntry>();
        let layout = std::alloc::Layout::from_size_align(bytes, 4096)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: `layout` has a non-zero size (count >= 1 entries of 16 bytes); the
        // zeroed memory is a valid array of `io_uring_buf` (plain integers).
        let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufRing {
            entries,
            layout,
            slab: vec![0u8; usize::from(count) * len].into_boxed_slice(),
            len,
            count,
            tail: 0,
        })
    }

    /// Puts buffer `bid` at the (unpublished) tail of the ring.
    fn recycle(&mut self, bid: u16) {
        let i = usize::from(self.tail & (self.count - 1));
        let addr = self.slab[usize::from(bid) * self.len..].as_mut_ptr();
        // SAFETY: `i < count`, inside the allocation; the entry at our tail is not
        // owned by the kernel: it reads entries only up to the published tail, and
        // at most `count` buffers exist, so the slot `count` entries back was
        // consumed already.
        let entry = unsafe { &mut *self.entries.add(i) };
        entry.set_addr(addr as u64);
        entry.set_len(self.len as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the recycled entries to the kernel.
    fn publish(&self) {
        // SAFETY: `tail` points at the `resv` field of entry 0, inside the
        // allocation, 2-aligned; the kernel reads it as the ring's tail, and the
        // release store makes the entries written before it visible first.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// The first `n` bytes of buffer `bid`.
    fn bytes(&self, bid: u16, n: usize) -> &[u8] {
        let start = usize::from(bid) * self.len;
        &self.slab[start..start + n.min(self.len)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.entries.cast(), self.layout) }
    }
}

impl Ring {
    /// A ring of `entries` submissions (completions: 4x) with `count` provided
    /// buffers of `len` bytes (`count` a power of two, at most 32,768).
    pub(crate) fn new(entries: u32, count: u16, len: usize) -> io::Result<Ring> {
        let ring = build_ring(entries)?;
        let mut bufs = BufRing::new(count, len)?;
        // SAFETY: the entry ring is `count` entries, page aligned, and lives in
        // `bufs` as long as `ring` (fields drop in order: `ring` first, which
        // unregisters it; a ring dropped with operations in flight leaks `bufs`).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.entries as u64, count, BGID, 0)?;
        }
        for bid in 0..count {
            bufs.recycle(bid);
        }
        bufs.publish();
        Ok(Ring {
            ring,
            bufs: std::mem::ManuallyDrop::new(bufs),
            sends: HashMap::default(),
            spare: Vec::new(),
            spare_bufs: Vec::new(),
            wake_buf: Box::new([0; 8]),
            in_flight: 0,
        })
    }

    /// An empty list to fill with a send's buffers (reused, see [`Ring::reuse_bufs`]).
    pub(crate) fn spare_bufs(&mut self) -> Vec<Bytes> {
        self.spare_bufs.pop().unwrap_or_default()
    }

    /// Keeps a finished send's list (emptied here) for a later send.
    pub(crate) fn reuse_bufs(&mut self, mut bufs: Vec<Bytes>) {
        bufs.clear();
        if self.spare_bufs.len() < 64 {
            self.spare_bufs.push(bufs);
        }
    }

    /// Operations whose last completion has not been reaped.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues an entry, submitting what is queued first if the submission queue is
    /// full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry built in this module points only at memory the
            // ring owns until the operation's last completion (module docs).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    // Completions must be reaped first; the caller's next turn does.
                    return Err(e);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A multishot accept on `listener`; new sockets are non-blocking, close-on-exec.
    pub(crate) fn accept(&mut self, listener: BorrowedFd<'_>) -> io::Result<()> {
        let e = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data(Kind::Accept, 0));
        self.push(e)
    }

    /// A multishot receive on connection `conn` into the provided buffers.
    pub(crate) fn recv(&mut self, fd: BorrowedFd<'_>, conn: u64) -> io::Result<()> {
        let e = opcode::RecvMulti::new(types::Fd(fd.as_raw_fd()), BGID)
            .build()
            .user_data(user_data(Kind::Recv, conn));
        self.push(e)
    }

    /// Sends `bufs` on connection `conn` (one `send`, or one `sendmsg` for several
    /// buffers). At most one send per connection is in flight. The buffers come
    /// back in the send's [`Completion::sent`].
    pub(crate) fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        conn: u64,
        bufs: Vec<Bytes>,
    ) -> io::Result<()> {
        // Keyed as its completion will be: by the id's low 56 bits.
        let conn = conn & KEY_MASK;
        debug_assert!(!self.sends.contains_key(&conn), "two sends in flight");
        let mut op = self.spare.pop().unwrap_or_else(|| {
            Box::new(SendOp {
                // SAFETY: `msghdr` is plain data; all-zero is a valid empty header.
                hdr: unsafe { std::mem::zeroed() },
                iov: Vec::new(),
                bufs: Vec::new(),
            })
        });
        op.bufs = bufs;
        let fd = types::Fd(fd.as_raw_fd());
        let entry = if let [b] = op.bufs.as_slice() {
            opcode::Send::new(fd, b.as_ptr(), b.len().min(u32::MAX as usize) as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build()
        } else {
            let SendOp { hdr, iov, bufs } = &mut *op;
            iov.clear();
            iov.extend(bufs.iter().map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            }));
            hdr.msg_iov = iov.as_mut_ptr();
            hdr.msg_iovlen = iov.len() as _;
            opcode::SendMsg::new(fd, &*hdr)
                .flags(libc::MSG_NOSIGNAL as u32)
                .build()
        };
        // The box (and the heap data of `iov` and `bufs`) stays where it is while
        // it sits in the map: the entry's pointers stay valid.
        let entry = entry.user_data(user_data(Kind::Send, conn));
        self.sends.insert(conn, op);
        if let Err(e) = self.push(entry) {
            if let Some(mut op) = self.sends.remove(&conn) {
                op.bufs.clear();
                self.spare.push(op);
            }
            return Err(e);
        }
        Ok(())
    }

    /// A one-shot poll of connection `conn` for `events` (`kind` says which).
    pub(crate) fn poll(
        &mut self,
        fd: BorrowedFd<'_>,
        conn: u64,
        kind: Kind,
        events: u32,
    ) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), events)
            .build()
            .user_data(user_data(kind, conn));
        self.push(e)
    }

    /// Asks the kernel to cancel the operation `kind` of `key` (its completion then
    /// comes with `-ECANCELED`, or it completes normally if it was done).
    pub(crate) fn cancel(&mut self, kind: Kind, key: u64) -> io::Result<()> {
        let e = opcode::AsyncCancel::new(user_data(kind, key))
            .build()
            .user_data(user_data(Kind::Cancel, key));
        self.push(e)
    }

    /// Cancels every operation in flight (shutdown).
    pub(crate) fn cancel_all(&mut self) -> io::Result<()> {
        let e = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(user_data(Kind::Cancel, 0));
        self.push(e)
    }

    /// A read of the loop's eventfd (a writer's wake-up).
    pub(crate) fn read_wake(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let e = opcode::Read::new(types::Fd(fd.as_raw_fd()), self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(user_data(Kind::Wake, 0));
        self.push(e)
    }

    /// Submits what is queued and waits up to `timeout` for a completion (`None`:
    /// does not wait). One system call.
    pub(crate) fn submit_and_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.bufs.publish();
        let res = match timeout {
            None => self.ring.submit_and_wait(0),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match res {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Reaps every completion ready into `out`, copying receives out of (and
    /// recycling) their buffers and handing sends' buffers back.
    pub(crate) fn complete(&mut self, out: &mut Vec<Completion>) {
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let Some(kind) = Kind::from_tag(ud >> KIND_SHIFT) else {
                debug_assert!(false, "unknown completion {ud:#x}");
                continue;
            };
            let key = ud & KEY_MASK;
            let more = cqueue::more(flags);
            if !more {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            let mut c = Completion {
                kind,
                key,
                res,
                more,
                data: Vec::new(),
                sent: Vec::new(),
                accepted: None,
            };
            match kind {
                Kind::Recv => {
                    if let Some(bid) = cqueue::buffer_select(flags) {
                        if res > 0 {
                            c.data = self.bufs.bytes(bid, res as usize).to_vec();
                        }
                        self.bufs.recycle(bid);
                    }
                }
                Kind::Send => {
                    if let Some(mut op) = self.sends.remove(&key) {
                        c.sent = std::mem::take(&mut op.bufs);
                        op.iov.clear();
                        self.spare.push(op);
                    }
                }
                Kind::Accept if res >= 0 => {
                    // SAFETY: a successful accept's result is a new descriptor that
                    // nothing else owns.
                    c.accepted = Some(unsafe { OwnedFd::from_raw_fd(res) });
                }
                _ => {}
            }
            out.push(c);
        }
        drop(cq);
        self.bufs.publish();
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            tracing::warn!(
                operations = self.in_flight,
                "io_uring dropped with operations in flight; their buffers are leaked"
            );
            // The kernel may still write the provided buffers or read the sends'
            // memory until it has cancelled them: never free that memory.
            std::mem::forget(std::mem::take(&mut self.sends));
            return;
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        // SAFETY: dropped once, here; no operation is in flight and the buffer ring
        // is unregistered, so the kernel no longer uses its memory.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.bufs) }
    }
}

/// Checks that this kernel runs everything the backend uses (a ring with provided
/// buffers, a multishot receive that stays armed): builds a small ring, receives
/// one byte over a socket pair, tears it down.
///
/// The probe runs on a thread of its own, never on the caller's. When a ring is
/// closed, the kernel's teardown of it (`io_ring_exit_work`, run a little later
/// from a kernel worker) adds task work with `TWA_SIGNAL` to every thread that
/// submitted to the ring, which sets `TIF_NOTIFY_SIGNAL` on it: a thread that is
/// then blocked in a socket call with a timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) sees
/// `EINTR`, since such calls are never restarted. Probed on the caller's thread,
/// the thread that builds a server (a test's, a client's) had its next blocking
/// read with a timeout fail that way. The probe thread exits instead, and takes
/// that task work with it.
pub(crate) fn probe() -> io::Result<()> {
    std::thread::Builder::new()
        .name("seda-uring-probe".to_owned())
        .spawn(probe_here)?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the io_uring probe panicked")))
}

/// [`probe`]'s work, on the calling thread (which then carries the ring's teardown
/// task work: call it only from a thread that exits after).
fn probe_here() -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
    let mut ring = Ring::new(8, 2, 64)?;
    let (a, b) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    ring.recv(std::os::fd::AsFd::as_fd(&a), 1)?;
    rustix::io::write(&b, b"x")?;
    ring.submit_and_wait(Some(Duration::from_secs(1)))?;
    let mut out = Vec::new();
    ring.complete(&mut out);
    let ok = out
        .iter()
        .any(|c| c.kind == Kind::Recv && c.res == 1 && c.more && c.data == b"x");
    ring.cancel_all()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while ring.in_flight() > 0 && std::time::Instant::now() < deadline {
        ring.submit_and_wait(Some(Duration::from_millis(50)))?;
        out.clear();
        ring.complete(&mut out);
    }
    drop(b);
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "multishot receive with provided buffers did not work",
        ))
    }
}
