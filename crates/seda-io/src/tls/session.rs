//! One TLS connection: its rustls session, shared by the TLS stage (which feeds it
//! what the socket read and takes the plaintext out) and the writers (which put
//! plaintext in and send the records out), each under the session's lock.
//!
//! # Invariants
//! - Records go to the socket in the order rustls made them: every `write_tls` and
//!   the raw send of its bytes happen under the session's lock.
//! - While a file streams ([`Session::file`]) nothing is encrypted after it: later
//!   output waits in `after_file`, in order, and a close waits for both.
//! - Raw reading is paused while the application asked it (`app_paused`), while a
//!   file waits for the socket to drain (`draining`), or while events the
//!   application's stage refused are held (`held`); [`TlsConn::settle_reading`]
//!   keeps the socket's state to that rule.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::counters::Counters;
use crate::socket::{ConnId, ConnState, ConnWriter, Outgoing, SocketEvent, WriteError, Writer};

/// Ciphertext a streamed file may have queued on the socket before it waits for the
/// socket to drain to half of it.
pub(crate) const FILE_WINDOW: usize = 256 << 10;
/// Bytes of a file read and encrypted at a time.
const FILE_CHUNK: usize = 64 << 10;

/// Where a connection's handshake is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The handshake runs; since when.
    Handshaking(Instant),
    /// Established; the application was told (`Accepted`).
    Open,
    /// Failed or closed; nothing more is read or written.
    Done,
}

/// A file being encrypted a window at a time.
#[derive(Debug)]
pub(crate) struct FileStream {
    file: Arc<File>,
    offset: u64,
    remaining: u64,
}

/// Output that waits behind a streamed file.
#[derive(Debug)]
pub(crate) enum Pending {
    Bytes(Vec<Bytes>),
    File(FileStream),
}

/// The lock-protected part of a connection.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) tls: rustls::ServerConnection,
    pub(crate) phase: Phase,
    /// The application paused reading ([`super::TlsConnWriter::pause_reading`]).
    pub(crate) app_paused: bool,
    /// The application resumed reading and is owed one `Resumed`.
    pub(crate) resume_owed: bool,
    /// A file waits for the socket to drain.
    pub(crate) draining: bool,
    /// Events the application's stage refused, to offer again.
    pub(crate) held: VecDeque<SocketEvent>,
    pub(crate) file: Option<FileStream>,
    pub(crate) after_file: VecDeque<Pending>,
    /// The application closed the connection while output waited.
    pub(crate) close_after: bool,
    /// The peer closed its side (or sent `close_notify`); told to the application.
    pub(crate) read_closed: bool,
    /// Bytes arrived (the first ones tell TLS from plain HTTP).
    pub(crate) seen_bytes: bool,
    /// Reused buffer: plaintext gathered into one record.
    plain: Vec<u8>,
    /// The application's state of the connection (made once the handshake is
    /// done, `BoundTls::start_attached`): a clone in each event, taken out into
    /// `Closed`.
    pub(crate) state: Option<ConnState>,
}

/// One TLS connection.
#[derive(Debug)]
pub(crate) struct TlsConn {
    pub(crate) id: ConnId,
    pub(crate) peer: SocketAddr,
    /// The socket, bound (no lookup per write).
    pub(crate) raw: ConnWriter,
    pub(crate) writer: Writer,
    /// The application heard `Accepted` (so it must hear `Closed`).
    pub(crate) announced: AtomicBool,
    pub(crate) s: Mutex<Session>,
}

impl TlsConn {
    pub(crate) fn new(
        id: ConnId,
        peer: SocketAddr,
        raw: ConnWriter,
        writer: Writer,
        tls: rustls::ServerConnection,
        now: Instant,
    ) -> Self {
        TlsConn {
            id,
            peer,
            raw,
            writer,
            announced: AtomicBool::new(false),
            s: Mutex::new(Session {
                tls,
                phase: Phase::Handshaking(now),
                app_paused: false,
                resume_owed: false,
                draining: false,
                held: VecDeque::new(),
                file: None,
                after_file: VecDeque::new(),
                close_after: false,
                read_closed: false,
                seen_bytes: false,
                state: None,
                plain: Vec::new(),
            }),
        }
    }

