//! Runs the plan: the knee, then every (shape, front, repeat) with its load against
//! a fresh backend ([`super::backend`]) and front ([`super::fronts`]), and the
//! outputs after every run.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rustix::process::Signal;

use super::backend::{Backend, calibrate, gunicorn_version};
use super::config::{CLASS_HEADER, Front, HIGH_SHARE, ProxyConfig, Shape, starts_shape};
use super::fronts::start_front;
use super::output::write_outputs;
use super::results::{CapacityCheck, HighClass, ProxyResults, ProxyRun, ShapeMetrics, Sustained};
use crate::ExperimentError;
use crate::harness::haproxy::ensure_haproxy;
use crate::harness::{date_utc, load_average, machine_summary};
use crate::overload::metrics::{phase_metrics, time_to_recover};
use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::report::LoadReport;
use seda_load::schedule::{Phase, Schedule};

/// Closed-loop think time of the spike (as `seda experiment overload`).
const THINK: Duration = Duration::from_millis(20);
/// Requests per client connection.
const REQS_PER_CONN: u32 = 100;

/// Runs the experiment, logging progress through `log`.
pub fn run(cfg: &ProxyConfig, log: &mut dyn FnMut(&str)) -> Result<ProxyResults, ExperimentError> {
    cfg.check()?;
    // gunicorn and its Python run with the app's directory as their working
    // directory: a relative path given on the command line must not be read from
    // there.
    let absolute = |p: &Path| {
        std::path::absolute(p)
            .map_err(|e| ExperimentError::step(format!("cannot resolve {}", p.display()), e))
    };
    let cfg = &ProxyConfig {
        gunicorn: absolute(&cfg.gunicorn)?,
        app_dir: absolute(&cfg.app_dir)?,
        seda: absolute(&cfg.seda)?,
        ..cfg.clone()
    };
    fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let plan = cfg.plan();
    let haproxy = if plan.iter().any(|p| p.1 == Front::Haproxy) {
        Some(ensure_haproxy(log)?)
    } else {
        None
    };
    let loadavg = load_average();
    let eta = cfg.eta();
    log(&format!(
        "plan: knee + {} runs; ETA {} min {} s; load average at start {}",
        plan.len() * cfg.repeats,
        eta.as_secs() / 60,
        eta.as_secs() % 60,
        loadavg.map_or("?".into(), |l| format!("{:.2}", l.0))
    ));
    let root = tempfile::Builder::new()
        .prefix("seda-proxy-root-")
        .tempdir()
        .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
    let iter_per_ms = calibrate(cfg)?;
    log(&format!(
        "app.py: {iter_per_ms:.1} hash iterations per ms (best of 5, for every worker)"
    ));
    let cfg = &ProxyConfig {
        iter_per_ms: Some(iter_per_ms),
        ..cfg.clone()
    };
    let (knee, sustained) = knee(cfg, &cfg.knee_users, log)?;
    let knee_peak = knee.iter().map(|k| k.1).fold(0.0, f64::max);
    let capacity = sustained.rps;
    if capacity < 1.0 {
        return Err(ExperimentError::run(format!(
            "the backend served nothing at the knee: {knee:?}, sustained {sustained:?}"
        )));
    }
    log(&format!(
        "capacity: {capacity:.1} req/s sustained ({} users, median second); the knee's best step {knee_peak:.1} req/s",
        sustained.users
    ));
    let mut results = ProxyResults {
        experiment: "proxy".into(),
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine_summary(),
            "load_average_at_start": loadavg.map(|(a, b, c)| [a, b, c]),
            "workers": cfg.workers,
            "work_ms": cfg.work_ms,
            "dist": cfg.dist,
            "target_ms": cfg.target_ms,
            "phases_s": cfg.phases.map(|d| d.as_secs_f64()),
            "repeats": cfg.repeats,
            "knee_users": cfg.knee_users,
            "knee_step_s": cfg.knee_step.as_secs_f64(),
            "sustain_s": cfg.sustain.as_secs_f64(),
            "spike_users": cfg.spike_users,
            "base_users": cfg.base_users,
            "retry_wait_ms": cfg.retry_wait.as_secs_f64() * 1e3,
            "max_conns": cfg.max_conns,
            "timeout_s": cfg.timeout.as_secs_f64(),
            "drain_s": cfg.drain.as_secs_f64(),
            "plan": plan.iter().map(|(s, f)| format!("{}/{}", s.name(), f.name())).collect::<Vec<_>>(),
            "high_class_share": HIGH_SHARE,
            "class_header": CLASS_HEADER,
            "seed": cfg.seed,
            "gunicorn": gunicorn_version(&cfg.gunicorn),
            "app_iter_per_ms": iter_per_ms,
        }),
        capacity_rps: capacity,
        knee,
        knee_peak_rps: knee_peak,
        sustained: Some(sustained),
        capacity_checks: Vec::new(),
        runs: Vec::new(),
        failed: Vec::new(),
    };
    let total = plan.len() * cfg.repeats;
    let mut i = 0;
    for repeat in 0..cfg.repeats {
        let mut capacity = capacity;
        for (k, &(shape, front)) in plan.iter().enumerate() {
            i += 1;
            // The capacity at the time: the sustained step again, on a fresh
            // backend, right before each shape (the knee's own for the first).
            if starts_shape(&plan, k) {
                let check = if repeat == 0 && k == 0 {
                    sustained_at_start(&results)
                } else {
                    match self::knee(cfg, &[], log) {
                        Ok((_, s)) if s.rps >= 1.0 => s,
                        Ok((_, s)) => {
                            log(&format!(
                                "   capacity check served nothing ({s:?}): keeping {capacity:.1} req/s"
                            ));
                            Sustained { rps: capacity, ..s }
                        }
                        Err(e) => {
                            log(&format!(
                                "   capacity check failed ({e}): keeping {capacity:.1} req/s"
                            ));
                            Sustained {
                                users: 2 * u64::from(cfg.workers),
                                seconds: Vec::new(),
                                rps: capacity,
                            }
                        }
                    }
                };
                capacity = check.rps;
                log(&format!(
                    "capacity before {} (repeat {}): {capacity:.1} req/s",
                    shape.name(),
                    repeat + 1
                ));
                results.capacity_checks.push(CapacityCheck {
                    repeat,
                    shape: shape.name(),
                    sustained: check,
                });
            }
            let id = format!("{}/{}/{}", shape.name(), front.name(), repeat + 1);
            log(&format!("== [{i}/{total}] {id}"));
            let index = (i - 1) as u64;
            match run_one(
                cfg,
                shape,
                front,
                capacity,
                haproxy.as_deref(),
                root.path(),
                index,
            ) {
                Ok(mut r) => {
                    r.repeat = repeat;
                    log(&format!("   {}", line(&r.metrics, cfg.target_ms)));
                    if let Some(h) = &r.high {
                        log(&format!(
                            "   high class: offered {:.1}/s, served {:.1}/s, lost {:.1} %, p90 {:.0} ms",
                            h.offered_rps,
                            h.served_rps,
                            h.lost_fraction * 100.0,
                            h.p90_ms
                        ));
                    }
                    results.runs.push(r);
                }
                Err(e) => {
                    let e = e
                        .to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ");
                    log(&format!("   failed: {e}"));
                    results.failed.push((id, e));
                }
            }
            write_outputs(&cfg.out, &results)?;
        }
    }
    log(&format!(
        "wrote {}/{{runs.json,table.md,*.svg}}",
        cfg.out.display()
    ));
    Ok(results)
}

