//! The result of a `seda load arashi` run: per request type, per class, per second.
//! Serialises to the JSON of `--json` (the experiment reads it back).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::request::RequestType;
use super::user::Outcome;
use crate::error::LoadError;
use crate::metrics::{quantile_ms, record_us, rt_histogram};

/// One finished request, as recorded by a user thread.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Completion time since the start, ms.
    pub t_ms: u64,
    /// Request type.
    pub kind: RequestType,
    /// Class of the user's group.
    pub class: u8,
    /// Outcome.
    pub outcome: Outcome,
    /// Response time, us.
    pub rt_us: u64,
}

/// Counts and response times of a set of requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stats {
    /// Requests served.
    pub completed: u64,
    /// Requests answered 503.
    pub rejected: u64,
    /// Requests failed.
    pub errors: u64,
    /// `rejected / (completed + rejected + errors)`, 0 without requests.
    pub reject_rate: f64,
    /// Mean response time of served requests, ms.
    pub rt_mean_ms: f64,
    /// Median, ms.
    pub rt_p50_ms: f64,
    /// 90th percentile, ms (USITS'03's measure).
    pub rt_p90_ms: f64,
    /// 99th percentile, ms.
    pub rt_p99_ms: f64,
    /// Largest, ms.
    pub rt_max_ms: f64,
}

impl Stats {
    /// The statistics of `samples`.
    pub fn of<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Stats {
        let mut h = rt_histogram(3);
        let mut s = Stats::default();
        for x in samples {
            match x.outcome {
                Outcome::Completed => {
                    s.completed += 1;
                    record_us(&mut h, x.rt_us);
                }
                Outcome::Rejected => s.rejected += 1,
                Outcome::Error(_) => s.errors += 1,
            }
        }
        let n = s.completed + s.rejected + s.errors;
        if n > 0 {
            s.reject_rate = s.rejected as f64 / n as f64;
        }
        if !h.is_empty() {
            s.rt_mean_ms = h.mean() / 1000.0;
            s.rt_p50_ms = quantile_ms(&h, 0.5);
            s.rt_p90_ms = quantile_ms(&h, 0.9);
            s.rt_p99_ms = quantile_ms(&h, 0.99);
            s.rt_max_ms = h.max() as f64 / 1000.0;
        }
        s
    }
}

/// One second of the run (by completion time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Second {
    /// Seconds since the start; covers `[t, t + 1)`.
    pub t: u64,
    /// Users scheduled (all groups).
    pub users: f64,
    /// All requests.
    pub all: Stats,
    /// Per class (index = class; only classes that have users).
    pub classes: Vec<Stats>,
}

/// One phase of the schedules (between two consecutive phase boundaries of any
/// group), measured over its whole length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Phase {
    /// Start, s.
    pub start_s: f64,
    /// End, s.
    pub end_s: f64,
    /// Users scheduled (all groups).
    pub users: f64,
    /// All requests completed in the phase.
    pub all: Stats,
    /// Per class.
    pub classes: Vec<Stats>,
}

/// Statistics of one request type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TypeStats {
    /// The type's name (`login`, `show`, ...).
    pub kind: String,
    /// Its statistics.
    pub stats: Stats,
}

/// The shape of a run, for [`ArashiReport::build`].
#[derive(Clone, Copy)]
pub struct RunShape<'a> {
    /// Length of the schedule, s.
    pub duration_s: f64,
    /// Warm-up left out of the totals, s.
    pub warmup_s: f64,
    /// Number of classes (highest class + 1).
    pub classes: usize,
    /// Users scheduled at second `t`.
    pub users_at: &'a dyn Fn(u64) -> f64,
    /// Ends of the schedules' phases, s.
    pub boundaries_s: &'a [f64],
}

impl std::fmt::Debug for RunShape<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunShape")
            .field("duration_s", &self.duration_s)
            .field("classes", &self.classes)
            .finish_non_exhaustive()
    }
}

/// Everything a run measured (after the warm-up, except the time series).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ArashiReport {
    /// The configuration, echoed.
    pub config: serde_json::Value,
    /// Seconds of the run (schedule length).
    pub duration_s: f64,
    /// Seconds at the start left out of `all`, `by_type` and `by_class`.
    pub warmup_s: f64,
    /// All request types together.
    pub all: Stats,
    /// Per request type, in [`RequestType::ALL`] order.
    pub by_type: Vec<TypeStats>,
    /// Per class (index = class).
    pub by_class: Vec<Stats>,
    /// Errors by kind (whole run).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// TCP connections opened.
    pub connections: u64,
    /// Per phase of the schedules (whole run).
    pub phases: Vec<Phase>,
    /// Per-second series (whole run).
    pub timeseries: Vec<Second>,
}