    /// Sends whatever records rustls has ready (handshake messages, alerts,
    /// application data). Call with the session locked.
    pub(crate) fn flush_records(
        &self,
        s: &mut Session,
        counters: &Counters,
    ) -> Result<(), WriteError> {
        if !s.tls.wants_write() {
            return Ok(());
        }
        let mut out = Vec::with_capacity(s.plain.len() + 1024);
        while s.tls.wants_write() {
            // Writing into a vector cannot fail.
            if s.tls.write_tls(&mut out).is_err() {
                break;
            }
        }
        counters
            .bytes_encrypted
            .fetch_add(out.len() as u64, Relaxed);
        self.raw.send(Outgoing::Bytes(Bytes::from(out)))
    }

    /// Encrypts `bufs` (as one record where they fit) and sends them; or queues
    /// them behind a streaming file. Call with the session locked.
    pub(crate) fn put(
        &self,
        s: &mut Session,
        bufs: &mut Vec<Bytes>,
        counters: &Counters,
    ) -> Result<(), WriteError> {
        if s.phase == Phase::Done {
            bufs.clear();
            return Err(WriteError::Closed);
        }
        if s.file.is_some() {
            s.after_file.push_back(Pending::Bytes(std::mem::take(bufs)));
            return Ok(());
        }
        let mut plain = std::mem::take(&mut s.plain);
        plain.clear();
        for b in bufs.drain(..) {
            plain.extend_from_slice(&b);
        }
        let res = s
            .tls
            .writer()
            .write_all(&plain)
            .map_err(|e| WriteError::Io(e.kind()));
        s.plain = plain;
        res?;
        self.flush_records(s, counters)
    }

    /// Starts sending `len` bytes of `file` from `offset`, encrypted a window at a
    /// time (or queues it behind a streaming file). Call with the session locked.
    pub(crate) fn put_file(
        &self,
        s: &mut Session,
        file: Arc<File>,
        offset: u64,
        len: u64,
        counters: &Counters,
    ) -> Result<(), WriteError> {
        if s.phase == Phase::Done {
            return Err(WriteError::Closed);
        }
        let size = file.metadata().map_err(|e| WriteError::Io(e.kind()))?.len();
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(WriteError::InvalidRange);
        }
        let stream = FileStream {
            file,
            offset,
            remaining: len,
        };
        if s.file.is_some() {
            s.after_file.push_back(Pending::File(stream));
            return Ok(());
        }
        s.file = Some(stream);
        self.pump(s, counters)
    }

    /// Encrypts more of the streaming file while the socket's queue is under the
    /// window; then the output that waited behind it, then a close that waited.
    /// Waits for the socket to drain when the window is full. Call with the
    /// session locked.
    pub(crate) fn pump(&self, s: &mut Session, counters: &Counters) -> Result<(), WriteError> {
        loop {
            let Some(f) = s.file.as_mut() else {
                match s.after_file.pop_front() {
                    Some(Pending::Bytes(mut bufs)) => {
                        self.put(s, &mut bufs, counters)?;
                        continue;
                    }
                    Some(Pending::File(f)) => {
                        s.file = Some(f);
                        continue;
                    }
                    None => break,
                }
            };
            if f.remaining == 0 {
                s.file = None;
                continue;
            }
            if self.writer.queued(self.id).unwrap_or(0) >= FILE_WINDOW {
                s.draining = true;
                self.writer.pause_reading(self.id);
                self.writer
                    .resume_on_drain(self.id, FILE_WINDOW / 2, self.id);
                return Ok(());
            }
            let n = f.remaining.min(FILE_CHUNK as u64) as usize;
            let mut chunk = vec![0u8; n];
            read_exact_at(&f.file, &mut chunk, f.offset).map_err(|e| WriteError::Io(e.kind()))?;
            f.offset += n as u64;
            f.remaining -= n as u64;
            s.tls
                .writer()
                .write_all(&chunk)
                .map_err(|e| WriteError::Io(e.kind()))?;
            self.flush_records(s, counters)?;
        }
        if s.close_after {
            s.close_after = false;
            self.close_now(s, counters);
        }
        Ok(())
    }

    /// Sends `close_notify` and closes the socket once its output is flushed; or,
    /// with output still waiting, once that is sent. Call with the session locked.
    pub(crate) fn close(&self, s: &mut Session, counters: &Counters) {
        if s.file.is_some() || !s.after_file.is_empty() {
            s.close_after = true;
            return;
        }
        self.close_now(s, counters);
    }

    fn close_now(&self, s: &mut Session, counters: &Counters) {
        if s.phase == Phase::Done {
            return;
        }
        if s.phase == Phase::Open {
            s.tls.send_close_notify();
            let _ = self.flush_records(s, counters);
        }
        s.phase = Phase::Done;
        self.writer.close(self.id);
    }

    /// Pauses or resumes the socket's reading per the invariants. Call with the
    /// session locked.
    pub(crate) fn settle_reading(&self, s: &Session) {
        if s.app_paused || s.draining || !s.held.is_empty() {
            self.writer.pause_reading(self.id);
        } else {
            self.writer.resume_reading(self.id);
        }
    }

    /// Output waiting here or on the socket, bytes.
    pub(crate) fn queued(&self) -> usize {
        let s = self.s.lock();
        let here: u64 = s.file.as_ref().map_or(0, |f| f.remaining)
            + s.after_file
                .iter()
                .map(|p| match p {
                    Pending::Bytes(b) => b.iter().map(|x| x.len() as u64).sum(),
                    Pending::File(f) => f.remaining,
                })
                .sum::<u64>();
        drop(s);
        usize::try_from(here).unwrap_or(usize::MAX) + self.writer.queued(self.id).unwrap_or(0)
    }
}

