//! `seda experiment scale-out`: `seda serve` replicas behind HAProxy on loopback, each
//! answering HAProxy's agent-check with its admission state (`seda_http::AgentServer`),
//! HAProxy retrying refused requests on other replicas ([`crate::harness::haproxy`]).
//!
//! Every replica is `seda serve --bottleneck-ms B --bottleneck-passes K --rt-target-ms
//! T --agent-listen ADDR` with the admission `--rt-target-ms` selects on its
//! bottleneck stage (delay-budget since 2026-11-24 05:30 UTC; the USITS'03
//! response-time controller before). K is calibrated once, here, before the runs (the largest of five
//! calibrations: the least disturbed by other load), so that every replica of every
//! run does the same work per request; a replica calibrating itself on a busy machine
//! can be off by a factor of three. The users
//! are the overload experiment's closed-loop users ([`seda_load::client`], 20 ms think
//! time, a user answered 503 waits `retry_wait`) at `/bottleneck` through HAProxy.
//! The replicas' `/_seda/stats` and HAProxy's statistics page are read once a second.
//!
//! Scenarios ([`Scenario`]):
//! 1. `throughput`: a steady overload on N = 1, 2, 3 replicas behind HAProxy, and on
//!    one replica without HAProxy (the proxy's cost). Replica *i* is pinned to CPU
//!    *i* mod cores, so a replica stands for a machine of one core: on a 2-core host
//!    N = 3 cannot beat N = 2, and HAProxy and the load generator share those cores.
//! 2. `slowed`: a load spike on 3 replicas, one of them `slow_factor` times slower per
//!    request; HAProxy with agent checks and `retry-on 503` (`agent`) against a plain
//!    round robin that ignores the replicas' state and passes their 503s on (`plain`).
//! 3. `killed`: the same spike on 3 equal replicas, one killed (SIGKILL) in the middle
//!    of the spike; `agent` as above against `plain` (HAProxy's default retries, on
//!    connection failures only).
//!
//! The figures of each run are the overload experiment's ([`crate::overload::metrics`]):
//! the fleet's p90 as the users see it against the target, goodput, rejections and
//! errors in the judged window (the measured phase; the spike), plus each replica's
//! share of the work and HAProxy's retries.

mod fleet;
pub mod output;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::report::LoadReport;
use seda_load::schedule::{Phase, Schedule};

use crate::harness::haproxy::process::{
    self as proxy, HaproxyPoller, HaproxyProcess, HaproxySample,
};
use crate::harness::server::{ServerProcess, free_port};
use crate::harness::stats::{BOTTLENECK_STAGE, StatsLog, StatsPoller};
use crate::harness::{bottleneck_passes, date_utc, load_average, machine_summary};
use crate::overload::metrics::{self, WindowMetrics};
use fleet::{haproxy_config, start_fleet, wait_all_up};

/// The backend's name in the generated configuration.
pub const BACKEND: &str = "seda_replicas";

/// One scenario of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Throughput against the number of replicas.
    Throughput,
    /// A spike with one replica slowed.
    Slowed,
    /// A spike with one replica killed.
    Killed,
}

impl Scenario {
    /// All, in run order.
    pub const ALL: [Scenario; 3] = [Scenario::Throughput, Scenario::Slowed, Scenario::Killed];

    /// Name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Slowed => "slowed",
            Scenario::Killed => "killed",
        }
    }

    /// Parse a name of [`Scenario::name`].
    pub fn parse(name: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name.trim())
            .ok_or_else(|| format!("unknown scenario {name:?} (known: throughput, slowed, killed)"))
    }
}

/// How HAProxy is set up in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyMode {
    /// No HAProxy: the users talk to the first replica.
    Direct,
    /// leastconn over the agents' weights, `retry-on conn-failure empty-response 503`,
    /// each retry on another replica.
    Agent,
    /// roundrobin, no agent checks, HAProxy's default `retry-on conn-failure`.
    Plain,
}

/// One replica of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaSpec {
    /// `--bottleneck-ms` of this replica.
    pub bottleneck_ms: f64,
    /// Pin it to this CPU.
    pub cpu: Option<usize>,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    /// Unique id, `scenario/label`.
    pub id: String,
    /// The scenario that defines it.
    pub scenario: Scenario,
    /// What is compared, e.g. `haproxy-2`, `agent`.
    pub label: String,
    /// How HAProxy is set up.
    pub proxy: ProxyMode,
    /// The replicas.
    pub replicas: Vec<ReplicaSpec>,
    /// Users over time.
    pub schedule: Schedule,
    /// The phase the run is judged by.
    pub window_phase: usize,
    /// Kill replica `.0` (index) at `.1` seconds after the load starts.
    pub kill: Option<(usize, f64)>,
}