/// The start's sustained step, as the first shape's capacity check.
fn sustained_at_start(r: &ProxyResults) -> Sustained {
    r.sustained.clone().unwrap_or(Sustained {
        users: 0,
        seconds: Vec::new(),
        rps: r.capacity_rps,
    })
}

fn line(m: &ShapeMetrics, target_ms: f64) -> String {
    let rec = |r: Option<u64>| r.map_or_else(|| "never".into(), |s| format!("{s} s"));
    format!(
        "served {:.1} req/s ({:.2}x capacity {:.1}), p90 {:.0} ms (target {target_ms:.0}), p99 {:.0} ms, 503 {:.1}/s, errors {}, recover {}, after {}",
        m.served_rps,
        m.served_of_capacity,
        m.capacity_rps,
        m.p90_ms,
        m.p99_ms,
        m.refused_rps,
        m.errors,
        rec(m.recover_s),
        rec(m.after_recover_s),
    )
}

fn load(
    cfg: &ProxyConfig,
    addr: SocketAddr,
    mode: Mode,
    phases: Vec<Phase>,
    seed: u64,
) -> LoadConfig {
    LoadConfig::new(addr, Schedule::new(phases))
        .with_mode(mode)
        .with_requests(RequestMix::Path(format!(
            "/work?ms={}&dist={}",
            cfg.work_ms, cfg.dist
        )))
        .with_timeout(cfg.timeout)
        .with_drain(cfg.drain)
        .with_threads(1)
        .with_seed(seed)
        .with_rt_target(Some(Duration::from_secs_f64(cfg.target_ms / 1e3)))
        .with_retry_wait(Some(cfg.retry_wait))
}

