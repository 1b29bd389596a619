//! One load thread: a mio event loop driving its share of the users (closed loop)
//! or of the arrival rate (open loop), see the [module docs](super).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Poll};

use super::config::{LoadConfig, Mode, RequestMix};
use super::record::{Progress, Recorder};
use crate::dist::SpecWebPopularity;
use crate::error::LoadError;
use crate::fileset::file_path;
use crate::http::ResponseReader;
use crate::schedule::Schedule;

mod conn;

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

pub(super) struct Worker {
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
    pub(super) rec: Recorder,
    progress: Arc<Progress>,
}

const TICK_US: u64 = 100_000;

impl Worker {
    pub(super) fn new(
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

    pub(super) fn run_loop(&mut self) -> Result<(), LoadError> {
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
        let level = self.schedule.phases()[phase].level;
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
                        self.schedule.phases()[self.phase.unwrap_or(0)].level / self.threads as f64;
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
}

/// An exponential inter-arrival gap for `rate` arrivals per second, in microseconds (>= 1).
fn exp_gap_us(rng: &mut fastrand::Rng, rate: f64) -> u64 {
    let gap_s = -(1.0 - rng.f64()).ln() / rate;
    ((gap_s * 1e6) as u64).max(1)
}
