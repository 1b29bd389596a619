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
use std::net::TcpStream;
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
    /// Per second.
    pub(crate) series: Vec<Second>,
    /// Per peer (global index): messages it sent, copies of its messages received.
    pub(crate) per_peer_sent: Vec<(usize, u64)>,
    pub(crate) delivered_from: Vec<u64>,
    pub(crate) write_stalls: u64,
    pub(crate) closed_by_router: u64,
    /// Query copies received by this thread's leaves.
    pub(crate) leaf_query_copies: u64,
}

/// One second of a generator thread's receipts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Second {
    /// Copies received, per kind.
    pub(crate) received: [u64; N_KINDS],
    /// Copies timed (all but unsampled pings), per kind.
    pub(crate) timed: [u64; N_KINDS],
    /// Latency sum of the timed copies, microseconds, per kind.
    pub(crate) sum_us: [u64; N_KINDS],
}

/// Bytes of a peer's receive buffer (reads go straight into it).
const RBUF: usize = 256 * 1024;

struct Sim {
    idx: usize,
    leaf: bool,
    stream: MioStream,
    /// Received bytes `rpos..rend` not framed yet; the buffer is `RBUF` long.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    sent: u64,
    seq: u32,
    dead: bool,
}

/// Last GUID byte of a generated (timed) message.
const TIMED: u8 = 0x5e;

fn timed_guid(ns: u64, peer: usize, seq: u32) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&ns.to_le_bytes());
    g[8] = 0xff;
    g[9..11].copy_from_slice(&(peer as u16).to_le_bytes());
    g[11..15].copy_from_slice(&seq.to_le_bytes());
    g[15] = TIMED;
    g
}

/// Frames and times the complete messages in `sim.rbuf[rpos..rend]`: every copy is
/// counted; its latency is recorded for every query, query hit and pong and for
/// one ping in `ping_sample` (by the sender's sequence number, so the sample is
/// unbiased), which keeps the generator's cost per copy low at millions a second.
#[allow(clippy::too_many_arguments)]
fn frame(
    sim: &mut Sim,
    r: &mut ThreadResult,
    cfg: &LoadConfig,
    rng: &mut fastrand::Rng,
    now_ns: u64,
    measured: bool,
    second: usize,
    ping_sample: u32,
) {
    while sim.rend - sim.rpos >= HEADER_LEN {
        let b = &sim.rbuf[sim.rpos..sim.rend];
        let len = u32::from_le_bytes([b[19], b[20], b[21], b[22]]) as usize;
        let end_at = sim.rpos + HEADER_LEN + len;
        if end_at > sim.rend {
            break;
        }
        let kind = Kind::of(b[16]);
        if let Some(kind) = kind
            && b[8] == 0xff
            && b[15] == TIMED
        {
            let k = kind as usize;
            r.received[k] += 1;
            if kind == Kind::Query && sim.leaf {
                r.leaf_query_copies += 1;
            }
            if let Some(slot) = r.series.get_mut(second) {
                slot.received[k] += 1;
            }
            let from = usize::from(u16::from_le_bytes([b[9], b[10]]));
            if from < r.delivered_from.len() {
                r.delivered_from[from] += 1;
            }
            let seq = u32::from_le_bytes([b[11], b[12], b[13], b[14]]);
            if kind != Kind::Ping || seq % ping_sample == 0 {
                let sent = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                let us = now_ns.saturating_sub(sent) / 1000;
                if measured {
                    crate::metrics::record_us(&mut r.latency[k], us);
                }
                if let Some(slot) = r.series.get_mut(second) {
                    slot.timed[k] += 1;
                    slot.sum_us[k] += us;
                }
            }
            if kind == Kind::Query && cfg.hit_fraction > 0.0 && rng.f64() < cfg.hit_fraction {
                let h = Header::parse(b).unwrap_or(Header {
                    guid: [0; 16],
                    kind: 0,
                    ttl: 0,
                    hops: 0,
                    len: 0,
                });
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
            leaf: cfg.is_leaf(idx),
            stream,
            rbuf: vec![0; RBUF],
            rpos: 0,
            rend: 0,
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
        series: vec![Second::default(); seconds],
        per_peer_sent: Vec::new(),
        delivered_from: vec![0; total_peers],
        write_stalls: 0,
        closed_by_router: 0,
        leaf_query_copies: 0,
    };
    let per_peer_rate = cfg.rate.map(|r| r / total_peers as f64);
    let mut rng = fastrand::Rng::with_seed(cfg.seed ^ (sims.first().map_or(0, |s| s.idx) as u64));
    // Without leaves, one query text of `query_bytes`; with leaves, words of the
    // vocabulary (what the leaves' tables are made of).
    let query_text: Vec<u8> = {
        let mut p = vec![0x80u8, 0x00];
        p.extend(std::iter::repeat_n(b'q', cfg.query_bytes.saturating_sub(3)));
        p.push(0);
        p
    };
    let mut worded = Vec::with_capacity(64);
    let measured_from = start + cfg.warmup;
    let ping_sample = u32::from(cfg.ping_sample.max(1));
    let mut events = Events::with_capacity(256);
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
        let now_ns = now.saturating_duration_since(epoch).as_nanos() as u64;
        let measured = now >= measured_from;
        let second = now.saturating_duration_since(start).as_secs() as usize;
        // Reads: every peer, since edge-triggered readiness may have been consumed;
        // straight into its buffer, framed in place.
        for sim in sims.iter_mut().filter(|s| !s.dead) {
            loop {
                if RBUF - sim.rend < 16 * 1024 {
                    // Only an incomplete message is left before rpos is reused.
                    sim.rbuf.copy_within(sim.rpos..sim.rend, 0);
                    sim.rend -= sim.rpos;
                    sim.rpos = 0;
                }
                let room = RBUF - sim.rend;
                match sim.stream.read(&mut sim.rbuf[sim.rend..]) {
                    Ok(0) => {
                        sim.dead = true;
                        r.closed_by_router += 1;
                        break;
                    }
                    Ok(n) => {
                        sim.rend += n;
                        frame(
                            sim,
                            &mut r,
                            cfg,
                            &mut rng,
                            now_ns,
                            measured,
                            second,
                            ping_sample,
                        );
                        if n < room {
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
            if sim.rpos == sim.rend {
                sim.rpos = 0;
                sim.rend = 0;
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
                    let g = timed_guid(now_ns, sim.idx, sim.seq);
                    sim.seq = sim.seq.wrapping_add(1);
                    let kind = cfg.mix.pick(rng.f64());
                    match kind {
                        Kind::Query if cfg.leaves > 0 => {
                            worded.clear();
                            worded.extend_from_slice(&[0x80, 0x00]);
                            for w in 0..cfg.query_words {
                                if w > 0 {
                                    worded.push(b' ');
                                }
                                let i = rng.usize(..cfg.vocabulary);
                                worded.extend_from_slice(LoadConfig::word(i).as_bytes());
                            }
                            worded.push(0);
                            write_message(&mut sim.wbuf, g, wire::QUERY, cfg.ttl, 0, &worded)
                        }
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