/// The knee: closed-loop users without think time straight at the backend, step by
/// step, then two users per worker for `sustain`. The capacity is that last step's
/// median second: the mean of a 3 s step overstated what the backend delivers (the
/// medium run of 2026-11-27 took 180/s from its 4-user step, while its 8-user step
/// served 140/s and nginx `proxy_pass`, which refuses nothing, served 0.85-0.92x of
/// it in the open loops).
///
/// With no staircase (`knee_users` empty) it is the sustained step alone: the
/// capacity check before each shape.
fn knee(
    cfg: &ProxyConfig,
    knee_users: &[u64],
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<(u64, f64)>, Sustained), ExperimentError> {
    let backend = Backend::start(cfg)?;
    let users = 2 * u64::from(cfg.workers);
    let mut phases: Vec<Phase> = knee_users
        .iter()
        .map(|&u| Phase::new(cfg.knee_step, u as f64))
        .collect();
    phases.push(Phase::new(cfg.sustain, users as f64));
    let mode = Mode::Closed {
        think: Duration::ZERO,
        reqs_per_conn: REQS_PER_CONN,
    };
    let mut l = load(cfg, backend.addr, mode, phases, cfg.seed);
    l.drain = Duration::from_secs(1);
    let report = seda_load::client::run(&l, |_, _| {}).map_err(ExperimentError::other)?;
    let steps: Vec<(u64, f64)> = report
        .phases
        .iter()
        .zip(knee_users)
        .map(|(p, &u)| {
            let secs = p.end_s.saturating_sub(p.start_s).max(1) as f64;
            (u, p.completed as f64 / secs)
        })
        .collect();
    for (u, r) in &steps {
        log(&format!("knee: {u} users -> {r:.1} req/s"));
    }
    let start = report
        .phases
        .get(knee_users.len())
        .map(|p| p.start_s)
        .ok_or_else(|| ExperimentError::run("the sustained step did not run"))?;
    let per_second = report.timeseries.iter().map(|p| (p.t, p.completed));
    let sustained = sustained(per_second, start, cfg.sustain, users);
    log(&format!(
        "sustained: {users} users -> {:.1} req/s (median of {:?})",
        sustained.rps, sustained.seconds
    ));
    Ok((steps, sustained))
}

