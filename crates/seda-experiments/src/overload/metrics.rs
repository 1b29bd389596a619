//! What a run is judged by, computed from the client's per-second series and per-phase
//! totals (by completion time).
//!
//! - **Time to recover** (issue 14): the first second after the start of a window
//!   (the spike) from which every second to the window's end completed something
//!   with a client-side p90 within [`TOLERANCE`] x the target. 0 if the p90 held
//!   from the first second; `None` if even the window's last second missed.
//! - **Goodput**: requests answered 2xx/3xx *within the target* response time, per
//!   second of the window. A 503, an error, or a page that took longer than the
//!   target is not goodput: the user did not get what the target promises.
//! - **Reject rate**: 503s / (completed + 503s + errors) in the window; errors (timeouts,
//!   refused or reset connections) are reported beside it, not folded in.

use serde::{Deserialize, Serialize};

use seda_load::report::{LoadReport, PhaseSummary, TimePoint};

/// How far over the target a recovered p90 may be (issue 14: 1.2 x target).
pub const TOLERANCE: f64 = 1.2;

/// Whether a second met the target: something completed and its p90 is within it.
fn good(p: &TimePoint, target_ms: f64) -> bool {
    p.completed > 0 && p.rt_p90_ms <= target_ms
}

/// Seconds from `start` to the first second from which every second of
/// `start..end` of `series` (by `t`) completed something with a p90 within
/// [`TOLERANCE`] x `target_ms`; see the module doc.
pub fn time_to_recover(series: &[TimePoint], start: u64, end: u64, target_ms: f64) -> Option<u64> {
    // A second without a point (nothing finished) is not good.
    let ok = |t: u64| {
        series
            .iter()
            .find(|p| p.t == t)
            .is_some_and(|p| good(p, TOLERANCE * target_ms))
    };
    let last_bad = (start..end).rev().find(|&t| !ok(t));
    match last_bad {
        None if start < end => Some(0),
        None => None,
        Some(t) if t + 1 < end => Some(t + 1 - start),
        Some(_) => None,
    }
}

/// A window's figures for one group of users.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowMetrics {
    /// First second of the window.
    pub start_s: u64,
    /// Second after its last.
    pub end_s: u64,
    /// The response-time target, ms.
    pub target_ms: f64,
    /// p90 of the requests completed in the window, ms (0 if none).
    pub p90_ms: f64,
    /// Largest response time completed in the window, ms.
    pub max_ms: f64,
    /// Requests completed 2xx/3xx.
    pub completed: u64,
    /// Of those, within the target.
    pub within_target: u64,
    /// 503s.
    pub rejected: u64,
    /// Failed requests (timeout, connection refused or reset, other status).
    pub errors: u64,
    /// Completed per second.
    pub throughput_rps: f64,
    /// Completed within the target per second.
    pub goodput_rps: f64,
    /// rejected / (completed + rejected + errors); 0 without requests.
    pub reject_rate: f64,
    /// errors / (completed + rejected + errors).
    pub error_rate: f64,
    /// Seconds of the window whose p90 was over the target or that completed nothing.
    pub seconds_over_target: u64,
    /// See [`time_to_recover`].
    pub recover_s: Option<u64>,
}

/// Figures of the window covered by `phases` (a contiguous run of phase summaries),
/// with the recovery and over-target seconds from `series`.
pub fn window_metrics(
    phases: &[PhaseSummary],
    series: &[TimePoint],
    target_ms: f64,
) -> Option<WindowMetrics> {
    let first = phases.first()?;
    let last = phases.last()?;
    let (start_s, end_s) = (first.start_s, last.end_s);
    let sum = |f: fn(&PhaseSummary) -> u64| phases.iter().map(f).sum::<u64>();
    let completed = sum(|p| p.completed);
    let within_target = sum(|p| p.within_target);
    let rejected = sum(|p| p.rejected);
    let errors = sum(|p| p.errors);
    let all = completed + rejected + errors;
    let secs = end_s.saturating_sub(start_s).max(1) as f64;
    let frac = |n: u64| if all == 0 { 0.0 } else { n as f64 / all as f64 };
    // A multi-phase window's p90 is the largest phase p90 (an upper bound).
    let p90_ms = phases.iter().map(|p| p.rt_p90_ms).fold(0.0, f64::max);
    let seconds_over_target = (start_s..end_s)
        .filter(|&t| {
            !series
                .iter()
                .find(|p| p.t == t)
                .is_some_and(|p| good(p, target_ms))
        })
        .count() as u64;
    Some(WindowMetrics {
        start_s,
        end_s,
        target_ms,
        p90_ms,
        max_ms: phases.iter().map(|p| p.rt_max_ms).fold(0.0, f64::max),
        completed,
        within_target,
        rejected,
        errors,
        throughput_rps: completed as f64 / secs,
        goodput_rps: within_target as f64 / secs,
        reject_rate: frac(rejected),
        error_rate: frac(errors),
        seconds_over_target,
        recover_s: time_to_recover(series, start_s, end_s, target_ms),
    })
}

/// Figures of phase `i` of a report (`None` if it has no such phase).
pub fn phase_metrics(r: &LoadReport, i: usize, target_ms: f64) -> Option<WindowMetrics> {
    window_metrics(r.phases.get(i..=i)?, &r.timeseries, target_ms)
}

/// Figures of the whole report.
pub fn whole_metrics(r: &LoadReport, target_ms: f64) -> Option<WindowMetrics> {
    window_metrics(&r.phases, &r.timeseries, target_ms)
}

/// Per-second reject fraction of a series: rejected / (completed + rejected + errors),
/// as (t, fraction) for seconds with requests.
pub fn reject_series(series: &[TimePoint]) -> Vec<(f64, f64)> {
    series
        .iter()
        .filter_map(|p| {
            let all = p.completed + p.rejected + p.errors;
            (all > 0).then(|| (p.t as f64, p.rejected as f64 / all as f64))
        })
        .collect()
}

