//! The colors experiment's load generator: closed loop, pipelined, epoll, few threads.
//!
//! It shares the machine's two cores with the server, so it does as little as it
//! can per response: each connection keeps `depth` read requests outstanding (SFS
//! clients pipeline their NFS reads over one connection, thesis 5.2.2); a response's
//! 16-byte header is read, its body is discarded in the kernel (`recv` with
//! `MSG_TRUNC`: no copy to user space), and the next request is written. Even so
//! it checks what it can see without the bytes: each header's status, length and
//! nonce (0, 1, 2, ... per connection). With `verify` it reads every body,
//! authenticates and decrypts it and compares it with the file: for tests, not for
//! measuring.
//!
//! Its wake-ups are batched ([`ClientConfig::dwell`]): when a poll finds nothing to
//! read, the thread sleeps for the dwell and polls again, instead of blocking in
//! `epoll_wait` until the next response arrives. A NIC's interrupt coalescing does
//! the same for the same reason: woken by every response, the generator spent
//! about a quarter of its CPU switching in and out (2026-11-27, a benchmark window:
//! 5.7 us of CPU per response, 3.9 us with a 100 us dwell; 0.29 and 0.14 context
//! switches per response). The dwell delays the next request of a connection by at most the
//! dwell (plus the kernel's timer slack), against the server's time to answer the
//! `connections x depth` requests outstanding (about 1-2 ms here), so the server's
//! queue does not run dry.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use chacha20poly1305::ChaCha20Poly1305;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use parking_lot::Mutex;
use rustix::net::RecvFlags;
use serde::{Deserialize, Serialize};

use super::proto::{self, HEADER_LEN, HELLO_LEN, Header, ReadRequest, STATUS_OK, TAG_LEN};
use crate::ExperimentError;

/// What the generator does.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The server.
    pub addr: SocketAddr,
    /// Connections (concurrent clients). At least 1.
    pub connections: usize,
    /// Requests outstanding per connection. At least 1.
    pub depth: usize,
    /// Bytes per read. At least 1, at most `file_len`.
    pub block: u32,
    /// Bytes of the served file; reads stay inside it.
    pub file_len: u64,
    /// Generator threads (connections are split among them). 1..=connections.
    pub threads: usize,
    /// Stop each connection after this many responses (None: until stopped).
    pub responses_per_connection: Option<u64>,
    /// The file's content: read, authenticate, decrypt and compare every body.
    pub verify: Option<Arc<Vec<u8>>>,
    /// Seed of each connection's starting block.
    pub seed: u64,
    /// When a poll finds nothing to read, sleep this long and poll again (batching
    /// the generator's wake-ups); zero: block in `epoll_wait`, woken by every
    /// arrival. At most one second.
    pub dwell: Duration,
}

/// The experiment's default [`ClientConfig::dwell`].
pub const DEFAULT_DWELL: Duration = Duration::from_micros(100);

impl ClientConfig {
    /// Checks the ranges; the error names the field.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        if self.connections == 0 || self.depth == 0 {
            return Err(ExperimentError::config(
                "connections and depth must be at least 1",
            ));
        }
        if self.block == 0 || u64::from(self.block) > self.file_len {
            return Err(ExperimentError::config(format!(
                "block must be in 1..={} (the file), got {}",
                self.file_len, self.block
            )));
        }
        if self.dwell > Duration::from_secs(1) {
            return Err(ExperimentError::config(format!(
                "dwell must be at most 1 s, got {:?}",
                self.dwell
            )));
        }
        if self.threads == 0 || self.threads > self.connections {
            return Err(ExperimentError::config(format!(
                "threads must be in 1..={} (the connections), got {}",
                self.connections, self.threads
            )));
        }
        Ok(())
    }
}

