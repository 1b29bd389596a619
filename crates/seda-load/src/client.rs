//! The HTTP load generator: one mio event loop per thread, each driving a share of the
//! users (closed loop) or of the arrival rate (open loop).
//!
//! Closed loop (SEDA 5.1.2): a user starts a request, reads the whole response, thinks
//! for `think`, and closes its connection after `reqs_per_conn` requests; the
//! response time runs from the start of the request, connection set-up included.
//!
//! Open loop: Poisson arrivals at the scheduled rate; each arrival takes an idle pooled
//! connection, opens a new one (up to `max_conns`), or waits in a client-side queue.
//! Its response time runs from the *intended* arrival time, so time spent waiting in
//! the client or behind a slow connection counts (no coordinated omission).
//!
//! At the end of the schedule no new request starts; requests still running after the
//! drain period are counted as errors (`unfinished`), so every issued request ends as
//! exactly one of completed, rejected or error.
//!
//! A request on a reused keep-alive connection that the server closed before sending a
//! byte is retried once on a new connection (as browsers do for idempotent requests);
//! its response time still runs from the first attempt.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::dist::SpecWebPopularity;
use crate::error::LoadError;
use crate::fileset::{Manifest, file_path};
use crate::http::{Feed, HttpError, Response, ResponseReader};
use crate::metrics::{cdf, jain_index, quantile_ms, record_us, rt_histogram};
use crate::report::{ClassCount, LoadReport, PhaseSummary, Tick, TimePoint};
use crate::schedule::Schedule;

/// Closed or open loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Users that request, read, think, repeat. Schedule levels are user counts.
    Closed {
        /// Think time between a response and the next request.
        think: Duration,
        /// Requests per connection before the client closes it (>= 1).
        reqs_per_conn: u32,
    },
    /// Poisson arrivals. Schedule levels are requests per second.
    Open {
        /// Requests per connection before the client closes it (>= 1).
        reqs_per_conn: u32,
        /// Most connections open at once (>= 1); arrivals beyond wait in the client.
        max_conns: usize,
    },
}

/// What to request.
#[derive(Debug, Clone)]
pub enum RequestMix {
    /// Always this path.
    Path(String),
    /// Files of a SPECweb99 file set, by its popularity model.
    FileSet(Manifest),
}

/// A load run. `#[non_exhaustive]`: start from [`LoadConfig::new`] and set the rest
/// with the `with_*` setters (a new setting is then not a breaking change).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda_load::{LoadConfig, Mode, Schedule};
///
/// let cfg = LoadConfig::new("127.0.0.1:8080".parse().unwrap(), Schedule::steady(Duration::from_secs(10), 50.0))
///     .with_mode(Mode::Open { reqs_per_conn: 1, max_conns: 100 })
///     .with_threads(2);
/// assert_eq!(cfg.host, "127.0.0.1:8080");
/// assert_eq!(cfg.timeout, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoadConfig {
    /// Server address (loopback only, see [`parse_url`]).
    pub addr: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Closed or open loop.
    pub mode: Mode,
    /// Paths to request.
    pub requests: RequestMix,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Levels over time.
    pub schedule: Schedule,
    /// A request running longer than this fails with `timeout`.
    pub timeout: Duration,
    /// After the schedule, how long to wait for requests still running.
    pub drain: Duration,
    /// Event-loop threads (1 or 2 on this machine).
    pub threads: usize,
    /// Seed of all random choices.
    pub seed: u64,
    /// Response-time target: completions within it are counted per second and per
    /// phase as `within_target` (goodput). `None`: not counted (0).
    pub rt_target: Option<Duration>,
    /// Closed loop: after a 503 or a failed request a user waits this long instead of
    /// the think time (USITS'03 4.1: rejected users wait 5 s before trying again).
    /// `None`: the think time.
    pub retry_wait: Option<Duration>,
}

/// Live counters, updated by the event loops as they go.
#[derive(Debug, Default)]
pub struct Progress {
    /// Completed requests so far.
    pub completed: AtomicU64,
    /// Rejected (503) requests so far.
    pub rejected: AtomicU64,
    /// Failed requests so far.
    pub errors: AtomicU64,
}

/// Parse `http://HOST[:PORT][/...]` (an [`http::Uri`]) into an address and a Host
/// header. Only loopback targets are accepted: this tool must never load a machine
/// other than this one.
pub fn parse_url(url: &str) -> Result<(SocketAddr, String), LoadError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| LoadError::parse(format!("--url {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(LoadError::parse(format!(
            "--url {url:?}: only http:// URLs are supported"
        )));
    }
    let authority = match uri.authority() {
        Some(a) if !a.host().is_empty() => a,
        _ => return Err(LoadError::parse(format!("--url {url:?} has no host"))),
    };
    if authority.as_str().contains('@') {
        return Err(LoadError::parse(format!(
            "--url {url:?}: a user name in the URL is not supported"
        )));
    }
    // `host()` keeps an IPv6 address's brackets, as `to_socket_addrs` wants them.
    let host = authority.host();
    let port = match authority.as_str()[host.len()..].strip_prefix(':') {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| LoadError::parse(format!("--url {url:?}: port {p:?} is not 0-65535")))?,
        None => 80,
    };
    let with_port = format!("{host}:{port}");
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(LoadError::io(format!(
            "--url {url:?}: cannot resolve {with_port}"
        )))?
        .collect();
    let addr = addrs
        .iter()
        .copied()
        .find(|a| a.ip().is_loopback())
        .ok_or_else(|| LoadError::config(format!("--url {url:?}: refusing a non-loopback target (this tool only loads 127.0.0.1 / ::1)")))?;
    Ok((addr, authority.as_str().to_string()))
}

