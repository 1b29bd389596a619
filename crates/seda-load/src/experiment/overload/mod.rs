//! `seda experiment overload`: Haboob's adaptive overload control against a CPU-bound
//! bottleneck stage (SEDA SOSP'01 5.1.4, USITS'03 section 4), on this machine.
//!
//! Every run starts `seda serve --bottleneck-ms N ...` on loopback, drives closed-loop
//! users at `/bottleneck` (20 ms think time; a user answered 503 or failed waits
//! `retry_wait`, 5 s as in USITS'03 4.1, before trying again), records the client's
//! per-second series and polls `/_seda/stats` once a second for the bottleneck stage's
//! admission rate, controller p90, quality and per-class counts.
//!
//! Scenarios ([`Scenario`]), each a few runs ([`RunSpec`]) that differ only in the
//! server's flags:
//! 1. `fig13` (SEDA Fig. 13): many users, no control vs the response-time controller.
//! 2. `spike` (USITS Fig. 10): base -> spike -> base users, no control, the
//!    response-time controller, and a plain connection limit.
//! 3. `degrade` (USITS Figs. 12-13): degradation alone, degradation + admission control.
//! 4. `classes` (USITS Figs. 14-15): a low class all along, a high class arriving for
//!    the middle phase; one controller for all vs per-class (multiclass) control.
//! 5. `policies`: the same spike under every admission policy; the spike runs of
//!    scenario 2 are reused, not rerun.
//!
//! The figures each run is judged by are in [`metrics`]; [`output`] writes
//! `runs.json`, `table.md` and the SVG charts.

pub mod metrics;
pub mod output;
pub mod stats;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::server::{ServerKind, ServerProcess, ServerSpec};
use super::{date_utc, machine_summary};
use crate::client::{LoadConfig, Mode, RequestMix};
use crate::report::LoadReport;
use crate::schedule::{Phase, Schedule};
use metrics::WindowMetrics;
use stats::{BOTTLENECK_STAGE, StatsLog, StatsPoller};

/// The request header that carries a user's class.
pub const CLASS_HEADER: &str = "X-Class";

/// One scenario of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// SEDA Fig. 13.
    Fig13,
    /// USITS Fig. 10.
    Spike,
    /// USITS Figs. 12-13.
    Degrade,
    /// USITS Figs. 14-15.
    Classes,
    /// Every admission policy on the spike.
    Policies,
}

impl Scenario {
    /// All, in run order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Fig13,
        Scenario::Spike,
        Scenario::Degrade,
        Scenario::Classes,
        Scenario::Policies,
    ];

    /// Name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Fig13 => "fig13",
            Scenario::Spike => "spike",
            Scenario::Degrade => "degrade",
            Scenario::Classes => "classes",
            Scenario::Policies => "policies",
        }
    }

    /// Title in the table.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::Fig13 => "1. Many users on the bottleneck (SEDA SOSP'01 Fig. 13)",
            Scenario::Spike => "2. A massive load spike (USITS'03 Fig. 10)",
            Scenario::Degrade => "3. Service degradation (USITS'03 Figs. 12-13)",
            Scenario::Classes => "4. Two classes of users (USITS'03 Figs. 14-15)",
            Scenario::Policies => "5. Admission policies side by side on the spike",
        }
    }

    /// Short label for chart titles.
    pub fn short(self) -> &'static str {
        match self {
            Scenario::Fig13 => "SEDA Fig. 13",
            Scenario::Spike => "USITS Fig. 10",
            Scenario::Degrade => "USITS Figs. 12-13",
            Scenario::Classes => "USITS Figs. 14-15",
            Scenario::Policies => "policies on the spike",
        }
    }

    /// Parse a name of [`Scenario::name`].
    pub fn parse(name: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name.trim())
            .ok_or_else(|| {
                format!(
                    "unknown scenario {name:?} (known: fig13, spike, degrade, classes, policies)"
                )
            })
    }
}

