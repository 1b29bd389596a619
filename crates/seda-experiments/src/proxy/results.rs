//! What a run of `seda experiment proxy` measured (`runs.json`).

use std::collections::BTreeMap;

use seda_load::report::{PhaseSummary, Tick, TimePoint};
use serde::{Deserialize, Serialize};

/// One run's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShapeMetrics {
    /// The backend's capacity during the overload phase, requests/s (the run's
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
    /// The client's per-second series (class 0's in a two-class run).
    pub series: Vec<TimePoint>,
    /// The same at 100 ms resolution.
    #[serde(default)]
    pub ticks: Vec<Tick>,
    /// The high class of a two-class run.
    #[serde(default)]
    pub high: Option<HighClass>,
}

/// The high class of a two-class run (`classes-Fx`), in the overload phase. In such a
/// run [`ShapeMetrics`]' served and errors count both classes, its p90 and p99 class
/// 0's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HighClass {
    /// Its requests per second (completed, refused or failed).
    pub offered_rps: f64,
    /// Of which served (2xx) per second.
    pub served_rps: f64,
    /// Refused or failed, of those offered (the target: <= 0.1).
    pub lost_fraction: f64,
    /// p90 of its served requests, ms.
    pub p90_ms: f64,
    /// Its 503s.
    pub refused: u64,
    /// Its errors in the whole run.
    pub errors: u64,
    /// Its per-second series.
    pub series: Vec<TimePoint>,
}

/// The backend saturated for longer than a knee step: what it delivers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sustained {
    /// Closed-loop users (two per worker).
    pub users: u64,
    /// Requests completed in each whole second but the first and the last.
    pub seconds: Vec<u64>,
    /// Their median, requests/s.
    pub rps: f64,
}

/// The backend's capacity measured right before a shape's runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CapacityCheck {
    /// The repeat (0-based) and the shape whose runs follow.
    pub repeat: usize,
    pub shape: String,
    /// The sustained step.
    pub sustained: Sustained,
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
    /// The backend's capacity, requests/s: the sustained step's median second
    /// (`sustained`), or in runs before it existed the knee's best step.
    pub capacity_rps: f64,
    /// Each knee step: (users, requests/s).
    pub knee: Vec<(u64, f64)>,
    /// The knee's best step, requests/s (the capacity of runs before 2026-11-27
    /// 07:00 UTC: a 3-5 s step's mean, which the backend did not sustain).
    #[serde(default)]
    pub knee_peak_rps: f64,
    /// The sustained step after the knee's.
    #[serde(default)]
    pub sustained: Option<Sustained>,
    /// The capacity at the time: the sustained step again right before each shape
    /// of each repeat (the first is `sustained`); each run's `capacity_rps` is its
    /// shape's. Empty in runs before 2026-11-27 10:00 UTC, which used `capacity_rps`
    /// for every run.
    #[serde(default)]
    pub capacity_checks: Vec<CapacityCheck>,
    /// The runs so far.
    pub runs: Vec<ProxyRun>,
    /// Runs that failed: (shape/front/repeat, why).
    pub failed: Vec<(String, String)>,
}
