//! Runs the plan: one server (and nginx, for its row) per run, the users, the stats
//! poller and a CPU sampler; writes the outputs after every run.

use std::path::Path;
use std::time::{Duration, Instant};

use super::config::{CLASS_HEADER, Front, OverloadConfig, RunSpec};
use super::metrics;
use super::output;
use super::plan::{PAUSE, eta, plan};
use super::results::{GroupResult, OverloadResults, RunResult};
use super::summary;
use crate::ExperimentError;
use crate::harness::server::{ServerKind, ServerProcess, ServerSpec, process_tree_cpu};
use crate::harness::stats::{self, BOTTLENECK_STAGE, StatsPoller};
use crate::harness::{bottleneck_passes, date_utc, load_average, machine_summary};
use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::report::LoadReport;

/// How often the server's CPU time is sampled during a run.
const CPU_SAMPLE: Duration = Duration::from_millis(500);

/// Run the experiment, logging progress through `log`.
pub fn run(
    cfg: &OverloadConfig,
    log: &mut dyn FnMut(&str),
) -> Result<OverloadResults, ExperimentError> {
    cfg.check()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let mut cfg = cfg.clone();
    cfg.bottleneck_passes = Some(bottleneck_passes(
        cfg.bottleneck_passes,
        cfg.bottleneck_ms,
        log,
    )?);
    let cfg = &cfg;
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
        .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
    let machine = machine_summary();
    let [p0, p1, p2] = cfg.phases.map(|d| d.as_secs_f64());
    let mut results = OverloadResults {
        experiment: "overload",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine,
            "load_average_before": loadavg.map(|(a, b, c)| [a, b, c]),
            "bottleneck_ms": cfg.bottleneck_ms,
            "bottleneck_passes": cfg.bottleneck_passes,
            "target_ms": cfg.target_ms,
            "fig13_users": cfg.fig13_users,
            "fig13_duration_s": cfg.fig13_duration.as_secs_f64(),
            "base_users": cfg.base_users,
            "spike_users": cfg.spike_users,
            "class_users": cfg.class_users,
            "high_users": cfg.high_users,
            "repeats": cfg.repeats,
            "knee_users": cfg.knee_users,
            "knee_step_s": cfg.knee_step.as_secs_f64(),
            "refusal_users": cfg.refusal_users,
            "refusal_phases_s": cfg.refusal_phases.map(|d| d.as_secs_f64()),
            "phases_s": [p0, p1, p2],
            "think_ms": cfg.think.as_secs_f64() * 1e3,
            "retry_wait_ms": cfg.retry_wait.as_secs_f64() * 1e3,
            "reqs_per_conn": cfg.reqs_per_conn,
            "max_connections": cfg.max_connections,
            "queue_threshold": cfg.queue_threshold,
            "timeout_s": cfg.timeout.as_secs_f64(),
            "drain_s": cfg.drain.as_secs_f64(),
            "load_threads": cfg.threads,
            "recovery_tolerance": metrics::TOLERANCE,
            "seed": cfg.seed,
        }),
        scenarios,
        runs: Vec::new(),
        failed: Vec::new(),
    };
    for (i, spec) in runs.iter().enumerate() {
        log(&format!(
            "== [{}/{}] {} #{}: {}seda serve {} ({} s)",
            i + 1,
            runs.len(),
            spec.id,
            spec.repeat + 1,
            match spec.front {
                Front::Seda => "",
                Front::NginxLimitReq => "nginx limit_req -> ",
            },
            spec.serve_args.join(" "),
            spec.length().as_secs()
        ));
        let capacity = summary::capacity(&results).map(|c| c.median);
        match run_one(cfg, spec, root.path(), i as u64, capacity) {
            Ok(r) => {
                for line in progress_lines(&r) {
                    log(&format!("   {line}"));
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

/// The nginx settings of [`Front::NginxLimitReq`]: `limit_req` at `rate` requests/s
/// with a burst of one target's worth, refusals answered 503 at once.
pub fn nginx_limit_req(rate: f64, target_ms: f64) -> (String, String) {
    let rate = rate.round().max(1.0);
    let burst = (rate * target_ms / 1000.0).round().max(1.0);
    (
        // One key for every client (all on loopback): a limit for the whole server.
        // (An empty key, e.g. `$server_name` without `server_name`, limits nothing.)
        format!("\x20 limit_req_zone $binary_remote_addr zone=bottleneck:1m rate={rate}r/s;"),
        format!("limit_req zone=bottleneck burst={burst}; limit_req_status 503;"),
    )
}

fn run_one(
    cfg: &OverloadConfig,
    spec: &RunSpec,
    root: &Path,
    index: u64,
    capacity: Option<f64>,
) -> Result<RunResult, ExperimentError> {
    let conf_dir = tempfile::Builder::new()
        .prefix("seda-overload-conf-")
        .tempdir()
        .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
    let mut extra = spec.serve_args.clone();
    if let Some(text) = &spec.config {
        let path = conf_dir.path().join("serve.toml");
        std::fs::write(&path, text)
            .map_err(|e| ExperimentError::step(format!("cannot write {}", path.display()), e))?;
        extra.push("--config".into());
        extra.push(path.display().to_string());
    }
    // A server with a long queue (no control) would use the whole default grace of
    // 10 s to stop; the run's figures are taken by then.
    extra.extend(["--shutdown-grace".into(), "1".into()]);
    let server_spec = ServerSpec {
        name: format!("{}-{}", spec.id.replace('/', "-"), spec.repeat),
        kind: ServerKind::Haboob {
            seda: cfg.seda.clone(),
            cache_mb: 16,
            extra,
        },
    };
    let server = ServerProcess::start(&server_spec, root)?;
    let front = match spec.front {
        Front::Seda => None,
        Front::NginxLimitReq => {
            // Without a knee measured in this run, the bottleneck's nominal rate on
            // two cores.
            let rate = capacity.unwrap_or(2000.0 / cfg.bottleneck_ms);
            let (http, location) = nginx_limit_req(rate, cfg.target_ms);
            let nginx = ServerSpec {
                name: format!("nginx-{}", spec.repeat),
                kind: ServerKind::NginxProxy {
                    workers: 1,
                    upstream: server.addr(),
                    http,
                    location,
                },
            };
            Some(ServerProcess::start(&nginx, root)?)
        }
    };
    let cpu_now =
        || server.cpu_seconds() + front.as_ref().map_or(0.0, |f| process_tree_cpu(f.pid()));
    let probe = stats::http_get(server.addr(), "/bottleneck", Duration::from_secs(10))
        .map_err(|e| ExperimentError::step("GET /bottleneck", e))?;
    if probe.status != 200 {
        return Err(ExperimentError::run(format!(
            "GET /bottleneck answered {}, not 200 (does this seda serve know --bottleneck-ms?): {}",
            probe.status,
            server.log_tail()
        )));
    }
    let calibration = calibration_line(&server.log_tail());
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let admin = server
        .admin_addr()
        .ok_or_else(|| ExperimentError::run("the server has no admin listener to poll"))?;
    let poller = StatsPoller::start(admin, BOTTLENECK_STAGE, t0)?;
    let addr = front.as_ref().map_or(server.addr(), |f| f.addr());
    let retry_wait = spec.retry_wait.unwrap_or(cfg.retry_wait);
    let loads: Vec<LoadConfig> = spec
        .groups
        .iter()
        .enumerate()
        .map(|(k, g)| {
            LoadConfig::new(addr, g.schedule.clone())
                .with_mode(Mode::Closed {
                    think: cfg.think,
                    reqs_per_conn: cfg.reqs_per_conn,
                })
                .with_requests(RequestMix::Path("/bottleneck".into()))
                .with_headers(
                    g.class
                        .map(|c| vec![(CLASS_HEADER.to_string(), c.to_string())])
                        .unwrap_or_default(),
                )
                .with_timeout(cfg.timeout)
                .with_drain(cfg.drain)
                .with_threads(cfg.threads)
                .with_seed(cfg.seed.wrapping_add(index * 16 + k as u64))
                .with_rt_target(Some(Duration::from_secs_f64(cfg.target_ms / 1e3)))
                .with_retry_wait(Some(retry_wait))
        })
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut cpu = Vec::new();
    let reports: Vec<Result<LoadReport, seda_load::LoadError>> = std::thread::scope(|s| {
        let handles: Vec<_> = loads
            .iter()
            .map(|l| s.spawn(move || seda_load::client::run(l, |_, _| {})))
            .collect();
        let sampler = s.spawn(|| {
            let mut v = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                v.push((t0.elapsed().as_secs_f64(), cpu_now() - cpu0));
                std::thread::sleep(CPU_SAMPLE);
            }
            // The last sample comes after the load: every phase ends before it.
            v.push((t0.elapsed().as_secs_f64(), cpu_now() - cpu0));
            v
        });
        let reports = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(seda_load::LoadError::Panicked("a load group")))
            })
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        cpu = sampler.join().unwrap_or_default();
        reports
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let stats = poller.finish();
    let server_cpu_s = cpu_now() - cpu0;
    let mut tail = server.log_tail();
    if let Some(f) = front {
        tail.push_str(&f.log_tail());
        if let Err(e) = f.stop() {
            eprintln!("   {e}");
        }
    }
    if let Err(e) = server.stop() {
        eprintln!("   {e}");
    }
    if !tail.is_empty() {
        let dir = cfg.out.join("logs");
        let _ = std::fs::create_dir_all(&dir);
        let name = format!("{}-{}.log", spec.id.replace('/', "-"), spec.repeat + 1);
        let _ = std::fs::write(dir.join(name), tail);
    }
    let mut groups = Vec::new();
    for (g, rep) in spec.groups.iter().zip(reports) {
        let report = rep.map_err(ExperimentError::other)?;
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
        cpu,
        wall_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_line_is_found_in_the_log() {
        let log = "listening on http://127.0.0.1:1\nadmin at http://127.0.0.1:2/_seda/\nbottleneck: 40 ms calibrated to 123 iterations\nseda serve: ...";
        assert_eq!(
            calibration_line(log).as_deref(),
            Some("bottleneck: 40 ms calibrated to 123 iterations")
        );
        assert_eq!(calibration_line("nothing"), None);
    }

    #[test]
    fn nginx_sheds_at_the_capacity_with_one_target_of_burst() {
        let (http, location) = nginx_limit_req(47.4, 1000.0);
        assert!(http.contains("rate=47r/s"), "{http}");
        assert!(
            http.contains("$binary_remote_addr"),
            "a non-empty key: {http}"
        );
        assert!(location.contains("burst=47;") && location.contains("limit_req_status 503"));
        assert!(nginx_limit_req(0.2, 100.0).1.contains("burst=1;"));
    }
}
