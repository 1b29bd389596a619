//! The response-time admission controller (USITS'03 3.2, Fig. 3).
//!
//! The controller adjusts the rate of a token bucket on a stage's queue to hold the
//! 90th-percentile response time (measured from `born`, so it covers every stage the
//! request has crossed) near an administrator's target.
//!
//! - [`P90Window`] collects up to `nreq` samples; it yields the 90th-percentile sample
//!   `samp` (the `0.9 * n`-th of the sorted samples) when `nreq` samples have arrived,
//!   or when `timeout` has passed since the last evaluation and at least one sample is
//!   there (so the rate moves when the processing rate is low).
//! - [`ResponseTimeController::update`] applies the law:
//!   `cur = alpha * cur + (1 - alpha) * samp` (the first sample initialises `cur`);
//!   `err = (cur - target) / target`;
//!   if `err > err_d`: `rate = rate / adj_d` (multiplicative decrease);
//!   else if `err < err_i`: `rate = rate - (err - c_i) * adj_i` (additive increase,
//!   zero at `err = c_i`);
//!   and `rate` is clamped to `[rate_min, rate_max]`.
//!
//! Defaults are the Sandstorm values (USITS'03 Fig. 4): nreq 100, timeout 1 s,
//! alpha 0.7, err_d 0.0, err_i -0.5, adj_i 2.0, adj_d 1.2, c_i -0.1, rate 0.05..5000
//! per second, initial rate 100, bucket depth 1, with two departures measured on
//! Haboob (`docs/overload/README.md`):
//! - `burst` 100 ms: the bucket holds `max(bucket_depth, rate * burst)` tokens. With
//!   a depth of 1, requests that a batched stage (HttpParse) hands on together
//!   microseconds apart were refused even when the rate was 5x the capacity and the
//!   p90 far under target (half of all requests refused for nothing). The long-run
//!   rate, and so the control law, is unchanged.
//! - An idle window counts as a zero sample: when `timeout` passes with no samples
//!   and nothing admitted is still in the stage, the policies feed `0` to the law
//!   (see [`P90Window::tick_idle`]). Without it a rate at `rate_min` (one request in
//!   20 s) gets one sample per 20 s and takes many minutes to climb back.

use std::time::{Duration, Instant};

use crate::control::{ConfigError, check};

/// Parameters of the response-time controller.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ResponseTimeConfig {
    /// 90th-percentile response-time target.
    pub target: Duration,
    /// Samples per evaluation.
    pub nreq: usize,
    /// Evaluate at least this often when samples are there.
    pub timeout: Duration,
    /// EWMA weight on history for the p90 estimate, in `[0, 1)`.
    pub alpha: f64,
    /// Error above which the rate is cut.
    pub err_d: f64,
    /// Error below which the rate is raised.
    pub err_i: f64,
    /// Additive-increase gain.
    pub adj_i: f64,
    /// Multiplicative-decrease divisor (> 1).
    pub adj_d: f64,
    /// Error at which the increase is zero.
    pub c_i: f64,
    /// Lowest token rate, per second.
    pub rate_min: f64,
    /// Highest token rate, per second.
    pub rate_max: f64,
    /// Starting token rate, per second.
    pub initial_rate: f64,
    /// Smallest token bucket depth (burst), tokens.
    pub bucket_depth: f64,
    /// Burst allowance as time at the current rate: the bucket holds
    /// `max(bucket_depth, rate * burst)` tokens. Zero gives the paper's fixed depth.
    pub burst: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(ResponseTimeConfig {
    with_nreq: nreq: usize,
    with_timeout: timeout: Duration,
    with_alpha: alpha: f64,
    with_err_d: err_d: f64,
    with_err_i: err_i: f64,
    with_adj_i: adj_i: f64,
    with_adj_d: adj_d: f64,
    with_c_i: c_i: f64,
    with_rate_min: rate_min: f64,
    with_rate_max: rate_max: f64,
    with_initial_rate: initial_rate: f64,
    with_bucket_depth: bucket_depth: f64,
    with_burst: burst: Duration,
});

impl ResponseTimeConfig {
    /// The paper's defaults with this target.
    pub fn with_target(target: Duration) -> Self {
        Self {
            target,
            nreq: 100,
            timeout: Duration::from_secs(1),
            alpha: 0.7,
            err_d: 0.0,
            err_i: -0.5,
            adj_i: 2.0,
            adj_d: 1.2,
            c_i: -0.1,
            rate_min: 0.05,
            rate_max: 5000.0,
            initial_rate: 100.0,
            bucket_depth: 1.0,
            burst: Duration::from_millis(100),
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(!self.target.is_zero(), || {
            "response-time controller: target must be positive".into()
        })?;
        check(self.nreq >= 1, || {
            "response-time controller: nreq must be at least 1".into()
        })?;
        check(!self.timeout.is_zero(), || {
            "response-time controller: timeout must be positive".into()
        })?;
        check((0.0..1.0).contains(&self.alpha), || {
            "response-time controller: alpha must be in [0, 1)".into()
        })?;
        check(self.err_i <= self.err_d, || {
            "response-time controller: err_i must not exceed err_d".into()
        })?;
        check(self.adj_i >= 0.0, || {
            "response-time controller: adj_i must be non-negative".into()
        })?;
        check(self.adj_d > 1.0, || {
            "response-time controller: adj_d must be above 1".into()
        })?;
        check(
            self.rate_min > 0.0 && self.rate_min <= self.rate_max,
            || "response-time controller: need 0 < rate_min <= rate_max".into(),
        )?;
        check(
            (self.rate_min..=self.rate_max).contains(&self.initial_rate),
            || "response-time controller: initial_rate outside [rate_min, rate_max]".into(),
        )?;
        check(self.bucket_depth >= 1.0, || {
            "response-time controller: bucket_depth must be at least 1".into()
        })
    }
}

/// The sample window behind the p90 measurement. See the module docs.
#[derive(Clone, Debug)]
pub struct P90Window {
    samples: Vec<Duration>,
    nreq: usize,
    timeout: Duration,
    last_eval: Instant,
}

impl P90Window {
    /// An empty window that evaluates every `nreq` samples or `timeout`.
    pub fn new(nreq: usize, timeout: Duration, now: Instant) -> Self {
        Self {
            samples: Vec::with_capacity(nreq.max(1)),
            nreq: nreq.max(1),
            timeout,
            last_eval: now,
        }
    }