/// The sustained step from `start_s`, from the run's (second, completed) series:
/// its whole seconds but the first and the last, and their median.
fn sustained(
    per_second: impl Iterator<Item = (u64, u64)>,
    start_s: u64,
    length: Duration,
    users: u64,
) -> Sustained {
    let end = start_s + length.as_secs();
    let seconds: Vec<u64> = per_second
        .filter(|(t, _)| *t > start_s && t + 1 < end)
        .map(|(_, n)| n)
        .collect();
    let mut sorted = seconds.clone();
    sorted.sort_unstable();
    let rps = match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2] as f64,
        n => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
    };
    Sustained {
        users,
        seconds,
        rps,
    }
}

fn run_one(
    cfg: &ProxyConfig,
    shape: Shape,
    front: Front,
    capacity: f64,
    haproxy: Option<&Path>,
    root: &Path,
    index: u64,
) -> Result<ProxyRun, ExperimentError> {
    let backend = Backend::start(cfg)?;
    let (running, front_config) =
        start_front(cfg, shape, front, backend.addr, capacity, haproxy, root)?;
    let [p0, p1, p2] = cfg.phases;
    let phase = Phase::new;
    let open = Mode::Open {
        reqs_per_conn: REQS_PER_CONN,
        max_conns: cfg.max_conns,
    };
    let (mode, phases, capacity_then) = match shape {
        Shape::Spike => (
            Mode::Closed {
                think: THINK,
                reqs_per_conn: REQS_PER_CONN,
            },
            vec![
                phase(p0, cfg.base_users as f64),
                phase(p1, cfg.spike_users as f64),
                phase(p2, cfg.base_users as f64),
            ],
            capacity,
        ),
        Shape::Open(f) | Shape::Classes(f) => (
            open.clone(),
            vec![
                phase(p0, capacity * 0.5),
                phase(p1, capacity * f),
                phase(p2, capacity * 0.5),
            ],
            capacity,
        ),
        Shape::Drop => (
            open.clone(),
            vec![
                phase(p0, capacity * 0.8),
                phase(p1, capacity * 0.8),
                phase(p2, capacity * 0.8),
            ],
            capacity / 2.0,
        ),
    };
    let l = load(
        cfg,
        running.addr(),
        mode,
        phases,
        cfg.seed.wrapping_add(index),
    );
    // The high class of `Classes`: its own arrivals at a steady share of the
    // capacity, with the class header.
    let high_load = matches!(shape, Shape::Classes(_)).then(|| {
        let level = capacity * HIGH_SHARE;
        let mut h = load(
            cfg,
            running.addr(),
            open,
            vec![phase(p0, level), phase(p1, level), phase(p2, level)],
            cfg.seed.wrapping_add(index).wrapping_add(1 << 32),
        );
        h.headers = vec![(CLASS_HEADER.into(), "1".into())];
        h
    });
    let (report, high): (
        Result<LoadReport, seda_load::LoadError>,
        Option<Result<LoadReport, seda_load::LoadError>>,
    ) = std::thread::scope(|s| {
        if shape == Shape::Drop {
            let b = &backend;
            let half = cfg.workers / 2;
            s.spawn(move || {
                std::thread::sleep(p0);
                b.signal(Signal::TTOU, half);
                std::thread::sleep(p1.saturating_sub(Duration::from_millis(100) * half));
                b.signal(Signal::TTIN, half);
            });
        }
        let high = high_load
            .as_ref()
            .map(|h| s.spawn(move || seda_load::client::run(h, |_, _| {})));
        let report = seda_load::client::run(&l, |_, _| {});
        let high = high.map(|t| {
            t.join().unwrap_or(Err(seda_load::LoadError::Panicked(
                "the high class's load generator",
            )))
        });
        (report, high)
    });
    let tail = backend.tail();
    running.stop();
    drop(backend);
    let report = report.map_err(|e| ExperimentError::run(format!("{e}; gunicorn: {tail}")))?;
    let mut metrics = shape_metrics(&report, cfg.target_ms, capacity_then)
        .ok_or_else(|| ExperimentError::run("the load report has fewer than three phases"))?;
    let high = match high {
        Some(h) => {
            let h =
                h.map_err(|e| ExperimentError::run(format!("high class: {e}; gunicorn: {tail}")))?;
            let c = high_class(&h).ok_or_else(|| {
                ExperimentError::run("the high class's report has fewer than three phases")
            })?;
            // Served counts both classes; the p90 columns stay class 0's.
            metrics.served_rps += c.served_rps;
            metrics.served_of_capacity = metrics.served_rps / capacity_then;
            metrics.errors += h.errors;
            for (k, v) in &h.errors_by_kind {
                *metrics.error_kinds.entry(k.clone()).or_default() += v;
            }
            Some(HighClass {
                series: h.timeseries.clone(),
                ..c
            })
        }
        None => None,
    };
    Ok(ProxyRun {
        shape: shape.name(),
        front: front.name().into(),
        repeat: 0,
        front_config,
        metrics,
        phases: report.phases.clone(),
        series: report.timeseries.clone(),
        ticks: report.ticks.clone(),
        high,
    })
}

