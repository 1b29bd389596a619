//! Hostile and unusual clients, one wave of each [`Kind`] per soak cycle, and how
//! each exchange ended ([`Outcome`]).
//!
//! Every client is bounded: it gives up at a deadline derived from the server's
//! timeouts, so a wave ends even when the server misbehaves (which is then counted,
//! not waited for). Which outcomes are clean:
//! - a response: `Answered` (2xx/3xx) or `Refused` (503, 408, any 4xx);
//! - `Closed`: the server closed without a response where none was owed (a stalled
//!   reader cut at the send timeout, a slowloris closed at the header timeout);
//! - `Abandoned`: the client left first (a reset, a slow reader giving up).
//!
//! `Unanswered` (a response owed and never sent, or a connection held past every
//! timeout) is what the soak fails on.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ExperimentError;
use seda_load::http::{Feed, ResponseReader};

/// The kinds of client a wave sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Starts a head and sends one byte of it every 500 ms, forever.
    Slowloris,
    /// Requests the large file and reads none of it.
    StalledReader,
    /// Requests the large file and reads it slowly (16 KiB per 100 ms), then leaves.
    SlowReader,
    /// Sends hundreds of pipelined GETs, reads nothing for a second, then reads all.
    PipelineFlood,
    /// A 256 KiB header field.
    OversizedHead,
    /// A body of 1 GiB announced (to a handler, and to a file), 2 MiB of it sent.
    OversizedBody,
    /// Three pipelined requests, then `shutdown(SHUT_WR)`; reads until the end.
    HalfClose,
    /// Twenty pipelined `/bottleneck` requests, then a reset (`SO_LINGER` 0).
    AbruptReset,
    /// 512 bytes that are not HTTP.
    Garbage,
}

impl Kind {
    /// Every kind, in wave order.
    pub const ALL: [Kind; 9] = [
        Kind::Slowloris,
        Kind::StalledReader,
        Kind::SlowReader,
        Kind::PipelineFlood,
        Kind::OversizedHead,
        Kind::OversizedBody,
        Kind::HalfClose,
        Kind::AbruptReset,
        Kind::Garbage,
    ];

    /// A well-behaved client (merely slow or unusual): every request it sends is
    /// owed a response, and a cut is a failure.
    pub fn well_behaved(self) -> bool {
        matches!(
            self,
            Kind::SlowReader | Kind::PipelineFlood | Kind::HalfClose
        )
    }
}

/// How one exchange (one request, or one connection where no request completes)
/// ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx or 3xx response.
    Answered(u16),
    /// A clean refusal: 503, 408 or another 4xx.
    Refused(u16),
    /// The server closed the connection where no response was owed.
    Closed,
    /// The client left first.
    Abandoned,
    /// Owed a response that never came, or held past every timeout: the reason.
    Unanswered(&'static str),
}

impl Outcome {
    fn of_status(status: u16) -> Outcome {
        match status {
            200..=399 => Outcome::Answered(status),
            400..=499 | 503 => Outcome::Refused(status),
            _ => Outcome::Unanswered("a server error (5xx other than 503)"),
        }
    }
}