/// Settings of the whole experiment.
#[derive(Debug, Clone)]
pub struct OverloadConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary whose `serve` is measured.
    pub seda: PathBuf,
    /// Scenarios to run, in order.
    pub scenarios: Vec<Scenario>,
    /// CPU work per bottleneck request at full quality, ms (`--bottleneck-ms`).
    pub bottleneck_ms: f64,
    /// 90th-percentile response-time target of the controllers, ms.
    pub target_ms: f64,
    /// Users of scenario 1.
    pub fig13_users: u64,
    /// Length of each scenario-1 run.
    pub fig13_duration: Duration,
    /// Users before and after the spike.
    pub base_users: u64,
    /// Users during the spike.
    pub spike_users: u64,
    /// Users of each class in scenario 4.
    pub class_users: u64,
    /// Before, during and after the spike (scenario 4: low class alone, both, low alone).
    pub phases: [Duration; 3],
    /// Think time between a response and the next request.
    pub think: Duration,
    /// Wait after a 503 or a failed request instead of the think time.
    pub retry_wait: Duration,
    /// Requests per connection before the client closes it.
    pub reqs_per_conn: u32,
    /// `--max-connections` of the connection-limit baseline.
    pub max_connections: usize,
    /// `--queue-threshold` of the fixed queue-threshold policy.
    pub queue_threshold: usize,
    /// A request running longer fails as a timeout.
    pub timeout: Duration,
    /// After the schedule, how long requests still running may finish.
    pub drain: Duration,
    /// Load-generator threads.
    pub threads: usize,
    /// Seed of the load.
    pub seed: u64,
}

impl OverloadConfig {
    /// The default experiment (about 17 minutes here): 40 ms bottleneck, 1 s target,
    /// 1,024 users for scenario 1, 3 -> 1,000 -> 3 users over 15 s / 40 s / 20 s.
    pub fn new(out: PathBuf, seda: PathBuf) -> OverloadConfig {
        OverloadConfig {
            out,
            seda,
            scenarios: Scenario::ALL.to_vec(),
            bottleneck_ms: 40.0,
            target_ms: 1000.0,
            fig13_users: 1024,
            fig13_duration: Duration::from_secs(30),
            base_users: 3,
            spike_users: 1000,
            class_users: 128,
            phases: [
                Duration::from_secs(15),
                Duration::from_secs(40),
                Duration::from_secs(20),
            ],
            think: Duration::from_millis(20),
            retry_wait: Duration::from_secs(5),
            reqs_per_conn: 5,
            max_connections: 128,
            queue_threshold: 100,
            timeout: Duration::from_secs(60),
            drain: Duration::from_secs(15),
            threads: 1,
            seed: 1,
        }
    }

    /// A small version for tests and smoke runs: a 10 ms bottleneck, 200 ms target,
    /// a fifth of the users, 3 s / 6 s / 3 s phases, 1 s retry wait.
    pub fn quick(mut self) -> OverloadConfig {
        self.bottleneck_ms = 10.0;
        self.target_ms = 200.0;
        self.fig13_users = 200;
        self.fig13_duration = Duration::from_secs(6);
        self.spike_users = 200;
        self.class_users = 32;
        self.phases = [
            Duration::from_secs(3),
            Duration::from_secs(6),
            Duration::from_secs(3),
        ];
        self.retry_wait = Duration::from_secs(1);
        self.drain = Duration::from_secs(3);
        self.timeout = Duration::from_secs(10);
        self
    }

    /// Multiply every phase length by `f` (> 0), keeping whole seconds (>= 1 s).
    pub fn scaled(mut self, f: f64) -> OverloadConfig {
        let s = |d: Duration| Duration::from_secs(((d.as_secs_f64() * f).round() as u64).max(1));
        self.phases = self.phases.map(s);
        self.fig13_duration = s(self.fig13_duration);
        self
    }

