//! The closed-loop run: one thread per emulated user (a mail reader blocks on each
//! answer and reads it whole), groups of users with their own schedule and class.
//!
//! A user of a group is active while its index in the group is below the group's
//! scheduled level; it then loops: choose the next request ([`User::choose`]), make
//! it, think (`think`, 20 ms in the paper) after a served request or wait
//! (`retry_wait`, 5 s) after a rejection or error and log in again. An inactive user
//! holds no session. At the end of the schedule no request starts; one still running
//! is given up a moment later and counted as an `unfinished` error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::http::HttpClient;
use super::markov::MarkovModel;
use super::report::{ArashiReport, RunShape, Sample};
use super::request::DEFAULT_ACCOUNTS;
use super::user::{Outcome, User};
use crate::error::LoadError;
use crate::schedule::Schedule;

/// Stack of a user thread (it holds little: a client and a page).
const USER_STACK: usize = 256 * 1024;

/// A group of users. `#[non_exhaustive]`: built by [`UserGroup::new`] and
/// [`with_class`](UserGroup::with_class).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UserGroup {
    /// Users over time.
    pub schedule: Schedule,
    /// Their class, sent in the class header (`None`: no header, class 0).
    pub class: Option<u8>,
}

impl UserGroup {
    /// Users over `schedule`, of no class.
    pub fn new(schedule: Schedule) -> Self {
        UserGroup {
            schedule,
            class: None,
        }
    }
}

crate::setters::setters!(UserGroup {
    with_schedule: schedule: Schedule,
    with_class: class: Option<u8>,
});

/// A load run. `#[non_exhaustive]`: start from [`ArashiLoadConfig::steady`] and set
/// the public fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ArashiLoadConfig {
    /// The service (loopback).
    pub addr: SocketAddr,
    /// The users.
    pub groups: Vec<UserGroup>,
    /// Seeded accounts: user `i` (over all groups) logs in as `user{(i mod accounts)+1}`.
    pub accounts: u32,
    /// Think time after a served request.
    pub think: Duration,
    /// Wait after a rejection or an error before logging in again.
    pub retry_wait: Duration,
    /// A request running longer fails (`timeout`).
    pub timeout: Duration,
    /// Seconds at the start left out of the totals.
    pub warmup: Duration,
    /// Header that carries the class.
    pub class_header: String,
    /// Seed of the users' random choices.
    pub seed: u64,
    /// The mail-reader model.
    pub model: MarkovModel,
}

impl ArashiLoadConfig {
    /// `users` users for `duration`, the paper's think time and retry wait.
    pub fn steady(addr: SocketAddr, users: u32, duration: Duration) -> ArashiLoadConfig {
        ArashiLoadConfig {
            addr,
            groups: vec![UserGroup {
                schedule: Schedule::steady(duration, f64::from(users)),
                class: None,
            }],
            accounts: DEFAULT_ACCOUNTS,
            think: Duration::from_millis(20),
            retry_wait: Duration::from_secs(5),
            timeout: Duration::from_secs(60),
            warmup: Duration::ZERO,
            class_header: "X-Class".into(),
            seed: 1,
            model: MarkovModel::default(),
        }
    }

    /// Length of the run (the longest group schedule).
    pub fn length(&self) -> Duration {
        self.groups
            .iter()
            .map(|g| g.schedule.total())
            .max()
            .unwrap_or_default()
    }

    fn check(&self) -> Result<(), LoadError> {
        if self.groups.is_empty() || self.length().is_zero() {
            return Err(LoadError::config("no users scheduled"));
        }
        if self.accounts == 0 {
            return Err(LoadError::config("accounts must be at least 1"));
        }
        if self.timeout.is_zero() {
            return Err(LoadError::config("the request timeout must be positive"));
        }
        let users: f64 = self.groups.iter().map(|g| g.schedule.max_level()).sum();
        if users > 20_000.0 {
            return Err(LoadError::config(format!(
                "{users} users is more threads than this tool runs (20,000)"
            )));
        }
        Ok(())
    }
}

/// Live counters for a progress line.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct LoadProgress {
    /// Served requests.
    pub completed: AtomicU64,
    /// Rejected requests.
    pub rejected: AtomicU64,
    /// Failed requests.
    pub errors: AtomicU64,
}

/// Sleeps `d`, waking early if `stop` is set. Returns whether it was stopped.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

struct Shared {
    cfg: ArashiLoadConfig,
    t0: Instant,
    stop: Arc<AtomicBool>,
    samples: Mutex<Vec<Sample>>,
    connections: AtomicU64,
    progress: Arc<LoadProgress>,
}

