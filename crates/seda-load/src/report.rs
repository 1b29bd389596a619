//! The result of a load run: totals, response-time statistics, time series per second
//! and per 100 ms, and the response-time CDF. Serialises to the JSON of `seda load
//! http --json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::LoadError;
use crate::metrics::CdfPoint;

/// One second of a run (by completion time).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct TimePoint {
    /// Seconds since the start; this point covers [t, t + 1).
    pub t: u64,
    /// Scheduled level during this second: users (closed loop) or requests/s (open loop).
    pub level: f64,
    /// Requests completed with a 2xx/3xx response.
    pub completed: u64,
    /// Of those, completed within the run's response-time target (0 without one).
    #[serde(default)]
    pub within_target: u64,
    /// Requests answered 503.
    pub rejected: u64,
    /// Requests that failed (connection, protocol, timeout, other status).
    pub errors: u64,
    /// 90th percentile response time of the completed requests, ms (0 if none).
    pub rt_p90_ms: f64,
    /// Mean response time of the completed requests, ms (0 if none).
    pub rt_mean_ms: f64,
    /// Received throughput, Mbit/s.
    pub mbps: f64,
}

/// A tenth of a second of a run (by completion time): the finer series of
/// [`LoadReport::ticks`], for what happens within the first second of a spike.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct Tick {
    /// Milliseconds since the start; this point covers [t_ms, t_ms + 100).
    pub t_ms: u64,
    /// Requests completed with a 2xx/3xx response.
    pub completed: u64,
    /// Requests answered 503.
    pub rejected: u64,
    /// Requests that failed.
    pub errors: u64,
    /// 90th percentile response time of the completed requests, ms (0 if none;
    /// exact, from every completion of the tenth).
    pub rt_p90_ms: f64,
}

/// Totals of one phase of the schedule (by completion time, whole seconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct PhaseSummary {
    /// First second of the phase.
    pub start_s: u64,
    /// Second after its last (the last phase runs to the end of the drain).
    pub end_s: u64,
    /// Scheduled level.
    pub level: f64,
    /// Requests completed 2xx/3xx.
    pub completed: u64,
    /// Of those, completed within the response-time target (0 without one).
    pub within_target: u64,
    /// Requests answered 503.
    pub rejected: u64,
    /// Requests failed.
    pub errors: u64,
    /// 90th percentile response time of the completed requests, ms (0 if none).
    pub rt_p90_ms: f64,
    /// Largest response time of the completed requests, ms (0 if none).
    pub rt_max_ms: f64,
}

/// Completions per SPECweb99 class (file-set loads only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct ClassCount {
    /// Class 0..4.
    pub class: usize,
    /// Completed requests for files of this class.
    pub completed: u64,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct LoadReport {
    /// The configuration, echoed.
    pub config: serde_json::Value,
    /// Requests started (closed loop) or arrived (open loop).
    pub issued: u64,
    /// Requests answered 2xx/3xx.
    pub completed: u64,
    /// Requests failed: connection or protocol error, timeout, unfinished at the end
    /// of the drain, or a status other than 2xx/3xx/503. `completed + errors +
    /// rejected == issued`.
    pub errors: u64,
    /// Requests answered 503 Service Unavailable.
    pub rejected: u64,
    /// Errors by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Responses by status code.
    pub status_counts: BTreeMap<u16, u64>,
    /// Wall time from start to the last completion or the end of the drain, seconds.
    pub elapsed_s: f64,
    /// Bytes received (heads and bodies).
    pub bytes: u64,
    /// TCP connections opened.
    pub connections: u64,
    /// Completed requests per second of `elapsed_s`.
    pub throughput_rps: f64,
    /// Received Mbit/s over `elapsed_s`.
    pub throughput_mbps: f64,
    /// Response time of completed requests, ms.
    pub rt_mean_ms: f64,
    /// Median, ms.
    pub rt_p50_ms: f64,
    /// 90th percentile, ms.
    pub rt_p90_ms: f64,
    /// 99th percentile, ms.
    pub rt_p99_ms: f64,
    /// Largest, ms.
    pub rt_max_ms: f64,
    /// Smallest, ms.
    pub rt_min_ms: f64,
    /// Mean response time of rejected (503) requests, ms.
    pub rejected_rt_mean_ms: f64,
    /// Users that took part (closed loop), 0 for an open loop.
    pub users: usize,
    /// Jain's index over per-user completions (closed loop); null for an open loop.
    pub fairness: Option<f64>,
    /// Users that completed no request at all (closed loop).
    #[serde(default)]
    pub users_starved: usize,
    /// Longest time a request waited without any answer before it was given up
    /// (timeout) or the run ended (unfinished), ms: a lower bound on response times
    /// that `rt_max_ms`, which covers completed requests only, cannot show.
    #[serde(default)]
    pub unanswered_wait_max_ms: f64,
    /// Per-phase totals, one per phase of the schedule.
    #[serde(default)]
    pub phases: Vec<PhaseSummary>,
    /// Per-second series.
    pub timeseries: Vec<TimePoint>,
    /// The same at 100 ms resolution (completed, rejected, errors, p90).
    #[serde(default)]
    pub ticks: Vec<Tick>,
    /// Response-time CDF of completed requests (log-spaced points).
    pub cdf: Vec<CdfPoint>,
    /// Completions per class (file-set loads only).
    pub by_class: Option<Vec<ClassCount>>,
}

impl LoadReport {
    /// Pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Every field is a plain number, string, map with string-like keys or list.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Parse the JSON of [`LoadReport::to_json`].
    pub fn from_json(text: &str) -> Result<LoadReport, LoadError> {
        serde_json::from_str(text).map_err(LoadError::json("not a load report"))
    }

    /// A few lines for a terminal.
    pub fn summary(&self) -> String {
        let fairness = self.fairness.map_or("-".to_string(), |f| format!("{f:.3}"));
        let mut s = format!(
            "requests: {} issued, {} completed, {} rejected (503), {} errors in {:.1} s over {} connections\n\
             throughput: {:.1} req/s, {:.2} Mbit/s\n\
             response time (ms): mean {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}\n\
             fairness (Jain, per user): {fairness}",
            self.issued,
            self.completed,
            self.rejected,
            self.errors,
            self.elapsed_s,
            self.connections,
            self.throughput_rps,
            self.throughput_mbps,
            self.rt_mean_ms,
            self.rt_p50_ms,
            self.rt_p90_ms,
            self.rt_p99_ms,
            self.rt_max_ms,
        );
        if !self.errors_by_kind.is_empty() {
            let kinds: Vec<String> = self
                .errors_by_kind
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            s.push_str(&format!("\nerrors: {}", kinds.join(", ")));
        }
        s
    }
}
