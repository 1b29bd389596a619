//! Batching controller (SEDA 3.4, Fig. 9).
//!
//! The batching factor is how many events a worker takes from the queue per call of
//! the handler. Large batches amortise per-call costs (locality, aggregation); small
//! batches cut latency and spread work over threads. The controller looks for the
//! smallest factor that sustains throughput.
//!
//! Control law, every observation (events processed over an interval):
//! - `rate = processed / elapsed`; `avg` is its EWMA with weight `alpha` on history;
//! - **sudden drop**: if `rate < drop_ratio * avg`, reset the factor to `max_batch`
//!   (SEDA: "responds to sudden drops in load by resetting the batching factor to its
//!   maximum value"; the original code never shipped this) and restart the averages;
//! - **holding**: if `avg >= (1 - tolerance) * best`, shrink the factor by
//!   `decrease` (multiplicative, at least by one) and remember `best = max(best, avg)`;
//! - **degrading**: otherwise grow the factor by `increase` (a small additive step)
//!   and re-base `best = avg`.
//!
//! Invariant: `min_batch <= batch_size() <= max_batch`.

use std::time::Duration;

use super::{ConfigError, check};

/// Parameters of the batching controller.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BatchingConfig {
    /// Smallest batching factor.
    pub min_batch: usize,
    /// Largest batching factor, and the starting point.
    pub max_batch: usize,
    /// EWMA weight on history for the output rate, in `[0, 1)`.
    pub alpha: f64,
    /// Fraction of the best smoothed rate that still counts as "holding".
    pub tolerance: f64,
    /// Multiplicative decrease while throughput holds, in `(0, 1)`.
    pub decrease: f64,
    /// Additive increase when throughput degrades.
    pub increase: usize,
    /// A raw rate below `drop_ratio * avg` is a sudden drop.
    pub drop_ratio: f64,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(BatchingConfig {
    with_min_batch: min_batch: usize,
    with_max_batch: max_batch: usize,
    with_alpha: alpha: f64,
    with_tolerance: tolerance: f64,
    with_decrease: decrease: f64,
    with_increase: increase: usize,
    with_drop_ratio: drop_ratio: f64,
});

impl Default for BatchingConfig {
    fn default() -> Self {
        Self {
            min_batch: 1,
            max_batch: 64,
            alpha: 0.7,
            tolerance: 0.05,
            decrease: 0.9,
            increase: 2,
            drop_ratio: 0.5,
        }
    }
}

impl BatchingConfig {
    /// Defaults with the given bounds.
    pub fn bounded(min_batch: usize, max_batch: usize) -> Self {
        Self {
            min_batch,
            max_batch,
            ..Self::default()
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(self.min_batch >= 1, || {
            "batching: min_batch must be at least 1".into()
        })?;
        check(self.max_batch >= self.min_batch, || {
            format!(
                "batching: max_batch ({}) below min_batch ({})",
                self.max_batch, self.min_batch
            )
        })?;
        check((0.0..1.0).contains(&self.alpha), || {
            "batching: alpha must be in [0, 1)".into()
        })?;
        check((0.0..1.0).contains(&self.tolerance), || {
            "batching: tolerance must be in [0, 1)".into()
        })?;
        check(self.decrease > 0.0 && self.decrease < 1.0, || {
            "batching: decrease must be in (0, 1)".into()
        })?;
        check(self.increase >= 1, || {
            "batching: increase must be at least 1".into()
        })?;
        check(self.drop_ratio > 0.0 && self.drop_ratio < 1.0, || {
            "batching: drop_ratio must be in (0, 1)".into()
        })
    }
}

/// Events a stage processed over an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchObservation {
    /// Events processed during the interval.
    pub processed: u64,
    /// Length of the interval.
    pub elapsed: Duration,
}

/// The SEDA batching controller. See the module docs for the law.
#[derive(Clone, Debug)]
pub struct BatchingController {
    cfg: BatchingConfig,
    batch: usize,
    avg: Option<f64>,
    best: f64,
}

impl BatchingController {
    /// A controller starting at `max_batch`.
    pub fn new(cfg: BatchingConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            batch: cfg.max_batch,
            cfg,
            avg: None,
            best: 0.0,
        })
    }

    /// Current batching factor.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// One controller step; returns the new batching factor.
    pub fn step(&mut self, o: BatchObservation) -> usize {
        let secs = o.elapsed.as_secs_f64();
        if secs <= 0.0 {
            return self.batch;
        }
        let rate = o.processed as f64 / secs;
        let c = &self.cfg;
        let Some(avg) = self.avg else {
            self.avg = Some(rate);
            self.best = rate;
            return self.batch;
        };
        if rate < c.drop_ratio * avg {
            self.batch = c.max_batch;
            self.avg = Some(rate);
            self.best = rate;
            return self.batch;
        }
        let avg = c.alpha * avg + (1.0 - c.alpha) * rate;
        self.avg = Some(avg);
        if avg >= (1.0 - c.tolerance) * self.best {
            self.best = self.best.max(avg);
            let shrunk = ((self.batch as f64) * c.decrease).floor() as usize;
            self.batch = shrunk.min(self.batch.saturating_sub(1)).max(c.min_batch);
        } else {
            self.best = avg;
            self.batch = (self.batch + c.increase).min(c.max_batch);
        }
        self.batch
    }
}