crate::setters::setters!(LoadConfig {
    with_addr: addr: SocketAddr,
    with_host: host: String,
    with_mode: mode: Mode,
    with_requests: requests: RequestMix,
    with_headers: headers: Vec<(String, String)>,
    with_schedule: schedule: Schedule,
    with_timeout: timeout: Duration,
    with_drain: drain: Duration,
    with_threads: threads: usize,
    with_seed: seed: u64,
    with_rt_target: rt_target: Option<Duration>,
    with_retry_wait: retry_wait: Option<Duration>,
});

impl LoadConfig {
    /// A run against `addr` over `schedule` with `seda load http`'s defaults: Host
    /// `addr`, a closed loop (20 ms think time, 5 requests per connection) asking
    /// for `/`, no extra headers, a 60 s timeout, 5 s drain, one thread, seed 1, no
    /// response-time target, the think time after a refusal.
    pub fn new(addr: SocketAddr, schedule: Schedule) -> Self {
        LoadConfig {
            addr,
            host: addr.to_string(),
            mode: Mode::Closed {
                think: Duration::from_millis(20),
                reqs_per_conn: 5,
            },
            requests: RequestMix::Path("/".to_owned()),
            headers: Vec::new(),
            schedule,
            timeout: Duration::from_secs(60),
            drain: Duration::from_secs(5),
            threads: 1,
            seed: 1,
            rt_target: None,
            retry_wait: None,
        }
    }

    fn validate(&self) -> Result<(), LoadError> {
        if !self.addr.ip().is_loopback() {
            return Err(LoadError::config(format!(
                "refusing non-loopback target {}",
                self.addr
            )));
        }
        if !(1..=16).contains(&self.threads) {
            return Err(LoadError::config("--threads must be 1..16"));
        }
        match self.mode {
            Mode::Closed { reqs_per_conn, .. } => {
                if reqs_per_conn == 0 {
                    return Err(LoadError::config("--reqs-per-conn must be at least 1"));
                }
                if let Some(p) = self.schedule.phases.iter().find(|p| p.level.fract() != 0.0) {
                    return Err(LoadError::config(format!(
                        "closed-loop schedule levels are user counts, got {}",
                        p.level
                    )));
                }
                if self.schedule.max_level() > 1_000_000.0 {
                    return Err(LoadError::config("at most 1,000,000 users"));
                }
            }
            Mode::Open {
                reqs_per_conn,
                max_conns,
            } => {
                if reqs_per_conn == 0 || max_conns == 0 {
                    return Err(LoadError::config(
                        "--reqs-per-conn and --max-conns must be at least 1",
                    ));
                }
            }
        }
        for (k, v) in &self.headers {
            if k.is_empty() || k.contains([':', '\r', '\n', ' ']) || v.contains(['\r', '\n']) {
                return Err(LoadError::config(format!("bad header {k:?}: {v:?}")));
            }
        }
        if let RequestMix::Path(p) = &self.requests {
            if !p.starts_with('/') || p.contains([' ', '\r', '\n']) {
                return Err(LoadError::config(format!(
                    "--path {p:?} must start with / and hold no spaces"
                )));
            }
        }
        Ok(())
    }

    fn echo(&self) -> serde_json::Value {
        let (mode, think_ms, rpc, max_conns) = match self.mode {
            Mode::Closed {
                think,
                reqs_per_conn,
            } => (
                "closed",
                Some(think.as_secs_f64() * 1e3),
                reqs_per_conn,
                None,
            ),
            Mode::Open {
                reqs_per_conn,
                max_conns,
            } => ("open", None, reqs_per_conn, Some(max_conns)),
        };
        let requests = match &self.requests {
            RequestMix::Path(p) => serde_json::json!({ "path": p }),
            RequestMix::FileSet(m) => serde_json::json!({
                "fileset": { "dirs": m.dirs, "files": m.files, "total_bytes": m.total_bytes, "seed": m.seed }
            }),
        };
        serde_json::json!({
            "addr": self.addr.to_string(),
            "mode": mode,
            "think_ms": think_ms,
            "reqs_per_conn": rpc,
            "max_conns": max_conns,
            "requests": requests,
            "headers": self.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>(),
            "schedule": self.schedule,
            "timeout_s": self.timeout.as_secs_f64(),
            "drain_s": self.drain.as_secs_f64(),
            "threads": self.threads,
            "seed": self.seed,
            "rt_target_ms": self.rt_target.map(|d| d.as_secs_f64() * 1e3),
            "retry_wait_ms": self.retry_wait.map(|d| d.as_secs_f64() * 1e3),
        })
    }
}

