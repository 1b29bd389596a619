//! The Gnutella throughput experiment's two routers and its traffic, apart, for
//! instruction counts that the machine's load does not move
//! (`bench/callgrind/gnutella.sh` runs the router under callgrind and the feeder
//! outside it):
//!
//! ```text
//! cargo build --release -p seda-experiments --example gnutella_replay
//! valgrind --tool=callgrind target/release/examples/gnutella_replay staged &
//! target/release/examples/gnutella_replay feed 127.0.0.1:PORT warmup=2048 n1=10240 n2=40960
//! ```
//!
//! `staged [ROUTER_THREADS [IO]]` starts the staged router with the experiment's
//! settings (`seda_experiments::gnutella::throughput::staged_config`: pong cache
//! off, the benchmark's advertised address, 2 router threads, a 5 ms queue delay
//! bound, one event loop per core) on the socket backend IO (`auto`, the
//! experiment's, is io_uring on a recent kernel; valgrind cannot run io_uring, so
//! the script passes `epoll`), `plain` the plain one-thread loop
//! (`seda_experiments::gnutella::plain`); each prints `listening on ADDR` and runs
//! until it is killed.
//!
//! `feed ADDR PHASE...` connects `PEERS` (4) simulated ultrapeers (the handshake of
//! `seda load gnutella`) and sends the experiment's traffic: 85 % pings and 15 %
//! queries of 32 payload bytes, TTL 2, hops 0, every GUID fresh (marked as the
//! generator marks its own). A phase `NAME=N` sends N messages in steps: each peer
//! writes `BATCH` (256, the generator's write) messages at once, then the feeder
//! reads until every copy of the step has arrived (each message at the 3 other
//! peers, and each ping's pong at its sender), so no queue ever stands and nothing
//! is shed: every message is routed exactly once, and a copy that does not arrive
//! within a minute is an error. A phase `NAME=Ss` keeps the connections open and
//! idle for S seconds. After each phase it runs `HOOK NAME` if `--hook HOOK` is
//! given (the script zeroes and dumps callgrind's counters there) and prints
//! `phase NAME: N messages, C copies, T s` (T: from the end of the previous phase's
//! hook to the end of this phase).
//!
//! Environment: PEERS (4), BATCH (256), SEED (1).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use seda_experiments::gnutella::plain::PlainLoop;
use seda_experiments::gnutella::throughput::{ThroughputConfig, staged_config};
use seda_gnutella::Gnutella;
use seda_load::gnutella::wire::{self, HEADER_LEN, PING, PONG, QUERY, write_message};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The generator's mark on its GUIDs (byte 8 and byte 15, as seda-load's).
const MARK8: u8 = 0xff;
const MARK15: u8 = 0x5e;
/// Byte 15 of the probes that find out when the router routes to every peer.
const PROBE15: u8 = 0x5f;

/// How long one step's copies may take (under callgrind the router is ~50x slower).
const STEP_DEADLINE: Duration = Duration::from_secs(60);

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("staged") => {
            let threads = match args.get(1) {
                Some(t) => t.parse().map_err(|e| format!("router threads: {e}"))?,
                None => ThroughputConfig::default().router_threads,
            };
            let io: seda_io::IoBackend = match args.get(2) {
                Some(io) => io.parse()?,
                None => seda_io::IoBackend::Auto,
            };
            let cfg = ThroughputConfig {
                router_threads: threads,
                ..ThroughputConfig::default()
            };
            let rt = seda::Runtime::builder().name("gnutella-replay").build();
            let mut router = staged_config(&cfg, false);
            router.io = io;
            let g = Gnutella::start(&rt, router)?;
            rt.start()?;
            println!("listening on {}", g.local_addr());
            park()
        }
        Some("plain") => {
            let p = PlainLoop::start()?;
            println!("listening on {}", p.addr());
            park()
        }
        Some("feed") => feed(&args[1..]),
        _ => Err(
            "usage: gnutella_replay staged [ROUTER_THREADS [auto|epoll|uring]] | plain | \
                  feed ADDR [--hook CMD] NAME=MESSAGES|NAME=SECONDSs..."
                .into(),
        ),
    }
}

fn park() -> ! {
    let _ = io::stdout().flush();
    loop {
        std::thread::park();
    }
}

