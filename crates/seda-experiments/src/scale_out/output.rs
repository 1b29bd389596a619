//! `runs.json`, `table.md` and the charts of the scale-out experiment:
//! `throughput.svg` (requests per second against replicas), `slowed-p90.svg` and
//! `killed-p90.svg` (the users' p90 per second against the target),
//! `slowed-work-{agent,plain}.svg` (each replica's completions per second),
//! `slowed-weight.svg` (HAProxy's weight of each replica, from the agents), and
//! `killed-failures.svg` (503s and errors per second around the kill).

use std::fmt::Write as _;
use std::path::Path;

use super::config::{ProxyMode, Scenario};
use super::results::{RunResult, ScaleOutResults};
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::write_runs_and_table;
use crate::overload::metrics::p90_series;

/// Write runs.json, table.md and every chart from the runs so far.
pub fn write_outputs(out: &Path, r: &ScaleOutResults) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    charts(out, r)
}

/// One line about a finished run for the progress log.
pub fn progress_line(r: &RunResult) -> String {
    let Some(m) = &r.window else {
        return "no requests in the judged window".into();
    };
    let (retries, redispatches) = r.retries();
    format!(
        "window {}-{} s: p90 {:.0} ms (target {:.0}), {} s over, throughput {:.1} req/s, goodput {:.1} req/s, rejected {:.1} %, errors {:.1} %, work per replica {:?}, haproxy retries {retries} (redispatched {redispatches})",
        m.start_s,
        m.end_s,
        m.p90_ms,
        m.target_ms,
        m.seconds_over_target,
        m.throughput_rps,
        m.goodput_rps,
        100.0 * m.reject_rate,
        100.0 * m.error_rate,
        r.processed(m.start_s as f64, m.end_s as f64),
    )
}

fn runs_of(r: &ScaleOutResults, sc: Scenario) -> Vec<&RunResult> {
    r.runs.iter().filter(|x| x.spec.scenario == sc).collect()
}

fn target_ms(r: &ScaleOutResults) -> f64 {
    r.setup["target_ms"].as_f64().unwrap_or(200.0)
}

/// Per-second completions of each replica's bottleneck, from its stats samples.
fn work_series(run: &RunResult) -> Vec<Series> {
    run.replicas
        .iter()
        .map(|rep| {
            let pts = rep
                .stats
                .samples
                .windows(2)
                .filter_map(|w| {
                    let (a, b) = (w[0].processed?, w[1].processed?);
                    let dt = w[1].t - w[0].t;
                    (dt > 0.0).then(|| (w[1].t, b.saturating_sub(a) as f64 / dt))
                })
                .collect();
            let what = if rep.killed_at.is_some() {
                " (killed)"
            } else if run.spec.scenario == Scenario::Slowed
                && rep.bottleneck_ms > run.replicas[0].bottleneck_ms
            {
                " (slowed)"
            } else {
                ""
            };
            Series {
                name: format!("{}{what}", rep.name),
                points: pts,
            }
        })
        .collect()
}

fn weight_series(run: &RunResult) -> Vec<Series> {
    run.replicas
        .iter()
        .map(|rep| Series {
            name: rep.name.clone(),
            points: run
                .haproxy
                .iter()
                .filter_map(|s| {
                    let row = s.rows.iter().find(|x| x.name == rep.name)?;
                    // DRAIN and DOWN take no new requests: weight 0 in effect.
                    let w = if row.status.starts_with("UP") {
                        row.weight as f64
                    } else {
                        0.0
                    };
                    Some((s.t, w))
                })
                .collect(),
        })
        .collect()
}

