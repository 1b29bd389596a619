//! What `seda experiment overload` runs: its settings ([`OverloadConfig`]), the
//! scenarios and the specification of each run. A leaf: the plan, the runner and the
//! outputs read it.

use std::path::PathBuf;
use std::time::Duration;

use crate::ExperimentError;
use seda_load::schedule::Schedule;
use serde::Serialize;

/// The request header that carries a user's class.
pub const CLASS_HEADER: &str = "X-Class";

/// One scenario of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// The capacity: a staircase of users without control.
    Knee,
    /// CPU per refusal.
    Refusal,
    /// SEDA Fig. 13.
    Fig13,
    /// USITS Fig. 10.
    Spike,
    /// USITS Figs. 12-13.
    Degrade,
    /// USITS Figs. 14-15.
    Classes,
    /// Every admission policy on the spike.
    Policies,
}

impl Scenario {
    /// All, in run order.
    pub const ALL: [Scenario; 7] = [
        Scenario::Knee,
        Scenario::Refusal,
        Scenario::Fig13,
        Scenario::Spike,
        Scenario::Degrade,
        Scenario::Classes,
        Scenario::Policies,
    ];

    /// Name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Knee => "knee",
            Scenario::Refusal => "refusal",
            Scenario::Fig13 => "fig13",
            Scenario::Spike => "spike",
            Scenario::Degrade => "degrade",
            Scenario::Classes => "classes",
            Scenario::Policies => "policies",
        }
    }

    /// Title in the table.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::Knee => "Capacity: the knee of the load curve (no control)",
            Scenario::Refusal => "What a refusal costs the server",
            Scenario::Fig13 => "1. Many users on the bottleneck (SEDA SOSP'01 Fig. 13)",
            Scenario::Spike => "2. A massive load spike (USITS'03 Fig. 10)",
            Scenario::Degrade => "3. Service degradation (USITS'03 Figs. 12-13)",
            Scenario::Classes => "4. Two classes of users (USITS'03 Figs. 14-15)",
            Scenario::Policies => "5. Admission policies side by side on the spike",
        }
    }

    /// Short label for chart titles.
    pub fn short(self) -> &'static str {
        match self {
            Scenario::Knee => "capacity",
            Scenario::Refusal => "refusal cost",
            Scenario::Fig13 => "SEDA Fig. 13",
            Scenario::Spike => "USITS Fig. 10",
            Scenario::Degrade => "USITS Figs. 12-13",
            Scenario::Classes => "USITS Figs. 14-15",
            Scenario::Policies => "policies on the spike",
        }
    }

    /// What `seda experiment overload` runs by default.
    pub const DEFAULT: [Scenario; 4] = [
        Scenario::Knee,
        Scenario::Refusal,
        Scenario::Policies,
        Scenario::Classes,
    ];

    /// Parse a name of [`Scenario::name`].
    pub fn parse(name: &str) -> Result<Scenario, ExperimentError> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name.trim())
            .ok_or_else(|| {
                ExperimentError::config(format!(
                    "unknown scenario {name:?} (known: knee, refusal, fig13, spike, degrade, classes, policies)"
                ))
            })
    }
}

/// Settings of the whole experiment.
#[derive(Debug, Clone)]
pub struct OverloadConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary whose `serve` is measured.
    pub seda: PathBuf,
    /// Scenarios to run, in order.
    pub scenarios: Vec<Scenario>,
    /// CPU work per bottleneck request at full quality, ms (`--bottleneck-ms`).
    pub bottleneck_ms: f64,
    /// Checksum passes of that work (`--bottleneck-passes`), the same for every server
    /// of the experiment; `None`: [`run`] calibrates once before the first run.
    pub bottleneck_passes: Option<u64>,
    /// 90th-percentile response-time target of the controllers, ms.
    pub target_ms: f64,
    /// Users of scenario 1.
    pub fig13_users: u64,
    /// Length of each scenario-1 run.
    pub fig13_duration: Duration,
    /// Users before and after the spike.
    pub base_users: u64,
    /// Users during the spike.
    pub spike_users: u64,
    /// Users of the low class in scenario `classes`.
    pub class_users: u64,
    /// Users of the high class in scenario `classes` (during the middle phase).
    pub high_users: u64,
    /// Runs of each configuration.
    pub repeats: usize,
    /// Only the runs with these ids (`scenario/policy`); empty: all of the scenarios.
    pub only: Vec<String>,
    /// Users of each step of scenario `knee`.
    pub knee_users: Vec<u64>,
    /// Length of each step of scenario `knee`.
    pub knee_step: Duration,
    /// Users of scenario `refusal`.
    pub refusal_users: u64,
    /// Warm-up and measured phase of scenario `refusal`.
    pub refusal_phases: [Duration; 2],
    /// Before, during and after the spike (scenario 4: low class alone, both, low alone).
    pub phases: [Duration; 3],
    /// Think time between a response and the next request.
    pub think: Duration,
    /// Wait after a 503 or a failed request instead of the think time.
    pub retry_wait: Duration,
    /// Requests per connection before the client closes it.
    pub reqs_per_conn: u32,
    /// `--max-connections` of the connection-limit baseline.
    pub max_connections: usize,
    /// `--queue-threshold` of the fixed queue-threshold policy.
    pub queue_threshold: usize,
    /// A request running longer fails as a timeout.
    pub timeout: Duration,
    /// After the schedule, how long requests still running may finish.
    pub drain: Duration,
    /// Load-generator threads.
    pub threads: usize,
    /// Seed of the load.
    pub seed: u64,
}

