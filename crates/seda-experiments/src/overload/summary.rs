//! The figures across repeats: the capacity at the knee, the CPU per served and per
//! refused request, and each configuration's median with its spread.
//!
//! - **Capacity**: the peak 2xx rate over the steps of a `knee` run (no control);
//!   the knee is the smallest step reaching 95 % of it.
//! - **CPU per served request**: server CPU over the `knee` steps at >= 90 % of the
//!   peak, divided by the requests they completed (everything the server does for
//!   a request: accept, parse, the bottleneck's work, the write).
//! - **CPU per refusal**: server CPU over the measured phase of a `refusal` run,
//!   less its few served requests at the CPU each costs, divided by its 503s.

use serde::Serialize;

use super::config::Scenario;
use super::metrics::WindowMetrics;
use super::results::{OverloadResults, RunResult};

/// Median, minimum and maximum of a figure over repeats.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Values.
    pub n: usize,
}

/// The spread of `values` (`None` if there are none; NaNs are left out).
pub fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

/// Server CPU seconds between `t0` and `t1`, interpolated from cumulative samples.
pub fn cpu_between(cpu: &[(f64, f64)], t0: f64, t1: f64) -> Option<f64> {
    let at = |t: f64| -> Option<f64> {
        let i = cpu.iter().position(|&(x, _)| x >= t)?;
        if i == 0 {
            return Some(cpu[0].1);
        }
        let ((xa, ya), (xb, yb)) = (cpu[i - 1], cpu[i]);
        let f = if xb > xa { (t - xa) / (xb - xa) } else { 1.0 };
        Some(ya + f * (yb - ya))
    };
    Some(at(t1)? - at(t0)?)
}

/// The server's CPU seconds between `t0` and `t1` of `run`'s load clock, with both
/// clamped to the run's last CPU sample. The runner takes that sample after the
/// load has ended, but a report's last phase ends at the end of the last second
/// with a completion (the drain's, rounded up: 4 for a load that finished at 3.2 s),
/// which can fall after it; the CPU up to that sample is all the load's.
fn run_cpu_between(run: &RunResult, t0: f64, t1: f64) -> Option<f64> {
    let last = run.cpu.last()?.0;
    cpu_between(&run.cpu, t0.min(last), t1.min(last))
}

/// What one `knee` run measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Knee {
    /// Peak 2xx rate over the steps, requests/s.
    pub peak_rps: f64,
    /// Users of the first step reaching 95 % of the peak.
    pub knee_users: f64,
    /// Server CPU per request served at >= 90 % of the peak, seconds.
    pub cpu_per_served_s: Option<f64>,
}

/// The knee of one run (`None` if it completed nothing).
pub fn knee(run: &RunResult) -> Option<Knee> {
    let phases = &run.groups.first()?.report.phases;
    let rate = |p: &seda_load::report::PhaseSummary| {
        p.completed as f64 / (p.end_s.saturating_sub(p.start_s)).max(1) as f64
    };
    let peak = phases.iter().map(rate).fold(0.0, f64::max);
    if peak <= 0.0 {
        return None;
    }
    let knee_users = phases.iter().find(|p| rate(p) >= 0.95 * peak)?.level;
    let (mut cpu, mut served) = (0.0, 0u64);
    for p in phases.iter().filter(|p| rate(p) >= 0.9 * peak) {
        cpu += run_cpu_between(run, p.start_s as f64, p.end_s as f64)?;
        served += p.completed;
    }
    Some(Knee {
        peak_rps: peak,
        knee_users,
        cpu_per_served_s: (served > 0).then(|| cpu / served as f64),
    })
}

fn runs_of(r: &OverloadResults, sc: Scenario) -> Vec<&RunResult> {
    r.runs.iter().filter(|x| x.spec.scenario == sc).collect()
}

/// The bottleneck's capacity over the `knee` repeats, requests/s.
pub fn capacity(r: &OverloadResults) -> Option<Spread> {
    spread(
        runs_of(r, Scenario::Knee)
            .into_iter()
            .filter_map(knee)
            .map(|k| k.peak_rps),
    )
}

/// CPU per served request over the `knee` repeats, seconds.
pub fn cpu_per_served(r: &OverloadResults) -> Option<Spread> {
    spread(
        runs_of(r, Scenario::Knee)
            .into_iter()
            .filter_map(knee)
            .filter_map(|k| k.cpu_per_served_s),
    )
}

/// What one `refusal` run measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RefusalCost {
    /// 503s per second in the measured phase.
    pub refused_rps: f64,
    /// Requests served in the measured phase.
    pub served: u64,
    /// Server CPU per refusal, seconds.
    pub cpu_per_refusal_s: f64,
}

