//! What to run: the fronts, the load shapes and the configuration (full and quick).

use std::path::PathBuf;
use std::time::Duration;

use crate::ExperimentError;
use serde::{Deserialize, Serialize};

/// A front in front of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Front {
    /// nginx `proxy_pass`, keep-alive upstream, no limit.
    NginxProxy,
    /// nginx `limit_req` + `limit_conn` sized at the measured capacity.
    NginxLimit,
    /// HAProxy `maxconn` per server with `timeout queue`.
    Haproxy,
    /// `seda serve --proxy` with `--rt-target-ms` only (delay-budget).
    Seda,
    /// The same with `--admission response-time` (USITS'03 3.2).
    SedaResponseTime,
    /// The same with `--admission multiclass` (USITS'03 3.3).
    SedaMulticlass,
    /// The same with `--admission codel`.
    SedaCodel,
    /// The same with `--admission gradient`.
    SedaGradient,
    /// The same with `--admission aimd`.
    SedaAimd,
    /// The same with `--admission queue-threshold` (its default threshold).
    SedaQueueThreshold,
}

impl Front {
    /// Every front, in table order.
    pub const ALL: [Front; 10] = [
        Front::NginxProxy,
        Front::NginxLimit,
        Front::Haproxy,
        Front::Seda,
        Front::SedaResponseTime,
        Front::SedaMulticlass,
        Front::SedaCodel,
        Front::SedaGradient,
        Front::SedaAimd,
        Front::SedaQueueThreshold,
    ];

    /// The fronts people put there today, and ours with its default policy.
    pub const MAIN: [Front; 4] = [
        Front::NginxProxy,
        Front::NginxLimit,
        Front::Haproxy,
        Front::Seda,
    ];

    /// `seda serve` with the runtime's other admission policies.
    pub const POLICIES: [Front; 6] = [
        Front::SedaResponseTime,
        Front::SedaMulticlass,
        Front::SedaCodel,
        Front::SedaGradient,
        Front::SedaAimd,
        Front::SedaQueueThreshold,
    ];

    /// Its name in tables, charts and `--fronts`.
    pub fn name(self) -> &'static str {
        match self {
            Front::NginxProxy => "nginx-proxy",
            Front::NginxLimit => "nginx-limit",
            Front::Haproxy => "haproxy",
            Front::Seda => "seda",
            Front::SedaResponseTime => "seda-response-time",
            Front::SedaMulticlass => "seda-multiclass",
            Front::SedaCodel => "seda-codel",
            Front::SedaGradient => "seda-gradient",
            Front::SedaAimd => "seda-aimd",
            Front::SedaQueueThreshold => "seda-queue-threshold",
        }
    }

    /// `seda serve`'s `--admission` for a seda front other than the default one.
    pub fn admission(self) -> Option<&'static str> {
        self.name().strip_prefix("seda-")
    }

    /// Whether `seda serve` is the front.
    pub fn is_seda(self) -> bool {
        self == Front::Seda || self.admission().is_some()
    }

    /// The front called `name`.
    pub fn by_name(name: &str) -> Result<Front, ExperimentError> {
        Front::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Front::ALL.iter().map(|f| f.name()).collect();
                ExperimentError::config(format!(
                    "unknown front {name:?} (known: {})",
                    known.join(", ")
                ))
            })
    }
}

/// A load shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Closed-loop users, base -> spike -> base.
    Spike,
    /// Poisson arrivals at this factor of the capacity in the middle phase.
    Open(f64),
    /// Poisson arrivals at 0.8x the capacity; the backend loses half its workers in
    /// the middle phase.
    Drop,
    /// Two classes: high-class requests (`X-Class: 1`) at [`HIGH_SHARE`] of the
    /// capacity throughout, beside class-0 requests as in `Open` at this factor.
    Classes(f64),
}

/// The high class's share of the capacity in [`Shape::Classes`].
pub const HIGH_SHARE: f64 = 0.2;

/// The header that carries a request's class in [`Shape::Classes`].
pub const CLASS_HEADER: &str = "X-Class";

impl Shape {
    /// The shapes of a full run.
    pub const ALL: [Shape; 5] = [
        Shape::Spike,
        Shape::Open(1.5),
        Shape::Open(3.0),
        Shape::Open(10.0),
        Shape::Drop,
    ];

    /// Its name in tables, charts and `--shapes`.
    pub fn name(self) -> String {
        match self {
            Shape::Spike => "spike".into(),
            Shape::Open(f) => format!("open-{f}x"),
            Shape::Drop => "drop".into(),
            Shape::Classes(f) => format!("classes-{f}x"),
        }
    }