/// The high class's figures in the overload phase (without its series).
pub fn high_class(r: &LoadReport) -> Option<HighClass> {
    let mid = r.phases.get(1)?;
    let secs = mid.end_s.saturating_sub(mid.start_s).max(1) as f64;
    let offered = mid.completed + mid.rejected + mid.errors;
    Some(HighClass {
        offered_rps: offered as f64 / secs,
        served_rps: mid.completed as f64 / secs,
        lost_fraction: if offered == 0 {
            0.0
        } else {
            (mid.rejected + mid.errors) as f64 / offered as f64
        },
        p90_ms: mid.rt_p90_ms,
        refused: mid.rejected,
        errors: r.errors,
        series: Vec::new(),
    })
}

/// The run's figures (see [`ShapeMetrics`]); `None` without three phases.
pub fn shape_metrics(r: &LoadReport, target_ms: f64, capacity: f64) -> Option<ShapeMetrics> {
    let mid = phase_metrics(r, 1, target_ms)?;
    let last = r.phases.get(2)?;
    let p99_ms = r
        .cdf
        .iter()
        .find(|p| p.p >= 0.99)
        .or(r.cdf.last())
        .map_or(0.0, |p| p.rt_ms);
    let secs = mid.end_s.saturating_sub(mid.start_s).max(1) as f64;
    Some(ShapeMetrics {
        capacity_rps: capacity,
        served_rps: mid.throughput_rps,
        served_of_capacity: if capacity > 0.0 {
            mid.throughput_rps / capacity
        } else {
            0.0
        },
        p90_ms: mid.p90_ms,
        p99_ms,
        refused_rps: mid.rejected as f64 / secs,
        errors: r.errors,
        error_kinds: r.errors_by_kind.clone(),
        recover_s: mid.recover_s,
        after_recover_s: time_to_recover(&r.timeseries, last.start_s, last.end_s, target_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_is_the_sustained_steps_median_second_without_its_edges() {
        // Knee steps in seconds 0-8, the sustained step in 9-16 (8 s), the drain
        // after: the step's first and last second (ramp, end) are left out.
        let series = [
            (0, 170),
            (8, 140),
            (9, 120),
            (10, 160),
            (11, 150),
            (12, 158),
            (13, 155),
            (14, 149),
            (15, 152),
            (16, 60),
            (17, 5),
        ];
        let s = sustained(series.into_iter(), 9, Duration::from_secs(8), 4);
        assert_eq!(s.seconds, vec![160, 150, 158, 155, 149, 152]);
        assert_eq!(s.rps, 153.5);
        assert_eq!(s.users, 4);
        let none = sustained([(0, 100)].into_iter(), 9, Duration::from_secs(8), 4);
        assert_eq!((none.seconds.len(), none.rps), (0, 0.0));
    }
}
