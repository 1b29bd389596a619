//! The experiment's outputs: `runs.json`, `table.md` (one table per figure) and SVG
//! charts drawn with the harness's plot helpers.

use std::fmt::Write;
use std::path::Path;

use seda_load::arashi::{RequestType, Second, Stats};

use super::results::{ExperimentResults, RunResult};
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::write_runs_and_table;

/// Writes `runs.json`, `table.md` and the charts into `out`.
pub fn write_outputs(out: &Path, r: &ExperimentResults) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    charts(out, r)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn ms(x: f64) -> String {
    if x >= 1000.0 {
        format!("{:.2} s", x / 1000.0)
    } else {
        format!("{x:.1} ms")
    }
}

/// `ms(x)`, in bold when over `target`.
fn ms_vs(x: f64, target: f64) -> String {
    if x > target {
        format!("**{}**", ms(x))
    } else {
        ms(x)
    }
}

fn fig8_users(r: &ExperimentResults) -> Vec<u32> {
    let mut users: Vec<u32> = r
        .runs
        .iter()
        .filter(|x| x.spec.figure == "fig8")
        .filter_map(|x| x.spec.id.split('-').nth(1)?.parse().ok())
        .collect();
    users.sort_unstable();
    users.dedup();
    users
}

fn throughput(run: &RunResult) -> f64 {
    let measured = (run.report.duration_s - run.report.warmup_s).max(1.0);
    run.report.all.completed as f64 / measured
}

/// The tables of every figure, in Markdown.
pub fn table(r: &ExperimentResults) -> String {
    let (target, spike_target) = r.targets_ms;
    let mut t = format!(
        "# Arashi (USITS'03 Figs. 8-11, 14-15) on this machine\n\n\
         {} · {} · load average at start {} · {} · {:.0} s in all. \
         Targets: {} (Figs. 8, 9, 11, 14, 15), {} (Fig. 10). Times are the 90th \
         percentile of served requests as the emulated users saw them; bold: over the target.\n\n",
        r.date,
        r.machine,
        r.load_at_start,
        r.store,
        r.elapsed_s,
        ms(target),
        ms(spike_target)
    );
    let users = fig8_users(r);
    t.push_str("## Fig. 8: p90 and reject rate vs users\n\n| users | p90, no control | p90, per-stage control | rejected, with control | served/s, no control | served/s, with control |\n|---|---|---|---|---|---|\n");
    for u in &users {
        let none = r.run(&format!("fig8-{u}-none"));
        let ctl = r.run(&format!("fig8-{u}-control"));
        let _ = writeln!(
            t,
            "| {u} | {} | {} | {} | {} | {} |",
            none.map_or("-".into(), |x| ms_vs(x.report.all.rt_p90_ms, target)),
            ctl.map_or("-".into(), |x| ms_vs(x.report.all.rt_p90_ms, target)),
            ctl.map_or("-".into(), |x| pct(x.report.all.reject_rate)),
            none.map_or("-".into(), |x| format!("{:.0}", throughput(x))),
            ctl.map_or("-".into(), |x| format!("{:.0}", throughput(x))),
        );
    }
    if let (Some(light), Some(heavy)) = (users.first(), users.last()) {
        let _ = write!(
            t,
            "\n## Fig. 9: p90 by request type, {light} and {heavy} users\n\n| type | {light}, no control | {light}, control | {heavy}, no control | {heavy}, control | {heavy}, rejected with control |\n|---|---|---|---|---|---|\n"
        );
        let cell = |id: String, ty: RequestType| -> Option<Stats> {
            r.run(&id)?.report.of_type(ty).cloned()
        };
        for ty in RequestType::ALL {
            let p = |id: String| cell(id, ty).map_or("-".into(), |s| ms_vs(s.rt_p90_ms, target));
            let _ = writeln!(
                t,
                "| {ty} | {} | {} | {} | {} | {} |",
                p(format!("fig8-{light}-none")),
                p(format!("fig8-{light}-control")),
                p(format!("fig8-{heavy}-none")),
                p(format!("fig8-{heavy}-control")),
                cell(format!("fig8-{heavy}-control"), ty)
                    .map_or("-".into(), |s| pct(s.reject_rate)),
            );
        }
        let per = r.run(&format!("fig8-{heavy}-control"));
        let single = r.run(&format!("fig11-{heavy}-single"));
        if let (Some(per), Some(single)) = (per, single) {
            let _ = write!(
                t,
                "\n## Fig. 11: per-stage vs a single controller, {heavy} users\n\n| type | per-stage p90 | per-stage rejected | single p90 | single rejected |\n|---|---|---|---|---|\n"
            );
            for ty in RequestType::ALL {
                let (a, b) = (per.report.of_type(ty), single.report.of_type(ty));
                let _ = writeln!(
                    t,
                    "| {ty} | {} | {} | {} | {} |",
                    a.map_or("-".into(), |s| ms_vs(s.rt_p90_ms, target)),
                    a.map_or("-".into(), |s| pct(s.reject_rate)),
                    b.map_or("-".into(), |s| ms_vs(s.rt_p90_ms, target)),
                    b.map_or("-".into(), |s| pct(s.reject_rate)),
                );
            }
            let _ = writeln!(
                t,
                "| all | {} | {} | {} | {} |",
                ms_vs(per.report.all.rt_p90_ms, target),
                pct(per.report.all.reject_rate),
                ms_vs(single.report.all.rt_p90_ms, target),
                pct(single.report.all.reject_rate)
            );
        }
    }
    t.push_str("\n## Fig. 10: load spike (per phase)\n\n| run | phase | users | p90 | max p90 of a second | rejected | served |\n|---|---|---|---|---|---|---|\n");
    for id in ["fig10-none", "fig10-control"] {
        phase_rows(&mut t, r, id, spike_target);
    }
    t.push_str("\n## Figs. 14-15: two classes (per phase; class 1 is the high class)\n\n| run | phase | class | users of the class | p90 | rejected | served |\n|---|---|---|---|---|---|---|\n");
    for id in ["fig14", "fig15"] {
        let Some(run) = r.run(id) else { continue };
        for p in &run.report.phases {
            for (c, s) in p.classes.iter().enumerate() {
                let users = class_users(run, c, p.start_s);
                // Requests of a class that left finish after its phase: not a row.
                if users == 0.0 {
                    continue;
                }
                let _ = writeln!(
                    t,
                    "| {id} | {:.0}-{:.0} s | {c} | {users:.0} | {} | {} | {} |",
                    p.start_s,
                    p.end_s,
                    ms_vs(s.rt_p90_ms, target),
                    pct(s.reject_rate),
                    s.completed
                );
            }
        }
    }
    let errors: Vec<String> = r
        .runs
        .iter()
        .filter(|x| x.report.all.errors > 0)
        .map(|x| {
            let kinds: Vec<String> = x
                .report
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            format!("{}: {}", x.spec.id, kinds.join(", "))
        })
        .collect();
    if !errors.is_empty() {
        let _ = write!(t, "\nErrors (whole runs): {}.\n", errors.join("; "));
    }
    t
}