impl RunSpec {
    /// Replicas behind HAProxy (1 for a direct run).
    pub fn n(&self) -> usize {
        self.replicas.len()
    }
}

/// Settings of the whole experiment.
#[derive(Debug, Clone)]
pub struct ScaleOutConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary whose `serve` runs the replicas.
    pub seda: PathBuf,
    /// The haproxy binary.
    pub haproxy: PathBuf,
    /// Scenarios to run, in order.
    pub scenarios: Vec<Scenario>,
    /// Replica counts of scenario `throughput`.
    pub replica_counts: Vec<usize>,
    /// CPU work per request of a replica, ms.
    pub bottleneck_ms: f64,
    /// The slowed replica's work is this many times larger.
    pub slow_factor: f64,
    /// p90 target of every replica's controller, ms.
    pub target_ms: f64,
    /// Users of scenario `throughput`.
    pub users: u64,
    /// Unmeasured warm-up and measured phase of scenario `throughput`.
    pub throughput_phases: [Duration; 2],
    /// Users before and after the spike.
    pub base_users: u64,
    /// Users during the spike.
    pub spike_users: u64,
    /// Before, during and after the spike.
    pub phases: [Duration; 3],
    /// Think time between a response and the next request.
    pub think: Duration,
    /// Wait after a 503 or a failed request instead of the think time.
    pub retry_wait: Duration,
    /// Requests per connection before the client closes it.
    pub reqs_per_conn: u32,
    /// A request running longer fails as a timeout.
    pub timeout: Duration,
    /// After the schedule, how long requests still running may finish.
    pub drain: Duration,
    /// Pin replica *i* to CPU *i* mod cores in scenario `throughput`.
    pub pin: bool,
    /// Load-generator threads.
    pub threads: usize,
    /// Seed of the load.
    pub seed: u64,
    /// Checksum passes of a `bottleneck_ms` request (`None`: calibrated at the start).
    pub passes: Option<u64>,
}

impl ScaleOutConfig {
    /// The default experiment (about 6 minutes): a 10 ms bottleneck, a 200 ms target
    /// (the overload experiment's quick settings), 1-3 replicas under 60 users for
    /// 10 + 20 s (3 to 6 times what they can serve: saturated without drowning in
    /// refusals), spikes of 4 -> 300 -> 4 users over 10 / 30 / 10 s, the slowed
    /// replica 4x slower.
    pub fn new(out: PathBuf, seda: PathBuf, haproxy: PathBuf) -> ScaleOutConfig {
        ScaleOutConfig {
            out,
            seda,
            haproxy,
            scenarios: Scenario::ALL.to_vec(),
            replica_counts: vec![1, 2, 3],
            bottleneck_ms: 10.0,
            slow_factor: 4.0,
            target_ms: 200.0,
            users: 60,
            throughput_phases: [Duration::from_secs(10), Duration::from_secs(20)],
            base_users: 4,
            spike_users: 300,
            phases: [
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(10),
            ],
            think: Duration::from_millis(20),
            retry_wait: Duration::from_secs(1),
            reqs_per_conn: 5,
            timeout: Duration::from_secs(10),
            drain: Duration::from_secs(3),
            pin: true,
            threads: 1,
            seed: 1,
            passes: None,
        }
    }

    /// A short version for smoke tests: 3 + 6 s throughput phases, 3 / 8 / 3 s spikes,
    /// 100 users in the spikes.
    pub fn quick(mut self) -> ScaleOutConfig {
        self.spike_users = 100;
        self.throughput_phases = [Duration::from_secs(3), Duration::from_secs(6)];
        self.phases = [
            Duration::from_secs(3),
            Duration::from_secs(8),
            Duration::from_secs(3),
        ];
        self.drain = Duration::from_secs(2);
        self
    }