/// Run the load and return its report. `on_second` is called about once a second
/// with the elapsed time and the live counters (for a progress line).
pub fn run(
    cfg: &LoadConfig,
    mut on_second: impl FnMut(Duration, &Progress),
) -> Result<LoadReport, LoadError> {
    cfg.validate()?;
    let progress = Arc::new(Progress::default());
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for k in 0..cfg.threads {
        let mut worker = Worker::new(cfg, k, t0, Arc::clone(&progress))?;
        let h = std::thread::Builder::new()
            .name(format!("seda-load-{k}"))
            .spawn(move || worker.run_loop().map(|()| worker.rec))
            .map_err(LoadError::io("cannot start a load thread"))?;
        handles.push(h);
    }
    let mut next = Duration::from_secs(1);
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let el = t0.elapsed();
        if el >= next {
            on_second(el, &progress);
            next += Duration::from_secs(1);
        }
    }
    let mut recs = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => recs.push(r),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(LoadError::Panicked("a load thread")),
        }
    }
    Ok(merge(cfg, recs))
}

/// Per-thread measurements.
struct Recorder {
    ok: Histogram<u64>,
    rejected_rt: Histogram<u64>,
    seconds: Vec<Second>,
    /// The same by tenths of a second.
    tenths: Vec<Tenth>,
    issued: u64,
    completed: u64,
    rejected: u64,
    errors: BTreeMap<&'static str, u64>,
    statuses: BTreeMap<u16, u64>,
    bytes: u64,
    connections: u64,
    by_class: [u64; 4],
    per_user: Vec<u64>,
    end_us: u64,
    /// Longest wait of a request that got no answer (timeout or unfinished), us.
    unanswered_age_us: u64,
}

/// A tenth of a second: counts and every completion's response time (us).
#[derive(Default)]
struct Tenth {
    completed: u64,
    rejected: u64,
    errors: u64,
    rts_us: Vec<u64>,
}

struct Second {
    completed: u64,
    within: u64,
    rejected: u64,
    errors: u64,
    bytes: u64,
    hist: Histogram<u64>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            ok: rt_histogram(3),
            rejected_rt: rt_histogram(2),
            seconds: Vec::new(),
            tenths: Vec::new(),
            issued: 0,
            completed: 0,
            rejected: 0,
            errors: BTreeMap::new(),
            statuses: BTreeMap::new(),
            bytes: 0,
            connections: 0,
            by_class: [0; 4],
            per_user: Vec::new(),
            end_us: 0,
            unanswered_age_us: 0,
        }
    }

    fn second(&mut self, now_us: u64) -> &mut Second {
        let s = (now_us / 1_000_000) as usize;
        while self.seconds.len() <= s {
            self.seconds.push(Second {
                completed: 0,
                within: 0,
                rejected: 0,
                errors: 0,
                bytes: 0,
                hist: rt_histogram(2),
            });
        }
        &mut self.seconds[s]
    }

    fn tenth(&mut self, now_us: u64) -> &mut Tenth {
        let t = (now_us / 100_000) as usize;
        if self.tenths.len() <= t {
            self.tenths.resize_with(t + 1, Tenth::default);
        }
        &mut self.tenths[t]
    }
}

#[derive(Debug)]
struct Req {
    start_us: u64,
    class: Option<u8>,
    retried: bool,
}

#[derive(Debug, Default)]
struct Agent {
    sock: Option<TcpStream>,
    connected: bool,
    reqs_on_conn: u32,
    req: Option<Req>,
    wbuf: Vec<u8>,
    wpos: usize,
    reader: ResponseReader,
    completions: u64,
    /// Closed loop: the user is in the current population.
    active: bool,
    ever_active: bool,
    /// Closed loop: the time the pending think timer fires.
    wake_at: Option<u64>,
}

enum ModeState {
    Closed {
        think_us: u64,
        rpc: u32,
        heap: BinaryHeap<Reverse<(u64, usize)>>,
        global_ids: Vec<usize>,
    },
    Open {
        rpc: u32,
        max_conns: usize,
        idle: Vec<usize>,
        pending: VecDeque<(u64, Option<u8>, String)>,
        next_arrival_us: Option<u64>,
    },
}

struct Worker {
    addr: SocketAddr,
    host: String,
    headers: String,
    requests: RequestMix,
    popularity: Option<SpecWebPopularity>,
    schedule: Schedule,
    timeout_us: u64,
    drain_us: u64,
    target_us: Option<u64>,
    retry_wait_us: Option<u64>,
    threads: usize,
    t0: Instant,
    poll: Poll,
    agents: Vec<Agent>,
    rbuf: Vec<u8>,
    rng: fastrand::Rng,
    mode: ModeState,
    inflight: usize,
    draining: bool,
    phase: Option<usize>,
    rec: Recorder,
    progress: Arc<Progress>,
}

const TICK_US: u64 = 100_000;