    fn check(&self) -> Result<(), String> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.bottleneck_ms) || !pos(self.target_ms) {
            return Err("--bottleneck-ms and --target-ms must be positive".into());
        }
        if self.scenarios.is_empty() {
            return Err("no scenario to run".into());
        }
        if self.fig13_users == 0 || self.spike_users == 0 || self.class_users == 0 {
            return Err("user counts must be positive".into());
        }
        if self.phases.iter().any(|p| p.is_zero()) || self.fig13_duration.is_zero() {
            return Err("phases must last at least 1 s".into());
        }
        Ok(())
    }
}

/// A group of users with one schedule and class.
#[derive(Debug, Clone, Serialize)]
pub struct UserGroup {
    /// Name in tables: `all`, `low`, `high`.
    pub name: String,
    /// Class sent in [`CLASS_HEADER`], if any.
    pub class: Option<u8>,
    /// Users over time.
    pub schedule: Schedule,
}

/// One run: a server configuration and the users that load it.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    /// Unique id, `scenario/policy`.
    pub id: String,
    /// The scenario that defines it.
    pub scenario: Scenario,
    /// What is being compared, e.g. `response-time`.
    pub policy: String,
    /// Flags of `seda serve` besides `--listen`, `--root`, `--cache-mb`.
    pub serve_args: Vec<String>,
    /// User groups, run in parallel.
    pub groups: Vec<UserGroup>,
    /// The phase the run is judged by (the spike; the high class's visit), or `None`
    /// for the whole run.
    pub window_phase: Option<usize>,
}

impl RunSpec {
    /// Longest schedule of its groups.
    pub fn length(&self) -> Duration {
        self.groups
            .iter()
            .map(|g| g.schedule.total())
            .max()
            .unwrap_or_default()
    }
}