impl ArashiReport {
    /// Builds the report from the samples of every user.
    pub fn build(
        config: serde_json::Value,
        samples: &[Sample],
        shape: &RunShape<'_>,
        connections: u64,
    ) -> ArashiReport {
        let RunShape {
            duration_s,
            warmup_s,
            classes,
            users_at,
            boundaries_s,
        } = *shape;
        let warm_ms = (warmup_s * 1000.0) as u64;
        let measured: Vec<&Sample> = samples.iter().filter(|s| s.t_ms >= warm_ms).collect();
        let by_type = RequestType::ALL
            .iter()
            .map(|t| TypeStats {
                kind: t.name().to_owned(),
                stats: Stats::of(measured.iter().copied().filter(|s| s.kind == *t)),
            })
            .collect();
        let by_class = (0..classes)
            .map(|c| {
                Stats::of(
                    measured
                        .iter()
                        .copied()
                        .filter(|s| usize::from(s.class) == c),
                )
            })
            .collect();
        let mut errors_by_kind = BTreeMap::new();
        for s in samples {
            if let Outcome::Error(k) = s.outcome {
                *errors_by_kind.entry(k.to_owned()).or_insert(0) += 1;
            }
        }
        let seconds = duration_s.ceil() as u64;
        let mut buckets: Vec<Vec<&Sample>> = vec![Vec::new(); seconds as usize + 1];
        for s in samples {
            let i = ((s.t_ms / 1000) as usize).min(seconds as usize);
            buckets[i].push(s);
        }
        let timeseries = buckets
            .iter()
            .enumerate()
            .map(|(t, b)| Second {
                t: t as u64,
                users: users_at(t as u64),
                all: Stats::of(b.iter().copied()),
                classes: (0..classes)
                    .map(|c| Stats::of(b.iter().copied().filter(|s| usize::from(s.class) == c)))
                    .collect(),
            })
            .collect();
        let class_stats = |xs: &[&Sample]| -> Vec<Stats> {
            (0..classes)
                .map(|c| Stats::of(xs.iter().copied().filter(|s| usize::from(s.class) == c)))
                .collect()
        };
        let mut bounds: Vec<f64> = boundaries_s.to_vec();
        bounds.push(0.0);
        bounds.push(duration_s);
        bounds.sort_by(f64::total_cmp);
        bounds.dedup_by(|a, b| (*a - *b).abs() < 1e-6);
        let phases = bounds
            .windows(2)
            .map(|w| {
                let (a, b) = ((w[0] * 1000.0) as u64, (w[1] * 1000.0) as u64);
                // The last phase also holds requests that ended in the drain.
                let last = (w[1] - duration_s).abs() < 1e-6;
                let xs: Vec<&Sample> = samples
                    .iter()
                    .filter(|s| s.t_ms >= a && (s.t_ms < b || last))
                    .collect();
                Phase {
                    start_s: w[0],
                    end_s: w[1],
                    users: users_at(w[0] as u64),
                    all: Stats::of(xs.iter().copied()),
                    classes: class_stats(&xs),
                }
            })
            .collect();
        ArashiReport {
            config,
            duration_s,
            phases,
            warmup_s,
            all: Stats::of(measured.iter().copied()),
            by_type,
            by_class,
            errors_by_kind,
            connections,
            timeseries,
        }
    }

    /// The statistics of one type.
    pub fn of_type(&self, t: RequestType) -> Option<&Stats> {
        self.by_type
            .iter()
            .find(|s| s.kind == t.name())
            .map(|s| &s.stats)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report from its JSON.
    pub fn from_json(text: &str) -> Result<ArashiReport, LoadError> {
        serde_json::from_str(text).map_err(LoadError::json("bad report"))
    }

    /// A text table: one line per request type and the total.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{:<9} {:>9} {:>9} {:>7} {:>8} {:>10} {:>10}\n",
            "type", "completed", "rejected", "errors", "reject%", "p90 ms", "mean ms"
        );
        let line = |name: &str, s: &Stats| {
            format!(
                "{name:<9} {:>9} {:>9} {:>7} {:>7.1}% {:>10.1} {:>10.1}\n",
                s.completed,
                s.rejected,
                s.errors,
                s.reject_rate * 100.0,
                s.rt_p90_ms,
                s.rt_mean_ms
            )
        };
        for t in &self.by_type {
            out.push_str(&line(&t.kind, &t.stats));
        }
        out.push_str(&line("all", &self.all));
        if !self.errors_by_kind.is_empty() {
            let kinds: Vec<String> = self
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            out.push_str(&format!("errors: {}\n", kinds.join(", ")));
        }
        out
    }
}