/// Counts since start, shared by the generator's threads.
#[derive(Debug, Default)]
struct Meter {
    responses: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    polls: AtomicU64,
    dwells: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// What the generator has seen so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientReport {
    /// Complete, well-formed responses.
    pub responses: u64,
    /// Plaintext bytes they carried.
    pub bytes: u64,
    /// Connections that failed (closed early, bad frame, failed authentication).
    pub errors: u64,
    /// Polls that found something to read or write.
    #[serde(default)]
    pub polls: u64,
    /// Polls that found nothing, after which the thread slept a dwell.
    #[serde(default)]
    pub dwells: u64,
    /// The first failure, in words.
    pub first_error: Option<String>,
}

/// A running generator. Dropping it stops it.
#[derive(Debug)]
pub struct LoadClient {
    stop: Arc<AtomicBool>,
    meter: Arc<Meter>,
    handles: Vec<JoinHandle<()>>,
}

impl LoadClient {
    /// Connects every connection, then starts the threads.
    pub fn start(cfg: &ClientConfig) -> Result<LoadClient, ExperimentError> {
        cfg.validate()?;
        let mut groups: Vec<Vec<Conn>> = (0..cfg.threads).map(|_| Vec::new()).collect();
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let blocks = cfg.file_len / u64::from(cfg.block);
        for i in 0..cfg.connections {
            let s = std::net::TcpStream::connect(cfg.addr)
                .map_err(|e| ExperimentError::step(format!("cannot connect to {}", cfg.addr), e))?;
            s.set_nodelay(true).map_err(ExperimentError::other)?;
            s.set_nonblocking(true).map_err(ExperimentError::other)?;
            groups[i % cfg.threads].push(Conn::new(TcpStream::from_std(s), rng.u64(..blocks)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let meter = Arc::new(Meter::default());
        let mut handles = Vec::new();
        for (i, conns) in groups.into_iter().enumerate() {
            let mut w = Worker {
                cfg: cfg.clone(),
                blocks,
                stop: stop.clone(),
                meter: meter.clone(),
            };
            let h = std::thread::Builder::new()
                .name(format!("{CLIENT_THREAD}-{i}"))
                .spawn(move || {
                    if let Err(e) = w.run(conns) {
                        w.fail(format!("generator thread failed: {e}"));
                    }
                })
                .map_err(|e| ExperimentError::step("cannot start a generator thread", e))?;
            handles.push(h);
        }
        Ok(LoadClient {
            stop,
            meter,
            handles,
        })
    }

    /// Counts so far.
    pub fn report(&self) -> ClientReport {
        ClientReport {
            responses: self.meter.responses.load(Relaxed),
            bytes: self.meter.bytes.load(Relaxed),
            errors: self.meter.errors.load(Relaxed),
            polls: self.meter.polls.load(Relaxed),
            dwells: self.meter.dwells.load(Relaxed),
            first_error: self.meter.first_error.lock().clone(),
        }
    }

    /// Whether every connection is done (bounded runs) or failed.
    pub fn finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// Stops the threads (connections close mid-stream) and returns the counts.
    pub fn stop(mut self) -> ClientReport {
        self.halt();
        self.report()
    }

    fn halt(&mut self) {
        self.stop.store(true, Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for LoadClient {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Name prefix of the generator's threads (the CPU accounting tells them apart).
pub const CLIENT_THREAD: &str = "colors-client";

/// Body bytes discarded per `recv` call.
const DISCARD: usize = 256 * 1024;

/// One connection's progress.
struct Conn {
    stream: TcpStream,
    hello: Vec<u8>,
    cipher: Option<ChaCha20Poly1305>,
    header: [u8; HEADER_LEN],
    header_got: usize,
    /// The response being read and the body bytes still to come.
    current: Option<Header>,
    body_left: usize,
    /// Whether the body is read (verifying, or an error message) or discarded.
    keep_body: bool,
    body: Vec<u8>,
    expect_nonce: u64,
    /// Offsets of the requests outstanding, oldest first.
    outstanding: VecDeque<u64>,
    next_block: u64,
    sent: u64,
    received: u64,
    out: Vec<u8>,
    out_off: usize,
}

impl Conn {
    fn new(stream: TcpStream, first_block: u64) -> Self {
        Conn {
            stream,
            hello: Vec::with_capacity(HELLO_LEN),
            cipher: None,
            header: [0; HEADER_LEN],
            header_got: 0,
            current: None,
            body_left: 0,
            keep_body: false,
            body: Vec::new(),
            expect_nonce: 0,
            outstanding: VecDeque::new(),
            next_block: first_block,
            sent: 0,
            received: 0,
            out: Vec::new(),
            out_off: 0,
        }
    }
}

struct Worker {
    cfg: ClientConfig,
    blocks: u64,
    stop: Arc<AtomicBool>,
    meter: Arc<Meter>,
}

/// Whether a connection goes on.
enum Progress {
    Open,
    Done,
}

impl Worker {
    fn fail(&self, msg: String) {
        self.meter.errors.fetch_add(1, Relaxed);
        self.meter.first_error.lock().get_or_insert(msg);
    }

    fn run(&mut self, mut conns: Vec<Conn>) -> io::Result<()> {
        let mut poll = Poll::new()?;
        for (i, c) in conns.iter_mut().enumerate() {
            poll.registry().register(
                &mut c.stream,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            self.top_up(c);
        }
        let mut live: Vec<bool> = vec![true; conns.len()];
        let mut open = conns.len();
        let mut events = Events::with_capacity(1024);
        let mut scratch = vec![0u8; DISCARD];
        let dwell = self.cfg.dwell;
        // With a dwell the poll never blocks: nothing ready means sleep, then poll.
        let timeout = if dwell.is_zero() {
            Duration::from_millis(50)
        } else {
            Duration::ZERO
        };
        while open > 0 && !self.stop.load(Relaxed) {
            match poll.poll(&mut events, Some(timeout)) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            }
            if events.is_empty() {
                if !dwell.is_zero() {
                    self.meter.dwells.fetch_add(1, Relaxed);
                    std::thread::sleep(dwell);
                }
                continue;
            }
            self.meter.polls.fetch_add(1, Relaxed);
            for ev in events.iter() {
                let i = ev.token().0;
                if !live[i] {
                    continue;
                }
                let c = &mut conns[i];
                let step = self.read(c, &mut scratch).and_then(|p| match p {
                    Progress::Open => self.flush(c).map(|()| Progress::Open),
                    Progress::Done => Ok(Progress::Done),
                });
                match step {
                    Ok(Progress::Open) => {}
                    Ok(Progress::Done) => {
                        live[i] = false;
                        open -= 1;
                    }
                    Err(e) => {
                        self.fail(e.to_string());
                        live[i] = false;
                        open -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Queues requests until `depth` are outstanding (or the connection's quota is
    /// sent).
    fn top_up(&self, c: &mut Conn) {
        let quota = self.cfg.responses_per_connection.unwrap_or(u64::MAX);
        while c.outstanding.len() < self.cfg.depth && c.sent < quota {
            let offset = c.next_block * u64::from(self.cfg.block);
            c.next_block = (c.next_block + 1) % self.blocks;
            let req = ReadRequest {
                len: self.cfg.block,
                offset,
            };
            c.out.extend_from_slice(&req.encode());
            c.outstanding.push_back(offset);
            c.sent += 1;
        }
    }

    fn flush(&self, c: &mut Conn) -> Result<(), ExperimentError> {
        while c.out_off < c.out.len() {
            match c.stream.write(&c.out[c.out_off..]) {
                Ok(n) => c.out_off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ExperimentError::run(format!("write failed: {e}"))),
            }
        }
        c.out.clear();
        c.out_off = 0;
        Ok(())
    }

    /// Reads what the socket has; completes responses and queues their successors.
    fn read(&self, c: &mut Conn, scratch: &mut [u8]) -> Result<Progress, ExperimentError> {
        loop {
            let quota = self.cfg.responses_per_connection.unwrap_or(u64::MAX);
            if c.received >= quota {
                return Ok(Progress::Done);
            }
            let r = if c.cipher.is_none() {
                let got = c.hello.len();
                let mut buf = [0u8; HELLO_LEN];
                c.stream
                    .read(&mut buf[..HELLO_LEN - got])
                    .inspect(|&n| c.hello.extend_from_slice(&buf[..n]))
            } else if c.current.is_none() {
                c.stream.read(&mut c.header[c.header_got..])
            } else if c.keep_body {
                let at = c.body.len() - c.body_left;
                c.stream.read(&mut c.body[at..])
            } else {
                let n = c.body_left.min(scratch.len());
                rustix::net::recv(&c.stream, &mut scratch[..n], RecvFlags::TRUNC)
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            };
            let n = match r {
                Ok(0) => return Err(ExperimentError::run("the server closed the connection")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Open),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ExperimentError::run(format!("read failed: {e}"))),
            };
            if c.cipher.is_none() {
                if let Ok(h) = <[u8; HELLO_LEN]>::try_from(c.hello.as_slice()) {
                    c.cipher = Some(
                        proto::open_hello(&h)
                            .ok_or_else(|| ExperimentError::run("malformed hello"))?,
                    );
                }
            } else if c.current.is_none() {
                c.header_got += n;
                if c.header_got == HEADER_LEN {
                    self.start_body(c)?;
                }
            } else {
                c.body_left -= n;
                if c.body_left == 0 {
                    self.finish(c)?;
                }
            }
        }
    }

    fn start_body(&self, c: &mut Conn) -> Result<(), ExperimentError> {
        let h = Header::decode(&c.header).map_err(ExperimentError::run)?;
        if h.nonce != c.expect_nonce {
            return Err(ExperimentError::run(format!(
                "response nonce {} where {} was due",
                h.nonce, c.expect_nonce
            )));
        }
        let want = self.cfg.block as usize + TAG_LEN;
        if h.status == STATUS_OK && h.body_len as usize != want {
            return Err(ExperimentError::run(format!(
                "body of {} bytes, expected {want}",
                h.body_len
            )));
        }
        c.header_got = 0;
        c.body_left = h.body_len as usize;
        c.keep_body = self.cfg.verify.is_some() || h.status != STATUS_OK;
        if c.keep_body {
            c.body.resize(h.body_len as usize, 0);
        }
        c.current = Some(h);
        Ok(())
    }

    fn finish(&self, c: &mut Conn) -> Result<(), ExperimentError> {
        let Some(h) = c.current.take() else {
            return Ok(());
        };
        c.expect_nonce += 1;
        let offset = c
            .outstanding
            .pop_front()
            .ok_or_else(|| ExperimentError::run("a response to no request"))?;
        if h.status != STATUS_OK {
            let why = match c.cipher.as_ref().map(|k| proto::open(k, &h, &mut c.body)) {
                Some(Ok(n)) => String::from_utf8_lossy(&c.body[..n]).into_owned(),
                _ => "unreadable".to_owned(),
            };
            return Err(ExperimentError::run(format!(
                "server refused a read: status {}: {why}",
                h.status
            )));
        }
        if let (Some(file), Some(k)) = (&self.cfg.verify, &c.cipher) {
            let n = proto::open(k, &h, &mut c.body).map_err(ExperimentError::run)?;
            let want = &file[offset as usize..offset as usize + n];
            if c.body[..n] != *want {
                return Err(ExperimentError::run(format!(
                    "response {} carries the wrong bytes",
                    h.nonce
                )));
            }
        }
        c.received += 1;
        self.meter.responses.fetch_add(1, Relaxed);
        self.meter
            .bytes
            .fetch_add(u64::from(self.cfg.block), Relaxed);
        self.top_up(c);
        Ok(())
    }
}