    /// Adds a sample; returns the p90 sample if the window is now full.
    pub fn push(&mut self, sample: Duration, now: Instant) -> Option<Duration> {
        self.samples.push(sample);
        if self.samples.len() >= self.nreq {
            Some(self.evaluate(now))
        } else {
            None
        }
    }

    /// Returns the p90 sample if `timeout` has passed and samples are there.
    pub fn tick(&mut self, now: Instant) -> Option<Duration> {
        if now.saturating_duration_since(self.last_eval) < self.timeout {
            return None;
        }
        if self.samples.is_empty() {
            self.last_eval = now;
            return None;
        }
        Some(self.evaluate(now))
    }

    /// Like [`tick`](Self::tick), but when `timeout` has passed with no samples and
    /// `idle` (nothing admitted is still in the stage) it yields a zero sample: an idle
    /// stage would answer a request admitted now at once.
    pub fn tick_idle(&mut self, now: Instant, idle: bool) -> Option<Duration> {
        if idle
            && self.samples.is_empty()
            && now.saturating_duration_since(self.last_eval) >= self.timeout
        {
            self.last_eval = now;
            return Some(Duration::ZERO);
        }
        self.tick(now)
    }

    /// Whether no samples are waiting.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    fn evaluate(&mut self, now: Instant) -> Duration {
        self.samples.sort_unstable();
        let idx =
            ((self.samples.len() as f64 * 0.9).ceil() as usize).clamp(1, self.samples.len()) - 1;
        let p90 = self.samples[idx];
        self.samples.clear();
        self.last_eval = now;
        p90
    }
}

/// What one controller update did to the rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateChange {
    /// Multiplicative decrease to this rate.
    Decreased(f64),
    /// Additive increase to this rate.
    Increased(f64),
    /// Error inside the dead band `[err_i, err_d]`: rate unchanged.
    Held(f64),
}

impl RateChange {
    /// The rate after the update.
    pub fn rate(self) -> f64 {
        match self {
            RateChange::Decreased(r) | RateChange::Increased(r) | RateChange::Held(r) => r,
        }
    }
}

/// The USITS'03 response-time controller. See the module docs for the law.
#[derive(Clone, Debug)]
pub struct ResponseTimeController {
    cfg: ResponseTimeConfig,
    cur: Option<f64>,
    rate: f64,
}

impl ResponseTimeController {
    /// A controller at `initial_rate`.
    pub fn new(cfg: ResponseTimeConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            rate: cfg.initial_rate,
            cfg,
            cur: None,
        })
    }

    /// The parameters.
    pub fn config(&self) -> &ResponseTimeConfig {
        &self.cfg
    }

    /// Current token rate, per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Smoothed p90 estimate.
    pub fn estimate(&self) -> Option<Duration> {
        self.cur.map(Duration::from_secs_f64)
    }

    /// Error of the current estimate against the target.
    pub fn error(&self) -> Option<f64> {
        let t = self.cfg.target.as_secs_f64();
        self.cur.map(|c| (c - t) / t)
    }

    /// Folds in one p90 sample and returns the rate change (the law in the module docs).
    pub fn update(&mut self, samp: Duration) -> RateChange {
        self.smooth(samp);
        let err = self.error().unwrap_or(0.0);
        let c = &self.cfg;
        if err > c.err_d {
            self.rate = (self.rate / c.adj_d).clamp(c.rate_min, c.rate_max);
            RateChange::Decreased(self.rate)
        } else if err < c.err_i {
            self.rate = (self.rate - (err - c.c_i) * c.adj_i).clamp(c.rate_min, c.rate_max);
            RateChange::Increased(self.rate)
        } else {
            RateChange::Held(self.rate)
        }
    }

    /// Folds a sample into the estimate without touching the rate.
    pub(crate) fn smooth(&mut self, samp: Duration) {
        let s = samp.as_secs_f64();
        let a = self.cfg.alpha;
        self.cur = Some(match self.cur {
            None => s,
            Some(cur) => a * cur + (1.0 - a) * s,
        });
    }

    pub(crate) fn set_rate(&mut self, rate: f64) {
        self.rate = rate.clamp(self.cfg.rate_min, self.cfg.rate_max);
    }
}