/// Outcomes of one kind, summed over the soak.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    /// Exchanges counted.
    pub exchanges: u64,
    /// Answered 2xx/3xx.
    pub answered: u64,
    /// Refused cleanly (503, 408, 4xx).
    pub refused: u64,
    /// Closed by the server with nothing owed.
    pub closed: u64,
    /// Left by the client.
    pub abandoned: u64,
    /// Owed a response that never came, or held past every timeout.
    pub unanswered: u64,
    /// Responses by status.
    pub statuses: BTreeMap<u16, u64>,
    /// Unanswered exchanges by reason.
    pub problems: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts one outcome.
    pub fn add(&mut self, o: &Outcome) {
        self.exchanges += 1;
        match *o {
            Outcome::Answered(s) => {
                self.answered += 1;
                *self.statuses.entry(s).or_default() += 1;
            }
            Outcome::Refused(s) => {
                self.refused += 1;
                *self.statuses.entry(s).or_default() += 1;
            }
            Outcome::Closed => self.closed += 1,
            Outcome::Abandoned => self.abandoned += 1,
            Outcome::Unanswered(why) => {
                self.unanswered += 1;
                *self.problems.entry(why.to_string()).or_default() += 1;
            }
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, o: &Tally) {
        self.exchanges += o.exchanges;
        self.answered += o.answered;
        self.refused += o.refused;
        self.closed += o.closed;
        self.abandoned += o.abandoned;
        self.unanswered += o.unanswered;
        for (k, v) in &o.statuses {
            *self.statuses.entry(*k).or_default() += v;
        }
        for (k, v) in &o.problems {
            *self.problems.entry(k.clone()).or_default() += v;
        }
    }
}

/// What a wave sends and the server settings its deadlines derive from.
#[derive(Debug, Clone, Serialize)]
pub struct WaveConfig {
    /// Connections per kind (slow and stalled readers: half of it each way).
    pub per_kind: usize,
    /// Pipelined requests per flooding connection.
    pub flood_depth: usize,
    /// A small file of the root.
    pub small_path: String,
    /// The large file of the root.
    pub large_path: String,
    /// Its size, bytes.
    pub large_len: u64,
    /// The server's `--header-timeout`.
    pub header_timeout: Duration,
    /// The server's `--send-timeout`.
    pub send_timeout: Duration,
    /// How long a slow reader keeps reading before it leaves.
    pub slow_read_for: Duration,
}

impl WaveConfig {
    /// Past this, a client that should have been answered or cut counts as held.
    fn grace(&self) -> Duration {
        self.header_timeout.max(self.send_timeout) + Duration::from_secs(10)
    }
}

/// Runs one wave of every kind against `addr`, the kinds in parallel, and returns
/// each kind's outcomes. Returns once every client has finished (bounded by the
/// deadlines of [`WaveConfig`]).
pub fn wave(addr: SocketAddr, cfg: &WaveConfig) -> BTreeMap<Kind, Tally> {
    let handles: Vec<_> = Kind::ALL
        .into_iter()
        .map(|kind| {
            let cfg = cfg.clone();
            std::thread::Builder::new()
                .name(format!("soak-{kind:?}"))
                .spawn(move || (kind, run_kind(kind, addr, &cfg)))
        })
        .collect();
    let mut out: BTreeMap<Kind, Tally> = BTreeMap::new();
    for h in handles {
        match h.map_err(ExperimentError::other).and_then(|h| {
            h.join()
                .map_err(|_| ExperimentError::run("a hostile client panicked"))
        }) {
            Ok((kind, outcomes)) => {
                let t = out.entry(kind).or_default();
                for o in &outcomes {
                    t.add(o);
                }
            }
            Err(e) => tracing::error!("soak wave: {e}"),
        }
    }
    out
}