fn ms(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The runs of `cfg`'s scenarios, without duplicates, in run order, and for each
/// scenario the ids of its runs.
pub fn plan(cfg: &OverloadConfig) -> (Vec<RunSpec>, Vec<(Scenario, Vec<String>)>) {
    let bn = vec!["--bottleneck-ms".to_string(), ms(cfg.bottleneck_ms)];
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v = bn.clone();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let target = ms(cfg.target_ms);
    let rt = ["--rt-target-ms", target.as_str()];
    let sched = |levels: [u64; 3]| Schedule {
        phases: cfg
            .phases
            .iter()
            .zip(levels)
            .map(|(&duration, l)| Phase {
                duration,
                level: l as f64,
            })
            .collect(),
    };
    let spike = sched([cfg.base_users, cfg.spike_users, cfg.base_users]);
    let one = |schedule: Schedule| {
        vec![UserGroup {
            name: "all".into(),
            class: None,
            schedule,
        }]
    };
    let run = |scenario: Scenario, policy: &str, serve_args: Vec<String>, groups, window| RunSpec {
        id: format!("{}/{policy}", scenario.name()),
        scenario,
        policy: policy.to_string(),
        serve_args,
        groups,
        window_phase: window,
    };
    let spike_runs = || {
        vec![
            run(
                Scenario::Spike,
                "none",
                bn.clone(),
                one(spike.clone()),
                Some(1),
            ),
            run(
                Scenario::Spike,
                "response-time",
                with(&rt),
                one(spike.clone()),
                Some(1),
            ),
        ]
    };
    let mut runs: Vec<RunSpec> = Vec::new();
    let mut scenarios = Vec::new();
    for &sc in &cfg.scenarios {
        let these: Vec<RunSpec> = match sc {
            Scenario::Fig13 => {
                let steady = Schedule::steady(cfg.fig13_duration, cfg.fig13_users as f64);
                vec![
                    run(sc, "none", bn.clone(), one(steady.clone()), None),
                    run(sc, "response-time", with(&rt), one(steady), None),
                ]
            }
            Scenario::Spike => {
                let mut v = spike_runs();
                let limit = cfg.max_connections.to_string();
                v.push(run(
                    sc,
                    "max-connections",
                    with(&["--max-connections", limit.as_str()]),
                    one(spike.clone()),
                    Some(1),
                ));
                v
            }
            Scenario::Degrade => vec![
                run(
                    sc,
                    "degrade-only",
                    with(&[rt[0], rt[1], "--degrade", "--admission", "none"]),
                    one(spike.clone()),
                    Some(1),
                ),
                run(
                    sc,
                    "degrade+admission",
                    with(&[rt[0], rt[1], "--degrade"]),
                    one(spike.clone()),
                    Some(1),
                ),
            ],
            Scenario::Classes => {
                let groups = vec![
                    UserGroup {
                        name: "low".into(),
                        class: Some(0),
                        schedule: sched([cfg.class_users; 3]),
                    },
                    UserGroup {
                        name: "high".into(),
                        class: Some(1),
                        schedule: sched([0, cfg.class_users, 0]),
                    },
                ];
                vec![
                    run(sc, "one-class", with(&rt), groups.clone(), Some(1)),
                    run(
                        sc,
                        "two-classes",
                        with(&[rt[0], rt[1], "--class-header", CLASS_HEADER]),
                        groups,
                        Some(1),
                    ),
                ]
            }
            Scenario::Policies => {
                let qt = cfg.queue_threshold.to_string();
                let mut v = spike_runs();
                for (policy, args) in [
                    (
                        "queue-threshold",
                        with(&["--admission", "queue-threshold", "--queue-threshold", &qt]),
                    ),
                    ("codel", with(&["--admission", "codel"])),
                    ("gradient", with(&["--admission", "gradient"])),
                    ("aimd", with(&["--admission", "aimd"])),
                ] {
                    v.push(run(sc, policy, args, one(spike.clone()), Some(1)));
                }
                v
            }
        };
        let ids = these.iter().map(|r| r.id.clone()).collect();
        for r in these {
            if !runs.iter().any(|x| x.id == r.id) {
                runs.push(r);
            }
        }
        scenarios.push((sc, ids));
    }
    (runs, scenarios)
}

/// Pause between runs so that sockets in TIME_WAIT settle.
const PAUSE: Duration = Duration::from_secs(2);
/// Expected overhead per run besides the load: start-up with calibration, drain, stop.
const OVERHEAD: Duration = Duration::from_secs(6);

/// Expected wall time of `runs`.
pub fn eta(runs: &[RunSpec]) -> Duration {
    runs.iter().map(|r| r.length() + OVERHEAD + PAUSE).sum()
}

/// One group's results.
#[derive(Debug, Clone, Serialize)]
pub struct GroupResult {
    /// Group name.
    pub name: String,
    /// Class header sent.
    pub class: Option<u8>,
    /// Figures of the run's window (the spike) or of the whole run.
    pub window: Option<WindowMetrics>,
    /// Figures of every phase.
    pub phases: Vec<WindowMetrics>,
    /// The load generator's report, with its per-second series and CDF.
    pub report: LoadReport,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The run.
    pub spec: RunSpec,
    /// The server's calibration line (`bottleneck: N ms calibrated to K iterations`).
    pub calibration: Option<String>,
    /// Per group.
    pub groups: Vec<GroupResult>,
    /// The bottleneck stage's stats, about once a second.
    pub stats: StatsLog,
    /// Server CPU (user + system) during the run, seconds.
    pub server_cpu_s: f64,
    /// Wall time of the load, seconds.
    pub wall_s: f64,
}

impl RunResult {
    /// Mean and minimum quality reported during seconds `from..to`.
    pub fn quality(&self, from: f64, to: f64) -> Option<(f64, f64)> {
        let q: Vec<f64> = self
            .stats
            .samples
            .iter()
            .filter(|s| s.t >= from && s.t < to)
            .filter_map(|s| s.quality)
            .collect();
        if q.is_empty() {
            return None;
        }
        let mean = q.iter().sum::<f64>() / q.len() as f64;
        Some((mean, q.iter().copied().fold(f64::INFINITY, f64::min)))
    }
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine and settings.
    pub setup: serde_json::Value,
    /// Scenarios and the ids of their runs.
    pub scenarios: Vec<(Scenario, Vec<String>)>,
    /// Every run measured.
    pub runs: Vec<RunResult>,
    /// Runs that could not be measured, with the reason.
    pub failed: Vec<(String, String)>,
}

impl OverloadResults {
    /// The run with this id.
    pub fn run(&self, id: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.spec.id == id)
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> Option<(f64, f64, f64)> {
    let t = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = t.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// Run the experiment, logging progress through `log`.
pub fn run(cfg: &OverloadConfig, log: &mut dyn FnMut(&str)) -> Result<OverloadResults, String> {
    cfg.check()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| format!("cannot create {}: {e}", cfg.out.display()))?;
    let (runs, scenarios) = plan(cfg);
    let eta = eta(&runs);
    log(&format!(
        "plan: {} runs ({}); ETA {} min {} s",
        runs.len(),
        cfg.scenarios
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", "),
        eta.as_secs() / 60,
        eta.as_secs() % 60
    ));
    let loadavg = load_average();
    if let Some((l1, _, _)) = loadavg {
        log(&format!("load average before the runs: {l1:.2}"));
    }
    let root = tempfile::Builder::new()
        .prefix("seda-overload-root-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let machine = machine_summary();
    let [p0, p1, p2] = cfg.phases.map(|d| d.as_secs_f64());
    let mut results = OverloadResults {
        experiment: "overload",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine,
            "load_average_before": loadavg.map(|(a, b, c)| [a, b, c]),
            "bottleneck_ms": cfg.bottleneck_ms,
            "target_ms": cfg.target_ms,
            "fig13_users": cfg.fig13_users,
            "fig13_duration_s": cfg.fig13_duration.as_secs_f64(),
            "base_users": cfg.base_users,
            "spike_users": cfg.spike_users,
            "class_users": cfg.class_users,
            "phases_s": [p0, p1, p2],
            "think_ms": cfg.think.as_secs_f64() * 1e3,
            "retry_wait_ms": cfg.retry_wait.as_secs_f64() * 1e3,
            "reqs_per_conn": cfg.reqs_per_conn,
            "max_connections": cfg.max_connections,
            "queue_threshold": cfg.queue_threshold,
            "timeout_s": cfg.timeout.as_secs_f64(),
            "drain_s": cfg.drain.as_secs_f64(),
            "load_threads": cfg.threads,
            "recovery_hold_s": metrics::HOLD_S,
            "seed": cfg.seed,
        }),
        scenarios,
        runs: Vec::new(),
        failed: Vec::new(),
    };
    for (i, spec) in runs.iter().enumerate() {
        log(&format!(
            "== [{}/{}] {}: seda serve {} ({} s)",
            i + 1,
            runs.len(),
            spec.id,
            spec.serve_args.join(" "),
            spec.length().as_secs()
        ));
        match run_one(cfg, spec, root.path(), i as u64) {
            Ok(r) => {
                for line in progress_lines(&r) {
                    log(&format!("   {line}"));
                }
                results.runs.push(r);
            }
            Err(e) => {
                let e = e.split_whitespace().collect::<Vec<_>>().join(" ");
                log(&format!("   failed: {e}"));
                results.failed.push((spec.id.clone(), e));
            }
        }
        output::write_outputs(&cfg.out, &results)?;
        std::thread::sleep(PAUSE);
    }
    log(&format!(
        "wrote {}/{{runs.json,table.md,*.svg}}",
        cfg.out.display()
    ));
    Ok(results)
}

