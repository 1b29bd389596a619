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

mod config;
mod fleet;
pub mod output;
mod results;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::schedule::{Phase, Schedule};

use crate::ExperimentError;
use crate::harness::haproxy::process::{self as proxy, HaproxyPoller, HaproxyProcess};
use crate::harness::server::{ServerProcess, free_port};
use crate::harness::stats::{BOTTLENECK_STAGE, StatsPoller};
use crate::harness::{bottleneck_passes, date_utc, load_average, machine_summary};
use crate::overload::metrics::{self};
use fleet::{haproxy_config, start_fleet, wait_all_up};

pub use config::{BACKEND, ProxyMode, ReplicaSpec, RunSpec, ScaleOutConfig, Scenario};
pub use results::{ReplicaResult, RunResult, ScaleOutResults};

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
    let steady = Schedule::new(
        cfg.throughput_phases
            .iter()
            .map(|&duration| Phase::new(duration, cfg.users as f64))
            .collect(),
    );
    let spike = Schedule::new(
        cfg.phases
            .iter()
            .zip([cfg.base_users, cfg.spike_users, cfg.base_users])
            .map(|(&duration, l)| Phase::new(duration, l as f64))
            .collect(),
    );
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

/// Run the experiment, logging progress through `log`.
pub fn run(
    cfg: &ScaleOutConfig,
    log: &mut dyn FnMut(&str),
) -> Result<ScaleOutResults, ExperimentError> {
    cfg.check()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
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
        .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
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
                let e = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
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
) -> Result<RunResult, ExperimentError> {
    let mut fleet = start_fleet(cfg, spec, root)?;
    let mut haproxy = None;
    let mut target = fleet.results[0].addr;
    let mut stats_addr = None;
    if spec.proxy != ProxyMode::Direct {
        let bind = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let stats = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let text = haproxy_config(cfg, spec, &fleet, bind, stats).render()?;
        let h = HaproxyProcess::start(&cfg.haproxy, &text, bind)?;
        wait_all_up(stats, spec.n())
            .map_err(|e| ExperimentError::run(format!("{e}; haproxy: {}", h.log_tail())))?;
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
            let admin = p
                .admin_addr()
                .ok_or_else(|| ExperimentError::run("a replica has no admin listener"))?;
            StatsPoller::start(admin, BOTTLENECK_STAGE, t0)
        })
        .collect::<Result<Vec<_>, ExperimentError>>()?;
    let hpoller = stats_addr
        .map(|a| HaproxyPoller::start(a, BACKEND, t0))
        .transpose()?;
    let load = LoadConfig::new(target, spec.schedule.clone())
        .with_host(target.to_string())
        .with_mode(Mode::Closed {
            think: cfg.think,
            reqs_per_conn: cfg.reqs_per_conn,
        })
        .with_requests(RequestMix::Path("/bottleneck".into()))
        .with_timeout(cfg.timeout)
        .with_drain(cfg.drain)
        .with_threads(cfg.threads)
        .with_seed(cfg.seed.wrapping_add(index * 16))
        .with_rt_target(Some(Duration::from_secs_f64(cfg.target_ms / 1e3)))
        .with_retry_wait(Some(cfg.retry_wait));
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
            .unwrap_or(Err(seda_load::LoadError::Panicked("the load generator")));
        (r, killed)
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let report = report.map_err(ExperimentError::other)?;
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