impl OverloadConfig {
    /// The default experiment (about 22 minutes here): scenarios `knee`, `refusal`,
    /// `policies` and `classes`, 3 repeats; 40 ms bottleneck, 1 s target, 3 -> 1,000
    /// -> 3 users over 10 s / 20 s / 10 s.
    pub fn new(out: PathBuf, seda: PathBuf) -> OverloadConfig {
        OverloadConfig {
            out,
            seda,
            scenarios: Scenario::DEFAULT.to_vec(),
            bottleneck_ms: 40.0,
            bottleneck_passes: None,
            target_ms: 1000.0,
            fig13_users: 1024,
            fig13_duration: Duration::from_secs(30),
            base_users: 3,
            spike_users: 1000,
            class_users: 128,
            high_users: 32,
            repeats: 3,
            only: Vec::new(),
            knee_users: vec![1, 2, 4, 8, 16, 32, 64, 128],
            knee_step: Duration::from_secs(3),
            refusal_users: 64,
            refusal_phases: [Duration::from_secs(2), Duration::from_secs(8)],
            phases: [
                Duration::from_secs(10),
                Duration::from_secs(20),
                Duration::from_secs(10),
            ],
            think: Duration::from_millis(20),
            retry_wait: Duration::from_secs(5),
            reqs_per_conn: 5,
            max_connections: 128,
            queue_threshold: 100,
            timeout: Duration::from_secs(60),
            drain: Duration::from_secs(5),
            threads: 1,
            seed: 1,
        }
    }

    /// A small version for tests and smoke runs: a 10 ms bottleneck, 200 ms target,
    /// a fifth of the users, 3 s / 6 s / 3 s phases, 1 s retry wait.
    pub fn quick(mut self) -> OverloadConfig {
        self.bottleneck_ms = 10.0;
        self.target_ms = 200.0;
        self.fig13_users = 200;
        self.fig13_duration = Duration::from_secs(6);
        self.spike_users = 200;
        self.class_users = 32;
        self.high_users = 8;
        self.repeats = 1;
        self.knee_users = vec![1, 4, 16];
        self.knee_step = Duration::from_secs(2);
        self.refusal_phases = [Duration::from_secs(1), Duration::from_secs(3)];
        self.phases = [
            Duration::from_secs(3),
            Duration::from_secs(6),
            Duration::from_secs(3),
        ];
        self.retry_wait = Duration::from_secs(1);
        self.drain = Duration::from_secs(3);
        self.timeout = Duration::from_secs(10);
        self
    }

    /// Multiply every phase length by `f` (> 0), keeping whole seconds (>= 1 s).
    pub fn scaled(mut self, f: f64) -> OverloadConfig {
        let s = |d: Duration| Duration::from_secs(((d.as_secs_f64() * f).round() as u64).max(1));
        self.phases = self.phases.map(s);
        self.fig13_duration = s(self.fig13_duration);
        self.knee_step = s(self.knee_step);
        self.refusal_phases = self.refusal_phases.map(s);
        self
    }

    pub(super) fn check(&self) -> Result<(), ExperimentError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.bottleneck_ms) || !pos(self.target_ms) {
            return Err(ExperimentError::config(
                "--bottleneck-ms and --target-ms must be positive",
            ));
        }
        if self.bottleneck_passes == Some(0) {
            return Err(ExperimentError::config(
                "--bottleneck-passes must be at least 1",
            ));
        }
        if self.scenarios.is_empty() {
            return Err(ExperimentError::config("no scenario to run"));
        }
        if self.fig13_users == 0
            || self.spike_users == 0
            || self.class_users == 0
            || self.high_users == 0
            || self.refusal_users == 0
            || self.knee_users.contains(&0)
        {
            return Err(ExperimentError::config("user counts must be positive"));
        }
        if self.repeats == 0 || self.knee_users.is_empty() {
            return Err(ExperimentError::config(
                "need at least one repeat and one knee step",
            ));
        }
        if self.phases.iter().any(|p| p.is_zero()) || self.fig13_duration.is_zero() {
            return Err(ExperimentError::config("phases must last at least 1 s"));
        }
        Ok(())
    }
}

/// A group of users with one schedule and class.
#[derive(Debug, Clone, Serialize)]
pub struct UserGroup {
    /// Name in tables: `all`, `low`, `high`.
    pub name: String,
    /// Class sent in [`CLASS_HEADER`], if any.
    pub class: Option<u8>,
    /// Users over time.
    pub schedule: Schedule,
}

/// One run: a server configuration and the users that load it.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    /// Unique id, `scenario/policy`.
    pub id: String,
    /// The scenario that defines it.
    pub scenario: Scenario,
    /// What is being compared, e.g. `response-time`.
    pub policy: String,
    /// Flags of `seda serve` besides `--listen`, `--root`, `--cache-mb`.
    pub serve_args: Vec<String>,
    /// User groups, run in parallel.
    pub groups: Vec<UserGroup>,
    /// The phase the run is judged by (the spike; the high class's visit), or `None`
    /// for the whole run.
    pub window_phase: Option<usize>,
    /// Which repeat of the run this is (0-based).
    pub repeat: u32,
    /// What the clients talk to.
    pub front: Front,
    /// Wait after a 503 or failure, if not the experiment's.
    pub retry_wait: Option<Duration>,
    /// A `seda serve --config` file's text, if any.
    pub config: Option<String>,
}

/// What stands between the clients and the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Front {
    /// Clients talk to `seda serve` directly.
    Seda,
    /// nginx proxies to `seda serve` without admission control and sheds load with
    /// `limit_req` at the capacity measured at the knee, a burst of one target's
    /// worth of requests, `limit_req_status 503`: an operator's setup today.
    NginxLimitReq,
}

impl RunSpec {
    /// Longest schedule of its groups.
    pub fn length(&self) -> Duration {
        self.groups
            .iter()
            .map(|g| g.schedule.total())
            .max()
            .unwrap_or_default()
    }
}
