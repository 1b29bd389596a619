//! An independent Gnutella 0.6 test peer: its own minimal codec (nothing from the
//! router's `proto` module), written from the protocol description, so that a bug
//! shared by encoder and decoder cannot hide. It checks what a servent such as
//! gtk-gnutella checks of its neighbours.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use seda::Runtime;
use seda_gnutella::{Gnutella, RouterConfig};

pub const PING: u8 = 0x00;
pub const PONG: u8 = 0x01;
pub const BYE: u8 = 0x02;
pub const QRP: u8 = 0x30;
pub const VENDOR: u8 = 0x31;
pub const PUSH: u8 = 0x40;
pub const QUERY: u8 = 0x80;
pub const QUERYHIT: u8 = 0x81;

/// A message as the test peer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    pub guid: [u8; 16],
    pub kind: u8,
    pub ttl: u8,
    pub hops: u8,
    pub payload: Vec<u8>,
}

impl Msg {
    pub fn new(kind: u8, ttl: u8, hops: u8, payload: Vec<u8>) -> Msg {
        Msg {
            guid: guid(),
            kind,
            ttl,
            hops,
            payload,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(23 + self.payload.len());
        v.extend_from_slice(&self.guid);
        v.push(self.kind);
        v.push(self.ttl);
        v.push(self.hops);
        v.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        v.extend_from_slice(&self.payload);
        v
    }
}

pub fn guid() -> [u8; 16] {
    let mut g = [0u8; 16];
    for b in &mut g {
        *b = fastrand::u8(..);
    }
    g[8] = 0xff;
    g[15] = 0;
    g
}

/// A query payload in today's format: flags mark 0x8000 set, text, NUL.
pub fn query(text: &str) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(text.as_bytes());
    p.push(0);
    p
}

/// A query hit with one result from servent `servent`.
pub fn queryhit(servent: [u8; 16]) -> Vec<u8> {
    let mut p = vec![1u8];
    p.extend_from_slice(&6346u16.to_le_bytes());
    p.extend_from_slice(&[10, 0, 0, 7]);
    p.extend_from_slice(&100u32.to_le_bytes());
    // One result: index, size, name NUL NUL.
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&1000u32.to_le_bytes());
    p.extend_from_slice(b"song.ogg\0\0");
    p.extend_from_slice(&servent);
    p
}

/// A push asking servent `servent` for file 1, to connect to 10.0.0.9:6346.
pub fn push(servent: [u8; 16]) -> Vec<u8> {
    let mut p = servent.to_vec();
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&[10, 0, 0, 9]);
    p.extend_from_slice(&6346u16.to_le_bytes());
    p
}

/// A pong naming `ip:port`.
pub fn pong(ip: [u8; 4], port: u16) -> Vec<u8> {
    let mut p = port.to_le_bytes().to_vec();
    p.extend_from_slice(&ip);
    p.extend_from_slice(&[0; 8]);
    p
}

/// A handshake block as the test peer parses it.
#[derive(Clone, Debug, Default)]
pub struct Head {
    pub start: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn code(&self) -> u16 {
        self.start
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }
}

/// Options of a test peer's handshake.
#[derive(Clone, Debug)]
pub struct Opts {
    pub request: String,
    pub headers: Vec<(String, String)>,
    /// Offer to inflate (Accept-Encoding: deflate).
    pub accept_deflate: bool,
    /// Compress what we send if the router accepts it.
    pub send_deflate: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            request: "GNUTELLA CONNECT/0.6".into(),
            headers: vec![
                ("User-Agent".into(), "test-peer/1".into()),
                ("X-Ultrapeer".into(), "True".into()),
                ("Vendor-Message".into(), "0.2".into()),
            ],
            accept_deflate: false,
            send_deflate: false,
        }
    }
}

/// A connected test peer.
pub struct Peer {
    pub stream: TcpStream,
    pub head: Head,
    inflate: Option<Decompress>,
    deflate: Option<Compress>,
    rbuf: Vec<u8>,
    /// Start of the unread part of `rbuf`.
    rpos: usize,
    raw: Vec<u8>,
}