fn user_thread(sh: &Shared, group: usize, index: usize, global: usize) {
    let cfg = &sh.cfg;
    let g = &cfg.groups[group];
    let class = g.class.unwrap_or(0);
    let mut client = HttpClient::new(cfg.addr, cfg.timeout);
    client.stop_on(Arc::clone(&sh.stop));
    if let Some(c) = g.class {
        client
            .extra_headers
            .push((cfg.class_header.clone(), c.to_string()));
    }
    let account = (global as u32 % cfg.accounts) + 1;
    let mut user = User::new(account, client);
    let mut rng =
        fastrand::Rng::with_seed(cfg.seed ^ (global as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut local = Vec::new();
    let end = cfg.length();
    // Users start spread over the first think time, not all in the same instant.
    if nap(Duration::from_micros(rng.u64(..20_000)), &sh.stop) {
        return;
    }
    loop {
        let now = sh.t0.elapsed();
        if now >= end || sh.stop.load(Ordering::Relaxed) {
            break;
        }
        if (index as f64) >= g.schedule.level_at(now) {
            user.drop_session();
            if nap(Duration::from_millis(50), &sh.stop) {
                break;
            }
            continue;
        }
        let kind = user.choose(&cfg.model, &mut rng);
        let done = user.perform(kind, cfg.accounts, &mut rng);
        let t_ms = sh.t0.elapsed().as_millis() as u64;
        local.push(Sample {
            t_ms,
            kind,
            class,
            outcome: done.outcome,
            rt_us: done.rt.as_micros() as u64,
        });
        let wait = match done.outcome {
            Outcome::Completed => {
                sh.progress.completed.fetch_add(1, Ordering::Relaxed);
                cfg.think
            }
            Outcome::Rejected => {
                sh.progress.rejected.fetch_add(1, Ordering::Relaxed);
                cfg.retry_wait
            }
            Outcome::Error(_) => {
                sh.progress.errors.fetch_add(1, Ordering::Relaxed);
                cfg.retry_wait
            }
        };
        if nap(wait, &sh.stop) {
            break;
        }
    }
    sh.samples.lock().extend(local);
    sh.connections
        .fetch_add(user.connections(), Ordering::Relaxed);
}

/// Runs the load; `progress` is updated live.
pub fn run(cfg: &ArashiLoadConfig, progress: Arc<LoadProgress>) -> Result<ArashiReport, LoadError> {
    cfg.check()?;
    std::net::TcpStream::connect_timeout(&cfg.addr, Duration::from_secs(5))
        .map_err(LoadError::io(format!("cannot connect to {}", cfg.addr)))?;
    let sh = Arc::new(Shared {
        cfg: cfg.clone(),
        t0: Instant::now(),
        stop: Arc::new(AtomicBool::new(false)),
        samples: Mutex::new(Vec::new()),
        connections: AtomicU64::new(0),
        progress,
    });
    let mut handles = Vec::new();
    let mut global = 0usize;
    for (gi, g) in cfg.groups.iter().enumerate() {
        for index in 0..g.schedule.max_level().ceil() as usize {
            let sh = Arc::clone(&sh);
            let h = std::thread::Builder::new()
                .name(format!("arashi-user-{global}"))
                .stack_size(USER_STACK)
                .spawn(move || user_thread(&sh, gi, index, global))
                .map_err(LoadError::io(format!("cannot start user thread {global}")))?;
            handles.push(h);
            global += 1;
        }
    }
    let length = cfg.length();
    while sh.t0.elapsed() < length {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Requests still running get a moment to finish, then give up.
    std::thread::sleep(Duration::from_millis(500));
    sh.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let mut samples = std::mem::take(&mut *sh.samples.lock());
    samples.sort_by_key(|s| s.t_ms);
    let classes = cfg
        .groups
        .iter()
        .map(|g| usize::from(g.class.unwrap_or(0)) + 1)
        .max()
        .unwrap_or(1);
    let groups = cfg.groups.clone();
    let users_at = move |t: u64| -> f64 {
        let at = Duration::from_secs(t);
        groups.iter().map(|g| g.schedule.level_at(at)).sum()
    };
    let config = serde_json::json!({
        "addr": cfg.addr.to_string(),
        "groups": cfg.groups.iter().map(|g| serde_json::json!({
            "schedule": g.schedule, "class": g.class,
        })).collect::<Vec<_>>(),
        "accounts": cfg.accounts,
        "think_ms": cfg.think.as_millis() as u64,
        "retry_wait_s": cfg.retry_wait.as_secs_f64(),
        "timeout_s": cfg.timeout.as_secs_f64(),
        "class_header": cfg.class_header,
        "seed": cfg.seed,
    });
    let boundaries: Vec<f64> = cfg
        .groups
        .iter()
        .flat_map(|g| (0..g.schedule.phases().len()).map(|i| g.schedule.phase_end(i).as_secs_f64()))
        .collect();
    let shape = RunShape {
        duration_s: length.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
        classes,
        users_at: &users_at,
        boundaries_s: &boundaries,
    };
    Ok(ArashiReport::build(
        config,
        &samples,
        &shape,
        sh.connections.load(Ordering::Relaxed),
    ))
}
