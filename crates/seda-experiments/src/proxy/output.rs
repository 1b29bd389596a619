//! `runs.json`, `table.md` (per shape, per front: median [min-max] over the repeats)
//! and two charts per shape, one question each: `SHAPE-p90.svg` (does the served p90
//! hold the target, 100 ms by 100 ms?) and `SHAPE-served.svg` (how much does each
//! front serve, against the backend's capacity?), plus `SHAPE-high.svg` for a
//! two-class shape (does the high class keep its service?). Charts show each front's
//! first repeat, at 100 ms resolution (per second for runs recorded without it).

use std::fmt::Write as _;
use std::path::Path;

use super::results::{HighClass, ProxyResults, ProxyRun, ShapeMetrics, Sustained};
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart, tick};
use crate::harness::write_runs_and_table;

/// Writes every output file of `r` to `out`.
pub fn write_outputs(out: &Path, r: &ProxyResults) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    for shape in shapes(r) {
        let runs: Vec<&ProxyRun> = r
            .runs
            .iter()
            .filter(|x| x.shape == shape && x.repeat == 0)
            .collect();
        if runs.is_empty() {
            continue;
        }
        let mut p90: Vec<Series> = runs.iter().map(|x| p90_series(x)).collect();
        let mut served: Vec<Series> = runs.iter().map(|x| served_series(x)).collect();
        let target = target_ms(r);
        let end = runs
            .iter()
            .flat_map(|x| x.series.last().map(|p| p.t as f64 + 1.0))
            .fold(0.0, f64::max);
        p90.push(Series {
            name: format!("target {} ms", tick(target)),
            points: vec![(0.0, target), (end, target)],
        });
        let title = format!("{shape}: p90 of served requests per 100 ms (log)");
        line_chart(
            &out.join(format!("{shape}-p90.svg")),
            &Chart {
                title: &title,
                x_label: "time, s",
                y_label: "p90, ms",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &p90,
        )?;
        let cap: Vec<(f64, f64)> = capacity_line(r, &runs[0].shape, end);
        served.push(Series {
            name: "backend capacity".into(),
            points: cap,
        });
        let title = format!("{shape}: requests served (2xx) per second, by 100 ms");
        line_chart(
            &out.join(format!("{shape}-served.svg")),
            &Chart {
                title: &title,
                x_label: "time, s",
                y_label: "served/s",
                x_log: false,
                y_log: false,
                y_range: None,
            },
            &served,
        )?;
        if runs.iter().any(|x| x.high.is_some()) {
            let mut high: Vec<Series> = runs
                .iter()
                .filter_map(|x| {
                    let h = x.high.as_ref()?;
                    Some(Series {
                        name: x.front.clone(),
                        points: h
                            .series
                            .iter()
                            .map(|p| (p.t as f64, p.completed as f64))
                            .collect(),
                    })
                })
                .collect();
            let offered = shape_capacity(r, &runs[0].shape)
                * r.setup["high_class_share"].as_f64().unwrap_or(0.0);
            high.push(Series {
                name: "high class offered".into(),
                points: vec![(0.0, offered), (end, offered)],
            });
            let title = format!("{shape}: high-class (X-Class: 1) requests served per second");
            line_chart(
                &out.join(format!("{shape}-high.svg")),
                &Chart {
                    title: &title,
                    x_label: "time, s",
                    y_label: "served/s",
                    x_log: false,
                    y_log: false,
                    y_range: None,
                },
                &high,
            )?;
        }
    }
    Ok(())
}

/// A run's p90 per 100 ms (tenths without a served request left out), or per second.
fn p90_series(x: &ProxyRun) -> Series {
    let points = if x.ticks.is_empty() {
        x.series
            .iter()
            .filter(|p| p.completed > 0)
            .map(|p| (p.t as f64, p.rt_p90_ms))
            .collect()
    } else {
        x.ticks
            .iter()
            .filter(|p| p.completed > 0)
            .map(|p| (p.t_ms as f64 / 1e3, p.rt_p90_ms))
            .collect()
    };
    Series {
        name: x.front.clone(),
        points,
    }
}

