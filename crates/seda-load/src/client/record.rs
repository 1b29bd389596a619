//! What one load thread measures ([`Recorder`]), the live counters every thread
//! adds to ([`Progress`]), and the merge of the threads' measurements into one
//! [`LoadReport`].

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::config::{LoadConfig, Mode, RequestMix};
use crate::metrics::{cdf, jain_index, quantile_ms, rt_histogram};
use crate::report::{ClassCount, LoadReport, PhaseSummary, Tick, TimePoint};
use crate::schedule::Schedule;

/// Live counters, updated by the event loops as they go.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Progress {
    /// Completed requests so far.
    pub completed: AtomicU64,
    /// Rejected (503) requests so far.
    pub rejected: AtomicU64,
    /// Failed requests so far.
    pub errors: AtomicU64,
}

/// Per-thread measurements.
pub(super) struct Recorder {
    pub(super) ok: Histogram<u64>,
    pub(super) rejected_rt: Histogram<u64>,
    pub(super) seconds: Vec<Second>,
    /// The same by tenths of a second.
    pub(super) tenths: Vec<Tenth>,
    pub(super) issued: u64,
    pub(super) completed: u64,
    pub(super) rejected: u64,
    pub(super) errors: BTreeMap<&'static str, u64>,
    pub(super) statuses: BTreeMap<u16, u64>,
    pub(super) bytes: u64,
    pub(super) connections: u64,
    pub(super) by_class: [u64; 4],
    pub(super) per_user: Vec<u64>,
    pub(super) end_us: u64,
    /// Longest wait of a request that got no answer (timeout or unfinished), us.
    pub(super) unanswered_age_us: u64,
}

/// A tenth of a second: counts and every completion's response time (us).
#[derive(Default)]
pub(super) struct Tenth {
    pub(super) completed: u64,
    pub(super) rejected: u64,
    pub(super) errors: u64,
    pub(super) rts_us: Vec<u64>,
}

pub(super) struct Second {
    pub(super) completed: u64,
    pub(super) within: u64,
    pub(super) rejected: u64,
    pub(super) errors: u64,
    pub(super) bytes: u64,
    pub(super) hist: Histogram<u64>,
}

impl Recorder {
    pub(super) fn new() -> Self {
        Recorder {
            ok: rt_histogram(3),
            rejected_rt: rt_histogram(2),
            seconds: Vec::new(),
            tenths: Vec::new(),
            issued: 0,
            completed: 0,
            rejected: 0,
            errors: BTreeMap::new(),
            statuses: BTreeMap::new(),
            bytes: 0,
            connections: 0,
            by_class: [0; 4],
            per_user: Vec::new(),
            end_us: 0,
            unanswered_age_us: 0,
        }
    }

    pub(super) fn second(&mut self, now_us: u64) -> &mut Second {
        let s = (now_us / 1_000_000) as usize;
        while self.seconds.len() <= s {
            self.seconds.push(Second {
                completed: 0,
                within: 0,
                rejected: 0,
                errors: 0,
                bytes: 0,
                hist: rt_histogram(2),
            });
        }
        &mut self.seconds[s]
    }

    pub(super) fn tenth(&mut self, now_us: u64) -> &mut Tenth {
        let t = (now_us / 100_000) as usize;
        if self.tenths.len() <= t {
            self.tenths.resize_with(t + 1, Tenth::default);
        }
        &mut self.tenths[t]
    }
}

