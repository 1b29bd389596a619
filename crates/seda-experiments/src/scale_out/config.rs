//! What `seda experiment scale-out` runs: its settings ([`ScaleOutConfig`]), the
//! scenarios, the proxy modes and the specification of each run. A leaf.

use std::path::PathBuf;
use std::time::Duration;

use crate::ExperimentError;
use seda_load::schedule::Schedule;
use serde::Serialize;

/// The backend's name in the generated configuration.
pub const BACKEND: &str = "seda_replicas";

/// One scenario of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Throughput against the number of replicas.
    Throughput,
    /// A spike with one replica slowed.
    Slowed,
    /// A spike with one replica killed.
    Killed,
}

impl Scenario {
    /// All, in run order.
    pub const ALL: [Scenario; 3] = [Scenario::Throughput, Scenario::Slowed, Scenario::Killed];

    /// Name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Slowed => "slowed",
            Scenario::Killed => "killed",
        }
    }

    /// Parse a name of [`Scenario::name`].
    pub fn parse(name: &str) -> Result<Scenario, ExperimentError> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name.trim())
            .ok_or_else(|| {
                ExperimentError::config(format!(
                    "unknown scenario {name:?} (known: throughput, slowed, killed)"
                ))
            })
    }
}

/// How HAProxy is set up in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyMode {
    /// No HAProxy: the users talk to the first replica.
    Direct,
    /// leastconn over the agents' weights, `retry-on conn-failure empty-response 503`,
    /// each retry on another replica.
    Agent,
    /// roundrobin, no agent checks, HAProxy's default `retry-on conn-failure`.
    Plain,
}

/// One replica of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaSpec {
    /// `--bottleneck-ms` of this replica.
    pub bottleneck_ms: f64,
    /// Pin it to this CPU.
    pub cpu: Option<usize>,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    /// Unique id, `scenario/label`.
    pub id: String,
    /// The scenario that defines it.
    pub scenario: Scenario,
    /// What is compared, e.g. `haproxy-2`, `agent`.
    pub label: String,
    /// How HAProxy is set up.
    pub proxy: ProxyMode,
    /// The replicas.
    pub replicas: Vec<ReplicaSpec>,
    /// Users over time.
    pub schedule: Schedule,
    /// The phase the run is judged by.
    pub window_phase: usize,
    /// Kill replica `.0` (index) at `.1` seconds after the load starts.
    pub kill: Option<(usize, f64)>,
}

impl RunSpec {
    /// Replicas behind HAProxy (1 for a direct run).
    pub fn n(&self) -> usize {
        self.replicas.len()
    }
}

/// Settings of the whole experiment.
#[derive(Debug, Clone)]
pub struct ScaleOutConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary whose `serve` runs the replicas.
    pub seda: PathBuf,
    /// The haproxy binary.
    pub haproxy: PathBuf,
    /// Scenarios to run, in order.
    pub scenarios: Vec<Scenario>,
    /// Replica counts of scenario `throughput`.
    pub replica_counts: Vec<usize>,
    /// CPU work per request of a replica, ms.
    pub bottleneck_ms: f64,
    /// The slowed replica's work is this many times larger.
    pub slow_factor: f64,
    /// p90 target of every replica's controller, ms.
    pub target_ms: f64,
    /// Users of scenario `throughput`.
    pub users: u64,
    /// Unmeasured warm-up and measured phase of scenario `throughput`.
    pub throughput_phases: [Duration; 2],
    /// Users before and after the spike.
    pub base_users: u64,
    /// Users during the spike.
    pub spike_users: u64,
    /// Before, during and after the spike.
    pub phases: [Duration; 3],
    /// Think time between a response and the next request.
    pub think: Duration,
    /// Wait after a 503 or a failed request instead of the think time.
    pub retry_wait: Duration,
    /// Requests per connection before the client closes it.
    pub reqs_per_conn: u32,
    /// A request running longer fails as a timeout.
    pub timeout: Duration,
    /// After the schedule, how long requests still running may finish.
    pub drain: Duration,
    /// Pin replica *i* to CPU *i* mod cores in scenario `throughput`.
    pub pin: bool,
    /// Load-generator threads.
    pub threads: usize,
    /// Seed of the load.
    pub seed: u64,
    /// Checksum passes of a `bottleneck_ms` request (`None`: calibrated at the start).
    pub passes: Option<u64>,
}

impl ScaleOutConfig {
    /// The default experiment (about 6 minutes): a 10 ms bottleneck, a 200 ms target
    /// (the overload experiment's quick settings), 1-3 replicas under 60 users for
    /// 10 + 20 s (3 to 6 times what they can serve: saturated without drowning in
    /// refusals), spikes of 4 -> 300 -> 4 users over 10 / 30 / 10 s, the slowed
    /// replica 4x slower.
    pub fn new(out: PathBuf, seda: PathBuf, haproxy: PathBuf) -> ScaleOutConfig {
        ScaleOutConfig {
            out,
            seda,
            haproxy,
            scenarios: Scenario::ALL.to_vec(),
            replica_counts: vec![1, 2, 3],
            bottleneck_ms: 10.0,
            slow_factor: 4.0,
            target_ms: 200.0,
            users: 60,
            throughput_phases: [Duration::from_secs(10), Duration::from_secs(20)],
            base_users: 4,
            spike_users: 300,
            phases: [
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(10),
            ],
            think: Duration::from_millis(20),
            retry_wait: Duration::from_secs(1),
            reqs_per_conn: 5,
            timeout: Duration::from_secs(10),
            drain: Duration::from_secs(3),
            pin: true,
            threads: 1,
            seed: 1,
            passes: None,
        }
    }

    /// A short version for smoke tests: 3 + 6 s throughput phases, 3 / 8 / 3 s spikes,
    /// 100 users in the spikes.
    pub fn quick(mut self) -> ScaleOutConfig {
        self.spike_users = 100;
        self.throughput_phases = [Duration::from_secs(3), Duration::from_secs(6)];
        self.phases = [
            Duration::from_secs(3),
            Duration::from_secs(8),
            Duration::from_secs(3),
        ];
        self.drain = Duration::from_secs(2);
        self
    }

    pub(super) fn check(&self) -> Result<(), ExperimentError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.bottleneck_ms) || !pos(self.target_ms) {
            return Err(ExperimentError::config(
                "--bottleneck-ms and --target-ms must be positive",
            ));
        }
        if !(self.slow_factor.is_finite() && self.slow_factor >= 1.0) {
            return Err(ExperimentError::config("--slow-factor must be at least 1"));
        }
        if self.scenarios.is_empty() {
            return Err(ExperimentError::config("no scenario to run"));
        }
        if self.replica_counts.is_empty() || self.replica_counts.iter().any(|&n| n == 0 || n > 16) {
            return Err(ExperimentError::config(
                "--replicas must be counts in 1..=16",
            ));
        }
        if self.users == 0 || self.spike_users == 0 {
            return Err(ExperimentError::config("user counts must be positive"));
        }
        if self
            .phases
            .iter()
            .chain(&self.throughput_phases)
            .any(|p| p.is_zero())
        {
            return Err(ExperimentError::config("phases must last at least 1 s"));
        }
        Ok(())
    }
}