fn run_kind(kind: Kind, addr: SocketAddr, cfg: &WaveConfig) -> Vec<Outcome> {
    let n = cfg.per_kind.max(1);
    match kind {
        Kind::Slowloris => slowloris(addr, n, cfg),
        Kind::StalledReader | Kind::SlowReader | Kind::PipelineFlood => {
            let count = if kind == Kind::PipelineFlood {
                n.div_ceil(4)
            } else {
                n.div_ceil(2)
            };
            let threads: Vec<_> = (0..count)
                .map(|_| {
                    let cfg = cfg.clone();
                    std::thread::spawn(move || match kind {
                        Kind::StalledReader => vec![stalled_reader(addr, &cfg)],
                        Kind::SlowReader => vec![slow_reader(addr, &cfg)],
                        _ => pipeline_flood(addr, &cfg),
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| vec![Outcome::Unanswered("the client panicked")])
                })
                .collect()
        }
        Kind::OversizedHead => (0..n).map(|_| oversized_head(addr)).collect(),
        Kind::OversizedBody => (0..n)
            .map(|i| oversized_body(addr, i % 2 == 0, cfg))
            .collect(),
        Kind::HalfClose => (0..n).flat_map(|_| half_close(addr, cfg)).collect(),
        Kind::AbruptReset => (0..n).map(|_| abrupt_reset(addr)).collect(),
        Kind::Garbage => (0..n).map(|i| garbage(addr, i as u64)).collect(),
    }
}

/// One GET on a fresh connection, read within `timeout` (the canary's fetch).
pub fn fetch(addr: SocketAddr, path: &str, timeout: Duration) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    if s.write_all(get(path).as_bytes()).is_err() {
        return Outcome::Unanswered("request not accepted");
    }
    match read_responses(&mut s, 1, Instant::now() + timeout) {
        (st, End::Complete) => Outcome::of_status(st[0]),
        (_, End::Eof) => Outcome::Unanswered("closed without a response"),
        (_, End::Deadline) => Outcome::Unanswered("no response in time"),
    }
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// How reading responses ended.
enum End {
    /// Every response expected arrived.
    Complete,
    /// End of stream (or a reset) before that.
    Eof,
    /// The deadline passed with the connection still open.
    Deadline,
}

/// Reads up to `n` responses (to GETs) until `deadline`; returns their statuses and
/// how reading ended.
fn read_responses(s: &mut TcpStream, n: usize, deadline: Instant) -> (Vec<u16>, End) {
    let mut statuses = Vec::with_capacity(n);
    let mut reader = ResponseReader::new();
    reader.start(false);
    let mut buf = vec![0u8; 64 * 1024];
    while statuses.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (statuses, End::Deadline);
        }
        let _ = s.set_read_timeout(Some(left.min(Duration::from_secs(1))));
        let got = match s.read(&mut buf) {
            Ok(0) => {
                let end = eof_end(&mut reader, &mut statuses, n);
                return (statuses, end);
            }
            Ok(k) => k,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return (statuses, End::Eof),
        };
        let mut data = &buf[..got];
        while !data.is_empty() {
            match reader.feed(data) {
                Ok(Feed::More) => break,
                Ok(Feed::Done { response, used }) => {
                    statuses.push(response.status);
                    data = &data[used..];
                    reader.start(false);
                    if statuses.len() == n {
                        return (statuses, End::Complete);
                    }
                }
                Err(_) => return (statuses, End::Eof),
            }
        }
    }
    (statuses, End::Complete)
}

/// A response delimited by the end of the stream completes at the end.
fn eof_end(reader: &mut ResponseReader, statuses: &mut Vec<u16>, n: usize) -> End {
    if !reader.is_fresh()
        && let Ok(r) = reader.eof()
    {
        statuses.push(r.status);
    }
    if statuses.len() >= n {
        End::Complete
    } else {
        End::Eof
    }
}