/// Reads one handshake block byte by byte (so no message bytes are swallowed).
pub fn read_head(s: &mut TcpStream) -> io::Result<Head> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed in handshake",
            ));
        }
        buf.push(b[0]);
        if buf.len() > 16_384 {
            return Err(io::Error::other("handshake block too long"));
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(Head { start, headers })
}

fn block(start: &str, headers: &[(String, String)]) -> Vec<u8> {
    let mut s = format!("{start}\r\n");
    for (n, v) in headers {
        s.push_str(&format!("{n}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s.into_bytes()
}

pub fn connect_raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to router");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A connection to `addr` from the local address `src` (any of 127.0.0.0/8 on
/// loopback: hosts of one network, or of several, for the rate limit's tests).
pub fn connect_raw_from(src: IpAddr, addr: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let family = if src.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket(family, SocketType::STREAM, None).expect("socket");
    rustix::net::bind(&fd, &SocketAddr::new(src, 0)).expect("bind the source address");
    rustix::net::connect(&fd, &addr).expect("connect to router");
    let s = TcpStream::from(fd);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

impl Peer {
    /// Handshakes as a client; returns the router's answer whatever its code (the
    /// final 200 is sent only after a 200).
    pub fn try_connect(addr: SocketAddr, o: &Opts) -> io::Result<Peer> {
        Self::handshake(connect_raw(addr), o)
    }

    /// As [`Peer::try_connect`], from the local address `src`.
    pub fn try_connect_from(src: IpAddr, addr: SocketAddr, o: &Opts) -> io::Result<Peer> {
        Self::handshake(connect_raw_from(src, addr), o)
    }

    fn handshake(mut s: TcpStream, o: &Opts) -> io::Result<Peer> {
        let mut headers = o.headers.clone();
        if o.accept_deflate {
            headers.push(("Accept-Encoding".into(), "deflate".into()));
        }
        s.write_all(&block(&o.request, &headers))?;
        let head = read_head(&mut s)?;
        let mut p = Peer {
            stream: s,
            inflate: None,
            deflate: None,
            rbuf: Vec::new(),
            rpos: 0,
            raw: Vec::new(),
            head,
        };
        if p.head.code() != 200 {
            return Ok(p);
        }
        let compress = o.send_deflate
            && p.head
                .get("Accept-Encoding")
                .is_some_and(|v| v.contains("deflate"));
        let mut fin = Vec::new();
        if compress {
            fin.push(("Content-Encoding".to_owned(), "deflate".to_owned()));
            p.deflate = Some(Compress::new(Compression::default(), true));
        }
        if p.head
            .get("Content-Encoding")
            .is_some_and(|v| v.contains("deflate"))
        {
            assert!(o.accept_deflate, "router compressed without being asked");
            p.inflate = Some(Decompress::new(true));
        }
        p.stream.write_all(&block("GNUTELLA/0.6 200 OK", &fin))?;
        Ok(p)
    }

    pub fn connect(addr: SocketAddr) -> Peer {
        Self::connect_with(addr, &Opts::default())
    }

    pub fn connect_with(addr: SocketAddr, o: &Opts) -> Peer {
        let p = Self::try_connect(addr, o).expect("handshake");
        assert_eq!(p.head.code(), 200, "router refused: {}", p.head.start);
        p
    }

    pub fn send(&mut self, m: &Msg) {
        self.send_bytes(&m.encode());
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        match self.deflate.as_mut() {
            Some(z) => {
                let mut out = Vec::with_capacity(bytes.len() + 64);
                let mut rest = bytes;
                loop {
                    out.reserve(4096);
                    let before = z.total_in();
                    z.compress_vec(rest, &mut out, FlushCompress::Sync).unwrap();
                    rest = &rest[(z.total_in() - before) as usize..];
                    if rest.is_empty() && out.len() < out.capacity() {
                        break;
                    }
                }
                self.stream.write_all(&out).unwrap();
            }
            None => self.stream.write_all(bytes).unwrap(),
        }
    }

    fn fill(&mut self, deadline: Instant) -> io::Result<bool> {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        self.stream
            .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
        let mut buf = [0u8; 16_384];
        let n = match self.stream.read(&mut buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "router closed",
                ));
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        match self.inflate.as_mut() {
            Some(z) => {
                self.raw.extend_from_slice(&buf[..n]);
                loop {
                    let mut out = Vec::with_capacity(65_536);
                    let before = z.total_in();
                    z.decompress_vec(&self.raw, &mut out, FlushDecompress::Sync)
                        .map_err(io::Error::other)?;
                    let used = (z.total_in() - before) as usize;
                    self.raw.drain(..used);
                    self.rbuf.extend_from_slice(&out);
                    if out.len() < out.capacity() {
                        break;
                    }
                }
            }
            None => self.rbuf.extend_from_slice(&buf[..n]),
        }
        Ok(true)
    }

    /// The next message within `timeout`, `Ok(None)` on timeout, `Err` if closed.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<Msg>> {
        let deadline = Instant::now() + timeout;
        loop {
            let b = &self.rbuf[self.rpos..];
            if b.len() >= 23 {
                let len = u32::from_le_bytes(b[19..23].try_into().unwrap()) as usize;
                if b.len() >= 23 + len {
                    let mut guid = [0u8; 16];
                    guid.copy_from_slice(&b[..16]);
                    let m = Msg {
                        guid,
                        kind: b[16],
                        ttl: b[17],
                        hops: b[18],
                        payload: b[23..23 + len].to_vec(),
                    };
                    self.rpos += 23 + len;
                    return Ok(Some(m));
                }
            }
            if self.rpos > 0 {
                self.rbuf.drain(..self.rpos);
                self.rpos = 0;
            }
            if !self.fill(deadline)? {
                return Ok(None);
            }
        }
    }

    /// The next message of type `kind` within `timeout`, skipping the rest (the
    /// router's own link messages); `None` on timeout.
    pub fn recv_kind(&mut self, kind: u8, timeout: Duration) -> Option<Msg> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left) {
                Ok(Some(m)) if m.kind == kind => return Some(m),
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Every message that arrives within `window`.
    pub fn drain(&mut self, window: Duration) -> Vec<Msg> {
        let deadline = Instant::now() + window;
        let mut v = Vec::new();
        while let Ok(Some(m)) = self.recv(deadline.saturating_duration_since(Instant::now())) {
            v.push(m);
        }
        v
    }

    /// Messages until `done(all so far)` holds or `timeout` passes (or the
    /// connection ends).
    pub fn drain_until(&mut self, timeout: Duration, done: impl Fn(&[Msg]) -> bool) -> Vec<Msg> {
        let deadline = Instant::now() + timeout;
        let mut v = Vec::new();
        while !done(&v) {
            match self.recv(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(m)) => v.push(m),
                Ok(None) | Err(_) => break,
            }
        }
        v
    }

    /// Whether the router closed the connection within `timeout` (messages before
    /// the close are returned).
    pub fn closed_within(&mut self, timeout: Duration) -> (bool, Vec<Msg>) {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            match self.recv(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(m)) => seen.push(m),
                Ok(None) => return (false, seen),
                Err(_) => return (true, seen),
            }
        }
    }
}