    /// The shape called `name` (`spike`, `open-Fx`, `drop`, `classes-Fx`).
    pub fn by_name(name: &str) -> Result<Shape, ExperimentError> {
        let factor = |rest: &str| {
            rest.strip_suffix('x')
                .and_then(|f| f.parse::<f64>().ok())
                .filter(|f| f.is_finite() && *f > 0.0 && *f <= 100.0)
        };
        let shape = match name {
            "spike" => Some(Shape::Spike),
            "drop" => Some(Shape::Drop),
            _ => name
                .strip_prefix("open-")
                .and_then(factor)
                .map(Shape::Open)
                .or_else(|| {
                    name.strip_prefix("classes-")
                        .and_then(factor)
                        .map(Shape::Classes)
                }),
        };
        shape.ok_or_else(|| {
            ExperimentError::config(format!(
                "unknown shape {name:?} (known: spike, open-Fx, drop, classes-Fx with F in (0, 100])"
            ))
        })
    }
}

/// Some shapes, each run through some fronts.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Load shapes.
    pub shapes: Vec<Shape>,
    /// Fronts, each through every shape of the group.
    pub fronts: Vec<Front>,
}

/// The groups of a full or medium run: every load shape through the fronts people
/// use and ours ([`Front::MAIN`]); the runtime's other policies at 3x the capacity;
/// two classes at 3x through the fronts that hold a target (HAProxy gives the high
/// class its queue's priority; nginx has no such thing) and ours.
pub fn default_groups() -> Vec<Group> {
    vec![
        Group {
            shapes: Shape::ALL.to_vec(),
            fronts: Front::MAIN.to_vec(),
        },
        Group {
            shapes: vec![Shape::Open(3.0)],
            fronts: Front::POLICIES.to_vec(),
        },
        Group {
            shapes: vec![Shape::Classes(3.0)],
            fronts: vec![
                Front::NginxLimit,
                Front::Haproxy,
                Front::Seda,
                Front::SedaMulticlass,
            ],
        },
    ]
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Output directory (runs.json, table.md, *.svg).
    pub out: PathBuf,
    /// The `seda` binary whose `serve --proxy` is measured.
    pub seda: PathBuf,
    /// The gunicorn binary (`bench/proxy/install.sh` prints it).
    pub gunicorn: PathBuf,
    /// The directory of `app.py` (`bench/proxy`).
    pub app_dir: PathBuf,
    /// gunicorn sync workers (an even number: the drop takes half).
    pub workers: u32,
    /// CPU cost of a request, ms.
    pub work_ms: f64,
    /// Its distribution: `fixed`, `exp` or `bimodal`.
    pub dist: String,
    /// p90 target, ms (seda's `--rt-target-ms`, HAProxy's queue timeout, nginx's
    /// burst and connection limit).
    pub target_ms: f64,
    /// What runs: each group's shapes through its fronts.
    pub groups: Vec<Group>,
    /// Runs of each (shape, front).
    pub repeats: usize,
    /// Before, overload, after.
    pub phases: [Duration; 3],
    /// Closed-loop users of the knee's steps.
    pub knee_users: Vec<u64>,
    /// Length of a knee step.
    pub knee_step: Duration,
    /// Length of the sustained step after the knee's: two closed-loop users per
    /// worker (every worker busy, a request waiting for each); the median of its
    /// whole seconds but the first and the last is the capacity.
    pub sustain: Duration,
    /// Users of the spike's middle phase, and before and after it.
    pub spike_users: u64,
    /// Users before and after the spike.
    pub base_users: u64,
    /// Closed loop: a refused or failed user waits this long.
    pub retry_wait: Duration,
    /// Open loop: most client connections at once.
    pub max_conns: usize,
    /// A request running longer than this is an error.
    pub timeout: Duration,
    /// After the schedule, how long requests still running may finish.
    pub drain: Duration,
    /// Seed of the load.
    pub seed: u64,
    /// app.py's hashing speed given to every worker (`None`: measured once at the
    /// start of the run).
    pub iter_per_ms: Option<f64>,
}