fn slowloris(addr: SocketAddr, n: usize, cfg: &WaveConfig) -> Vec<Outcome> {
    let mut conns: Vec<Option<TcpStream>> = (0..n)
        .map(|_| {
            let mut s = connect(addr).ok()?;
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
                .ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        })
        .collect();
    let mut out: Vec<Option<Outcome>> = conns
        .iter()
        .map(|c| {
            c.is_none()
                .then_some(Outcome::Unanswered("connection refused"))
        })
        .collect();
    let deadline = Instant::now() + cfg.grace();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && out.iter().any(Option::is_none) {
        std::thread::sleep(Duration::from_millis(500));
        for (c, o) in conns.iter_mut().zip(out.iter_mut()) {
            let Some(s) = c.as_mut().filter(|_| o.is_none()) else {
                continue;
            };
            let _ = s.write(b"a");
            match s.read(&mut buf) {
                Ok(0) => *o = Some(Outcome::Closed),
                Ok(k) => {
                    let mut r = ResponseReader::new();
                    r.start(false);
                    *o = Some(match r.feed(&buf[..k]) {
                        Ok(Feed::Done { response, .. }) => Outcome::of_status(response.status),
                        // The head of the 408 is all that matters; it came whole.
                        _ => status_line(&buf[..k]).map_or(Outcome::Closed, Outcome::of_status),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => *o = Some(Outcome::Closed),
            }
        }
    }
    out.into_iter()
        .map(|o| {
            o.unwrap_or(Outcome::Unanswered(
                "slowloris held past the header timeout",
            ))
        })
        .collect()
}

fn status_line(b: &[u8]) -> Option<u16> {
    let line = b.strip_prefix(b"HTTP/1.1 ")?;
    std::str::from_utf8(line.get(..3)?).ok()?.parse().ok()
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: soak\r\n\r\n")
}

fn stalled_reader(addr: SocketAddr, cfg: &WaveConfig) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    if s.write_all(get(&cfg.large_path).as_bytes()).is_err() {
        return Outcome::Closed;
    }
    // Take nothing for longer than the send timeout, then see whether the server cut
    // the connection (the rest of the file never arrives) or kept it.
    std::thread::sleep(cfg.send_timeout + Duration::from_secs(3));
    let (statuses, end) = read_responses(&mut s, 1, Instant::now() + Duration::from_secs(10));
    match end {
        End::Complete => Outcome::of_status(statuses[0]),
        End::Eof => Outcome::Closed,
        End::Deadline => Outcome::Unanswered("stalled reader held past the send timeout"),
    }
}

fn slow_reader(addr: SocketAddr, cfg: &WaveConfig) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    if s.write_all(get(&cfg.large_path).as_bytes()).is_err() {
        return Outcome::Unanswered("slow reader: request not accepted");
    }
    let _ = s.set_read_timeout(Some(cfg.grace()));
    let end = Instant::now() + cfg.slow_read_for;
    let mut buf = vec![0u8; 16 * 1024];
    let mut got = 0u64;
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => got += k as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        if got >= cfg.large_len {
            return Outcome::Answered(200);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if Instant::now() < end {
        Outcome::Unanswered("slow reader cut while making progress")
    } else {
        Outcome::Abandoned
    }
}

fn pipeline_flood(addr: SocketAddr, cfg: &WaveConfig) -> Vec<Outcome> {
    let n = cfg.flood_depth.max(1);
    let Ok(mut s) = connect(addr) else {
        return vec![Outcome::Unanswered("connection refused"); n];
    };
    let one = get(&cfg.small_path);
    let all = one.repeat(n);
    // The writer must not block on a server that stops reading while we do not read:
    // send from a thread, read here after a second.
    let Ok(mut w) = s.try_clone() else {
        return vec![Outcome::Unanswered("cannot clone the socket"); n];
    };
    let writer = std::thread::spawn(move || w.write_all(all.as_bytes()));
    std::thread::sleep(Duration::from_secs(1));
    let deadline = Instant::now() + cfg.grace() + Duration::from_secs(20);
    let (statuses, _) = read_responses(&mut s, n, deadline);
    let _ = writer.join();
    let mut out: Vec<Outcome> = statuses.into_iter().map(Outcome::of_status).collect();
    out.resize(n, Outcome::Unanswered("pipelined request never answered"));
    out
}

fn oversized_head(addr: SocketAddr) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    let mut req = b"GET / HTTP/1.1\r\nHost: soak\r\nX-Big: ".to_vec();
    req.resize(req.len() + 256 * 1024, b'a');
    req.extend_from_slice(b"\r\n\r\n");
    // The server may answer 431 and close before all of it is written.
    let _ = s.write_all(&req);
    match read_responses(&mut s, 1, Instant::now() + Duration::from_secs(15)) {
        (st, End::Complete) => Outcome::of_status(st[0]),
        (_, End::Eof) => Outcome::Closed,
        (_, End::Deadline) => Outcome::Unanswered("oversized head: no answer"),
    }
}

fn oversized_body(addr: SocketAddr, to_handler: bool, cfg: &WaveConfig) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    let path = if to_handler {
        "/bottleneck"
    } else {
        cfg.small_path.as_str()
    };
    let head = format!("POST {path} HTTP/1.1\r\nHost: soak\r\nContent-Length: 1073741824\r\n\r\n");
    if s.write_all(head.as_bytes()).is_err() {
        return Outcome::Closed;
    }
    let chunk = vec![b'b'; 64 * 1024];
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    for _ in 0..32 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let out = match read_responses(&mut s, 1, Instant::now() + Duration::from_secs(15)) {
        (st, End::Complete) => Outcome::of_status(st[0]),
        (_, End::Eof) => Outcome::Closed,
        (_, End::Deadline) => Outcome::Unanswered("oversized body: no answer"),
    };
    let _ = s.shutdown(Shutdown::Both);
    out
}