fn env_usize(name: &str, default: usize) -> Result<usize, Error> {
    match std::env::var(name) {
        Ok(v) => Ok(v.parse().map_err(|e| format!("{name}={v}: {e}"))?),
        Err(_) => Ok(default),
    }
}

enum Phase {
    Messages(String, u64),
    Idle(String, Duration),
}

struct Peer {
    stream: MioStream,
    rbuf: Vec<u8>,
    seq: u32,
}

fn feed(args: &[String]) -> Result<(), Error> {
    let addr: SocketAddr = args
        .first()
        .ok_or("feed: the router's address")?
        .parse()
        .map_err(|e| format!("feed: address: {e}"))?;
    let mut hook: Option<Vec<String>> = None;
    let mut phases = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        if a == "--hook" {
            let cmd = it.next().ok_or("--hook needs a command")?;
            hook = Some(cmd.split_whitespace().map(str::to_owned).collect());
            continue;
        }
        let (name, v) = a
            .split_once('=')
            .ok_or_else(|| format!("phase {a:?}: expected NAME=MESSAGES or NAME=SECONDSs"))?;
        phases.push(match v.strip_suffix('s') {
            Some(secs) => Phase::Idle(
                name.to_owned(),
                Duration::from_secs_f64(secs.parse().map_err(|e| format!("{a}: {e}"))?),
            ),
            None => Phase::Messages(name.to_owned(), v.parse().map_err(|e| format!("{a}: {e}"))?),
        });
    }
    let n_peers = env_usize("PEERS", 4)?;
    let batch = env_usize("BATCH", 256)?.max(1);
    if n_peers < 2 {
        return Err("PEERS must be at least 2".into());
    }
    let mut rng = fastrand::Rng::with_seed(env_usize("SEED", 1)? as u64);
    let mut poll = Poll::new()?;
    let mut peers = Vec::new();
    for i in 0..n_peers {
        let mut stream = MioStream::from_std(wire::handshake(
            addr,
            "gnutella-replay",
            false,
            STEP_DEADLINE,
        )?);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)?;
        peers.push(Peer {
            stream,
            rbuf: Vec::with_capacity(64 * 1024),
            seq: 0,
        });
    }
    settle(&mut poll, &mut peers)?;
    let query: Vec<u8> = {
        let mut p = vec![0x80u8, 0x00];
        p.extend(std::iter::repeat_n(b'q', 32 - 3));
        p.push(0);
        p
    };
    let mut events = Events::with_capacity(64);
    let mut since = Instant::now();
    let mut counter: u64 = 0;
    let mut wbuf = Vec::with_capacity(batch * (HEADER_LEN + query.len()));
    for phase in &phases {
        let (name, sent, copies) = match phase {
            Phase::Idle(name, d) => {
                // Read (and drop) whatever the router sends meanwhile (keep-alives).
                let end = Instant::now() + *d;
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    poll.poll(&mut events, Some(left))?;
                    for p in &mut peers {
                        drain(p)?;
                        p.rbuf.clear();
                    }
                }
                (name, 0, 0)
            }
            Phase::Messages(name, n) => {
                let mut sent = 0u64;
                let mut copies = 0u64;
                while sent < *n {
                    let mut expected = 0u64;
                    for (i, p) in peers.iter_mut().enumerate() {
                        wbuf.clear();
                        let k = (batch as u64).min(*n - sent);
                        for _ in 0..k {
                            counter += 1;
                            p.seq += 1;
                            let mut g = [0u8; 16];
                            g[..8].copy_from_slice(&counter.to_le_bytes());
                            g[8] = MARK8;
                            g[9..11].copy_from_slice(&(i as u16).to_le_bytes());
                            g[11..15].copy_from_slice(&p.seq.to_le_bytes());
                            g[15] = MARK15;
                            if rng.f64() < 0.15 {
                                write_message(&mut wbuf, g, QUERY, 2, 0, &query);
                            } else {
                                write_message(&mut wbuf, g, PING, 2, 0, &[]);
                                expected += 1; // our pong
                            }
                            expected += (n_peers - 1) as u64;
                        }
                        sent += k;
                        write_fully(&mut p.stream, &wbuf)?;
                        if sent >= *n {
                            break;
                        }
                    }
                    copies += receive(&mut poll, &mut events, &mut peers, expected)?;
                }
                (name, sent, copies)
            }
        };
        let secs = since.elapsed().as_secs_f64();
        if let Some(cmd) = &hook {
            let st = std::process::Command::new(&cmd[0])
                .args(&cmd[1..])
                .arg(name)
                .status()?;
            if !st.success() {
                return Err(format!("hook {cmd:?} {name}: {st}").into());
            }
        }
        since = Instant::now();
        println!("phase {name}: {sent} messages, {copies} copies, {secs:.3} s");
    }
    Ok(())
}