    fn check(&self) -> Result<(), String> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.bottleneck_ms) || !pos(self.target_ms) {
            return Err("--bottleneck-ms and --target-ms must be positive".into());
        }
        if !(self.slow_factor.is_finite() && self.slow_factor >= 1.0) {
            return Err("--slow-factor must be at least 1".into());
        }
        if self.scenarios.is_empty() {
            return Err("no scenario to run".into());
        }
        if self.replica_counts.is_empty() || self.replica_counts.iter().any(|&n| n == 0 || n > 16) {
            return Err("--replicas must be counts in 1..=16".into());
        }
        if self.users == 0 || self.spike_users == 0 {
            return Err("user counts must be positive".into());
        }
        if self
            .phases
            .iter()
            .chain(&self.throughput_phases)
            .any(|p| p.is_zero())
        {
            return Err("phases must last at least 1 s".into());
        }
        Ok(())
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The runs of `cfg`'s scenarios, in order.
pub fn plan(cfg: &ScaleOutConfig) -> Vec<RunSpec> {
    let cores = cores();
    let pinned = |n: usize| -> Vec<ReplicaSpec> {
        (0..n)
            .map(|i| ReplicaSpec {
                bottleneck_ms: cfg.bottleneck_ms,
                cpu: cfg.pin.then_some(i % cores),
            })
            .collect()
    };
    let equal = |n: usize| -> Vec<ReplicaSpec> {
        (0..n)
            .map(|_| ReplicaSpec {
                bottleneck_ms: cfg.bottleneck_ms,
                cpu: None,
            })
            .collect()
    };
    let steady = Schedule {
        phases: cfg
            .throughput_phases
            .iter()
            .map(|&duration| Phase {
                duration,
                level: cfg.users as f64,
            })
            .collect(),
    };
    let spike = Schedule {
        phases: cfg
            .phases
            .iter()
            .zip([cfg.base_users, cfg.spike_users, cfg.base_users])
            .map(|(&duration, l)| Phase {
                duration,
                level: l as f64,
            })
            .collect(),
    };
    let mid_spike = (cfg.phases[0] + cfg.phases[1] / 2).as_secs_f64();
    let run =
        |scenario: Scenario, label: String, proxy, replicas, schedule: &Schedule, window, kill| {
            RunSpec {
                id: format!("{}/{label}", scenario.name()),
                scenario,
                label,
                proxy,
                replicas,
                schedule: schedule.clone(),
                window_phase: window,
                kill,
            }
        };
    let mut runs = Vec::new();
    for &sc in &cfg.scenarios {
        match sc {
            Scenario::Throughput => {
                runs.push(run(
                    sc,
                    "direct-1".into(),
                    ProxyMode::Direct,
                    pinned(1),
                    &steady,
                    1,
                    None,
                ));
                for &n in &cfg.replica_counts {
                    runs.push(run(
                        sc,
                        format!("haproxy-{n}"),
                        ProxyMode::Agent,
                        pinned(n),
                        &steady,
                        1,
                        None,
                    ));
                }
            }
            Scenario::Slowed => {
                let mut reps = equal(3);
                reps[2].bottleneck_ms = cfg.bottleneck_ms * cfg.slow_factor;
                for (label, mode) in [("agent", ProxyMode::Agent), ("plain", ProxyMode::Plain)] {
                    runs.push(run(sc, label.into(), mode, reps.clone(), &spike, 1, None));
                }
            }
            Scenario::Killed => {
                for (label, mode) in [("agent", ProxyMode::Agent), ("plain", ProxyMode::Plain)] {
                    runs.push(run(
                        sc,
                        label.into(),
                        mode,
                        equal(3),
                        &spike,
                        1,
                        Some((2, mid_spike)),
                    ));
                }
            }
        }
    }
    runs
}

/// Expected overhead per run: replicas' start-up with calibration, drain, stop, pause.
const OVERHEAD: Duration = Duration::from_secs(12);

/// Expected wall time of `runs`.
pub fn eta(runs: &[RunSpec]) -> Duration {
    runs.iter().map(|r| r.schedule.total() + OVERHEAD).sum()
}

/// One replica's side of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaResult {
    /// HAProxy's name for it (`r1`, ...).
    pub name: String,
    /// Its service address.
    pub addr: SocketAddr,
    /// Its agent-check address.
    pub agent: SocketAddr,
    /// `--bottleneck-ms`.
    pub bottleneck_ms: f64,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Why pinning failed, if it did.
    pub pin_error: Option<String>,
    /// The calibration line it printed.
    pub calibration: Option<String>,
    /// Its bottleneck stage's stats, about once a second.
    pub stats: StatsLog,
    /// CPU seconds it used during the load.
    pub cpu_s: f64,
    /// Seconds after the start of the load it was killed.
    pub killed_at: Option<f64>,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The run.
    pub spec: RunSpec,
    /// The judged window's figures.
    pub window: Option<WindowMetrics>,
    /// Figures of every phase.
    pub phases: Vec<WindowMetrics>,
    /// The load generator's report (per-second series, CDF).
    pub report: LoadReport,
    /// The replicas.
    pub replicas: Vec<ReplicaResult>,
    /// HAProxy's statistics, about once a second.
    pub haproxy: Vec<HaproxySample>,
    /// HAProxy's CPU seconds during the load.
    pub haproxy_cpu_s: f64,
    /// Wall time of the load, seconds.
    pub wall_s: f64,
}