impl Worker {
    fn new(
        cfg: &LoadConfig,
        index: usize,
        t0: Instant,
        progress: Arc<Progress>,
    ) -> Result<Self, LoadError> {
        let poll = Poll::new().map_err(LoadError::io("cannot create a poller"))?;
        let popularity = match &cfg.requests {
            RequestMix::FileSet(m) => Some(m.popularity()?),
            RequestMix::Path(_) => None,
        };
        let headers: String = cfg
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let mode = match cfg.mode {
            Mode::Closed {
                think,
                reqs_per_conn,
            } => {
                let max_users = cfg.schedule.max_level() as usize;
                let global_ids: Vec<usize> = (0..max_users)
                    .filter(|u| u % cfg.threads == index)
                    .collect();
                ModeState::Closed {
                    think_us: think.as_micros() as u64,
                    rpc: reqs_per_conn,
                    heap: BinaryHeap::new(),
                    global_ids,
                }
            }
            Mode::Open {
                reqs_per_conn,
                max_conns,
            } => ModeState::Open {
                rpc: reqs_per_conn,
                max_conns: max_conns.div_ceil(cfg.threads).max(1),
                idle: Vec::new(),
                pending: VecDeque::new(),
                next_arrival_us: None,
            },
        };
        let mut agents = Vec::new();
        if let ModeState::Closed { global_ids, .. } = &mode {
            agents.resize_with(global_ids.len(), Agent::default);
        }
        Ok(Worker {
            addr: cfg.addr,
            host: cfg.host.clone(),
            headers,
            requests: cfg.requests.clone(),
            popularity,
            schedule: cfg.schedule.clone(),
            timeout_us: cfg.timeout.as_micros() as u64,
            drain_us: cfg.drain.as_micros() as u64,
            target_us: cfg.rt_target.map(|d| d.as_micros() as u64),
            retry_wait_us: cfg.retry_wait.map(|d| d.as_micros() as u64),
            threads: cfg.threads,
            t0,
            poll,
            agents,
            rbuf: vec![0; 64 * 1024],
            rng: fastrand::Rng::with_seed(
                cfg.seed
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(index as u64),
            ),
            mode,
            inflight: 0,
            draining: false,
            phase: None,
            rec: Recorder::new(),
            progress,
        })
    }

    fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    fn run_loop(&mut self) -> Result<(), LoadError> {
        let mut events = Events::with_capacity(1024);
        let end_us = self.schedule.total().as_micros() as u64;
        let mut next_tick = TICK_US;
        loop {
            let now = self.now_us();
            if !self.draining {
                if now >= end_us {
                    self.start_drain();
                } else {
                    self.update_phase(now);
                }
            }
            if self.draining
                && (self.inflight == 0 && self.pending_len() == 0 || now >= end_us + self.drain_us)
            {
                self.finish_unfinished(now);
                self.rec.end_us = self.now_us();
                if matches!(self.mode, ModeState::Closed { .. }) {
                    self.rec.per_user = self
                        .agents
                        .iter()
                        .filter(|a| a.ever_active)
                        .map(|a| a.completions)
                        .collect();
                }
                return Ok(());
            }
            self.fire_timers(now);
            if now >= next_tick {
                self.check_timeouts(now);
                next_tick = now + TICK_US;
            }
            let mut wake = next_tick.min(if self.draining {
                end_us + self.drain_us
            } else {
                end_us
            });
            if let Some(t) = self.next_timer() {
                wake = wake.min(t);
            }
            let now = self.now_us();
            let timeout = Duration::from_micros(wake.saturating_sub(now));
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LoadError::io("poll failed")(e)),
            }
            for ev in events.iter() {
                let i = ev.token().0;
                if i < self.agents.len() {
                    let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                    self.on_ready(i, readable);
                }
            }
        }
    }

    fn pending_len(&self) -> usize {
        match &self.mode {
            ModeState::Open { pending, .. } => pending.len(),
            ModeState::Closed { .. } => 0,
        }
    }

    fn next_timer(&self) -> Option<u64> {
        match &self.mode {
            ModeState::Closed { heap, .. } => heap.peek().map(|Reverse((t, _))| *t),
            ModeState::Open {
                next_arrival_us, ..
            } => {
                if self.draining {
                    None
                } else {
                    *next_arrival_us
                }
            }
        }
    }

    /// Apply the schedule's level at `now`.
    fn update_phase(&mut self, now: u64) {
        let Some(phase) = self.schedule.phase_at(Duration::from_micros(now)) else {
            return;
        };
        if self.phase == Some(phase) {
            return;
        }
        self.phase = Some(phase);
        let level = self.schedule.phases[phase].level;
        let phase_end_us = self.schedule.phase_end(phase).as_micros() as u64;
        match &mut self.mode {
            ModeState::Closed {
                think_us,
                heap,
                global_ids,
                ..
            } => {
                let users = level as usize;
                for (j, &u) in global_ids.iter().enumerate() {
                    let a = &mut self.agents[j];
                    let should = u < users;
                    if should && !a.active {
                        a.active = true;
                        a.ever_active = true;
                        if a.req.is_none() && a.wake_at.is_none() {
                            // Stagger first requests over one think time.
                            let at = now + self.rng.u64(0..=*think_us);
                            a.wake_at = Some(at);
                            heap.push(Reverse((at, j)));
                        }
                    } else if !should && a.active {
                        a.active = false;
                        a.wake_at = None;
                        if a.req.is_none() {
                            if let Some(s) = a.sock.take() {
                                let _ = self.poll.registry().deregister(&mut { s });
                            }
                        }
                    }
                }
            }
            ModeState::Open {
                next_arrival_us, ..
            } => {
                // The first arrival of the phase; with no rate, a marker at its end so
                // that the next phase is read on time.
                let rate = level / self.threads as f64;
                let first = if rate > 0.0 {
                    now + exp_gap_us(&mut self.rng, rate)
                } else {
                    phase_end_us
                };
                *next_arrival_us = Some(first.min(phase_end_us));
            }
        }
    }

    fn start_drain(&mut self) {
        self.draining = true;
        for j in 0..self.agents.len() {
            let a = &mut self.agents[j];
            a.active = false;
            a.wake_at = None;
            if a.req.is_none() {
                self.close(j);
            }
        }
    }

    /// Requests still running at the end of the drain fail as `unfinished`.
    fn finish_unfinished(&mut self, now: u64) {
        for j in 0..self.agents.len() {
            if self.agents[j].req.is_some() {
                self.fail(j, "unfinished", now);
            }
        }
        if let ModeState::Open { pending, .. } = &mut self.mode {
            let n = pending.len() as u64;
            if let Some((t, _, _)) = pending.front() {
                self.rec.unanswered_age_us = self.rec.unanswered_age_us.max(now.saturating_sub(*t));
            }
            pending.clear();
            if n > 0 {
                *self.rec.errors.entry("unfinished").or_default() += n;
                self.rec.second(now).errors += n;
                self.rec.tenth(now).errors += n;
                self.progress.errors.fetch_add(n, Ordering::Relaxed);
            }
        }
        for j in 0..self.agents.len() {
            self.close(j);
        }
    }

    fn fire_timers(&mut self, now: u64) {
        match &mut self.mode {
            ModeState::Closed { heap, .. } => {
                let mut due = Vec::new();
                while let Some(&Reverse((t, j))) = heap.peek() {
                    if t > now {
                        break;
                    }
                    heap.pop();
                    due.push((t, j));
                }
                for (t, j) in due {
                    let a = &self.agents[j];
                    if a.active && a.req.is_none() && a.wake_at == Some(t) && !self.draining {
                        self.agents[j].wake_at = None;
                        let (path, class) = self.pick();
                        let start = self.now_us();
                        self.rec.issued += 1;
                        self.begin(j, start, path, class);
                    }
                }
            }
            ModeState::Open { .. } => {
                if self.draining {
                    return;
                }
                loop {
                    let ModeState::Open {
                        next_arrival_us, ..
                    } = &mut self.mode
                    else {
                        return;
                    };
                    let Some(t) = *next_arrival_us else { return };
                    if t > now {
                        return;
                    }
                    let phase = self.schedule.phase_at(Duration::from_micros(t));
                    match phase {
                        Some(p) if Some(p) == self.phase => {}
                        _ => {
                            // A phase boundary: the next phase draws its own arrivals.
                            self.phase = None;
                            if phase.is_some() {
                                self.update_phase(t);
                            } else {
                                *next_arrival_us = None;
                            }
                            continue;
                        }
                    }
                    let rate =
                        self.schedule.phases[self.phase.unwrap_or(0)].level / self.threads as f64;
                    let phase_end =
                        self.schedule.phase_end(self.phase.unwrap_or(0)).as_micros() as u64;
                    let next = t + exp_gap_us(&mut self.rng, rate);
                    if let ModeState::Open {
                        next_arrival_us, ..
                    } = &mut self.mode
                    {
                        *next_arrival_us = Some(next.min(phase_end));
                    }
                    self.rec.issued += 1;
                    let (path, class) = self.pick();
                    self.dispatch(t, path, class);
                }
            }
        }
    }

    fn pick(&mut self) -> (String, Option<u8>) {
        match (&self.requests, &self.popularity) {
            (RequestMix::FileSet(_), Some(pop)) => {
                let p = pop.sample(&mut self.rng);
                (file_path(p), Some(p.class as u8))
            }
            (RequestMix::Path(p), _) => (p.clone(), None),
            (RequestMix::FileSet(_), None) => ("/".into(), None),
        }
    }

    /// Open loop: hand an arrival to a connection, or queue it.
    fn dispatch(&mut self, intended: u64, path: String, class: Option<u8>) {
        let ModeState::Open {
            idle,
            pending,
            max_conns,
            ..
        } = &mut self.mode
        else {
            return;
        };
        let j = if let Some(j) = idle.pop() {
            j
        } else if self.agents.len() < *max_conns {
            self.agents.push(Agent::default());
            self.agents.len() - 1
        } else {
            pending.push_back((intended, class, path));
            return;
        };
        self.begin(j, intended, path, class);
    }

    fn request_bytes(&self, path: &str) -> Vec<u8> {
        format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: seda-load/0.1\r\n{}\r\n",
            self.host, self.headers
        )
        .into_bytes()
    }

    fn begin(&mut self, j: usize, start_us: u64, path: String, class: Option<u8>) {
        let bytes = self.request_bytes(&path);
        let a = &mut self.agents[j];
        a.req = Some(Req {
            start_us,
            class,
            retried: false,
        });
        a.wbuf = bytes;
        a.wpos = 0;
        a.reader.start(false);
        self.inflight += 1;
        if self.agents[j].sock.is_some() && self.agents[j].connected {
            // Nothing can be readable before the request is out: write only.
            self.write_some(j);
        } else {
            self.connect(j);
        }
    }

    fn connect(&mut self, j: usize) {
        self.close(j);
        self.rec.connections += 1;
        match TcpStream::connect(self.addr) {
            Ok(mut s) => {
                // No TCP_NODELAY: each request leaves in one write, so Nagle never holds it.
                if self
                    .poll
                    .registry()
                    .register(&mut s, Token(j), Interest::READABLE | Interest::WRITABLE)
                    .is_err()
                {
                    let now = self.now_us();
                    self.fail(j, "connect", now);
                    return;
                }
                let a = &mut self.agents[j];
                a.sock = Some(s);
                a.connected = false;
                a.reqs_on_conn = 0;
            }
            Err(_) => {
                let now = self.now_us();
                self.fail(j, "connect", now);
            }
        }
    }

    fn close(&mut self, j: usize) {
        let a = &mut self.agents[j];
        if let Some(mut s) = a.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        a.connected = false;
        a.reqs_on_conn = 0;
    }

    /// A readiness event for agent `j`; `readable` says whether reading can make
    /// progress (edge-triggered: a later readable edge arrives as its own event).
    fn on_ready(&mut self, j: usize, readable: bool) {
        let a = &self.agents[j];
        let Some(s) = a.sock.as_ref() else { return };
        if !a.connected {
            // A non-blocking connect finished when the socket has no error and a peer.
            let up = match s.take_error() {
                Ok(None) => match s.peer_addr() {
                    Ok(_) => Some(true),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
                    Err(_) => Some(false),
                },
                Ok(Some(_)) | Err(_) => Some(false),
            };
            match up {
                None => return,
                Some(true) => self.agents[j].connected = true,
                Some(false) => {
                    let now = self.now_us();
                    if self.agents[j].req.is_some() {
                        self.fail(j, "connect", now);
                    } else {
                        self.close(j);
                    }
                    return;
                }
            }
        }
        self.write_some(j);
        if readable {
            self.read_some(j);
        }
    }

    fn write_some(&mut self, j: usize) {
        loop {
            let a = &mut self.agents[j];
            if a.req.is_none() || a.wpos >= a.wbuf.len() || !a.connected {
                return;
            }
            let Some(s) = a.sock.as_mut() else { return };
            match s.write(&a.wbuf[a.wpos..]) {
                Ok(0) => return self.io_failed(j, io::ErrorKind::WriteZero),
                Ok(n) => a.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_failed(j, e.kind()),
            }
        }
    }

    fn read_some(&mut self, j: usize) {
        let mut buf = std::mem::take(&mut self.rbuf);
        loop {
            let a = &mut self.agents[j];
            if !a.connected {
                break;
            }
            let Some(s) = a.sock.as_mut() else { break };
            match s.read(&mut buf) {
                Ok(0) => {
                    self.on_eof(j);
                    break;
                }
                Ok(n) => {
                    if a.req.is_none() {
                        // Bytes nobody asked for: drop the connection.
                        self.close(j);
                        break;
                    }
                    match a.reader.feed(&buf[..n]) {
                        Ok(Feed::More) => {}
                        Ok(Feed::Done { response, .. }) => {
                            // Keep reading until WouldBlock even though the response is
                            // complete: readiness is edge-triggered, so a FIN that came
                            // with the response (a server closing an idle keep-alive
                            // connection) has no later event; missing it would send the
                            // next request into a lingering close and wait forever.
                            self.complete(j, response);
                        }
                        Err(e) => {
                            let now = self.now_us();
                            let kind = match e {
                                HttpError::BadHead(_)
                                | HttpError::BadChunk
                                | HttpError::BodyTooLarge => "protocol",
                                HttpError::Truncated => "truncated",
                            };
                            self.fail(j, kind, now);
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.io_failed(j, e.kind());
                    break;
                }
            }
        }
        self.rbuf = buf;
    }

    /// Retry once if a reused connection died before the response began.
    fn try_retry(&mut self, j: usize) -> bool {
        let a = &mut self.agents[j];
        let reused = a.reqs_on_conn > 0;
        match a.req.as_mut() {
            Some(r) if reused && !r.retried && a.reader.is_fresh() => {
                r.retried = true;
                a.wpos = 0;
                self.connect(j);
                true
            }
            _ => false,
        }
    }

    fn on_eof(&mut self, j: usize) {
        if self.agents[j].req.is_none() {
            self.close(j);
            return;
        }
        if self.try_retry(j) {
            return;
        }
        match self.agents[j].reader.eof() {
            Ok(resp) => self.complete(j, resp),
            Err(_) => {
                let now = self.now_us();
                self.fail(j, "truncated", now);
            }
        }
    }

    fn io_failed(&mut self, j: usize, kind: io::ErrorKind) {
        if self.agents[j].req.is_none() {
            self.close(j);
            return;
        }
        if self.try_retry(j) {
            return;
        }
        let now = self.now_us();
        let k = match kind {
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => "reset",
            io::ErrorKind::ConnectionRefused => "connect",
            _ => "io",
        };
        self.fail(j, k, now);
    }

    fn complete(&mut self, j: usize, resp: Response) {
        let now = self.now_us();
        let Some(req) = self.agents[j].req.take() else {
            return;
        };
        self.inflight -= 1;
        let rt = now.saturating_sub(req.start_us);
        *self.rec.statuses.entry(resp.status).or_default() += 1;
        self.rec.bytes += resp.bytes;
        self.rec.second(now).bytes += resp.bytes;
        match resp.status {
            200..=399 => {
                let within = self.target_us.is_some_and(|t| rt <= t);
                let sec = self.rec.second(now);
                sec.completed += 1;
                sec.within += u64::from(within);
                record_us(&mut sec.hist, rt);
                let tenth = self.rec.tenth(now);
                tenth.completed += 1;
                tenth.rts_us.push(rt);
                record_us(&mut self.rec.ok, rt);
                self.rec.completed += 1;
                if let Some(c) = req.class {
                    self.rec.by_class[usize::from(c).min(3)] += 1;
                }
                self.agents[j].completions += 1;
                self.progress.completed.fetch_add(1, Ordering::Relaxed);
            }
            503 => {
                self.rec.second(now).rejected += 1;
                self.rec.tenth(now).rejected += 1;
                record_us(&mut self.rec.rejected_rt, rt);
                self.rec.rejected += 1;
                self.progress.rejected.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.rec.second(now).errors += 1;
                self.rec.tenth(now).errors += 1;
                *self.rec.errors.entry("status").or_default() += 1;
                self.progress.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let a = &mut self.agents[j];
        a.reqs_on_conn += 1;
        let rpc = match self.mode {
            ModeState::Closed { rpc, .. } | ModeState::Open { rpc, .. } => rpc,
        };
        if resp.close || a.reqs_on_conn >= rpc {
            self.close(j);
        }
        self.after_request(j, now, (200..=399).contains(&resp.status));
    }

    fn fail(&mut self, j: usize, kind: &'static str, now: u64) {
        if let Some(req) = self.agents[j].req.take() {
            self.inflight -= 1;
            if matches!(kind, "unfinished" | "timeout") {
                self.rec.unanswered_age_us = self
                    .rec
                    .unanswered_age_us
                    .max(now.saturating_sub(req.start_us));
            }
            *self.rec.errors.entry(kind).or_default() += 1;
            self.rec.second(now).errors += 1;
            self.rec.tenth(now).errors += 1;
            self.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.close(j);
        self.after_request(j, now, false);
    }

    /// The user of agent `j` is done with a request (`ok`: answered 2xx/3xx).
    fn after_request(&mut self, j: usize, now: u64, ok: bool) {
        if self.draining {
            self.close(j);
            return;
        }
        match &mut self.mode {
            ModeState::Closed { think_us, heap, .. } => {
                let a = &mut self.agents[j];
                if a.active {
                    let wait = match self.retry_wait_us {
                        Some(w) if !ok => w,
                        _ => *think_us,
                    };
                    let at = now + wait;
                    a.wake_at = Some(at);
                    heap.push(Reverse((at, j)));
                } else {
                    self.close(j);
                }
            }
            ModeState::Open { idle, pending, .. } => {
                if let Some((intended, class, path)) = pending.pop_front() {
                    self.begin(j, intended, path, class);
                } else {
                    idle.push(j);
                }
            }
        }
    }

    fn check_timeouts(&mut self, now: u64) {
        for j in 0..self.agents.len() {
            let late = self.agents[j]
                .req
                .as_ref()
                .is_some_and(|r| now.saturating_sub(r.start_us) > self.timeout_us);
            if late {
                self.fail(j, "timeout", now);
            }
        }
        if let ModeState::Open { pending, .. } = &mut self.mode {
            let mut n = 0;
            while pending
                .front()
                .is_some_and(|(t, _, _)| now.saturating_sub(*t) > self.timeout_us)
            {
                if let Some((t, _, _)) = pending.pop_front() {
                    self.rec.unanswered_age_us =
                        self.rec.unanswered_age_us.max(now.saturating_sub(t));
                }
                n += 1;
            }
            if n > 0 {
                *self.rec.errors.entry("timeout").or_default() += n;
                self.rec.second(now).errors += n;
                self.rec.tenth(now).errors += n;
                self.progress.errors.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// Combine the threads' measurements into one report.
fn merge(cfg: &LoadConfig, mut recs: Vec<Recorder>) -> LoadReport {
    let mut total = Recorder::new();
    let mut per_user: Vec<u64> = Vec::new();
    for r in recs.iter_mut() {
        let _ = total.ok.add(&r.ok);
        let _ = total.rejected_rt.add(&r.rejected_rt);
        total.issued += r.issued;
        total.completed += r.completed;
        total.rejected += r.rejected;
        for (k, v) in &r.errors {
            *total.errors.entry(k).or_default() += v;
        }
        for (k, v) in &r.statuses {
            *total.statuses.entry(*k).or_default() += v;
        }
        total.bytes += r.bytes;
        total.connections += r.connections;
        for c in 0..4 {
            total.by_class[c] += r.by_class[c];
        }
        total.end_us = total.end_us.max(r.end_us);
        total.unanswered_age_us = total.unanswered_age_us.max(r.unanswered_age_us);
        for (i, s) in r.seconds.drain(..).enumerate() {
            let t = total.second(i as u64 * 1_000_000);
            t.completed += s.completed;
            t.within += s.within;
            t.rejected += s.rejected;
            t.errors += s.errors;
            t.bytes += s.bytes;
            let _ = t.hist.add(&s.hist);
        }
        for (i, s) in r.tenths.drain(..).enumerate() {
            let t = total.tenth(i as u64 * 100_000);
            t.completed += s.completed;
            t.rejected += s.rejected;
            t.errors += s.errors;
            t.rts_us.extend(s.rts_us);
        }
        per_user.append(&mut r.per_user);
    }
    let elapsed_s = (total.end_us as f64 / 1e6).max(1e-6);
    let errors: u64 = total.errors.values().sum();
    let closed = matches!(cfg.mode, Mode::Closed { .. });
    let timeseries = total
        .seconds
        .iter()
        .enumerate()
        .map(|(t, s)| TimePoint {
            t: t as u64,
            level: cfg.schedule.level_at(Duration::from_secs(t as u64)),
            completed: s.completed,
            within_target: s.within,
            rejected: s.rejected,
            errors: s.errors,
            rt_p90_ms: quantile_ms(&s.hist, 0.9),
            rt_mean_ms: if s.hist.is_empty() {
                0.0
            } else {
                s.hist.mean() / 1000.0
            },
            mbps: s.bytes as f64 * 8.0 / 1e6,
        })
        .collect();
    let ticks = total
        .tenths
        .iter_mut()
        .enumerate()
        .map(|(i, s)| Tick {
            t_ms: i as u64 * 100,
            completed: s.completed,
            rejected: s.rejected,
            errors: s.errors,
            rt_p90_ms: exact_quantile_ms(&mut s.rts_us, 0.9),
        })
        .collect();
    LoadReport {
        config: cfg.echo(),
        issued: total.issued,
        completed: total.completed,
        errors,
        rejected: total.rejected,
        errors_by_kind: total
            .errors
            .iter()
            .map(|(k, v)| ((*k).to_string(), *v))
            .collect(),
        status_counts: total.statuses.clone(),
        elapsed_s,
        bytes: total.bytes,
        connections: total.connections,
        throughput_rps: total.completed as f64 / elapsed_s,
        throughput_mbps: total.bytes as f64 * 8.0 / 1e6 / elapsed_s,
        rt_mean_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.mean() / 1000.0
        },
        rt_p50_ms: quantile_ms(&total.ok, 0.5),
        rt_p90_ms: quantile_ms(&total.ok, 0.9),
        rt_p99_ms: quantile_ms(&total.ok, 0.99),
        rt_max_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.max() as f64 / 1000.0
        },
        rt_min_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.min() as f64 / 1000.0
        },
        rejected_rt_mean_ms: if total.rejected_rt.is_empty() {
            0.0
        } else {
            total.rejected_rt.mean() / 1000.0
        },
        users: if closed { per_user.len() } else { 0 },
        fairness: if closed { jain_index(&per_user) } else { None },
        users_starved: per_user.iter().filter(|&&c| c == 0).count(),
        unanswered_wait_max_ms: total.unanswered_age_us as f64 / 1000.0,
        phases: phase_summaries(&cfg.schedule, &total.seconds),
        timeseries,
        ticks,
        cdf: cdf(&total.ok, 200),
        by_class: matches!(cfg.requests, RequestMix::FileSet(_)).then(|| {
            (0..4)
                .map(|c| ClassCount {
                    class: c,
                    completed: total.by_class[c],
                })
                .collect()
        }),
    }
}

/// The `q` quantile of `us` (sorted here) in ms, nearest rank; 0 when empty.
fn exact_quantile_ms(us: &mut [u64], q: f64) -> f64 {
    if us.is_empty() {
        return 0.0;
    }
    us.sort_unstable();
    let rank = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len());
    us[rank - 1] as f64 / 1000.0
}

/// Per-phase totals: phase `i` covers the seconds from its start (rounded down) to the
/// next phase's start; the last phase also takes the drain.
fn phase_summaries(schedule: &Schedule, seconds: &[Second]) -> Vec<PhaseSummary> {
    let n = schedule.phases.len();
    let mut out = Vec::with_capacity(n);
    let mut start = Duration::ZERO;
    for (i, p) in schedule.phases.iter().enumerate() {
        let end = start + p.duration;
        let from = start.as_secs() as usize;
        let to = if i + 1 == n {
            seconds.len().max(from)
        } else {
            end.as_secs() as usize
        };
        let mut hist = rt_histogram(2);
        let (mut completed, mut within, mut rejected, mut errors) = (0, 0, 0, 0);
        for s in seconds.iter().take(to).skip(from) {
            completed += s.completed;
            within += s.within;
            rejected += s.rejected;
            errors += s.errors;
            let _ = hist.add(&s.hist);
        }
        out.push(PhaseSummary {
            start_s: from as u64,
            end_s: to as u64,
            level: p.level,
            completed,
            within_target: within,
            rejected,
            errors,
            rt_p90_ms: quantile_ms(&hist, 0.9),
            rt_max_ms: if hist.is_empty() {
                0.0
            } else {
                hist.max() as f64 / 1000.0
            },
        });
        start = end;
    }
    out
}

/// An exponential inter-arrival gap for `rate` arrivals per second, in microseconds (>= 1).
fn exp_gap_us(rng: &mut fastrand::Rng, rate: f64) -> u64 {
    let gap_s = -(1.0 - rng.f64()).ln() / rate;
    ((gap_s * 1e6) as u64).max(1)
}
