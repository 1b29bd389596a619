//! Throughput of the staged router against a plain forwarding loop.
//!
//! The baseline is the same routing work without stages: one thread, one epoll
//! loop, the same handshake answer, framing, payload rules and [`Routes`], writing
//! each destination's copies straight to its socket. Both are driven by the same
//! generator ([`crate::load`]) in the same process on the same cores, in
//! alternating rounds, and the result is the ratio of their medians.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use seda_io::ConnId;
use serde::{Deserialize, Serialize};

use crate::load::{LoadConfig, LoadReport, Mix};
use crate::proto::framing::Framer;
use crate::proto::handshake::Block;
use crate::proto::message::{DEFAULT_MAX_PAYLOAD, Header, MsgType, check, pong_payload};
use crate::routing::{Action, Routes, RoutingConfig};
use crate::{Gnutella, GnutellaStats, RouterConfig};

const LISTENER: Token = Token(usize::MAX);

/// The address both routers of a benchmark name in their pongs (TEST-NET-1, RFC
/// 5737): a routable-looking address, so that both answer every fresh ping.
pub const BENCH_ADVERTISE: (std::net::Ipv4Addr, u16) =
    (std::net::Ipv4Addr::new(192, 0, 2, 1), 6346);

struct PlainConn {
    stream: TcpStream,
    established: bool,
    hs: Vec<u8>,
    answered: bool,
    framer: Framer,
    out: Vec<u8>,
}