impl RunResult {
    /// Work each replica's bottleneck finished during seconds `from..to` (from the
    /// replicas' stats), in replica order.
    pub fn processed(&self, from: f64, to: f64) -> Vec<u64> {
        self.replicas
            .iter()
            .map(|r| {
                let at = |t: f64| {
                    r.stats
                        .samples
                        .iter()
                        .filter(|s| s.t <= t)
                        .filter_map(|s| s.processed)
                        .next_back()
                        .unwrap_or(0)
                };
                let first = r
                    .stats
                    .samples
                    .iter()
                    .find(|s| s.t >= from)
                    .and_then(|s| s.processed)
                    .unwrap_or(0);
                at(to).saturating_sub(first.min(at(to)))
            })
            .collect()
    }

    /// Requests HAProxy retried and redispatched in the whole run (backend totals).
    pub fn retries(&self) -> (u64, u64) {
        self.haproxy
            .last()
            .and_then(|s| s.rows.iter().find(|r| r.name == "BACKEND"))
            .map_or((0, 0), |r| (r.retries, r.redispatches))
    }
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleOutResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine and settings.
    pub setup: serde_json::Value,
    /// Every run measured.
    pub runs: Vec<RunResult>,
    /// Runs that could not be measured, with the reason.
    pub failed: Vec<(String, String)>,
}

impl ScaleOutResults {
    /// The run with this id.
    pub fn run(&self, id: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.spec.id == id)
    }
}

/// Run the experiment, logging progress through `log`.
pub fn run(cfg: &ScaleOutConfig, log: &mut dyn FnMut(&str)) -> Result<ScaleOutResults, String> {
    cfg.check()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| format!("cannot create {}: {e}", cfg.out.display()))?;
    let runs = plan(cfg);
    let eta = eta(&runs);
    log(&format!(
        "plan: {} runs; ETA {} min {} s; {}",
        runs.len(),
        eta.as_secs() / 60,
        eta.as_secs() % 60,
        proxy::haproxy_version(&cfg.haproxy)
    ));
    let loadavg = load_average();
    if let Some((l1, _, _)) = loadavg {
        log(&format!("load average before the runs: {l1:.2}"));
    }
    let mut cfg = cfg.clone();
    let passes = bottleneck_passes(cfg.passes, cfg.bottleneck_ms, log)?;
    cfg.passes = Some(passes);
    let cfg = &cfg;
    let root = tempfile::Builder::new()
        .prefix("seda-scale-out-root-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let [p0, p1, p2] = cfg.phases.map(|d| d.as_secs_f64());
    let mut results = ScaleOutResults {
        experiment: "scale-out",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine_summary(),
            "cores": cores(),
            "haproxy": proxy::haproxy_version(&cfg.haproxy),
            "load_average_before": loadavg.map(|(a, b, c)| [a, b, c]),
            "bottleneck_ms": cfg.bottleneck_ms,
            "bottleneck_passes": passes,
            "slow_factor": cfg.slow_factor,
            "target_ms": cfg.target_ms,
            "users": cfg.users,
            "throughput_phases_s": cfg.throughput_phases.map(|d| d.as_secs_f64()),
            "base_users": cfg.base_users,
            "spike_users": cfg.spike_users,
            "phases_s": [p0, p1, p2],
            "think_ms": cfg.think.as_secs_f64() * 1e3,
            "retry_wait_ms": cfg.retry_wait.as_secs_f64() * 1e3,
            "reqs_per_conn": cfg.reqs_per_conn,
            "timeout_s": cfg.timeout.as_secs_f64(),
            "pin": cfg.pin,
            "load_threads": cfg.threads,
            "seed": cfg.seed,
        }),
        runs: Vec::new(),
        failed: Vec::new(),
    };
    for (i, spec) in runs.iter().enumerate() {
        log(&format!(
            "== [{}/{}] {}: {} replica(s), {:?}, {} s",
            i + 1,
            runs.len(),
            spec.id,
            spec.n(),
            spec.proxy,
            spec.schedule.total().as_secs()
        ));
        match run_one(cfg, spec, root.path(), i as u64) {
            Ok(r) => {
                log(&format!("   {}", output::progress_line(&r)));
                results.runs.push(r);
            }
            Err(e) => {
                let e = e.split_whitespace().collect::<Vec<_>>().join(" ");
                log(&format!("   failed: {e}"));
                results.failed.push((spec.id.clone(), e));
            }
        }
        output::write_outputs(&cfg.out, &results)?;
        std::thread::sleep(Duration::from_secs(2));
    }
    if let Some((l1, _, _)) = load_average() {
        results.setup["load_average_after"] = serde_json::json!(l1);
        output::write_outputs(&cfg.out, &results)?;
    }
    log(&format!(
        "wrote {}/{{runs.json,table.md,*.svg}}",
        cfg.out.display()
    ));
    Ok(results)
}