/// One line per group: the window's p90 against the target, recovery, goodput,
/// rejects; and the quality when the server reports one.
fn progress_lines(r: &RunResult) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(c) = &r.calibration {
        lines.push(c.clone());
    }
    for g in &r.groups {
        let Some(m) = &g.window else { continue };
        let rec = m
            .recover_s
            .map_or_else(|| "never".to_string(), |s| format!("{s} s"));
        let mut line = format!(
            "{:<5} s {:>3}-{:<3} p90 {:>8.0} ms (target {:.0}), max {:>8.0} ms, recover {rec}, goodput {:>6.1} req/s, throughput {:>6.1} req/s, rejected {:>5.1} %, errors {:>5.1} %",
            g.name,
            m.start_s,
            m.end_s,
            m.p90_ms,
            m.target_ms,
            m.max_ms,
            m.goodput_rps,
            m.throughput_rps,
            100.0 * m.reject_rate,
            100.0 * m.error_rate,
        );
        if let Some((mean, min)) = r.quality(m.start_s as f64, m.end_s as f64) {
            line.push_str(&format!(", quality mean {mean:.2} min {min:.2}"));
        }
        lines.push(line);
    }
    if r.stats.failures > 0 {
        lines.push(format!(
            "stats polls failed: {} (last: {})",
            r.stats.failures,
            r.stats.last_failure.as_deref().unwrap_or("-")
        ));
    }
    lines
}

