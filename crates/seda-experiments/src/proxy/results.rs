//! What a run of `seda experiment proxy` measured (`runs.json`).

use std::collections::BTreeMap;

use seda_load::report::{PhaseSummary, TimePoint};
use serde::{Deserialize, Serialize};

/// One run's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShapeMetrics {
    /// The backend's capacity during the overload phase, requests/s (the knee's;
    /// half of it in `drop`).
    pub capacity_rps: f64,
    /// Served (2xx) per second in the overload phase.
    pub served_rps: f64,
    /// `served_rps` / `capacity_rps`.
    pub served_of_capacity: f64,
    /// p90 of the requests served in the overload phase, ms.
    pub p90_ms: f64,
    /// p99 of every request served in the run, ms.
    pub p99_ms: f64,
    /// 503s per second in the overload phase.
    pub refused_rps: f64,
    /// Errors (timeouts, resets, other statuses) in the whole run.
    pub errors: u64,
    /// Errors by kind.
    pub error_kinds: BTreeMap<String, u64>,
    /// Seconds from the overload phase's start until every second's p90 stays within
    /// 1.2x the target (None: never within the phase).
    pub recover_s: Option<u64>,
    /// The same for the last phase (after the spike, the workers' return).
    pub after_recover_s: Option<u64>,
}

/// One run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyRun {
    /// Shape name.
    pub shape: String,
    /// Front name.
    pub front: String,
    /// Repeat, from 0.
    pub repeat: usize,
    /// The front's configuration, in one line.
    pub front_config: String,
    /// Figures.
    pub metrics: ShapeMetrics,
    /// The client's per-phase totals.
    pub phases: Vec<PhaseSummary>,
    /// The client's per-second series.
    pub series: Vec<TimePoint>,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyResults {
    /// Always `proxy`.
    pub experiment: String,
    /// When it started (UTC).
    pub date: String,
    /// Machine, load average at start, the configuration.
    pub setup: serde_json::Value,
    /// The backend's capacity at the knee, requests/s.
    pub capacity_rps: f64,
    /// Each knee step: (users, requests/s).
    pub knee: Vec<(u64, f64)>,
    /// The runs so far.
    pub runs: Vec<ProxyRun>,
    /// Runs that failed: (shape/front/repeat, why).
    pub failed: Vec<(String, String)>,
}