/// Users of class `c` scheduled at `t` seconds in a run.
fn class_users(run: &RunResult, c: usize, t: f64) -> f64 {
    run.spec
        .groups
        .iter()
        .filter(|(_, class)| usize::from(class.unwrap_or(0)) == c)
        .filter_map(|(s, _)| seda_load::Schedule::parse(s).ok())
        .map(|s| s.level_at(std::time::Duration::from_secs_f64(t)))
        .sum()
}

fn phase_rows(t: &mut String, r: &ExperimentResults, id: &str, target: f64) {
    let Some(run) = r.run(id) else { return };
    for p in &run.report.phases {
        let max_p90 = run
            .report
            .timeseries
            .iter()
            .filter(|s| (s.t as f64) >= p.start_s && (s.t as f64) < p.end_s)
            .map(|s| s.all.rt_p90_ms)
            .fold(0.0, f64::max);
        let _ = writeln!(
            t,
            "| {id} | {:.0}-{:.0} s | {:.0} | {} | {} | {} | {} |",
            p.start_s,
            p.end_s,
            p.users,
            ms_vs(p.all.rt_p90_ms, target),
            ms(max_p90),
            pct(p.all.reject_rate),
            p.all.completed
        );
    }
}

fn per_second(series: &[Second], f: impl Fn(&Second) -> Option<f64>) -> Vec<(f64, f64)> {
    series
        .iter()
        .filter_map(|s| f(s).map(|y| (s.t as f64, y)))
        .collect()
}

fn reject_pct(s: &Stats) -> Option<f64> {
    let n = s.completed + s.rejected + s.errors;
    (n > 0).then(|| s.rejected as f64 * 100.0 / n as f64)
}