/// Mean HAProxy weight of replica `name` during seconds `from..to` (DRAIN and DOWN
/// count as 0), and the seconds it was not UP.
fn weight_in(run: &RunResult, name: &str, from: f64, to: f64) -> Option<(f64, usize)> {
    let pts: Vec<(f64, bool)> = run
        .haproxy
        .iter()
        .filter(|s| s.t >= from && s.t < to)
        .filter_map(|s| {
            let row = s.rows.iter().find(|x| x.name == name)?;
            let up = row.status.starts_with("UP");
            Some((if up { row.weight as f64 } else { 0.0 }, up))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let mean = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
    Some((mean, pts.iter().filter(|p| !p.1).count()))
}

fn charts(out: &Path, r: &ScaleOutResults) -> Result<(), ExperimentError> {
    let target = target_ms(r);
    let tput = runs_of(r, Scenario::Throughput);
    if !tput.is_empty() {
        let via: Vec<&&RunResult> = tput
            .iter()
            .filter(|x| x.spec.proxy != ProxyMode::Direct)
            .collect();
        let pts = |f: fn(&crate::overload::metrics::WindowMetrics) -> f64,
                   runs: &[&&RunResult]|
         -> Vec<(f64, f64)> {
            runs.iter()
                .filter_map(|x| x.window.as_ref().map(|m| (x.spec.n() as f64, f(m))))
                .collect()
        };
        let direct: Vec<&&RunResult> = tput
            .iter()
            .filter(|x| x.spec.proxy == ProxyMode::Direct)
            .collect();
        line_chart(
            &out.join("throughput.svg"),
            &Chart {
                title: &format!(
                    "Throughput against replicas (one CPU each, {} cores), {}",
                    r.setup["cores"], r.date
                ),
                x_label: "replicas behind HAProxy",
                y_label: "requests per second",
                x_log: false,
                y_log: false,
                y_range: None,
            },
            &[
                Series {
                    name: "completed via HAProxy".into(),
                    points: pts(|m| m.throughput_rps, &via),
                },
                Series {
                    name: format!("within {target:.0} ms via HAProxy"),
                    points: pts(|m| m.goodput_rps, &via),
                },
                Series {
                    name: "completed, 1 replica direct".into(),
                    points: pts(|m| m.throughput_rps, &direct),
                },
            ],
        )?;
    }
    for sc in [Scenario::Slowed, Scenario::Killed] {
        let runs = runs_of(r, sc);
        if runs.is_empty() {
            continue;
        }
        let end = runs
            .iter()
            .map(|x| x.report.timeseries.len() as f64)
            .fold(1.0, f64::max);
        let mut p90: Vec<Series> = runs
            .iter()
            .map(|x| Series {
                name: x.spec.label.clone(),
                points: p90_series(&x.report.timeseries),
            })
            .collect();
        p90.push(Series {
            name: format!("target {target:.0} ms"),
            points: vec![(0.0, target), (end, target)],
        });
        let what = match sc {
            Scenario::Slowed => format!("one replica {}x slower", r.setup["slow_factor"]),
            _ => "one replica killed mid-spike".to_string(),
        };
        line_chart(
            &out.join(format!("{}-p90.svg", sc.name())),
            &Chart {
                title: &format!("Users' p90 per second, 3 replicas, {what}, {}", r.date),
                x_label: "time, s",
                y_label: "p90 response time, ms (log scale)",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &p90,
        )?;
        if sc == Scenario::Slowed {
            for run in &runs {
                line_chart(
                    &out.join(format!("slowed-work-{}.svg", run.spec.label)),
                    &Chart {
                        title: &format!(
                            "Completions per replica per second ({}), {}",
                            run.spec.label, r.date
                        ),
                        x_label: "time, s",
                        y_label: "requests per second",
                        x_log: false,
                        y_log: false,
                        y_range: None,
                    },
                    &work_series(run),
                )?;
            }
            if let Some(agent) = runs.iter().find(|x| x.spec.proxy == ProxyMode::Agent) {
                line_chart(
                    &out.join("slowed-weight.svg"),
                    &Chart {
                        title: &format!("HAProxy weight from the agents (0 = drain), {}", r.date),
                        x_label: "time, s",
                        y_label: "weight, % of configured",
                        x_log: false,
                        y_log: false,
                        y_range: Some((0.0, 105.0)),
                    },
                    &weight_series(agent),
                )?;
            }
        } else {
            let fails: Vec<Series> = runs
                .iter()
                .flat_map(|x| {
                    let ts = &x.report.timeseries;
                    [
                        Series {
                            name: format!("{} errors", x.spec.label),
                            points: ts.iter().map(|p| (p.t as f64, p.errors as f64)).collect(),
                        },
                        Series {
                            name: format!("{} 503s", x.spec.label),
                            points: ts.iter().map(|p| (p.t as f64, p.rejected as f64)).collect(),
                        },
                    ]
                })
                .collect();
            line_chart(
                &out.join("killed-failures.svg"),
                &Chart {
                    title: &format!(
                        "Failed and refused requests per second, replica r3 killed, {}",
                        r.date
                    ),
                    x_label: "time, s",
                    y_label: "requests per second",
                    x_log: false,
                    y_log: false,
                    y_range: None,
                },
                &fails,
            )?;
        }
    }
    Ok(())
}

fn pct(v: f64) -> String {
    format!("{:.1}", 100.0 * v)
}

/// The results as Markdown.
pub fn table(r: &ScaleOutResults) -> String {
    let mut t = String::new();
    let target = target_ms(r);
    let s = &r.setup;
    let _ = writeln!(t, "# Scale-out behind HAProxy ({})\n", r.date);
    let _ = writeln!(
        t,
        "Machine: {}; {}; load average {} before, {} after. Replicas: `seda serve --bottleneck-ms {} --bottleneck-passes {} --rt-target-ms {target:.0} --agent-listen ...` (passes calibrated once before the runs); users: closed loop, think {} ms, {} ms wait after a 503, {} requests per connection. Written by `seda experiment scale-out`.\n",
        s["machine"].as_str().unwrap_or("?"),
        s["haproxy"].as_str().unwrap_or("haproxy ?"),
        s["load_average_before"]
            .get(0)
            .map_or("?".into(), |v| format!("{v}")),
        s["load_average_after"]
            .as_f64()
            .map_or("?".into(), |v| format!("{v:.2}")),
        s["bottleneck_ms"],
        s["bottleneck_passes"],
        s["think_ms"],
        s["retry_wait_ms"],
        s["reqs_per_conn"],
    );
    let tput = runs_of(r, Scenario::Throughput);
    if !tput.is_empty() {
        let base = tput
            .iter()
            .find(|x| x.spec.label == "haproxy-1")
            .and_then(|x| x.window.as_ref())
            .map(|m| m.throughput_rps);
        let _ = writeln!(
            t,
            "## 1. Throughput against replicas ({} users, measured {} s after {} s of warm-up)\n\n\
             Replica *i* pinned to CPU *i* mod {}: a replica stands for a machine of one core. HAProxy and the load generator are not pinned and share the same cores.\n\n\
             | run | replicas | throughput req/s | vs 1 replica | within target req/s | p90 ms | rejected % | errors % | completions per replica | replicas' CPU ms per completion | HAProxy CPU ms per request | HAProxy retries |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|",
            s["users"], s["throughput_phases_s"][1], s["throughput_phases_s"][0], s["cores"],
        );
        for x in &tput {
            let Some(m) = &x.window else { continue };
            let vs = base.map_or("-".into(), |b| {
                if b > 0.0 {
                    format!("{:.2}x", m.throughput_rps / b)
                } else {
                    "-".into()
                }
            });
            let cpu: f64 = x.replicas.iter().map(|p| p.cpu_s).sum();
            let done = x.report.completed.max(1) as f64;
            let answered = (x.report.completed + x.report.rejected).max(1) as f64;
            let _ = writeln!(
                t,
                "| {} | {} | {:.1} | {vs} | {:.1} | {:.0} | {} | {} | {:?} | {:.1} | {:.2} | {} |",
                x.spec.label,
                x.spec.n(),
                m.throughput_rps,
                m.goodput_rps,
                m.p90_ms,
                pct(m.reject_rate),
                pct(m.error_rate),
                x.processed(m.start_s as f64, m.end_s as f64),
                1e3 * cpu / done,
                1e3 * x.haproxy_cpu_s / answered,
                x.retries().0,
            );
        }
        let pin_errors: Vec<String> = tput
            .iter()
            .flat_map(|x| x.replicas.iter().filter_map(|p| p.pin_error.clone()))
            .collect();
        if let Some(e) = pin_errors.first() {
            let _ = writeln!(t, "\nPinning failed ({} replicas): {e}", pin_errors.len());
        }
        t.push('\n');
    }
    for sc in [Scenario::Slowed, Scenario::Killed] {
        let runs = runs_of(r, sc);
        if runs.is_empty() {
            continue;
        }
        let title = match sc {
            Scenario::Slowed => format!(
                "## 2. A spike with one replica {}x slower per request",
                s["slow_factor"]
            ),
            _ => "## 3. A spike with one replica killed (SIGKILL) in the middle".to_string(),
        };
        let _ = writeln!(
            t,
            "{title}\n\n{} -> {} -> {} users over {} s; 3 replicas, not pinned; judged on the spike. `agent`: leastconn over the agents' weights, `retry-on conn-failure empty-response 503` with redispatch; `plain`: roundrobin, no agent, HAProxy's default `retry-on conn-failure`.\n\n\
             | proxy | p90 ms (target {target:.0}) | seconds over target | throughput req/s | within target req/s | rejected % | errors % | completions r1/r2/r3 | r3 weight (mean), s not UP | HAProxy retries / redispatches |\n\
             |---|---|---|---|---|---|---|---|---|---|",
            s["base_users"],
            s["spike_users"],
            s["base_users"],
            s["phases_s"]
                .as_array()
                .map(|a| a
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(" / "))
                .unwrap_or_default(),
        );
        for x in &runs {
            let Some(m) = &x.window else { continue };
            let (from, to) = (m.start_s as f64, m.end_s as f64);
            let w = weight_in(x, "r3", from, to)
                .map_or("-".into(), |(mean, down)| format!("{mean:.0} %, {down} s"));
            let (retries, redis) = x.retries();
            let _ = writeln!(
                t,
                "| {} | {:.0} | {} of {} | {:.1} | {:.1} | {} | {} | {:?} | {w} | {retries} / {redis} |",
                x.spec.label,
                m.p90_ms,
                m.seconds_over_target,
                m.end_s - m.start_s,
                m.throughput_rps,
                m.goodput_rps,
                pct(m.reject_rate),
                pct(m.error_rate),
                x.processed(from, to),
            );
        }
        if sc == Scenario::Killed
            && let Some(k) = runs
                .iter()
                .flat_map(|x| x.replicas.iter())
                .find_map(|p| p.killed_at)
        {
            let _ = writeln!(t, "\nr3 killed {k:.1} s after the start of the load.");
            for x in &runs {
                if !x.report.errors_by_kind.is_empty() {
                    let _ = writeln!(
                        t,
                        "Errors of `{}` by kind: {:?}.",
                        x.spec.label, x.report.errors_by_kind
                    );
                }
            }
        }
        t.push('\n');
    }
    for (id, e) in &r.failed {
        let _ = writeln!(t, "Run `{id}` failed: {e}");
    }
    t
}
