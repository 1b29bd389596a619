//! What `seda experiment scale-out` measured, run by run and replica by replica. A
//! leaf: the runner and the fleet write it, the outputs read it.

use std::net::SocketAddr;

use seda_load::report::LoadReport;
use serde::Serialize;

use super::config::*;
use crate::harness::haproxy::process::HaproxySample;
use crate::harness::stats::StatsLog;
use crate::overload::metrics::WindowMetrics;

/// One replica's side of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaResult {
    /// HAProxy's name for it (`r1`, ...).
    pub name: String,
    /// Its service address.
    pub addr: SocketAddr,
    /// Its agent-check address.
    pub agent: SocketAddr,
    /// `--bottleneck-ms`.
    pub bottleneck_ms: f64,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Why pinning failed, if it did.
    pub pin_error: Option<String>,
    /// The calibration line it printed.
    pub calibration: Option<String>,
    /// Its bottleneck stage's stats, about once a second.
    pub stats: StatsLog,
    /// CPU seconds it used during the load.
    pub cpu_s: f64,
    /// Seconds after the start of the load it was killed.
    pub killed_at: Option<f64>,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The run.
    pub spec: RunSpec,
    /// The judged window's figures.
    pub window: Option<WindowMetrics>,
    /// Figures of every phase.
    pub phases: Vec<WindowMetrics>,
    /// The load generator's report (per-second series, CDF).
    pub report: LoadReport,
    /// The replicas.
    pub replicas: Vec<ReplicaResult>,
    /// HAProxy's statistics, about once a second.
    pub haproxy: Vec<HaproxySample>,
    /// HAProxy's CPU seconds during the load.
    pub haproxy_cpu_s: f64,
    /// Wall time of the load, seconds.
    pub wall_s: f64,
}

impl RunResult {
    /// Work each replica's bottleneck finished during seconds `from..to` (from the
    /// replicas' stats), in replica order.
    pub fn processed(&self, from: f64, to: f64) -> Vec<u64> {
        self.replicas
            .iter()
            .map(|r| {
                let at = |t: f64| {
                    r.stats
                        .samples
                        .iter()
                        .filter(|s| s.t <= t)
                        .filter_map(|s| s.processed)
                        .next_back()
                        .unwrap_or(0)
                };
                let first = r
                    .stats
                    .samples
                    .iter()
                    .find(|s| s.t >= from)
                    .and_then(|s| s.processed)
                    .unwrap_or(0);
                at(to).saturating_sub(first.min(at(to)))
            })
            .collect()
    }

    /// Requests HAProxy retried and redispatched in the whole run (backend totals).
    pub fn retries(&self) -> (u64, u64) {
        self.haproxy
            .last()
            .and_then(|s| s.rows.iter().find(|r| r.name == "BACKEND"))
            .map_or((0, 0), |r| (r.retries, r.redispatches))
    }
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleOutResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine and settings.
    pub setup: serde_json::Value,
    /// Every run measured.
    pub runs: Vec<RunResult>,
    /// Runs that could not be measured, with the reason.
    pub failed: Vec<(String, String)>,
}

impl ScaleOutResults {
    /// The run with this id.
    pub fn run(&self, id: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.spec.id == id)
    }
}
