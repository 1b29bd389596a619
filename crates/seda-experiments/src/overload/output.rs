//! `runs.json`, `table.md` and the charts of the overload experiment, one chart per
//! question:
//! - `knee.svg`: what can the bottleneck serve? (2xx/s per step of users)
//! - `NAME-p90.svg` (`spike`, `policies`, `degrade`, `fig13`): does each policy hold
//!   the target? (per-second client p90 of the median repeat, log scale, the target
//!   and 1.2 x the target drawn)
//! - `NAME-served.svg` (`spike`, `policies`): how much of the capacity is served?
//!   (2xx/s over the capacity, averaged over [`SMOOTH_S`] seconds)
//! - `classes-p90.svg`, `classes-reject.svg`: does the high class keep its service?
//!   (per-class p90; per-class share of 503s, averaged over [`SMOOTH_S`] seconds)
//! - `degrade-quality.svg`: the server's automatic quality.

use std::fmt::Write as _;
use std::path::Path;

use super::config::{Front, Scenario};
use super::metrics::{TOLERANCE, p90_series};
use super::results::{OverloadResults, RunResult};
use super::summary::{self, Row, Spread};
use seda_load::report::TimePoint;

use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::write_runs_and_table;

/// Window of the moving averages in the rate charts, seconds.
pub const SMOOTH_S: usize = 3;

/// Write runs.json, table.md and every chart from the runs so far.
pub fn write_outputs(out: &Path, r: &OverloadResults) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    charts(out, r)
}

/// The ids of scenario `sc`'s runs, in plan order.
fn ids_of(r: &OverloadResults, sc: Scenario) -> Vec<&str> {
    r.scenarios
        .iter()
        .filter(|(s, _)| *s == sc)
        .flat_map(|(_, ids)| ids.iter().map(String::as_str))
        .filter(|id| r.run(id).is_some())
        .collect()
}

fn target_ms(r: &OverloadResults) -> f64 {
    r.setup["target_ms"].as_f64().unwrap_or(1000.0)
}

/// Trailing moving average over [`SMOOTH_S`] seconds of `num / den` per second
/// (seconds with `den == 0` left out).
fn smoothed(
    ts: &[TimePoint],
    num: fn(&TimePoint) -> f64,
    den: fn(&TimePoint) -> f64,
) -> Vec<(f64, f64)> {
    (0..ts.len())
        .filter_map(|i| {
            let w = &ts[i.saturating_sub(SMOOTH_S - 1)..=i];
            let d: f64 = w.iter().map(den).sum();
            (d > 0.0).then(|| (ts[i].t as f64, w.iter().map(num).sum::<f64>() / d))
        })
        .collect()
}

fn hline(name: String, y: f64, end: f64) -> Series {
    Series {
        name,
        points: vec![(0.0, y), (end, y)],
    }
}

fn fmt_target(target: f64) -> String {
    if target >= 1000.0 {
        format!("{} s", target / 1000.0)
    } else {
        format!("{target} ms")
    }
}