/// A run's served requests per second, by 100 ms (ten times a tenth's count), or
/// per second.
fn served_series(x: &ProxyRun) -> Series {
    let points = if x.ticks.is_empty() {
        x.series
            .iter()
            .map(|p| (p.t as f64, p.completed as f64))
            .collect()
    } else {
        x.ticks
            .iter()
            .map(|p| (p.t_ms as f64 / 1e3, p.completed as f64 * 10.0))
            .collect()
    };
    Series {
        name: x.front.clone(),
        points,
    }
}

fn target_ms(r: &ProxyResults) -> f64 {
    r.setup["target_ms"].as_f64().unwrap_or(0.0)
}

/// The backend's capacity over time (halved in `drop`'s middle phase): the median
/// of the capacity checks before this shape (the run's start capacity in runs
/// without them).
fn capacity_line(r: &ProxyResults, shape: &str, end: f64) -> Vec<(f64, f64)> {
    let c = shape_capacity(r, shape);
    if shape != "drop" {
        return vec![(0.0, c), (end, c)];
    }
    let p = |i: usize| r.setup["phases_s"][i].as_f64().unwrap_or(0.0);
    let (a, b) = (p(0), p(0) + p(1));
    vec![
        (0.0, c),
        (a, c),
        (a, c / 2.0),
        (b, c / 2.0),
        (b, c),
        (end, c),
    ]
}

/// The median capacity check before `shape`, or the start capacity.
fn shape_capacity(r: &ProxyResults, shape: &str) -> f64 {
    let mut xs: Vec<f64> = checks(r, shape).iter().map(|s| s.rps).collect();
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(r.capacity_rps)
}

fn checks<'a>(r: &'a ProxyResults, shape: &str) -> Vec<&'a Sustained> {
    r.capacity_checks
        .iter()
        .filter(|c| c.shape == shape)
        .map(|c| &c.sustained)
        .collect()
}

/// Shapes in the order first run.
fn shapes(r: &ProxyResults) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for x in &r.runs {
        if !v.contains(&x.shape) {
            v.push(x.shape.clone());
        }
    }
    v
}

/// `median [min-max]` of `xs` with `d` decimals (just the value for one repeat).
fn spread(mut xs: Vec<f64>, d: usize) -> String {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => "-".into(),
        1 => format!("{:.d$}", xs[0]),
        n => format!("{:.d$} [{:.d$}-{:.d$}]", xs[n / 2], xs[0], xs[n - 1]),
    }
}

fn recover(xs: Vec<Option<u64>>) -> String {
    let never = xs.iter().filter(|x| x.is_none()).count();
    let mut s: Vec<f64> = xs.into_iter().flatten().map(|v| v as f64).collect();
    if s.is_empty() {
        return "never".into();
    }
    s.sort_by(f64::total_cmp);
    let mut out = spread(s, 0);
    if never > 0 {
        let _ = write!(out, " ({never} never)");
    }
    out
}