fn charts(out: &Path, r: &ExperimentResults) -> Result<(), ExperimentError> {
    let users = fig8_users(r);
    let line = |name: &str, points: Vec<(f64, f64)>| Series {
        name: name.to_owned(),
        points,
    };
    let fig8 = |tag: &str, f: &dyn Fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
        users
            .iter()
            .filter_map(|u| {
                r.run(&format!("fig8-{u}-{tag}"))
                    .map(|x| (f64::from(*u), f(x)))
            })
            .collect()
    };
    let target = r.targets_ms.0;
    let flat = |y: f64, xs: &[(f64, f64)]| -> Vec<(f64, f64)> {
        xs.iter().map(|(x, _)| (*x, y)).collect()
    };
    let none = fig8("none", &|x| x.report.all.rt_p90_ms);
    let ctl = fig8("control", &|x| x.report.all.rt_p90_ms);
    line_chart(
        &out.join("fig8.svg"),
        &Chart {
            title: "Fig. 8: 90th-percentile response time vs users",
            x_label: "users",
            y_label: "p90 response time, ms",
            x_log: true,
            y_log: true,
            y_range: None,
        },
        &[
            line("no overload control", none.clone()),
            line("per-stage control", ctl),
            line("target", flat(target, &none)),
        ],
    )?;
    line_chart(
        &out.join("fig8-reject.svg"),
        &Chart {
            title: "Fig. 8: requests rejected with per-stage control",
            x_label: "users",
            y_label: "rejected, %",
            x_log: true,
            y_log: false,
            y_range: Some((0.0, 100.0)),
        },
        &[line(
            "per-stage control",
            fig8("control", &|x| x.report.all.reject_rate * 100.0),
        )],
    )?;
    let spike_target = r.targets_ms.1;
    if let (Some(a), Some(b)) = (r.run("fig10-none"), r.run("fig10-control")) {
        let p90 = |x: &RunResult| {
            per_second(&x.report.timeseries, |s| {
                (s.all.completed > 0).then_some(s.all.rt_p90_ms)
            })
        };
        let pa = p90(a);
        line_chart(
            &out.join("fig10.svg"),
            &Chart {
                title: "Fig. 10: p90 response time through a load spike",
                x_label: "time, s",
                y_label: "p90 response time, ms",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &[
                line("no overload control", pa.clone()),
                line("per-stage control", p90(b)),
                line("target", flat(spike_target, &pa)),
            ],
        )?;
        line_chart(
            &out.join("fig10-reject.svg"),
            &Chart {
                title: "Fig. 10: requests rejected per second (per-stage control)",
                x_label: "time, s",
                y_label: "rejected, %",
                x_log: false,
                y_log: false,
                y_range: Some((0.0, 100.0)),
            },
            &[
                line(
                    "rejected",
                    per_second(&b.report.timeseries, |s| reject_pct(&s.all)),
                ),
                line(
                    "users / 10",
                    per_second(&b.report.timeseries, |s| Some(s.users / 10.0)),
                ),
            ],
        )?;
        let rate: Vec<(f64, f64)> = b
            .stage
            .iter()
            .filter_map(|s| Some((s.t, s.rate?)))
            .collect();
        let cp90: Vec<(f64, f64)> = b
            .stage
            .iter()
            .filter_map(|s| Some((s.t, s.controller_p90_ms?)))
            .collect();
        line_chart(
            &out.join("fig7.svg"),
            &Chart {
                title: "Fig. 7: the list stage's controller through the spike",
                x_label: "time, s",
                y_label: "admission rate, req/s; smoothed p90, ms",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &[
                line("token-bucket rate, req/s", rate),
                line("controller's p90, ms", cp90.clone()),
                line("target, ms", flat(spike_target, &cp90)),
            ],
        )?;
    }
    for (id, title) in [
        (
            "fig14",
            "Fig. 14: two classes, no differentiation: rejected per class",
        ),
        (
            "fig15",
            "Fig. 15: two classes, differentiation: rejected per class",
        ),
    ] {
        let Some(run) = r.run(id) else { continue };
        let class = |c: usize| {
            per_second(&run.report.timeseries, |s| {
                s.classes.get(c).and_then(reject_pct)
            })
        };
        line_chart(
            &out.join(format!("{id}.svg")),
            &Chart {
                title,
                x_label: "time, s",
                y_label: "rejected, %",
                x_log: false,
                y_log: false,
                y_range: Some((0.0, 100.0)),
            },
            &[
                line("low class (0)", class(0)),
                line("high class (1)", class(1)),
            ],
        )?;
        let p90 = |c: usize| {
            per_second(&run.report.timeseries, |s| {
                s.classes
                    .get(c)
                    .filter(|x| x.completed > 0)
                    .map(|x| x.rt_p90_ms)
            })
        };
        line_chart(
            &out.join(format!("{id}-p90.svg")),
            &Chart {
                title: &format!("{}: p90 per class", &title[..7]),
                x_label: "time, s",
                y_label: "p90 response time, ms",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &[
                line("low class (0)", p90(0)),
                line("high class (1)", p90(1)),
                line("target", flat(target, &p90(0))),
            ],
        )?;
    }
    Ok(())
}