fn run_one(
    cfg: &ScaleOutConfig,
    spec: &RunSpec,
    root: &Path,
    index: u64,
) -> Result<RunResult, String> {
    let mut fleet = start_fleet(cfg, spec, root)?;
    let mut haproxy = None;
    let mut target = fleet.results[0].addr;
    let mut stats_addr = None;
    if spec.proxy != ProxyMode::Direct {
        let bind = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let stats = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let text = haproxy_config(cfg, spec, &fleet, bind, stats).render()?;
        let h = HaproxyProcess::start(&cfg.haproxy, &text, bind)?;
        wait_all_up(stats, spec.n()).map_err(|e| format!("{e}; haproxy: {}", h.log_tail()))?;
        let _ = std::fs::create_dir_all(cfg.out.join("haproxy"));
        let _ = std::fs::write(
            cfg.out
                .join("haproxy")
                .join(format!("{}.cfg", spec.id.replace('/', "-"))),
            &text,
        );
        target = bind;
        stats_addr = Some(stats);
        haproxy = Some(h);
    }
    let t0 = Instant::now();
    let cpu0: Vec<f64> = fleet
        .procs
        .iter()
        .flatten()
        .map(ServerProcess::cpu_seconds)
        .collect();
    let hcpu0 = haproxy.as_ref().map_or(0.0, HaproxyProcess::cpu_seconds);
    let pollers = fleet
        .procs
        .iter()
        .flatten()
        .map(|p| {
            let admin = p.admin_addr().ok_or("a replica has no admin listener")?;
            StatsPoller::start(admin, BOTTLENECK_STAGE, t0)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let hpoller = stats_addr
        .map(|a| HaproxyPoller::start(a, BACKEND, t0))
        .transpose()?;
    let load = LoadConfig {
        addr: target,
        host: target.to_string(),
        mode: Mode::Closed {
            think: cfg.think,
            reqs_per_conn: cfg.reqs_per_conn,
        },
        requests: RequestMix::Path("/bottleneck".into()),
        headers: Vec::new(),
        schedule: spec.schedule.clone(),
        timeout: cfg.timeout,
        drain: cfg.drain,
        threads: cfg.threads,
        seed: cfg.seed.wrapping_add(index * 16),
        rt_target: Some(Duration::from_secs_f64(cfg.target_ms / 1e3)),
        retry_wait: Some(cfg.retry_wait),
    };
    let (report, killed) = std::thread::scope(|s| {
        let h = s.spawn(|| seda_load::client::run(&load, |_, _| {}));
        let mut killed = None;
        if let Some((i, at)) = spec.kill {
            let when = t0 + Duration::from_secs_f64(at);
            while Instant::now() < when && !h.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            if let Some(p) = fleet.procs.get(i).and_then(Option::as_ref) {
                proxy::signal_group(p.pid(), rustix::process::Signal::KILL);
                killed = Some((i, t0.elapsed().as_secs_f64()));
            }
        }
        let r = h
            .join()
            .unwrap_or_else(|_| Err("the load generator panicked".into()));
        (r, killed)
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let report = report?;
    for (k, (p, poller)) in fleet.procs.iter().flatten().zip(pollers).enumerate() {
        fleet.results[k].stats = poller.finish();
        fleet.results[k].cpu_s = p.cpu_seconds() - cpu0[k];
    }
    if let Some((i, at)) = killed {
        fleet.results[i].killed_at = Some(at);
    }
    let haproxy_samples = hpoller.map(HaproxyPoller::finish).unwrap_or_default();
    let haproxy_cpu_s = haproxy.as_ref().map_or(0.0, |h| h.cpu_seconds() - hcpu0);
    if let Some(h) = haproxy {
        h.stop();
    }
    for p in fleet.procs.iter_mut() {
        if let Some(p) = p.take() {
            let _ = p.stop();
        }
    }
    let phases = (0..report.phases.len())
        .filter_map(|i| metrics::phase_metrics(&report, i, cfg.target_ms))
        .collect();
    Ok(RunResult {
        spec: spec.clone(),
        window: metrics::phase_metrics(&report, spec.window_phase, cfg.target_ms),
        phases,
        report,
        replicas: fleet.results,
        haproxy: haproxy_samples,
        haproxy_cpu_s,
        wall_s,
    })
}

#[cfg(test)]
mod tests;
