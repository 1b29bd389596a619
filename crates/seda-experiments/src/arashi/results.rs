//! What a run of `seda experiment arashi` is ([`RunSpec`]) and what it measured
//! ([`RunResult`], [`ExperimentResults`]). A leaf: the runner and the outputs both
//! read it.

use std::time::Duration;

use seda_arashi::ControlScope;
use seda_http::OverloadControl;
use seda_load::Schedule;
use seda_load::arashi::ArashiReport;
use serde::{Deserialize, Serialize};

/// How the request stages are controlled in a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Control {
    /// No admission control.
    None,
    /// A response-time controller per stage with this p90 target, ms.
    PerStage(f64),
    /// One response-time controller for all stages, ms.
    Single(f64),
    /// Per stage, with two classes from the `X-Class` header and this target for
    /// both (the multiclass controller: low class cut first).
    Classes(f64),
}

impl Control {
    /// Label in tables and charts.
    pub fn label(&self) -> String {
        match self {
            Control::None => "no control".into(),
            Control::PerStage(t) => format!("per-stage control ({t} ms)"),
            Control::Single(t) => format!("single controller ({t} ms)"),
            Control::Classes(t) => format!("per-stage, 2 classes ({t} ms)"),
        }
    }

    pub(super) fn overload(&self) -> (OverloadControl, ControlScope) {
        let (oc, scope) = self.overload_of_scope();
        let t = oc.rt_target.unwrap_or(Duration::from_secs(1));
        // The paper's controller (USITS'03 3.2), not the server's default.
        let admission = oc.rt_target.map(|_| seda_http::Admission::ResponseTime);
        (
            oc.with_admission(admission)
                .with_response_time(seda_arashi::controller_config(t)),
            scope,
        )
    }

    pub(super) fn overload_of_scope(&self) -> (OverloadControl, ControlScope) {
        let target = |ms: f64| Some(Duration::from_secs_f64(ms / 1000.0));
        match self {
            Control::None => (OverloadControl::default(), ControlScope::PerStage),
            Control::PerStage(t) => (
                OverloadControl::default().with_rt_target(target(*t)),
                ControlScope::PerStage,
            ),
            Control::Single(t) => (
                OverloadControl::default().with_rt_target(target(*t)),
                ControlScope::Single,
            ),
            Control::Classes(t) => {
                let mut oc = OverloadControl::default()
                    .with_rt_target(target(*t))
                    .with_class_targets(vec![Duration::from_secs_f64(t / 1000.0); 2]);
                oc.classes.header = Some(CLASS_HEADER.into());
                (oc, ControlScope::PerStage)
            }
        }
    }
}

/// The header that carries a user's class.
pub const CLASS_HEADER: &str = "X-Class";

/// One run of the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Unique id, e.g. `fig8-256-control`.
    pub id: String,
    /// Figure it belongs to: `fig8`, `fig10`, `fig11`, `fig14`, `fig15`.
    pub figure: String,
    /// Control of the request stages.
    pub control: Control,
    /// User groups: (schedule as `DURATION@USERS,...`, class).
    pub groups: Vec<(String, Option<u8>)>,
    /// Warm-up left out of the totals, s.
    pub warmup_s: f64,
}

impl RunSpec {
    pub(super) fn length(&self) -> Duration {
        self.groups
            .iter()
            .filter_map(|(s, _)| Schedule::parse(s).ok())
            .map(|s| s.total())
            .max()
            .unwrap_or_default()
    }
}

/// The watched stage's controller, once a second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageSample {
    /// Seconds since the run's start.
    pub t: f64,
    /// Token-bucket rate, requests/s (rate-based control only).
    pub rate: Option<f64>,
    /// The controller's smoothed p90, ms.
    pub controller_p90_ms: Option<f64>,
    /// Queue length.
    pub queue_len: usize,
}

/// One run's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// What ran.
    pub spec: RunSpec,
    /// What the users measured.
    pub report: ArashiReport,
    /// The watched stage over time.
    pub stage: Vec<StageSample>,
    /// Rejections counted by each request stage (server side), by type.
    pub server_rejected: Vec<(String, u64)>,
}

/// Everything the experiment measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentResults {
    /// `arashi`.
    pub experiment: String,
    /// Date (UTC).
    pub date: String,
    /// Machine.
    pub machine: String,
    /// Load average at the start (1, 5, 15 min).
    pub load_at_start: String,
    /// The corpus and the seeding.
    pub store: String,
    /// Targets, ms: steady and spike.
    pub targets_ms: (f64, f64),
    /// Wall time, s.
    pub elapsed_s: f64,
    /// The runs.
    pub runs: Vec<RunResult>,
}

impl ExperimentResults {
    /// The run with this id.
    pub fn run(&self, id: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.spec.id == id)
    }
}