/// The CPU per refusal of one `refusal` run, given the CPU per served request.
pub fn refusal_cost(run: &RunResult, cpu_per_served_s: f64) -> Option<RefusalCost> {
    let m = run.groups.first()?.window.as_ref()?;
    if m.rejected == 0 {
        return None;
    }
    let cpu = run_cpu_between(run, m.start_s as f64, m.end_s as f64)?;
    let refusals = (cpu - m.completed as f64 * cpu_per_served_s).max(0.0);
    Some(RefusalCost {
        refused_rps: m.rejected as f64 / (m.end_s - m.start_s).max(1) as f64,
        served: m.completed,
        cpu_per_refusal_s: refusals / m.rejected as f64,
    })
}

/// CPU per refusal over the `refusal` repeats, seconds.
pub fn cpu_per_refusal(r: &OverloadResults) -> Option<Spread> {
    let served = cpu_per_served(r)?.median;
    spread(
        runs_of(r, Scenario::Refusal)
            .into_iter()
            .filter_map(|run| refusal_cost(run, served))
            .map(|c| c.cpu_per_refusal_s),
    )
}

/// One configuration's window figures for one group, over its repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Repeats measured.
    pub n: usize,
    /// Client p90 over the window, ms.
    pub p90_ms: Spread,
    /// Recovery, s; `None` in a repeat that never recovered counts as the whole
    /// window (and `never` is how many did not).
    pub recover_s: Spread,
    /// Repeats that never recovered.
    pub never: usize,
    /// Seconds of the window over the target.
    pub over_s: Spread,
    /// 2xx per second.
    pub served_rps: Spread,
    /// 2xx within the target per second.
    pub goodput_rps: Spread,
    /// 503s / all requests.
    pub reject_rate: Spread,
    /// Errors / all requests.
    pub error_rate: Spread,
    /// The window's length, s.
    pub window_s: u64,
}

/// The figures of `group` (index) of every repeat of run `id`.
pub fn row(r: &OverloadResults, id: &str, group: usize) -> Option<Row> {
    let ms: Vec<&WindowMetrics> = r
        .repeats(id)
        .into_iter()
        .filter_map(|run| run.groups.get(group)?.window.as_ref())
        .collect();
    let first = ms.first()?;
    let window_s = first.end_s - first.start_s;
    let s = |f: &dyn Fn(&WindowMetrics) -> f64| spread(ms.iter().map(|m| f(m)));
    Some(Row {
        n: ms.len(),
        p90_ms: s(&|m| m.p90_ms)?,
        recover_s: s(&|m| m.recover_s.map_or(window_s as f64, |v| v as f64))?,
        never: ms.iter().filter(|m| m.recover_s.is_none()).count(),
        over_s: s(&|m| m.seconds_over_target as f64)?,
        served_rps: s(&|m| m.throughput_rps)?,
        goodput_rps: s(&|m| m.goodput_rps)?,
        reject_rate: s(&|m| m.reject_rate)?,
        error_rate: s(&|m| m.error_rate)?,
        window_s,
    })
}

/// The repeat of run `id` whose recovery (then p90) is the median: the one a chart
/// shows.
pub fn median_repeat<'a>(r: &'a OverloadResults, id: &str) -> Option<&'a RunResult> {
    let mut v: Vec<(&RunResult, f64, f64)> = r
        .repeats(id)
        .into_iter()
        .filter_map(|run| {
            let m = run.groups.first()?.window.as_ref()?;
            let rec = m.recover_s.map_or(f64::INFINITY, |s| s as f64);
            Some((run, rec, m.p90_ms))
        })
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)));
    let n = v.len();
    v.get(n.checked_sub(1)? / 2).map(|x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_median_and_the_range() {
        let s = spread([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(spread([1.0, 4.0]).unwrap().median, 2.5);
        assert!(spread(Vec::<f64>::new()).is_none());
        assert_eq!(spread([f64::NAN, 5.0]).unwrap().n, 1);
    }

    #[test]
    fn cpu_between_interpolates_cumulative_samples() {
        let cpu = [(0.0, 0.0), (1.0, 0.5), (2.0, 1.5)];
        assert!((cpu_between(&cpu, 0.5, 1.5).unwrap() - 0.75).abs() < 1e-9);
        assert!((cpu_between(&cpu, 0.0, 2.0).unwrap() - 1.5).abs() < 1e-9);
        assert!(
            cpu_between(&cpu, 0.0, 3.0).is_none(),
            "after the last sample"
        );
    }
}