impl ProxyConfig {
    /// The full run: 4 workers, 20 ms requests, 200 ms target, 10/30/20 s phases, 3
    /// repeats, 1,000 spike users (about 100 minutes with the default groups).
    pub fn full(out: PathBuf, seda: PathBuf, gunicorn: PathBuf, app_dir: PathBuf) -> Self {
        ProxyConfig {
            out,
            seda,
            gunicorn,
            app_dir,
            workers: 4,
            work_ms: 20.0,
            dist: "fixed".into(),
            target_ms: 200.0,
            groups: default_groups(),
            repeats: 3,
            phases: [
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(20),
            ],
            knee_users: vec![2, 4, 8, 16, 32],
            knee_step: Duration::from_secs(5),
            sustain: Duration::from_secs(20),
            spike_users: 1000,
            base_users: 3,
            retry_wait: Duration::from_secs(5),
            max_conns: 4000,
            timeout: Duration::from_secs(30),
            drain: Duration::from_secs(5),
            seed: 1,
            iter_per_ms: None,
        }
    }

    /// One benchmark window (about 23 minutes): the quick run's backend (2 workers,
    /// 10 ms requests, 100 ms target) with 2/8/3 s phases, a 1 s drain, 3 repeats
    /// and 1,000 spike users who wait 5 s after a refusal; the same groups as the
    /// full run.
    pub fn medium(out: PathBuf, seda: PathBuf, gunicorn: PathBuf, app_dir: PathBuf) -> Self {
        ProxyConfig {
            phases: [
                Duration::from_secs(2),
                Duration::from_secs(8),
                Duration::from_secs(3),
            ],
            drain: Duration::from_secs(1),
            repeats: 3,
            spike_users: 1000,
            retry_wait: Duration::from_secs(5),
            groups: default_groups(),
            ..ProxyConfig::quick(out, seda, gunicorn, app_dir)
        }
    }

    /// Every (shape, front) to run, in order, each once (a repeat runs them all).
    pub fn plan(&self) -> Vec<(Shape, Front)> {
        let mut v: Vec<(Shape, Front)> = Vec::new();
        for g in &self.groups {
            for &s in &g.shapes {
                for &f in &g.fronts {
                    if !v.contains(&(s, f)) {
                        v.push((s, f));
                    }
                }
            }
        }
        v
    }

    /// A few minutes: 2 workers, 10 ms requests, 100 ms target, 2/6/3 s phases, one
    /// repeat, 200 spike users.
    pub fn quick(out: PathBuf, seda: PathBuf, gunicorn: PathBuf, app_dir: PathBuf) -> Self {
        ProxyConfig {
            workers: 2,
            work_ms: 10.0,
            target_ms: 100.0,
            repeats: 1,
            phases: [
                Duration::from_secs(2),
                Duration::from_secs(6),
                Duration::from_secs(3),
            ],
            knee_users: vec![2, 4, 8],
            knee_step: Duration::from_secs(3),
            sustain: Duration::from_secs(8),
            spike_users: 200,
            retry_wait: Duration::from_secs(1),
            max_conns: 1000,
            timeout: Duration::from_secs(10),
            drain: Duration::from_secs(2),
            ..ProxyConfig::full(out, seda, gunicorn, app_dir)
        }
    }

    /// Refuses what cannot run.
    pub fn check(&self) -> Result<(), ExperimentError> {
        if self.workers < 2 || self.workers % 2 != 0 || self.workers > 64 {
            return Err(ExperimentError::config(
                "--workers must be even, 2..=64 (the drop takes half)",
            ));
        }
        if !(self.work_ms > 0.0 && self.work_ms <= 10_000.0) {
            return Err(ExperimentError::config("--work-ms must be in (0, 10000]"));
        }
        if !["fixed", "exp", "bimodal"].contains(&self.dist.as_str()) {
            return Err(ExperimentError::config(format!(
                "--dist {:?}: fixed, exp or bimodal",
                self.dist
            )));
        }
        if !(self.target_ms >= 1.0 && self.target_ms <= 600_000.0) {
            return Err(ExperimentError::config(
                "--target-ms must be in [1, 600000]",
            ));
        }
        if self.plan().is_empty() {
            return Err(ExperimentError::config("no fronts or no shapes to run"));
        }
        if self.repeats == 0 {
            return Err(ExperimentError::config("--repeats must be at least 1"));
        }
        if self.knee_users.is_empty() || self.knee_users.contains(&0) {
            return Err(ExperimentError::config(
                "knee steps need at least one user each",
            ));
        }
        if self.sustain < Duration::from_secs(3) {
            return Err(ExperimentError::config(
                "the sustained step needs at least 3 s (its first and last second are left out)",
            ));
        }
        if self.spike_users == 0 || self.base_users == 0 {
            return Err(ExperimentError::config(
                "--spike-users and the base users must be at least 1",
            ));
        }
        if !self.gunicorn.exists() {
            return Err(ExperimentError::config(format!(
                "no gunicorn at {} (bench/proxy/install.sh installs it and prints its path)",
                self.gunicorn.display()
            )));
        }
        if !self.app_dir.join("app.py").exists() {
            return Err(ExperimentError::config(format!(
                "no app.py in {}",
                self.app_dir.display()
            )));
        }
        Ok(())
    }