/// The calibration line of the server's output, if printed.
fn calibration_line(log: &str) -> Option<String> {
    log.lines()
        .find(|l| l.starts_with("bottleneck:"))
        .map(|l| l.trim().to_string())
}

fn run_one(
    cfg: &OverloadConfig,
    spec: &RunSpec,
    root: &Path,
    index: u64,
) -> Result<RunResult, String> {
    let server_spec = ServerSpec {
        name: spec.id.replace('/', "-"),
        kind: ServerKind::Haboob {
            seda: cfg.seda.clone(),
            cache_mb: 16,
            // A server with a long queue (no control) would use the whole default
            // grace of 10 s to stop; the run's figures are taken by then.
            extra: [
                spec.serve_args.as_slice(),
                &["--shutdown-grace".into(), "1".into()],
            ]
            .concat(),
        },
    };
    let server = ServerProcess::start(&server_spec, root)?;
    let probe = stats::http_get(server.addr(), "/bottleneck", Duration::from_secs(10))
        .map_err(|e| format!("GET /bottleneck: {e}"))?;
    if probe.status != 200 {
        return Err(format!(
            "GET /bottleneck answered {}, not 200 (does this seda serve know --bottleneck-ms?): {}",
            probe.status,
            server.log_tail()
        ));
    }
    let calibration = calibration_line(&server.log_tail());
    let cpu0 = server.cpu_seconds();
    let t0 = Instant::now();
    let admin = server
        .admin_addr()
        .ok_or("the server has no admin listener to poll")?;
    let poller = StatsPoller::start(admin, BOTTLENECK_STAGE, t0)?;
    let addr = server.addr();
    let loads: Vec<LoadConfig> = spec
        .groups
        .iter()
        .enumerate()
        .map(|(k, g)| LoadConfig {
            addr,
            host: addr.to_string(),
            mode: Mode::Closed {
                think: cfg.think,
                reqs_per_conn: cfg.reqs_per_conn,
            },
            requests: RequestMix::Path("/bottleneck".into()),
            headers: g
                .class
                .map(|c| vec![(CLASS_HEADER.to_string(), c.to_string())])
                .unwrap_or_default(),
            schedule: g.schedule.clone(),
            timeout: cfg.timeout,
            drain: cfg.drain,
            threads: cfg.threads,
            seed: cfg.seed.wrapping_add(index * 16 + k as u64),
            rt_target: Some(Duration::from_secs_f64(cfg.target_ms / 1e3)),
            retry_wait: Some(cfg.retry_wait),
        })
        .collect();
    let reports: Vec<Result<LoadReport, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = loads
            .iter()
            .map(|l| s.spawn(move || crate::client::run(l, |_, _| {})))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a load group panicked".into()))
            })
            .collect()
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let stats = poller.finish();
    let server_cpu_s = server.cpu_seconds() - cpu0;
    let tail = server.log_tail();
    if let Err(e) = server.stop() {
        eprintln!("   {e}");
    }
    if !tail.is_empty() {
        let dir = cfg.out.join("logs");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{}.log", spec.id.replace('/', "-"))), tail);
    }
    let mut groups = Vec::new();
    for (g, rep) in spec.groups.iter().zip(reports) {
        let report = rep?;
        let phases = (0..report.phases.len())
            .filter_map(|i| metrics::phase_metrics(&report, i, cfg.target_ms))
            .collect();
        let window = match spec.window_phase {
            Some(i) => metrics::phase_metrics(&report, i, cfg.target_ms),
            None => metrics::whole_metrics(&report, cfg.target_ms),
        };
        groups.push(GroupResult {
            name: g.name.clone(),
            class: g.class,
            window,
            phases,
            report,
        });
    }
    Ok(RunResult {
        spec: spec.clone(),
        calibration,
        groups,
        stats,
        server_cpu_s,
        wall_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_reuses_the_spike_runs_and_fits_twenty_minutes() {
        let cfg = OverloadConfig::new("out".into(), "seda".into());
        let (runs, scenarios) = plan(&cfg);
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "fig13/none",
                "fig13/response-time",
                "spike/none",
                "spike/response-time",
                "spike/max-connections",
                "degrade/degrade-only",
                "degrade/degrade+admission",
                "classes/one-class",
                "classes/two-classes",
                "policies/queue-threshold",
                "policies/codel",
                "policies/gradient",
                "policies/aimd",
            ]
        );
        let policies = &scenarios
            .iter()
            .find(|s| s.0 == Scenario::Policies)
            .unwrap()
            .1;
        assert_eq!(policies[0], "spike/none");
        assert_eq!(policies[1], "spike/response-time");
        assert!(
            eta(&runs) < Duration::from_secs(20 * 60),
            "{:?}",
            eta(&runs)
        );
        // The spike: 3 -> 1000 -> 3 users, judged on the middle phase.
        let spike = &runs[3];
        assert_eq!(
            spike.serve_args,
            ["--bottleneck-ms", "40", "--rt-target-ms", "1000"]
        );
        let levels: Vec<f64> = spike.groups[0]
            .schedule
            .phases
            .iter()
            .map(|p| p.level)
            .collect();
        assert_eq!(levels, [3.0, 1000.0, 3.0]);
        assert_eq!(spike.window_phase, Some(1));
        // The classes: the high class only in the middle phase, with its header.
        let classes = &runs[8];
        assert!(classes.serve_args.contains(&"--class-header".to_string()));
        assert_eq!(classes.groups[1].class, Some(1));
        let high: Vec<f64> = classes.groups[1]
            .schedule
            .phases
            .iter()
            .map(|p| p.level)
            .collect();
        assert_eq!(high, [0.0, 128.0, 0.0]);
        // Only the policies: the two spike runs come along.
        let only = OverloadConfig {
            scenarios: vec![Scenario::Policies],
            ..cfg.clone()
        };
        assert_eq!(plan(&only).0.len(), 6);
    }

    #[test]
    fn scaling_and_quick_shorten_every_phase() {
        let cfg = OverloadConfig::new("o".into(), "s".into()).scaled(0.5);
        assert_eq!(cfg.phases[1], Duration::from_secs(20));
        assert_eq!(cfg.fig13_duration, Duration::from_secs(15));
        let q = OverloadConfig::new("o".into(), "s".into()).quick();
        let (runs, _) = plan(&q);
        assert!(eta(&runs) < Duration::from_secs(5 * 60));
        assert!(q.check().is_ok());
        assert!(
            OverloadConfig {
                target_ms: 0.0,
                ..q
            }
            .check()
            .is_err()
        );
    }

    #[test]
    fn calibration_line_is_found_in_the_log() {
        let log = "listening on http://127.0.0.1:1\nadmin at http://127.0.0.1:2/_seda/\nbottleneck: 40 ms calibrated to 123 iterations\nseda serve: ...";
        assert_eq!(
            calibration_line(log).as_deref(),
            Some("bottleneck: 40 ms calibrated to 123 iterations")
        );
        assert_eq!(calibration_line("nothing"), None);
    }
}
