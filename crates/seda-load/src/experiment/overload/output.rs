//! `runs.json`, `table.md` and the charts of the overload experiment.
//!
//! Charts per scenario (`NAME` = `fig13`, `spike`, `degrade`, `classes`, `policies`):
//! `NAME-p90.svg` (per-second client p90, log scale, with the target),
//! `NAME-reject.svg` (per-second fraction of requests answered 503), and
//! `NAME-cdf.svg` (response-time CDF of completed requests); `degrade-quality.svg`
//! (the server's automatic quality) and `classes-admitted.svg` (per-class admission
//! rates from the server's stats).

use std::fmt::Write as _;
use std::path::Path;

use super::metrics::{WindowMetrics, p90_series, reject_series};
use super::stats::class_rates;
use super::{OverloadResults, RunResult, Scenario};
use crate::experiment::plot::{Chart, Series, line_chart};

/// Write runs.json, table.md and every chart from the runs so far.
pub fn write_outputs(out: &Path, r: &OverloadResults) -> Result<(), String> {
    crate::experiment::write_runs_and_table(out, r, table(r))?;
    charts(out, r)
}

fn runs_of(r: &OverloadResults, sc: Scenario) -> Vec<&RunResult> {
    r.scenarios
        .iter()
        .filter(|(s, _)| *s == sc)
        .flat_map(|(_, ids)| ids.iter().filter_map(|id| r.run(id)))
        .collect()
}

fn target_ms(r: &OverloadResults) -> f64 {
    r.setup["target_ms"].as_f64().unwrap_or(1000.0)
}