/// A running plain forwarding loop.
#[derive(Debug)]
pub struct PlainLoop {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    routed: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl PlainLoop {
    /// Starts the loop on an ephemeral loopback port.
    pub fn start() -> io::Result<PlainLoop> {
        let mut listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let routed = Arc::new(AtomicU64::new(0));
        let (s, r) = (Arc::clone(&stop), Arc::clone(&routed));
        let thread = std::thread::Builder::new()
            .name("plain-loop".into())
            .spawn(move || run_plain(poll, listener, &s, &r))?;
        Ok(PlainLoop {
            addr,
            stop,
            routed,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Messages routed (sent on to at least one connection) so far.
    pub fn routed(&self) -> u64 {
        self.routed.load(Relaxed)
    }
}

impl Drop for PlainLoop {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_plain(mut poll: Poll, listener: TcpListener, stop: &AtomicBool, routed: &AtomicU64) {
    let routes = Routes::new(RoutingConfig::default());
    let mut conns: HashMap<usize, PlainConn> = HashMap::new();
    let mut next = 1usize;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 16 * 1024];
    let mut ready: Vec<usize> = Vec::new();
    while !stop.load(Relaxed) {
        if poll
            .poll(&mut events, Some(Duration::from_millis(20)))
            .is_err()
        {
            return;
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nodelay(true);
                    let id = next;
                    next += 1;
                    if poll
                        .registry()
                        .register(&mut s, Token(id), Interest::READABLE | Interest::WRITABLE)
                        .is_ok()
                    {
                        conns.insert(
                            id,
                            PlainConn {
                                stream: s,
                                established: false,
                                hs: Vec::new(),
                                answered: false,
                                framer: Framer::new(DEFAULT_MAX_PAYLOAD),
                                out: Vec::new(),
                            },
                        );
                    }
                }
            } else {
                ready.push(ev.token().0);
            }
        }
        let now = Instant::now();
        let mut n_routed = 0u64;
        for id in ready.drain(..) {
            while let Some(c) = conns.get_mut(&id) {
                let n = match c.stream.read(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(0) | Err(_) => {
                        if let Some(mut c) = conns.remove(&id) {
                            let _ = poll.registry().deregister(&mut c.stream);
                        }
                        break;
                    }
                    Ok(n) => n,
                };
                if !c.established {
                    c.hs.extend_from_slice(&buf[..n]);
                    if let Ok(Some((_, used))) = Block::parse(&c.hs) {
                        let rest = c.hs.split_off(used);
                        c.hs.clear();
                        if !c.answered {
                            c.answered = true;
                            let ok = Block::new("GNUTELLA/0.6 200 OK")
                                .header("User-Agent", "plain-loop")
                                .header("X-Ultrapeer", "True");
                            c.out.extend_from_slice(&ok.to_bytes());
                            c.hs = rest;
                        } else {
                            c.established = true;
                            if let Ok(chunk) = c.framer.feed(rest) {
                                n_routed += route_chunk(&routes, &mut conns, id, chunk, now);
                            }
                        }
                    }
                } else {
                    match c.framer.feed(buf[..n].to_vec()) {
                        Ok(chunk) => n_routed += route_chunk(&routes, &mut conns, id, chunk, now),
                        Err(_) => {
                            conns.remove(&id);
                            break;
                        }
                    }
                }
                if n < buf.len() {
                    break;
                }
            }
        }
        for c in conns.values_mut() {
            let mut pos = 0;
            while pos < c.out.len() {
                match c.stream.write(&c.out[pos..]) {
                    Ok(n) if n > 0 => pos += n,
                    _ => break,
                }
            }
            c.out.drain(..pos);
            // Unwritten output waits for the next turn (a short poll timeout).
        }
        routed.fetch_add(n_routed, Relaxed);
    }
}

fn route_chunk(
    routes: &Routes,
    conns: &mut HashMap<usize, PlainConn>,
    from: usize,
    chunk: crate::proto::framing::Chunk,
    now: Instant,
) -> u64 {
    let mut n = 0;
    for f in &chunk.frames {
        let h = f.header;
        let p = chunk.payload(f);
        if check(&h, p).is_err() || h.kind.is_link_local() {
            continue;
        }
        match routes.route(ConnId(from as u64), &h, p, now) {
            Action::Broadcast(next) => {
                if h.kind == MsgType::Ping {
                    pong(conns, from, &h);
                }
                let mut any = false;
                for (id, c) in conns.iter_mut() {
                    if *id != from && c.established {
                        c.out.extend_from_slice(&next.to_bytes());
                        c.out.extend_from_slice(p);
                        any = true;
                    }
                }
                n += u64::from(any);
            }
            Action::Absorb if h.kind == MsgType::Ping => pong(conns, from, &h),
            Action::Forward(to, next) => {
                if let Some(c) = conns.get_mut(&(to.0 as usize)) {
                    c.out.extend_from_slice(&next.to_bytes());
                    c.out.extend_from_slice(p);
                    n += 1;
                }
            }
            _ => {}
        }
    }
    n
}

fn pong(conns: &mut HashMap<usize, PlainConn>, to: usize, ping: &Header) {
    if let Some(c) = conns.get_mut(&to) {
        let p = pong_payload(BENCH_ADVERTISE.0, BENCH_ADVERTISE.1, 0, 0);
        let h = Header {
            guid: ping.guid,
            kind: MsgType::Pong,
            ttl: ping.hops + 1,
            hops: 0,
            len: p.len() as u32,
        };
        c.out.extend_from_slice(&h.to_bytes());
        c.out.extend_from_slice(&p);
    }
}

/// Settings of the throughput comparison.
#[derive(Clone, Debug)]
pub struct ThroughputConfig {
    /// Simulated peers. Default 4.
    pub peers: usize,
    /// Seconds per round.
    pub duration: Duration,
    /// Rounds of each (alternating). Default 3.
    pub rounds: usize,
    /// Generator threads. Default 1.
    pub threads: usize,
    /// Message mix.
    pub mix: Mix,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        ThroughputConfig {
            peers: 4,
            duration: Duration::from_secs(10),
            rounds: 3,
            threads: 1,
            mix: Mix::default(),
        }
    }
}

/// One round.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Round {
    /// "staged" or "plain".
    pub router: String,
    /// Messages routed per second, counted by the router.
    pub routed_per_s: f64,
    /// Copies delivered per second, counted by the peers.
    pub delivered_per_s: f64,
    /// Messages the peers sent per second.
    pub sent_per_s: f64,
    /// Mean one-way query latency, ms.
    pub query_mean_ms: f64,
    /// Router stats after the round (staged only).
    pub stats: Option<GnutellaStats>,
}

/// Both routers' rounds and the ratio of their medians.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// Every round, in the order run.
    pub rounds: Vec<Round>,
    /// Median routed/s of the staged router.
    pub staged_median: f64,
    /// Median routed/s of the plain loop.
    pub plain_median: f64,
    /// staged / plain.
    pub ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn load(cfg: &ThroughputConfig, router: SocketAddr) -> Result<LoadReport, String> {
    crate::load::run(&LoadConfig {
        router,
        peers: cfg.peers,
        threads: cfg.threads,
        rate: None,
        duration: cfg.duration,
        mix: cfg.mix.clone(),
        hit_fraction: 0.0,
        ..LoadConfig::default()
    })
}