fn half_close(addr: SocketAddr, cfg: &WaveConfig) -> Vec<Outcome> {
    let paths = [
        cfg.small_path.as_str(),
        "/bottleneck",
        cfg.small_path.as_str(),
    ];
    let Ok(mut s) = connect(addr) else {
        return vec![Outcome::Unanswered("connection refused"); paths.len()];
    };
    let req: String = paths.iter().map(|p| get(p)).collect();
    if s.write_all(req.as_bytes()).is_err() || s.shutdown(Shutdown::Write).is_err() {
        return vec![Outcome::Unanswered("half-close: request not accepted"); paths.len()];
    }
    let (statuses, _) = read_responses(&mut s, paths.len(), Instant::now() + cfg.grace());
    let mut out: Vec<Outcome> = statuses.into_iter().map(Outcome::of_status).collect();
    out.resize(
        paths.len(),
        Outcome::Unanswered("half-closed: response lost"),
    );
    out
}

fn abrupt_reset(addr: SocketAddr) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    let _ = s.write_all(get("/bottleneck").repeat(20).as_bytes());
    std::thread::sleep(Duration::from_millis(20));
    let _ = rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO));
    drop(s);
    Outcome::Abandoned
}

fn garbage(addr: SocketAddr, seed: u64) -> Outcome {
    let Ok(mut s) = connect(addr) else {
        return Outcome::Unanswered("connection refused");
    };
    let mut rng = fastrand::Rng::with_seed(seed);
    // Control bytes first: never a method token, so a 400 and not a wait.
    let mut bytes = vec![0x01u8];
    bytes.extend((0..511).map(|_| rng.u8(..)));
    let _ = s.write_all(&bytes);
    match read_responses(&mut s, 1, Instant::now() + Duration::from_secs(15)) {
        (st, End::Complete) => Outcome::of_status(st[0]),
        (_, End::Eof) => Outcome::Closed,
        (_, End::Deadline) => Outcome::Unanswered("garbage: no answer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_tallied_by_kind_of_end() {
        let mut t = Tally::default();
        for o in [
            Outcome::Answered(200),
            Outcome::Refused(503),
            Outcome::Refused(408),
            Outcome::Closed,
            Outcome::Abandoned,
            Outcome::Unanswered("lost"),
            Outcome::of_status(500),
        ] {
            t.add(&o);
        }
        assert_eq!(
            (
                t.exchanges,
                t.answered,
                t.refused,
                t.closed,
                t.abandoned,
                t.unanswered
            ),
            (7, 1, 2, 1, 1, 2)
        );
        assert_eq!(t.problems["lost"], 1);
        let mut sum = Tally::default();
        sum.merge(&t);
        sum.merge(&t);
        assert_eq!((sum.exchanges, sum.statuses[&503]), (14, 2));
        assert_eq!(status_line(b"HTTP/1.1 408 Request Timeout\r\n"), Some(408));
    }
}
