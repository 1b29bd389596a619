//! What `seda experiment overload` measured, run by run. A leaf: the runner writes
//! it, the summary and the outputs read it.

use seda_load::report::LoadReport;
use serde::Serialize;

use super::config::*;
use super::metrics::WindowMetrics;
use crate::harness::stats::StatsLog;

/// One group's results.
#[derive(Debug, Clone, Serialize)]
pub struct GroupResult {
    /// Group name.
    pub name: String,
    /// Class header sent.
    pub class: Option<u8>,
    /// Figures of the run's window (the spike) or of the whole run.
    pub window: Option<WindowMetrics>,
    /// Figures of every phase.
    pub phases: Vec<WindowMetrics>,
    /// The load generator's report, with its per-second series and CDF.
    pub report: LoadReport,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The run.
    pub spec: RunSpec,
    /// The server's calibration line (`bottleneck: N ms calibrated to K iterations`).
    pub calibration: Option<String>,
    /// Per group.
    pub groups: Vec<GroupResult>,
    /// The bottleneck stage's stats, about once a second.
    pub stats: StatsLog,
    /// Server CPU (user + system) during the run, seconds (nginx's included).
    pub server_cpu_s: f64,
    /// Cumulative server CPU seconds sampled during the load, as (t, s).
    pub cpu: Vec<(f64, f64)>,
    /// Wall time of the load, seconds.
    pub wall_s: f64,
}

impl RunResult {
    /// Mean and minimum quality reported during seconds `from..to`.
    pub fn quality(&self, from: f64, to: f64) -> Option<(f64, f64)> {
        let q: Vec<f64> = self
            .stats
            .samples
            .iter()
            .filter(|s| s.t >= from && s.t < to)
            .filter_map(|s| s.quality)
            .collect();
        if q.is_empty() {
            return None;
        }
        let mean = q.iter().sum::<f64>() / q.len() as f64;
        Some((mean, q.iter().copied().fold(f64::INFINITY, f64::min)))
    }
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine and settings.
    pub setup: serde_json::Value,
    /// Scenarios and the ids of their runs.
    pub scenarios: Vec<(Scenario, Vec<String>)>,
    /// Every run measured.
    pub runs: Vec<RunResult>,
    /// Runs that could not be measured, with the reason.
    pub failed: Vec<(String, String)>,
}

impl OverloadResults {
    /// The first repeat of the run with this id.
    pub fn run(&self, id: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.spec.id == id)
    }

    /// Every repeat of the run with this id.
    pub fn repeats(&self, id: &str) -> Vec<&RunResult> {
        self.runs.iter().filter(|r| r.spec.id == id).collect()
    }
}