/// Combine the threads' measurements into one report.
pub(super) fn merge(cfg: &LoadConfig, mut recs: Vec<Recorder>) -> LoadReport {
    let mut total = Recorder::new();
    let mut per_user: Vec<u64> = Vec::new();
    for r in recs.iter_mut() {
        let _ = total.ok.add(&r.ok);
        let _ = total.rejected_rt.add(&r.rejected_rt);
        total.issued += r.issued;
        total.completed += r.completed;
        total.rejected += r.rejected;
        for (k, v) in &r.errors {
            *total.errors.entry(k).or_default() += v;
        }
        for (k, v) in &r.statuses {
            *total.statuses.entry(*k).or_default() += v;
        }
        total.bytes += r.bytes;
        total.connections += r.connections;
        for c in 0..4 {
            total.by_class[c] += r.by_class[c];
        }
        total.end_us = total.end_us.max(r.end_us);
        total.unanswered_age_us = total.unanswered_age_us.max(r.unanswered_age_us);
        for (i, s) in r.seconds.drain(..).enumerate() {
            let t = total.second(i as u64 * 1_000_000);
            t.completed += s.completed;
            t.within += s.within;
            t.rejected += s.rejected;
            t.errors += s.errors;
            t.bytes += s.bytes;
            let _ = t.hist.add(&s.hist);
        }
        for (i, s) in r.tenths.drain(..).enumerate() {
            let t = total.tenth(i as u64 * 100_000);
            t.completed += s.completed;
            t.rejected += s.rejected;
            t.errors += s.errors;
            t.rts_us.extend(s.rts_us);
        }
        per_user.append(&mut r.per_user);
    }
    let elapsed_s = (total.end_us as f64 / 1e6).max(1e-6);
    let errors: u64 = total.errors.values().sum();
    let closed = matches!(cfg.mode, Mode::Closed { .. });
    let timeseries = total
        .seconds
        .iter()
        .enumerate()
        .map(|(t, s)| TimePoint {
            t: t as u64,
            level: cfg.schedule.level_at(Duration::from_secs(t as u64)),
            completed: s.completed,
            within_target: s.within,
            rejected: s.rejected,
            errors: s.errors,
            rt_p90_ms: quantile_ms(&s.hist, 0.9),
            rt_mean_ms: if s.hist.is_empty() {
                0.0
            } else {
                s.hist.mean() / 1000.0
            },
            mbps: s.bytes as f64 * 8.0 / 1e6,
        })
        .collect();
    let ticks = total
        .tenths
        .iter_mut()
        .enumerate()
        .map(|(i, s)| Tick {
            t_ms: i as u64 * 100,
            completed: s.completed,
            rejected: s.rejected,
            errors: s.errors,
            rt_p90_ms: exact_quantile_ms(&mut s.rts_us, 0.9),
        })
        .collect();
    LoadReport {
        config: cfg.echo(),
        issued: total.issued,
        completed: total.completed,
        errors,
        rejected: total.rejected,
        errors_by_kind: total
            .errors
            .iter()
            .map(|(k, v)| ((*k).to_string(), *v))
            .collect(),
        status_counts: total.statuses.clone(),
        elapsed_s,
        bytes: total.bytes,
        connections: total.connections,
        throughput_rps: total.completed as f64 / elapsed_s,
        throughput_mbps: total.bytes as f64 * 8.0 / 1e6 / elapsed_s,
        rt_mean_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.mean() / 1000.0
        },
        rt_p50_ms: quantile_ms(&total.ok, 0.5),
        rt_p90_ms: quantile_ms(&total.ok, 0.9),
        rt_p99_ms: quantile_ms(&total.ok, 0.99),
        rt_max_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.max() as f64 / 1000.0
        },
        rt_min_ms: if total.ok.is_empty() {
            0.0
        } else {
            total.ok.min() as f64 / 1000.0
        },
        rejected_rt_mean_ms: if total.rejected_rt.is_empty() {
            0.0
        } else {
            total.rejected_rt.mean() / 1000.0
        },
        users: if closed { per_user.len() } else { 0 },
        fairness: if closed { jain_index(&per_user) } else { None },
        users_starved: per_user.iter().filter(|&&c| c == 0).count(),
        unanswered_wait_max_ms: total.unanswered_age_us as f64 / 1000.0,
        phases: phase_summaries(&cfg.schedule, &total.seconds),
        timeseries,
        ticks,
        cdf: cdf(&total.ok, 200),
        by_class: matches!(cfg.requests, RequestMix::FileSet(_)).then(|| {
            (0..4)
                .map(|c| ClassCount {
                    class: c,
                    completed: total.by_class[c],
                })
                .collect()
        }),
    }
}

/// The `q` quantile of `us` (sorted here) in ms, nearest rank; 0 when empty.
fn exact_quantile_ms(us: &mut [u64], q: f64) -> f64 {
    if us.is_empty() {
        return 0.0;
    }
    us.sort_unstable();
    let rank = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len());
    us[rank - 1] as f64 / 1000.0
}

/// Per-phase totals: phase `i` covers the seconds from its start (rounded down) to the
/// next phase's start; the last phase also takes the drain.
fn phase_summaries(schedule: &Schedule, seconds: &[Second]) -> Vec<PhaseSummary> {
    let n = schedule.phases().len();
    let mut out = Vec::with_capacity(n);
    let mut start = Duration::ZERO;
    for (i, p) in schedule.phases().iter().enumerate() {
        let end = start + p.duration;
        let from = start.as_secs() as usize;
        let to = if i + 1 == n {
            seconds.len().max(from)
        } else {
            end.as_secs() as usize
        };
        let mut hist = rt_histogram(2);
        let (mut completed, mut within, mut rejected, mut errors) = (0, 0, 0, 0);
        for s in seconds.iter().take(to).skip(from) {
            completed += s.completed;
            within += s.within;
            rejected += s.rejected;
            errors += s.errors;
            let _ = hist.add(&s.hist);
        }
        out.push(PhaseSummary {
            start_s: from as u64,
            end_s: to as u64,
            level: p.level,
            completed,
            within_target: within,
            rejected,
            errors,
            rt_p90_ms: quantile_ms(&hist, 0.9),
            rt_max_ms: if hist.is_empty() {
                0.0
            } else {
                hist.max() as f64 / 1000.0
            },
        });
        start = end;
    }
    out
}
