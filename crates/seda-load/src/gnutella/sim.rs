//! Simulated peers: each a real 0.6 connection, paced by a token count, reading and
//! timing everything the router delivers.
//!
//! GUIDs of generated messages carry their send time so that any receiver can time
//! them: bytes 0..8 the nanoseconds since the run's epoch (little endian), byte 8
//! `0xff` (modern servent mark), 9..11 the sender's index, 11..15 its sequence
//! number, byte 15 [`TIMED`] (the router's own GUIDs end in 0). A query hit reuses its query's GUID, so
//! its latency is the query-to-hit round trip; the router's own pong answers our
//! ping with the ping's GUID (a round trip too).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};

use super::config::{Kind, LoadConfig, N_KINDS};
use super::wire::{self, HEADER_LEN, Header, write_message};

/// Per-thread results, merged by the caller.
#[derive(Debug)]
pub(crate) struct ThreadResult {
    pub(crate) sent: [u64; N_KINDS],
    pub(crate) received: [u64; N_KINDS],
    pub(crate) latency: Vec<Histogram<u64>>,
    /// Per second: received copies per kind, latency sum (us) per kind.
    pub(crate) series: Vec<([u64; N_KINDS], [u64; N_KINDS])>,
    /// Per peer (global index): messages it sent, copies of its messages received.
    pub(crate) per_peer_sent: Vec<(usize, u64)>,
    pub(crate) delivered_from: Vec<u64>,
    pub(crate) write_stalls: u64,
    pub(crate) closed_by_router: u64,
}

struct Sim {
    idx: usize,
    stream: MioStream,
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    sent: u64,
    seq: u32,
    dead: bool,
}

/// Handshakes with the router as an ultrapeer (no compression: the generator
/// measures the router, not zlib), blocking, and returns the nonblocking stream.
pub(crate) fn handshake(router: SocketAddr, agent: &str) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&router, Duration::from_secs(5))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let hello = wire::connect_block(&[
        ("User-Agent", agent),
        ("X-Ultrapeer", "True"),
        ("X-Query-Routing", "0.2"),
        ("Vendor-Message", "0.2"),
    ]);
    s.write_all(&hello)?;
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 || buf.len() > wire::MAX_ANSWER {
            return Err(io::Error::other("router closed during the handshake"));
        }
        buf.push(b[0]);
    }
    let (status, line) =
        wire::answer_status(&buf).ok_or_else(|| io::Error::other("unreadable handshake answer"))?;
    if status != 200 {
        return Err(io::Error::other(format!(
            "router refused the connection: {line}"
        )));
    }
    s.write_all(wire::ACCEPT_BLOCK)?;
    s.set_read_timeout(None)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Last GUID byte of a generated (timed) message.
const TIMED: u8 = 0x5e;

fn timed_guid(epoch: Instant, now: Instant, peer: usize, seq: u32) -> [u8; 16] {
    let mut g = [0u8; 16];
    let ns = now.duration_since(epoch).as_nanos() as u64;
    g[..8].copy_from_slice(&ns.to_le_bytes());
    g[8] = 0xff;
    g[9..11].copy_from_slice(&(peer as u16).to_le_bytes());
    g[11..15].copy_from_slice(&seq.to_le_bytes());
    g[15] = TIMED;
    g
}

fn guid_time(g: &[u8; 16]) -> Option<(u64, usize)> {
    (g[8] == 0xff && g[15] == TIMED).then(|| {
        (
            u64::from_le_bytes(g[..8].try_into().unwrap_or_default()),
            usize::from(u16::from_le_bytes([g[9], g[10]])),
        )
    })
}