/// A router on loopback in a runtime of its own.
pub struct TestRouter {
    pub rt: Runtime,
    pub router: Gnutella,
}

impl TestRouter {
    pub fn start(cfg: RouterConfig) -> TestRouter {
        let rt = Runtime::builder().build();
        let router = Gnutella::start(&rt, cfg.with_event_loops(Some(1))).expect("router starts");
        rt.start().expect("runtime starts");
        TestRouter { rt, router }
    }

    pub fn addr(&self) -> SocketAddr {
        self.router.local_addr()
    }

    /// Waits until `f(stats)` holds, up to 10 s.
    pub fn wait(&self, what: &str, f: impl Fn(&seda_gnutella::GnutellaStats) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.router.stats();
            if f(&s) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {s:#?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestRouter {
    fn drop(&mut self) {
        self.router.stop();
        self.rt.shutdown(Duration::from_secs(2));
    }
}

/// `n` established test peers, the router's opening messages (Messages Supported,
/// then a one-hop ping) already read.
pub fn peers(r: &TestRouter, n: usize) -> Vec<Peer> {
    let mut v: Vec<Peer> = (0..n).map(|_| Peer::connect(r.addr())).collect();
    for p in &mut v {
        let ping = p.recv_kind(PING, T).expect("the router's opening ping");
        assert_eq!((ping.ttl, ping.hops), (1, 0));
    }
    r.wait("peers established", |s| s.peers >= n);
    v
}

pub const T: Duration = Duration::from_secs(3);
pub const QUIET: Duration = Duration::from_millis(300);

/// The QRP hash of an ASCII keyword, written from the spec's text (not the
/// router's code): bytes XORed into a little-endian word at rotating positions,
/// times 0x4F1BBCDC, the top `bits` bits of the low 32.
pub fn qrp_hash(word: &str, bits: u32) -> usize {
    let mut x: u32 = 0;
    for (i, b) in word.to_ascii_lowercase().bytes().enumerate() {
        x ^= u32::from(b) << ((i % 4) * 8);
    }
    let prod = (u64::from(x) * 0x4F1B_BCDC) & 0xffff_ffff;
    (prod >> (32 - bits)) as usize
}

/// A leaf's table of 2^bits slots holding `words`.
pub fn qrp_table(words: &[&str], bits: u32) -> Vec<bool> {
    let mut t = vec![false; 1 << bits];
    for w in words {
        t[qrp_hash(w, bits)] = true;
    }
    t
}

/// RESET (infinity 7) and PATCH messages (4-bit entries, present = -6, zlib,
/// `parts` messages) sending `table` from scratch.
pub fn qrp_messages(table: &[bool], parts: usize) -> Vec<Msg> {
    let mut reset = vec![0u8];
    reset.extend_from_slice(&(table.len() as u32).to_le_bytes());
    reset.push(7);
    let mut raw = Vec::with_capacity(table.len() / 2);
    for pair in table.chunks(2) {
        let e = |on: bool| if on { 0xAu8 } else { 0 };
        raw.push(e(pair[0]) << 4 | e(pair[1]));
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
    z.write_all(&raw).unwrap();
    let packed = z.finish().unwrap();
    let chunk = packed.len().div_ceil(parts).max(1);
    let n = packed.len().div_ceil(chunk);
    let mut v = vec![Msg::new(QRP, 1, 0, reset)];
    for (i, part) in packed.chunks(chunk).enumerate() {
        let mut p = vec![1u8, (i + 1) as u8, n as u8, 1, 4];
        p.extend_from_slice(part);
        v.push(Msg::new(QRP, 1, 0, p));
    }
    v
}

/// Reads a table sent as RESET + one PATCH sequence of 4-bit zlib entries (what
/// the router sends ultrapeers): slot i present iff its entry is negative.
pub fn qrp_decode(msgs: &[Msg]) -> Vec<bool> {
    qrp_decode_entries(msgs)
        .into_iter()
        .map(|e| e & 0x8 != 0)
        .collect()
}

/// The 4-bit entries of a RESET + PATCH sequence, one per slot.
pub fn qrp_decode_entries(msgs: &[Msg]) -> Vec<u8> {
    let reset = &msgs[0].payload;
    assert_eq!(reset[0], 0, "a RESET first");
    let len = u32::from_le_bytes(reset[1..5].try_into().unwrap()) as usize;
    let mut packed = Vec::new();
    for m in &msgs[1..] {
        assert_eq!(m.payload[0], 1, "then PATCHes");
        assert_eq!((m.payload[3], m.payload[4]), (1, 4), "zlib, 4 bits");
        packed.extend_from_slice(&m.payload[5..]);
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&packed[..])
        .read_to_end(&mut raw)
        .unwrap();
    assert_eq!(raw.len() * 2, len, "the patch covers the table");
    raw.iter().flat_map(|b| [b >> 4, b & 0xf]).collect()
}

/// A leaf's handshake options (`X-Ultrapeer: False`, QRP).
pub fn leaf_opts() -> Opts {
    Opts {
        headers: vec![
            ("User-Agent".into(), "test-leaf/1".into()),
            ("X-Ultrapeer".into(), "False".into()),
            ("X-Query-Routing".into(), "0.2".into()),
            ("Vendor-Message".into(), "0.2".into()),
        ],
        ..Opts::default()
    }
}

/// A leaf connected and its opening messages read.
pub fn leaf(r: &TestRouter) -> Peer {
    let mut p = Peer::connect_with(r.addr(), &leaf_opts());
    p.recv_kind(PING, T).expect("the router's opening ping");
    p
}