fn charts(out: &Path, r: &OverloadResults) -> Result<(), String> {
    let target = target_ms(r);
    for sc in Scenario::ALL {
        let runs = runs_of(r, sc);
        if runs.is_empty() {
            continue;
        }
        let label = |run: &RunResult, group: &str| {
            if run.groups.len() > 1 {
                format!("{} {group}", run.spec.policy)
            } else {
                run.spec.policy.clone()
            }
        };
        let mut p90 = Vec::new();
        let mut rej = Vec::new();
        let mut cdf = Vec::new();
        let mut end = 1.0f64;
        for run in &runs {
            for g in &run.groups {
                let ts = &g.report.timeseries;
                end = end.max(ts.len() as f64);
                p90.push(Series {
                    name: label(run, &g.name),
                    points: p90_series(ts),
                });
                rej.push(Series {
                    name: label(run, &g.name),
                    points: reject_series(ts),
                });
                let m = &g.report;
                // Unanswered requests never reach 1: scale by the answered share.
                let f = m.completed as f64 / (m.completed + m.errors).max(1) as f64;
                cdf.push(Series {
                    name: label(run, &g.name),
                    points: m.cdf.iter().map(|c| (c.rt_ms, c.p * f)).collect(),
                });
            }
        }
        p90.push(Series {
            name: format!("target {target:.0} ms"),
            points: vec![(0.0, target), (end, target)],
        });
        let name = sc.name();
        let title = |what: &str| format!("{what}: {}, {}", sc.short(), r.date);
        line_chart(
            &out.join(format!("{name}-p90.svg")),
            &Chart {
                title: &title("p90 per second"),
                x_label: "time, s",
                y_label: "p90 response time, ms (log scale)",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &p90,
        )?;
        line_chart(
            &out.join(format!("{name}-reject.svg")),
            &Chart {
                title: &title("503s per second"),
                x_label: "time, s",
                y_label: "rejected / all requests",
                x_log: false,
                y_log: false,
                y_range: Some((0.0, 1.0)),
            },
            &rej,
        )?;
        line_chart(
            &out.join(format!("{name}-cdf.svg")),
            &Chart {
                title: &title("Response-time CDF"),
                x_label: "response time, ms (log scale)",
                y_label: "P[response time <= x] (unanswered = never)",
                x_log: true,
                y_log: false,
                y_range: Some((0.0, 1.0)),
            },
            &cdf,
        )?;
        if sc == Scenario::Degrade {
            let q: Vec<Series> = runs
                .iter()
                .map(|run| Series {
                    name: run.spec.policy.clone(),
                    points: run
                        .stats
                        .samples
                        .iter()
                        .filter_map(|s| Some((s.t, s.quality?)))
                        .collect(),
                })
                .collect();
            line_chart(
                &out.join("degrade-quality.svg"),
                &Chart {
                    title: &title("Quality"),
                    x_label: "time, s",
                    y_label: "quality (fraction of the work done)",
                    x_log: false,
                    y_log: false,
                    y_range: Some((0.0, 1.05)),
                },
                &q,
            )?;
        }
        if sc == Scenario::Classes {
            let mut s = Vec::new();
            for run in &runs {
                let rates = class_rates(&run.stats.samples);
                for class in [0u8, 1] {
                    let pts: Vec<(f64, f64)> = rates
                        .iter()
                        .filter(|c| c.class == class)
                        .filter_map(|c| Some((c.t, c.reject_fraction?)))
                        .collect();
                    if !pts.is_empty() {
                        s.push(Series {
                            name: format!("{} class {class}", run.spec.policy),
                            points: pts,
                        });
                    }
                }
            }
            line_chart(
                &out.join("classes-server-reject.svg"),
                &Chart {
                    title: &title("Server reject fraction per class"),
                    x_label: "time, s",
                    y_label: "rejected / offered at the bottleneck stage",
                    x_log: false,
                    y_log: false,
                    y_range: Some((0.0, 1.0)),
                },
                &s,
            )?;
        }
    }
    Ok(())
}

fn fmt_recover(m: &WindowMetrics) -> String {
    match m.recover_s {
        Some(s) => format!("{s} s"),
        None => format!("not within {} s", m.end_s - m.start_s),
    }
}

fn pct(v: f64) -> String {
    format!("{:.1} %", 100.0 * v)
}

fn fmt_ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

fn errors_note(run: &RunResult) -> String {
    let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
    for g in &run.groups {
        for (k, v) in &g.report.errors_by_kind {
            *kinds.entry(k.as_str()).or_default() += v;
        }
    }
    kinds
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The markdown tables, one per scenario.
pub fn table(r: &OverloadResults) -> String {
    let su = &r.setup;
    let mut s = format!("# Overload control on this machine, {}\n\n", r.date);
    let num = |k: &str| su[k].as_f64().map_or("-".to_string(), |v| format!("{v}"));
    let phases: Vec<String> = su["phases_s"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_f64())
                .map(|v| format!("{v}"))
                .collect()
        })
        .unwrap_or_default();
    let load = su["load_average_before"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|v| v.as_f64())
        .map_or(String::new(), |l| {
            format!(", load average {l:.2} at the start")
        });
    let _ = writeln!(
        s,
        "{}{load}. Bottleneck: `seda serve --bottleneck-ms {}` (CPU work per request at full quality, calibrated at start-up), `/bottleneck` returns 8 KB. Target p90 {} ms. Closed-loop users, {} ms think time, {} requests per connection; a user answered 503 or failed waits {} ms before its next request. Phases {} s (before / spike / after); spike {} -> {} -> {} users; scenario 1: {} users for {} s; scenario 4: {} users per class, the high class during the middle phase only. Client timeout {} s, drain {} s.\n\n\
         Definitions: *p90 spike* = p90 of the requests completed during the spike; *s over target* = seconds of the spike whose p90 was over the target or that completed nothing; *recover* = from the start of the spike to the first second, after the p90 first went over the target, that begins {} seconds in a row each within it; *goodput* = requests completed 2xx within the target, per second of the spike; *rejected* = 503s / all requests of the spike; *errors* = timeouts, refused or reset connections / all requests.\n",
        su["machine"].as_str().unwrap_or(""),
        num("bottleneck_ms"),
        num("target_ms"),
        num("think_ms"),
        num("reqs_per_conn"),
        num("retry_wait_ms"),
        phases.join(" / "),
        num("base_users"),
        num("spike_users"),
        num("base_users"),
        num("fig13_users"),
        num("fig13_duration_s"),
        num("class_users"),
        num("timeout_s"),
        num("drain_s"),
        num("recovery_hold_s"),
    );
    for run in &r.runs {
        if let Some(c) = &run.calibration {
            let _ = writeln!(s, "Calibration (first run): `{c}`.\n");
            break;
        }
    }
    for (id, why) in &r.failed {
        let _ = writeln!(s, "- **{id}** not measured: {why}");
    }
    for (sc, _) in &r.scenarios {
        let runs = runs_of(r, *sc);
        if runs.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n## {}\n", sc.title());
        match sc {
            Scenario::Fig13 => {
                s.push_str("| Policy | serve flags | req/s | p50 | p90 | max | rejected | errors | goodput req/s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
                for run in runs {
                    let g = &run.groups[0];
                    let m = &g.report;
                    let Some(w) = &g.window else { continue };
                    let _ = writeln!(
                        s,
                        "| {} | `{}` | {:.1} | {} | {} | {} | {} | {} | {:.1} |",
                        run.spec.policy,
                        run.spec.serve_args.join(" "),
                        w.throughput_rps,
                        fmt_ms(m.rt_p50_ms),
                        fmt_ms(m.rt_p90_ms),
                        fmt_ms(m.rt_max_ms.max(m.unanswered_wait_max_ms)),
                        pct(w.reject_rate),
                        pct(w.error_rate),
                        w.goodput_rps
                    );
                }
            }
            Scenario::Spike | Scenario::Degrade | Scenario::Policies => {
                let quality = *sc == Scenario::Degrade;
                s.push_str("| Policy | serve flags | p90 before | p90 spike | max spike | p90 after | s over target | recover | goodput req/s | throughput req/s | rejected | errors |");
                s.push_str(if quality {
                    " quality mean / min |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
                } else {
                    "\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
                });
                for run in runs {
                    let g = &run.groups[0];
                    let ph = |i: usize| g.phases.get(i).map_or("-".into(), |m| fmt_ms(m.p90_ms));
                    let Some(w) = &g.window else { continue };
                    let _ = write!(
                        s,
                        "| {} | `{}` | {} | **{}** | {} | {} | {} / {} | {} | {:.1} | {:.1} | {} | {} |",
                        run.spec.policy,
                        run.spec.serve_args.join(" "),
                        ph(0),
                        fmt_ms(w.p90_ms),
                        fmt_ms(w.max_ms),
                        ph(2),
                        w.seconds_over_target,
                        w.end_s - w.start_s,
                        fmt_recover(w),
                        w.goodput_rps,
                        w.throughput_rps,
                        pct(w.reject_rate),
                        pct(w.error_rate),
                    );
                    if quality {
                        let q = run
                            .quality(w.start_s as f64, w.end_s as f64)
                            .map_or("-".into(), |(m, n)| format!("{m:.2} / {n:.2}"));
                        let _ = write!(s, " {q} |");
                    }
                    s.push('\n');
                }
                let notes: Vec<String> = runs_of(r, *sc)
                    .iter()
                    .filter_map(|run| {
                        let e = errors_note(run);
                        (!e.is_empty()).then(|| format!("{}: {e}", run.spec.policy))
                    })
                    .collect();
                if !notes.is_empty() {
                    let _ = writeln!(s, "\nErrors by kind (whole run): {}.", notes.join("; "));
                }
            }
            Scenario::Classes => {
                s.push_str("| Run | class | p90 alone (before) | p90 both | p90 alone (after) | rejected both | goodput both req/s | server: admitted / rejected (both) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
                for run in runs {
                    for g in &run.groups {
                        let ph = |i: usize| {
                            g.phases
                                .get(i)
                                .filter(|m| m.completed + m.rejected + m.errors > 0)
                                .map_or("-".into(), |m| fmt_ms(m.p90_ms))
                        };
                        let Some(w) = &g.window else { continue };
                        let server = g.class.map_or("-".into(), |c| {
                            let (a, rj) = super::stats::class_totals(
                                &run.stats.samples,
                                c,
                                w.start_s as f64,
                                w.end_s as f64,
                            );
                            // A server without class rules counts everyone as class 0.
                            if a + rj == 0 {
                                "-".to_string()
                            } else {
                                format!("{a} / {rj}")
                            }
                        });
                        let _ = writeln!(
                            s,
                            "| {} | {} ({}) | {} | **{}** | {} | {} | {:.1} | {} |",
                            run.spec.policy,
                            g.name,
                            g.class.map_or("-".into(), |c| c.to_string()),
                            ph(0),
                            fmt_ms(w.p90_ms),
                            ph(2),
                            pct(w.reject_rate),
                            w.goodput_rps,
                            server
                        );
                    }
                }
            }
        }
    }
    s
}
