//! What to run: the fronts, the load shapes and the configuration (full and quick).

use std::path::PathBuf;
use std::time::Duration;

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
    /// `seda serve --proxy` with `--rt-target-ms` only.
    Seda,
}

impl Front {
    /// Every front, in table order.
    pub const ALL: [Front; 4] = [
        Front::NginxProxy,
        Front::NginxLimit,
        Front::Haproxy,
        Front::Seda,
    ];

    /// Its name in tables, charts and `--fronts`.
    pub fn name(self) -> &'static str {
        match self {
            Front::NginxProxy => "nginx-proxy",
            Front::NginxLimit => "nginx-limit",
            Front::Haproxy => "haproxy",
            Front::Seda => "seda",
        }
    }

    /// The front called `name`.
    pub fn by_name(name: &str) -> Result<Front, String> {
        Front::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                format!("unknown front {name:?} (known: nginx-proxy, nginx-limit, haproxy, seda)")
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
}

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
        }
    }

    /// The shape called `name` (`spike`, `open-Fx`, `drop`).
    pub fn by_name(name: &str) -> Result<Shape, String> {
        match name {
            "spike" => Ok(Shape::Spike),
            "drop" => Ok(Shape::Drop),
            _ => name
                .strip_prefix("open-")
                .and_then(|f| f.strip_suffix('x'))
                .and_then(|f| f.parse::<f64>().ok())
                .filter(|f| f.is_finite() && *f > 0.0 && *f <= 100.0)
                .map(Shape::Open)
                .ok_or_else(|| {
                    format!(
                        "unknown shape {name:?} (known: spike, open-Fx with F in (0, 100], drop)"
                    )
                }),
        }
    }
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
    /// Fronts to compare.
    pub fronts: Vec<Front>,
    /// Load shapes.
    pub shapes: Vec<Shape>,
    /// Runs of each (shape, front).
    pub repeats: usize,
    /// Before, overload, after.
    pub phases: [Duration; 3],
    /// Closed-loop users of the knee's steps.
    pub knee_users: Vec<u64>,
    /// Length of a knee step.
    pub knee_step: Duration,
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
    /// repeats, 1,000 spike users (about an hour).
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
            fronts: Front::ALL.to_vec(),
            shapes: Shape::ALL.to_vec(),
            repeats: 3,
            phases: [
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(20),
            ],
            knee_users: vec![2, 4, 8, 16, 32],
            knee_step: Duration::from_secs(5),
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
            spike_users: 200,
            retry_wait: Duration::from_secs(1),
            max_conns: 1000,
            timeout: Duration::from_secs(10),
            drain: Duration::from_secs(2),
            ..ProxyConfig::full(out, seda, gunicorn, app_dir)
        }
    }

    /// Refuses what cannot run.
    pub fn check(&self) -> Result<(), String> {
        if self.workers < 2 || self.workers % 2 != 0 || self.workers > 64 {
            return Err("--workers must be even, 2..=64 (the drop takes half)".into());
        }
        if !(self.work_ms > 0.0 && self.work_ms <= 10_000.0) {
            return Err("--work-ms must be in (0, 10000]".into());
        }
        if !["fixed", "exp", "bimodal"].contains(&self.dist.as_str()) {
            return Err(format!("--dist {:?}: fixed, exp or bimodal", self.dist));
        }
        if !(self.target_ms >= 1.0 && self.target_ms <= 600_000.0) {
            return Err("--target-ms must be in [1, 600000]".into());
        }
        if self.fronts.is_empty() || self.shapes.is_empty() {
            return Err("no fronts or no shapes to run".into());
        }
        if self.repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        if self.knee_users.is_empty() || self.knee_users.contains(&0) {
            return Err("knee steps need at least one user each".into());
        }
        if self.spike_users == 0 || self.base_users == 0 {
            return Err("--spike-users and the base users must be at least 1".into());
        }
        if !self.gunicorn.exists() {
            return Err(format!(
                "no gunicorn at {} (bench/proxy/install.sh installs it and prints its path)",
                self.gunicorn.display()
            ));
        }
        if !self.app_dir.join("app.py").exists() {
            return Err(format!("no app.py in {}", self.app_dir.display()));
        }
        Ok(())
    }

    /// How long the plan takes, roughly (runs plus a few seconds each to start).
    pub fn eta(&self) -> Duration {
        let run: Duration = self.phases.iter().sum::<Duration>() + self.drain;
        let runs = (self.fronts.len() * self.shapes.len() * self.repeats) as u32;
        self.knee_step * self.knee_users.len() as u32 + (run + Duration::from_secs(3)) * runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_fronts_parse_back_from_their_names() {
        for s in Shape::ALL {
            assert_eq!(Shape::by_name(&s.name()).unwrap(), s);
        }
        for f in Front::ALL {
            assert_eq!(Front::by_name(f.name()).unwrap(), f);
        }
        assert!(Shape::by_name("open-0x").is_err());
        assert!(Shape::by_name("open-x").is_err());
        assert!(Front::by_name("envoy").unwrap_err().contains("known"));
    }

    #[test]
    fn the_quick_run_fits_in_a_few_minutes_and_odd_workers_are_refused() {
        let q = ProxyConfig::quick("o".into(), "s".into(), "g".into(), "a".into());
        assert!(q.eta() < Duration::from_secs(6 * 60), "{:?}", q.eta());
        let f = ProxyConfig::full("o".into(), "s".into(), "g".into(), "a".into());
        assert!(f.eta() > Duration::from_secs(30 * 60));
        let mut bad = q.clone();
        bad.workers = 3;
        assert!(bad.check().unwrap_err().contains("even"));
    }
}