/// Reads exactly `buf.len()` bytes at `offset` (a file shorter than the range
/// queued is an error, as with `sendfile`).
fn read_exact_at(file: &File, buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ended before the range queued for sending",
                ));
            }
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Feeds `bytes` (read from the socket) to the session and takes out the
/// plaintext. `Err` is a protocol failure (rustls queued an alert if it had one).
pub(crate) fn feed(
    s: &mut Session,
    mut bytes: &[u8],
    plain: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    let mut stuck = false;
    while !bytes.is_empty() {
        let read = s.tls.read_tls(&mut bytes);
        s.tls.process_new_packets()?;
        drain_plain(s, plain);
        match read {
            Ok(0) => break,
            Ok(_) => stuck = false,
            // The deframer's buffer was full and processing made room: try again,
            // once (a second failure in a row is a record no valid peer sends).
            Err(_) if !stuck => stuck = true,
            Err(e) => return Err(rustls::Error::General(format!("TLS input: {e}"))),
        }
    }
    Ok(())
}

/// Moves the plaintext rustls holds into `plain`; notes a `close_notify`.
fn drain_plain(s: &mut Session, plain: &mut Vec<u8>) {
    let mut buf = [0u8; 16 << 10];
    loop {
        match s.tls.reader().read(&mut buf) {
            Ok(0) => {
                s.read_closed = true;
                return;
            }
            Ok(n) => plain.extend_from_slice(&buf[..n]),
            Err(_) => return,
        }
    }
}

const SHARDS: usize = 32;

/// Open TLS connections by id.
#[derive(Debug)]
pub(crate) struct Table {
    shards: Vec<Mutex<HashMap<u64, Arc<TlsConn>, foldhash::fast::RandomState>>>,
}

impl Table {
    pub(crate) fn new() -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, id: ConnId) -> &Mutex<HashMap<u64, Arc<TlsConn>, foldhash::fast::RandomState>> {
        &self.shards[(id.0 % SHARDS as u64) as usize]
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<TlsConn>> {
        self.shard(id).lock().get(&id.0).cloned()
    }

    pub(crate) fn insert(&self, c: Arc<TlsConn>) {
        self.shard(c.id).lock().insert(c.id.0, c);
    }

    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<TlsConn>> {
        self.shard(id).lock().remove(&id.0)
    }

    pub(crate) fn all(&self) -> Vec<Arc<TlsConn>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect()
    }
}