/// Runs `streams` (peers `first..first + n`) until `end`.
pub(crate) fn run_thread(
    cfg: &LoadConfig,
    streams: Vec<(usize, TcpStream)>,
    total_peers: usize,
    epoch: Instant,
    start: Instant,
    end: Instant,
) -> io::Result<ThreadResult> {
    let mut poll = Poll::new()?;
    let mut sims = Vec::with_capacity(streams.len());
    for (i, (idx, s)) in streams.into_iter().enumerate() {
        let mut stream = MioStream::from_std(s);
        poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        sims.push(Sim {
            idx,
            stream,
            rbuf: Vec::with_capacity(64 * 1024),
            rpos: 0,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            sent: 0,
            seq: 0,
            dead: false,
        });
    }
    let seconds = end.duration_since(start).as_secs() as usize + 2;
    let mut r = ThreadResult {
        sent: [0; N_KINDS],
        received: [0; N_KINDS],
        latency: (0..N_KINDS)
            .map(|_| crate::metrics::rt_histogram(3))
            .collect(),
        series: vec![([0; N_KINDS], [0; N_KINDS]); seconds],
        per_peer_sent: Vec::new(),
        delivered_from: vec![0; total_peers],
        write_stalls: 0,
        closed_by_router: 0,
    };
    let per_peer_rate = cfg.rate.map(|r| r / total_peers as f64);
    let mut rng = fastrand::Rng::with_seed(cfg.seed ^ (sims.first().map_or(0, |s| s.idx) as u64));
    let query_text: Vec<u8> = {
        let mut p = vec![0x80u8, 0x00];
        p.extend(std::iter::repeat_n(b'q', cfg.query_bytes.saturating_sub(3)));
        p.push(0);
        p
    };
    let measured_from = start + cfg.warmup;
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let timeout = if per_peer_rate.is_some() {
            Duration::from_micros(500)
        } else {
            Duration::from_millis(1)
        };
        poll.poll(&mut events, Some(timeout))?;
        let now = Instant::now();
        let second = now.saturating_duration_since(start).as_secs() as usize;
        // Reads: every peer, since edge-triggered readiness may have been consumed.
        for sim in sims.iter_mut().filter(|s| !s.dead) {
            loop {
                match sim.stream.read(&mut buf) {
                    Ok(0) => {
                        sim.dead = true;
                        r.closed_by_router += 1;
                        break;
                    }
                    Ok(n) => {
                        if sim.rpos > 0 && sim.rpos == sim.rbuf.len() {
                            sim.rbuf.clear();
                            sim.rpos = 0;
                        }
                        sim.rbuf.extend_from_slice(&buf[..n]);
                        if n < buf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        sim.dead = true;
                        r.closed_by_router += 1;
                        break;
                    }
                }
            }
            // Frame and time what arrived.
            while let Some(h) = Header::parse(&sim.rbuf[sim.rpos..]) {
                let end_at = sim.rpos + HEADER_LEN + h.len as usize;
                if end_at > sim.rbuf.len() {
                    break;
                }
                if let Some(kind) = Kind::of(h.kind)
                    && let Some((ns, from)) = guid_time(&h.guid)
                {
                    let k = kind as usize;
                    r.received[k] += 1;
                    let sent_at = epoch + Duration::from_nanos(ns);
                    let us = now.saturating_duration_since(sent_at).as_micros() as u64;
                    if now >= measured_from {
                        crate::metrics::record_us(&mut r.latency[k], us);
                    }
                    if let Some(slot) = r.series.get_mut(second) {
                        slot.0[k] += 1;
                        slot.1[k] += us;
                    }
                    if from < r.delivered_from.len() {
                        r.delivered_from[from] += 1;
                    }
                    if kind == Kind::Query && rng.f64() < cfg.hit_fraction {
                        let servent = [sim.idx as u8; 16];
                        let mut hit = Vec::with_capacity(27 + 16);
                        hit.push(1);
                        hit.extend_from_slice(&6346u16.to_le_bytes());
                        hit.extend_from_slice(&[10, 0, (sim.idx >> 8) as u8, sim.idx as u8]);
                        hit.extend_from_slice(&1000u32.to_le_bytes());
                        hit.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, b'a', 0, 0]);
                        hit.extend_from_slice(&servent);
                        write_message(
                            &mut sim.wbuf,
                            h.guid,
                            wire::QUERY_HIT,
                            h.hops.saturating_add(1),
                            0,
                            &hit,
                        );
                        r.sent[Kind::QueryHit as usize] += 1;
                    }
                }
                sim.rpos = end_at;
            }
            if sim.rpos == sim.rbuf.len() {
                sim.rbuf.clear();
                sim.rpos = 0;
            }
        }
        // Writes: generate what each peer owes, then flush.
        let elapsed = now.saturating_duration_since(start).as_secs_f64();
        for sim in sims.iter_mut().filter(|s| !s.dead) {
            let pending = sim.wbuf.len() - sim.wpos;
            let owed = match per_peer_rate {
                Some(rate) => ((rate * elapsed) as u64).saturating_sub(sim.sent).min(4096),
                None if pending < 16 * 1024 => 256,
                None => 0,
            };
            if pending > cfg.max_pending_bytes {
                r.write_stalls += 1;
            } else {
                for _ in 0..owed {
                    let g = timed_guid(epoch, now, sim.idx, sim.seq);
                    sim.seq = sim.seq.wrapping_add(1);
                    let kind = cfg.mix.pick(rng.f64());
                    match kind {
                        Kind::Query => {
                            write_message(&mut sim.wbuf, g, wire::QUERY, cfg.ttl, 0, &query_text)
                        }
                        _ => write_message(&mut sim.wbuf, g, wire::PING, cfg.ttl, 0, &[]),
                    }
                    r.sent[kind as usize] += 1;
                    sim.sent += 1;
                }
            }
            while sim.wpos < sim.wbuf.len() {
                match sim.stream.write(&sim.wbuf[sim.wpos..]) {
                    Ok(0) => break,
                    Ok(n) => sim.wpos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        sim.dead = true;
                        r.closed_by_router += 1;
                        break;
                    }
                }
            }
            if sim.wpos == sim.wbuf.len() {
                sim.wbuf.clear();
                sim.wpos = 0;
            } else if sim.wpos > 1 << 20 {
                sim.wbuf.drain(..sim.wpos);
                sim.wpos = 0;
            }
        }
    }
    r.per_peer_sent = sims.iter().map(|s| (s.idx, s.sent)).collect();
    Ok(r)
}
