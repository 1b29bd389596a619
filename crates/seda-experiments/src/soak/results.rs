//! What `seda experiment soak` measured: its cycles, the counts of each kind of
//! client and the verdict. A leaf: the runner writes it, the outputs read it.

use std::collections::BTreeMap;

use seda_load::report::LoadReport;
use serde::Serialize;

use super::hostile::{Kind, Tally};
use super::sampler::ProcSample;

/// One cycle.
#[derive(Debug, Clone, Serialize)]
pub struct Cycle {
    /// Seconds since the start when the cycle began.
    pub start_s: f64,
    /// Seconds the spike took (its drain included).
    pub spike_s: f64,
    /// Seconds the hostile wave took.
    pub wave_s: f64,
    /// The server at the end of the calm phase.
    pub calm: Option<ProcSample>,
    /// The spike users' counts.
    pub spike: Counts,
    /// The wave's outcomes by kind.
    pub wave: BTreeMap<Kind, Tally>,
}

/// A load run's counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Requests issued.
    pub issued: u64,
    /// Answered 2xx/3xx.
    pub completed: u64,
    /// Refused with 503.
    pub rejected: u64,
    /// Neither.
    pub errors: u64,
    /// Errors by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
}

impl Counts {
    pub(super) fn of(r: &LoadReport) -> Counts {
        Counts {
            issued: r.issued,
            completed: r.completed,
            rejected: r.rejected,
            errors: r.errors,
            errors_by_kind: r.errors_by_kind.clone(),
        }
    }

    pub(super) fn merge(&mut self, o: &Counts) {
        self.issued += o.issued;
        self.completed += o.completed;
        self.rejected += o.rejected;
        self.errors += o.errors;
        for (k, v) in &o.errors_by_kind {
            *self.errors_by_kind.entry(k.clone()).or_default() += v;
        }
    }
}

/// The verdict and the figures it rests on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// RSS at the first sample, KiB.
    pub rss_start_kib: u64,
    /// Largest RSS, KiB.
    pub rss_peak_kib: u64,
    /// RSS at the last sample before the server stopped, KiB.
    pub rss_end_kib: u64,
    /// Descriptors at the first sample, the largest, and at the last calm sample.
    pub fds_start: u64,
    /// Largest number of descriptors.
    pub fds_peak: u64,
    /// Descriptors at the last calm sample.
    pub fds_end_calm: u64,
    /// Every request of a well-behaved client: users, canary, slow readers,
    /// pipelining floods, half-closes.
    pub well_behaved: Tally,
    /// Every exchange of the other hostile clients.
    pub hostile: Tally,
    /// Why the soak failed; empty if it passed.
    pub failures: Vec<String>,
}

/// Everything `soak.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct SoakResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine, settings, load averages.
    pub setup: serde_json::Value,
    /// The `seda serve` flags.
    pub serve_args: Vec<String>,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// The server, once a second.
    pub samples: Vec<ProcSample>,
    /// Every cycle.
    pub cycles: Vec<Cycle>,
    /// The base users (the whole run).
    pub base: Option<LoadReport>,
    /// The spike users, summed over the cycles.
    pub spikes: Counts,
    /// The canary's fetches.
    pub canary: Tally,
    /// The canary's slowest answer, ms.
    pub canary_max_ms: f64,
    /// Hostile outcomes by kind, summed over the cycles.
    pub hostile: BTreeMap<Kind, Tally>,
    /// The verdict.
    pub verdict: Verdict,
}

impl SoakResults {
    /// Whether the soak passed.
    pub fn passed(&self) -> bool {
        self.verdict.failures.is_empty()
    }
}