fn round(
    router: &str,
    routed: u64,
    secs: f64,
    r: &LoadReport,
    stats: Option<GnutellaStats>,
) -> Round {
    Round {
        router: router.to_owned(),
        routed_per_s: routed as f64 / secs,
        delivered_per_s: r.delivered_per_s,
        sent_per_s: r.sent_per_s,
        query_mean_ms: r.kinds.get("query").map_or(0.0, |k| k.mean_ms),
        stats,
    }
}

/// Runs the comparison; `log` gets a line per round.
pub fn throughput(cfg: &ThroughputConfig, log: &mut dyn FnMut(&str)) -> Result<Throughput, String> {
    let mut rounds = Vec::new();
    let secs = cfg.duration.as_secs_f64();
    for i in 0..cfg.rounds {
        let plain = PlainLoop::start().map_err(|e| format!("plain loop: {e}"))?;
        let before = plain.routed();
        let r = load(cfg, plain.addr())?;
        let routed = plain.routed() - before;
        drop(plain);
        let p = round("plain", routed, secs, &r, None);
        log(&format!(
            "round {}: plain loop {:.0} routed/s ({:.0} copies/s)",
            i + 1,
            p.routed_per_s,
            p.delivered_per_s
        ));
        rounds.push(p);

        let rt = seda::Runtime::builder().name("gnutella-bench").build();
        let g = Gnutella::start(
            &rt,
            RouterConfig {
                max_peers: cfg.peers + 4,
                min_outgoing: 0,
                advertise: Some(SocketAddr::from(BENCH_ADVERTISE)),
                ..RouterConfig::default()
            },
        )
        .map_err(|e| e.to_string())?;
        rt.start().map_err(|e| e.to_string())?;
        let before = GnutellaStats::total(&g.stats().routed);
        let r = load(cfg, g.local_addr())?;
        let stats = g.stats();
        let routed = GnutellaStats::total(&stats.routed) - before;
        g.stop();
        rt.shutdown(Duration::from_secs(2));
        let s = round("staged", routed, secs, &r, Some(stats));
        log(&format!(
            "round {}: staged router {:.0} routed/s ({:.0} copies/s)",
            i + 1,
            s.routed_per_s,
            s.delivered_per_s
        ));
        rounds.push(s);
    }
    let pick = |name: &str| {
        median(
            rounds
                .iter()
                .filter(|r| r.router == name)
                .map(|r| r.routed_per_s)
                .collect(),
        )
    };
    let (staged, plain) = (pick("staged"), pick("plain"));
    Ok(Throughput {
        rounds,
        staged_median: staged,
        plain_median: plain,
        ratio: if plain > 0.0 { staged / plain } else { 0.0 },
    })
}

/// The comparison as Markdown.
pub fn table(r: &Throughput, cfg: &ThroughputConfig, loadavg: &str) -> String {
    let mut s = format!(
        "Gnutella router throughput, {} ({}; load average at start {loadavg}).\n\
         {} simulated peers sending as fast as the router takes them (mix {:.0} % pings, \
         {:.0} % queries, TTL 2: every message is broadcast to the {} other peers), \
         generator and router in one process on the same cores, {} rounds of {:.0} s each, alternating.\n\n",
        seda_load::experiment::date_utc(),
        seda_load::experiment::machine_summary(),
        cfg.peers,
        cfg.mix.ping * 100.0,
        cfg.mix.query * 100.0,
        cfg.peers.saturating_sub(1),
        cfg.rounds,
        cfg.duration.as_secs_f64(),
    );
    s.push_str("| round | router | routed msgs/s | delivered copies/s | sent msgs/s | query mean ms |\n|---:|---|---:|---:|---:|---:|\n");
    for (i, x) in r.rounds.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} |\n",
            i / 2 + 1,
            x.router,
            x.routed_per_s,
            x.delivered_per_s,
            x.sent_per_s,
            x.query_mean_ms
        ));
    }
    s.push_str(&format!(
        "\nMedian routed msgs/s: staged {:.0}, plain loop {:.0}; ratio staged / plain = {:.2}.\n",
        r.staged_median, r.plain_median, r.ratio
    ));
    s
}