fn charts(out: &Path, r: &OverloadResults) -> Result<(), ExperimentError> {
    let target = target_ms(r);
    let title = |what: &str| format!("{what} ({})", r.date);
    let cap = summary::capacity(r).map(|c| c.median);
    // What can the bottleneck serve?
    let knees: Vec<Series> = r
        .runs
        .iter()
        .filter(|x| x.spec.scenario == Scenario::Knee)
        .filter_map(|run| {
            let phases = &run.groups.first()?.report.phases;
            Some(Series {
                name: format!("repeat {}", run.spec.repeat + 1),
                points: phases
                    .iter()
                    .map(|p| {
                        let secs = p.end_s.saturating_sub(p.start_s).max(1) as f64;
                        (p.level, p.completed as f64 / secs)
                    })
                    .collect(),
            })
        })
        .collect();
    if !knees.is_empty() {
        line_chart(
            &out.join("knee.svg"),
            &Chart {
                title: &title("Bottleneck throughput vs users, no control"),
                x_label: "closed-loop users (log scale)",
                y_label: "requests served per second",
                x_log: true,
                y_log: false,
                y_range: None,
            },
            &knees,
        )?;
    }
    for sc in [
        Scenario::Spike,
        Scenario::Policies,
        Scenario::Degrade,
        Scenario::Fig13,
    ] {
        let ids = ids_of(r, sc);
        if ids.is_empty() {
            continue;
        }
        let shown: Vec<&RunResult> = ids
            .iter()
            .filter_map(|id| summary::median_repeat(r, id))
            .collect();
        let end = shown
            .iter()
            .flat_map(|run| run.groups.iter().map(|g| g.report.timeseries.len()))
            .max()
            .unwrap_or(1) as f64;
        let mut p90: Vec<Series> = shown
            .iter()
            .map(|run| Series {
                name: run.spec.policy.clone(),
                points: p90_series(&run.groups[0].report.timeseries),
            })
            .collect();
        p90.push(hline(format!("target {}", fmt_target(target)), target, end));
        p90.push(hline(
            format!("{TOLERANCE} x target"),
            TOLERANCE * target,
            end,
        ));
        let name = sc.name();
        line_chart(
            &out.join(format!("{name}-p90.svg")),
            &Chart {
                title: &title(&format!("Client p90 per second, {}", sc.short())),
                x_label: "time, s",
                y_label: "p90 response time, ms (log scale)",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &p90,
        )?;
        if let (Some(cap), Scenario::Spike | Scenario::Policies) = (cap, sc) {
            let mut served: Vec<Series> = shown
                .iter()
                .map(|run| Series {
                    name: run.spec.policy.clone(),
                    points: smoothed(
                        &run.groups[0].report.timeseries,
                        |p| p.completed as f64,
                        |_| 1.0,
                    )
                    .into_iter()
                    .map(|(t, v)| (t, v / cap))
                    .collect(),
                })
                .collect();
            served.push(hline("90 % of capacity".into(), 0.9, end));
            line_chart(
                &out.join(format!("{name}-served.svg")),
                &Chart {
                    title: &title(&format!(
                        "Served per second / capacity ({cap:.0}/s), {SMOOTH_S} s average"
                    )),
                    x_label: "time, s",
                    y_label: "2xx per second / capacity",
                    x_log: false,
                    y_log: false,
                    y_range: Some((0.0, 1.2)),
                },
                &served,
            )?;
        }
        if sc == Scenario::Degrade {
            let q: Vec<Series> = shown
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
    }
    let class_runs: Vec<&RunResult> = ids_of(r, Scenario::Classes)
        .iter()
        .filter_map(|id| summary::median_repeat(r, id))
        .collect();
    if !class_runs.is_empty() {
        let mut p90 = Vec::new();
        let mut rej = Vec::new();
        let mut end = 1.0f64;
        for run in &class_runs {
            for g in &run.groups {
                let ts = &g.report.timeseries;
                end = end.max(ts.len() as f64);
                let name = format!("{} {}", run.spec.policy, g.name);
                p90.push(Series {
                    name: name.clone(),
                    points: p90_series(ts),
                });
                rej.push(Series {
                    name,
                    points: smoothed(
                        ts,
                        |p| p.rejected as f64,
                        |p| (p.completed + p.rejected + p.errors) as f64,
                    ),
                });
            }
        }
        p90.push(hline(format!("target {}", fmt_target(target)), target, end));
        line_chart(
            &out.join("classes-p90.svg"),
            &Chart {
                title: &title("Client p90 per second and class"),
                x_label: "time, s",
                y_label: "p90 response time, ms (log scale)",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &p90,
        )?;
        line_chart(
            &out.join("classes-reject.svg"),
            &Chart {
                title: &title(&format!(
                    "Share of requests refused, per class, {SMOOTH_S} s average"
                )),
                x_label: "time, s",
                y_label: "503s / all requests of the class",
                x_log: false,
                y_log: false,
                y_range: Some((0.0, 1.0)),
            },
            &rej,
        )?;
    }
    Ok(())
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

/// `median [min-max]` with `f` formatting each value; the range only over repeats.
fn med(s: &Spread, f: impl Fn(f64) -> String) -> String {
    if s.n > 1 {
        format!("{} [{}-{}]", f(s.median), f(s.min), f(s.max))
    } else {
        f(s.median)
    }
}

fn fmt_recover(row: &Row) -> String {
    let s = med(&row.recover_s, |v| format!("{v:.0} s"));
    if row.never > 0 {
        format!("{s}; never in {}/{}", row.never, row.n)
    } else {
        s
    }
}

fn flags(run: &RunResult) -> String {
    let args = run.spec.serve_args.join(" ");
    match run.spec.front {
        Front::Seda => format!("`{args}`"),
        Front::NginxLimitReq => format!("nginx `limit_req` -> `{args}`"),
    }
}

fn setup_text(r: &OverloadResults) -> String {
    let su = &r.setup;
    let num = |k: &str| su[k].as_f64().map_or("-".to_string(), |v| format!("{v}"));
    let list = |k: &str| {
        su[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_f64())
                    .map(|v| format!("{v}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .unwrap_or_default()
    };
    let load = su["load_average_before"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|v| v.as_f64())
        .map_or(String::new(), |l| {
            format!(", load average {l:.2} at the start")
        });
    format!(
        "{}{load}. Bottleneck: `seda serve --bottleneck-ms {} --bottleneck-passes {}` (CPU work per request, calibrated once before the runs, the same for every server), `/bottleneck` returns 8 KB. Target p90 {} ms. Closed-loop users, {} ms think time, {} requests per connection; a user answered 503 or failed waits {} ms before its next request. Each configuration is run {} times: tables give the median and [min-max]. Phases {} s (before / spike / after); spike {} -> {} -> {} users; classes: {} low-class users throughout, {} high-class users in the middle phase; knee: {} users, {} s per step. Client timeout {} s, drain {} s.\n\n\
         Definitions: *p90* = client-side p90 of the requests completed in the window (the spike; for classes, the high class's visit); *recover* = from the start of the spike to the first second from which every second of the spike completed something with a p90 within {} x the target (0 s = held from the first second; a repeat that never recovered counts as the whole spike); *s over* = seconds of the spike with the p90 over the target or nothing completed; *served* = 2xx per second (and as a share of the capacity measured at the knee); *in target* = 2xx within the target per second; *rejected* = 503s / all requests; *errors* = timeouts, refused or reset connections / all requests.\n",
        su["machine"].as_str().unwrap_or(""),
        num("bottleneck_ms"),
        num("bottleneck_passes"),
        num("target_ms"),
        num("think_ms"),
        num("reqs_per_conn"),
        num("retry_wait_ms"),
        num("repeats"),
        list("phases_s"),
        num("base_users"),
        num("spike_users"),
        num("base_users"),
        num("class_users"),
        num("high_users"),
        list("knee_users"),
        num("knee_step_s"),
        num("timeout_s"),
        num("drain_s"),
        num("recovery_tolerance"),
    )
}

fn knee_table(r: &OverloadResults, s: &mut String) {
    s.push_str("| Repeat | capacity (peak 2xx/s) | knee (users) | server CPU per served request |\n|---|---:|---:|---:|\n");
    for run in r.runs.iter().filter(|x| x.spec.scenario == Scenario::Knee) {
        if let Some(k) = summary::knee(run) {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {} | {} |",
                run.spec.repeat + 1,
                k.peak_rps,
                k.knee_users,
                k.cpu_per_served_s
                    .map_or("-".into(), |c| format!("{:.1} ms", c * 1e3))
            );
        }
    }
    if let Some(c) = summary::capacity(r) {
        let _ = writeln!(
            s,
            "\nCapacity: **{}** requests/s.",
            med(&c, |v| format!("{v:.1}"))
        );
    }
}

fn refusal_table(r: &OverloadResults, s: &mut String) {
    let Some(served) = summary::cpu_per_served(r) else {
        s.push_str("No knee run: the CPU per served request is unknown.\n");
        return;
    };
    s.push_str("| Repeat | 503s/s | served | server CPU per refusal |\n|---|---:|---:|---:|\n");
    for run in r
        .runs
        .iter()
        .filter(|x| x.spec.scenario == Scenario::Refusal)
    {
        if let Some(c) = summary::refusal_cost(run, served.median) {
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {:.0} us |",
                run.spec.repeat + 1,
                c.refused_rps,
                c.served,
                c.cpu_per_refusal_s * 1e6
            );
        }
    }
    if let Some(c) = summary::cpu_per_refusal(r) {
        let _ = writeln!(
            s,
            "\nCPU per refusal {} against {} per served request: a refusal costs **{:.2} %** of a served request (median over median; goal < 5 %).",
            med(&c, |v| format!("{:.0} us", v * 1e6)),
            med(&served, |v| format!("{:.1} ms", v * 1e3)),
            100.0 * c.median / served.median
        );
    }
}

fn spike_table(r: &OverloadResults, sc: Scenario, s: &mut String) {
    let cap = summary::capacity(r).map(|c| c.median);
    s.push_str("| Policy | setup | p90 spike | recover | s over | served /s | served / capacity | in target /s | rejected | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for id in ids_of(r, sc) {
        let (Some(run), Some(row)) = (r.run(id), summary::row(r, id, 0)) else {
            continue;
        };
        let share = cap.map_or("-".into(), |c| {
            med(&row.served_rps, |v| format!("{:.0} %", 100.0 * v / c))
        });
        let _ = writeln!(
            s,
            "| {} | {} | **{}** | **{}** | {} / {} | {} | **{}** | {} | {} | {} |",
            run.spec.policy,
            flags(run),
            med(&row.p90_ms, fmt_ms),
            fmt_recover(&row),
            med(&row.over_s, |v| format!("{v:.0}")),
            row.window_s,
            med(&row.served_rps, |v| format!("{v:.1}")),
            share,
            med(&row.goodput_rps, |v| format!("{v:.1}")),
            med(&row.reject_rate, pct),
            med(&row.error_rate, pct),
        );
    }
}

fn classes_table(r: &OverloadResults, s: &mut String) {
    s.push_str("| Run | setup | class | p90 (high class present) | rejected | served /s | in target /s |\n|---|---|---|---:|---:|---:|---:|\n");
    for id in ids_of(r, Scenario::Classes) {
        let Some(run) = r.run(id) else { continue };
        for (k, g) in run.groups.iter().enumerate() {
            let Some(row) = summary::row(r, id, k) else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | **{}** | {} | {} |",
                run.spec.policy,
                flags(run),
                g.name,
                med(&row.p90_ms, fmt_ms),
                med(&row.reject_rate, pct),
                med(&row.served_rps, |v| format!("{v:.1}")),
                med(&row.goodput_rps, |v| format!("{v:.1}")),
            );
        }
    }
}

/// The markdown tables, one per scenario.
pub fn table(r: &OverloadResults) -> String {
    let mut s = format!("# Overload control on this machine, {}\n\n", r.date);
    s.push_str(&setup_text(r));
    if let Some(c) = r.runs.iter().find_map(|run| run.calibration.as_ref()) {
        let _ = writeln!(s, "\nThe server's line: `{c}`.");
    }
    for (id, why) in &r.failed {
        let _ = writeln!(s, "- **{id}** not measured: {why}");
    }
    for (sc, _) in &r.scenarios {
        if ids_of(r, *sc).is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n## {}\n", sc.title());
        match sc {
            Scenario::Knee => knee_table(r, &mut s),
            Scenario::Refusal => refusal_table(r, &mut s),
            Scenario::Classes => classes_table(r, &mut s),
            Scenario::Fig13 | Scenario::Spike | Scenario::Degrade | Scenario::Policies => {
                spike_table(r, *sc, &mut s)
            }
        }
    }
    s
}