/// Waits until the router routes to every peer: a router learns of a connection
/// when its handshake is through, which may be after another peer's first
/// messages (the staged router's `Joined` event is queued behind other work).
/// Every peer sends a probe ping (byte 15 [`PROBE15`], not counted as ours) each
/// round until one round's probes reach every other peer.
fn settle(poll: &mut Poll, peers: &mut [Peer]) -> Result<(), Error> {
    let mut events = Events::with_capacity(64);
    let n = peers.len();
    let deadline = Instant::now() + STEP_DEADLINE;
    for round in 1u64.. {
        let mut b = Vec::new();
        for (i, p) in peers.iter_mut().enumerate() {
            b.clear();
            let mut g = [0u8; 16];
            g[..8].copy_from_slice(&round.to_le_bytes());
            g[8] = MARK8;
            g[9..11].copy_from_slice(&(i as u16).to_le_bytes());
            g[15] = PROBE15;
            write_message(&mut b, g, PING, 2, 0, &[]);
            write_fully(&mut p.stream, &b)?;
        }
        let mut got = 0;
        let round_end = Instant::now() + Duration::from_secs(2);
        while let Some(left) = round_end.checked_duration_since(Instant::now()) {
            poll.poll(&mut events, Some(left))?;
            for p in peers.iter_mut() {
                drain(p)?;
                let mut at = 0;
                while p.rbuf.len() - at >= HEADER_LEN {
                    let m = &p.rbuf[at..];
                    let len = u32::from_le_bytes([m[19], m[20], m[21], m[22]]) as usize;
                    if m.len() < HEADER_LEN + len {
                        break;
                    }
                    if m[15] == PROBE15 && m[16] == PING && m[..8] == round.to_le_bytes() {
                        got += 1;
                    }
                    at += HEADER_LEN + len;
                }
                p.rbuf.drain(..at);
            }
            if got == n * (n - 1) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the router did not route to all {n} peers within {STEP_DEADLINE:?}"
            )
            .into());
        }
    }
    Ok(())
}

/// Writes all of `b` to a nonblocking stream (the router reads it meanwhile).
fn write_fully(s: &mut MioStream, mut b: &[u8]) -> io::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    while !b.is_empty() {
        match s.write(b) {
            Ok(0) => return Err(io::Error::other("router closed the connection")),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(io::Error::other("the router did not read for a minute"));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads everything available on `p` into its buffer.
fn drain(p: &mut Peer) -> io::Result<()> {
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match p.stream.read(&mut chunk) {
            Ok(0) => return Err(io::Error::other("router closed a connection")),
            Ok(n) => p.rbuf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads until `expected` copies of our messages (and pongs to our pings) arrived;
/// the router's own messages (keep-alive pings, vendor messages) are passed over.
fn receive(
    poll: &mut Poll,
    events: &mut Events,
    peers: &mut [Peer],
    expected: u64,
) -> Result<u64, Error> {
    let deadline = Instant::now() + STEP_DEADLINE;
    let mut got = 0u64;
    loop {
        for p in peers.iter_mut() {
            drain(p)?;
            let mut at = 0;
            while p.rbuf.len() - at >= HEADER_LEN {
                let b = &p.rbuf[at..];
                let len = u32::from_le_bytes([b[19], b[20], b[21], b[22]]) as usize;
                if b.len() < HEADER_LEN + len {
                    break;
                }
                if b[8] == MARK8 && b[15] == MARK15 && matches!(b[16], PING | QUERY | PONG) {
                    got += 1;
                }
                at += HEADER_LEN + len;
            }
            p.rbuf.drain(..at);
        }
        if got >= expected {
            if got > expected {
                return Err(format!("{got} copies where {expected} were due").into());
            }
            return Ok(got);
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return Err(format!(
                "{got} of {expected} copies arrived within {STEP_DEADLINE:?}: \
                 the router lost or shed some"
            )
            .into());
        };
        poll.poll(events, Some(left))?;
    }
}