fn table(r: &ProxyResults) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "# seda experiment proxy, {}\n", r.date);
    let _ = writeln!(t, "Setup: `{}`\n", r.setup);
    let knee: Vec<String> = r
        .knee
        .iter()
        .map(|(u, x)| format!("{u} users {x:.1}/s"))
        .collect();
    match &r.sustained {
        Some(s) => {
            let _ = writeln!(
                t,
                "Capacity: **{:.1} req/s**, the median second of {} closed-loop users \
                 straight at the backend for {} s (seconds {:?}; the first and last left \
                 out). The knee's best step, the capacity of earlier runs: {:.1} req/s \
                 ({}).\n",
                r.capacity_rps,
                s.users,
                s.seconds.len() + 2,
                s.seconds,
                r.knee_peak_rps,
                knee.join(", ")
            );
        }
        None => {
            let _ = writeln!(
                t,
                "Capacity at the knee: **{:.1} req/s** ({}).\n",
                r.capacity_rps,
                knee.join(", ")
            );
        }
    }
    if !r.capacity_checks.is_empty() {
        let _ = writeln!(
            t,
            "The capacity at the time: the same sustained step on a fresh backend right \
             before each shape of each repeat (the first is the one above); each run's \
             served/s is against its shape's check (half of it in `drop`).\n"
        );
    }
    let target = target_ms(r);
    for shape in shapes(r) {
        let _ = writeln!(t, "## {shape}\n");
        let c = checks(r, &shape);
        if !c.is_empty() {
            let _ = writeln!(
                t,
                "Capacity before this shape, by repeat: {} req/s.\n",
                c.iter()
                    .map(|s| format!("{:.1}", s.rps))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let classes = r.runs.iter().any(|x| x.shape == shape && x.high.is_some());
        if classes {
            let _ = writeln!(
                t,
                "Two classes: `{}: 1` at {} req/s throughout, class 0 as in open-Fx. \
                 served/s and errors count both; p90, p99 and recovery are class 0's.\n",
                r.setup["class_header"].as_str().unwrap_or("?"),
                tick(
                    shape_capacity(r, &shape) * r.setup["high_class_share"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        let _ = write!(
            t,
            "| front | served/s | of capacity | p90 ms (target {}) | p99 ms | 503/s | errors | recover s | after s |",
            tick(target)
        );
        let _ = writeln!(
            t,
            "{}",
            if classes {
                " high served/s | high lost % (target <= 10) | high p90 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            } else {
                "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
            }
        );
        let mut fronts: Vec<&str> = Vec::new();
        for x in r.runs.iter().filter(|x| x.shape == shape) {
            if !fronts.contains(&x.front.as_str()) {
                fronts.push(&x.front);
            }
        }
        for f in fronts {
            let ms: Vec<&ShapeMetrics> = r
                .runs
                .iter()
                .filter(|x| x.shape == shape && x.front == f)
                .map(|x| &x.metrics)
                .collect();
            let col = |g: fn(&ShapeMetrics) -> f64, d| spread(ms.iter().map(|m| g(m)).collect(), d);
            let hs: Vec<&HighClass> = r
                .runs
                .iter()
                .filter(|x| x.shape == shape && x.front == f)
                .filter_map(|x| x.high.as_ref())
                .collect();
            let high = if classes {
                let h = |g: fn(&HighClass) -> f64, d| spread(hs.iter().map(|m| g(m)).collect(), d);
                format!(
                    " {} | {} | {} |",
                    h(|m| m.served_rps, 1),
                    h(|m| m.lost_fraction * 100.0, 1),
                    h(|m| m.p90_ms, 0)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                t,
                "| {f} | {} | {} | {} | {} | {} | {} | {} | {} |{high}",
                col(|m| m.served_rps, 1),
                col(|m| m.served_of_capacity, 2),
                col(|m| m.p90_ms, 0),
                col(|m| m.p99_ms, 0),
                col(|m| m.refused_rps, 1),
                col(|m| m.errors as f64, 0),
                recover(ms.iter().map(|m| m.recover_s).collect()),
                recover(ms.iter().map(|m| m.after_recover_s).collect()),
            );
        }
        let _ = writeln!(t);
    }
    if !r.failed.is_empty() {
        let _ = writeln!(t, "## Failed runs\n");
        for (id, why) in &r.failed {
            let _ = writeln!(t, "- {id}: {why}");
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_show_the_median_and_the_range() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0], 1), "2.0 [1.0-3.0]");
        assert_eq!(spread(vec![5.0], 0), "5");
        assert_eq!(recover(vec![Some(1), None, Some(3)]), "3 [1-3] (1 never)");
        assert_eq!(recover(vec![None]), "never");
    }
}