/// Per-second p90 of a series as (t, ms), for seconds that completed something.
pub fn p90_series(series: &[TimePoint]) -> Vec<(f64, f64)> {
    series
        .iter()
        .filter(|p| p.completed > 0)
        .map(|p| (p.t as f64, p.rt_p90_ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: u64, completed: u64, within: u64, rejected: u64, p90: f64) -> TimePoint {
        let mut p = TimePoint::default();
        (p.t, p.completed, p.within_target, p.rejected) = (t, completed, within, rejected);
        (p.rt_p90_ms, p.rt_mean_ms) = (p90, p90 / 2.0);
        p
    }

    /// p90 per second from a list; 0 means "nothing completed that second".
    fn series(p90s: &[f64]) -> Vec<TimePoint> {
        p90s.iter()
            .enumerate()
            .map(|(t, &p)| {
                let n = if p > 0.0 { 10 } else { 0 };
                point(t as u64, n, if p <= 1000.0 { n } else { 0 }, 0, p)
            })
            .collect()
    }

    #[test]
    fn recovery_is_the_first_second_from_which_the_p90_stays_within_tolerance() {
        //         0    1    2     3     4    5    6    7    8    9
        let s = series(&[
            100.0, 200.0, 3000.0, 5000.0, 900.0, 1150.0, 2000.0, 700.0, 600.0, 500.0,
        ]);
        // Over 1.2 s at 2, 3 and 6 (1.15 s at 5 is within the tolerance): from 7 on.
        assert_eq!(time_to_recover(&s, 0, 10, 1000.0), Some(7));
        // Measured from a later window start.
        assert_eq!(time_to_recover(&s, 2, 10, 1000.0), Some(5));
        // Held from the first second.
        assert_eq!(time_to_recover(&s, 7, 10, 1000.0), Some(0));
        // A second with nothing completed is not good.
        let gap = series(&[2000.0, 500.0, 0.0, 500.0, 500.0, 500.0]);
        assert_eq!(time_to_recover(&gap, 0, 6, 1000.0), Some(3));
        // Exactly at the tolerance counts as within.
        let edge = series(&[1500.0, 1200.0, 1000.0, 1000.0]);
        assert_eq!(time_to_recover(&edge, 0, 4, 1000.0), Some(1));
        // Never back, or back only after the window.
        let bad = series(&[2000.0; 8]);
        assert_eq!(time_to_recover(&bad, 0, 8, 1000.0), None);
        assert_eq!(time_to_recover(&s, 0, 7, 1000.0), None);
        assert_eq!(time_to_recover(&s, 3, 3, 1000.0), None, "empty window");
    }

    #[test]
    fn goodput_counts_only_completions_within_the_target() {
        let s = vec![
            point(10, 40, 30, 60, 1200.0),
            point(11, 50, 50, 50, 800.0),
            point(12, 50, 50, 50, 700.0),
            point(13, 45, 45, 55, 600.0),
        ];
        let mut phase = PhaseSummary::default();
        (phase.start_s, phase.end_s, phase.level) = (10, 14, 1000.0);
        (phase.completed, phase.within_target, phase.rejected) = (185, 175, 215);
        (phase.rt_p90_ms, phase.rt_max_ms) = (900.0, 2500.0);
        let m = window_metrics(&[phase], &s, 1000.0).unwrap();
        assert_eq!((m.start_s, m.end_s), (10, 14));
        assert!((m.goodput_rps - 175.0 / 4.0).abs() < 1e-9);
        assert!((m.throughput_rps - 185.0 / 4.0).abs() < 1e-9);
        assert!((m.reject_rate - 215.0 / 400.0).abs() < 1e-9);
        assert_eq!(m.error_rate, 0.0);
        assert_eq!(m.seconds_over_target, 1);
        assert_eq!(m.recover_s, Some(0), "1.2 s is within 1.2 x 1 s");
        assert_eq!((m.p90_ms, m.max_ms), (900.0, 2500.0));
    }

    #[test]
    fn multi_phase_windows_sum_counts_and_bound_the_p90() {
        let ph = |start_s, end_s, completed, rejected, errors, p90: f64| {
            let mut p = PhaseSummary::default();
            (p.start_s, p.end_s, p.level) = (start_s, end_s, 3.0);
            (p.completed, p.within_target) = (completed, completed);
            (p.rejected, p.errors) = (rejected, errors);
            (p.rt_p90_ms, p.rt_max_ms) = (p90, p90 * 2.0);
            p
        };
        let phases = [ph(0, 2, 10, 0, 0, 50.0), ph(2, 4, 10, 10, 20, 70.0)];
        let s = series(&[50.0, 50.0, 70.0, 0.0]);
        let m = window_metrics(&phases, &s, 1000.0).unwrap();
        assert_eq!((m.completed, m.rejected, m.errors), (20, 10, 20));
        assert!((m.error_rate - 0.4).abs() < 1e-9 && (m.reject_rate - 0.2).abs() < 1e-9);
        assert_eq!((m.p90_ms, m.max_ms), (70.0, 140.0));
        assert_eq!(m.seconds_over_target, 1, "the empty second 3");
        assert!(window_metrics(&[], &s, 1000.0).is_none());
    }

    #[test]
    fn per_second_series_skip_empty_seconds() {
        let s = vec![point(0, 0, 0, 0, 0.0), point(1, 3, 3, 1, 40.0)];
        assert_eq!(p90_series(&s), vec![(1.0, 40.0)]);
        assert_eq!(reject_series(&s), vec![(1.0, 0.25)]);
    }
}