    /// How long the plan takes, roughly (runs plus a few seconds each to start).
    pub fn eta(&self) -> Duration {
        let run: Duration = self.phases.iter().sum::<Duration>() + self.drain;
        let plan = self.plan();
        let runs = (plan.len() * self.repeats) as u32;
        // A capacity check (the sustained step on a fresh backend) before each
        // shape of each repeat but the first, which is the knee's.
        let shapes = (0..plan.len()).filter(|&k| starts_shape(&plan, k)).count();
        let checks = (shapes * self.repeats).saturating_sub(1) as u32;
        self.knee_step * self.knee_users.len() as u32
            + self.sustain
            + (self.sustain + Duration::from_secs(3)) * checks
            + (run + Duration::from_secs(3)) * runs
    }
}

/// Whether the `k`-th run of `plan` starts a shape (the runner measures the
/// capacity again there).
pub(super) fn starts_shape(plan: &[(Shape, Front)], k: usize) -> bool {
    k == 0 || plan.get(k - 1).map(|p| p.0) != plan.get(k).map(|p| p.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_is_checked_before_each_shape() {
        let cfg = ProxyConfig::medium("o".into(), "s".into(), "g".into(), "a".into());
        let plan = cfg.plan();
        let starts: Vec<String> = (0..plan.len())
            .filter(|&k| starts_shape(&plan, k))
            .map(|k| plan[k].0.name())
            .collect();
        // open-3x twice: the four main fronts, then the other policies after drop.
        assert_eq!(
            starts,
            [
                "spike",
                "open-1.5x",
                "open-3x",
                "open-10x",
                "drop",
                "open-3x",
                "classes-3x"
            ]
        );
        // 7 checks a repeat, 3 repeats, the first the knee's: 20 x (8 s + 3 s).
        let without = ProxyConfig {
            repeats: 3,
            ..cfg.clone()
        };
        let eta = without.eta().as_secs();
        let runs = (plan.len() * 3) as u64 * (13 + 1 + 3);
        assert_eq!(eta, 3 * 3 + 8 + 20 * 11 + runs, "{eta}");
    }

    #[test]
    fn shapes_and_fronts_parse_back_from_their_names() {
        for s in Shape::ALL {
            assert_eq!(Shape::by_name(&s.name()).unwrap(), s);
        }
        for f in Front::ALL {
            assert_eq!(Front::by_name(f.name()).unwrap(), f);
        }
        assert_eq!(Shape::by_name("classes-3x").unwrap(), Shape::Classes(3.0));
        assert_eq!(Front::SedaCodel.admission(), Some("codel"));
        assert_eq!(Front::Seda.admission(), None);
        assert!(Front::Seda.is_seda() && !Front::Haproxy.is_seda());
        assert!(Shape::by_name("open-0x").is_err());
        assert!(Shape::by_name("open-x").is_err());
        assert!(
            Front::by_name("envoy")
                .unwrap_err()
                .to_string()
                .contains("known")
        );
    }

    #[test]
    fn the_quick_run_fits_in_a_few_minutes_and_odd_workers_are_refused() {
        let q = ProxyConfig::quick("o".into(), "s".into(), "g".into(), "a".into());
        assert!(q.eta() < Duration::from_secs(10 * 60), "{:?}", q.eta());
        let m = ProxyConfig::medium("o".into(), "s".into(), "g".into(), "a".into());
        assert!(m.eta() < Duration::from_secs(30 * 60), "{:?}", m.eta());
        // Every front and shape of the issue is in the plan.
        let plan = m.plan();
        for f in Front::ALL {
            assert!(plan.iter().any(|p| p.1 == f), "{f:?}");
        }
        for s in Shape::ALL {
            assert!(plan.iter().any(|p| p.0 == s), "{s:?}");
        }
        assert!(plan.iter().any(|p| matches!(p.0, Shape::Classes(_))));
        let f = ProxyConfig::full("o".into(), "s".into(), "g".into(), "a".into());
        assert!(f.eta() > Duration::from_secs(30 * 60));
        let mut bad = q.clone();
        bad.workers = 3;
        assert!(bad.check().unwrap_err().to_string().contains("even"));
    }
}
