//! Service degradation (USITS'03 3.4, Figs. 12-13).
//!
//! SEDA does not degrade service itself; it gives a stage its p90 estimate and a
//! switch for its admission control. This controller is the policy a stage runs on
//! those two hooks, sampled periodically:
//! - p90 above target: `quality = max(q_min, quality * decrease)`; if quality is
//!   already at `q_min` and the stage is still over target for `reenable_after`
//!   consecutive samples, admission control is switched **on** (reject rather than
//!   serve everyone badly, Fig. 13);
//! - p90 below `(1 + err_i) * target` (well under): `quality = min(q_max, quality +
//!   increase)` (raised slowly); admission control, if the controller switched it on,
//!   stays on until quality is back at `q_max`, and is then switched **off**. This
//!   hysteresis is ours (the paper does not say when to switch off): switching off as
//!   soon as quality left `q_min` let the waiting crowd in at once, the p90 jumped over
//!   target, quality fell back to the floor, and the two controllers alternated every
//!   few seconds (p90 of the spike 3.5 s against 1 s, `docs/overload/`);
//! - in between, or without an estimate: hold.
//!
//! Invariant: `q_min <= quality <= q_max`. With `reenable_after = None` the controller
//! never touches admission (degradation alone, Fig. 12).
//!
//! # Degradation under admission control (`with_admission`, ours)
//! The paper's order lets a flash crowd queue while quality falls (x0.8 a second
//! from 1 to 0.05 takes 13 samples, then 3 more at the floor): in our spike of 1,000
//! users the queue held 1,000 requests and the p90 reached 9.4 s before admission
//! control came on. With `with_admission` the stage's admission control stays **on**
//! from the start and holds the target, and a sample in which it refused counts as
//! over target: `quality *= decrease` while the stage refuses or the p90 is over
//! target, `quality += increase` only in a sample with no refusal and the p90 well
//! under target. Quality thus falls as long as demand exceeds what the stage serves
//! at the current quality, and rises when it no longer refuses; the two loops never
//! switch each other, so they cannot alternate.

use std::time::Duration;

use super::{ConfigError, check};

/// Parameters of the quality controller.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct QualityConfig {
    /// p90 target.
    pub target: Duration,
    /// Lowest quality.
    pub q_min: f64,
    /// Highest quality (and the start).
    pub q_max: f64,
    /// Multiplicative decrease over target, in `(0, 1)`.
    pub decrease: f64,
    /// Additive increase when well under target.
    pub increase: f64,
    /// "Well under" threshold as a relative error (negative), like `err_i`.
    pub err_i: f64,
    /// Samples at `q_min` still over target before admission control is switched on;
    /// `None`: never. Ignored with `with_admission`.
    pub reenable_after: Option<u32>,
    /// Admission control on throughout, refusals count as over target (see the
    /// module docs); `false`: the paper's order.
    pub with_admission: bool,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(QualityConfig {
    with_q_min: q_min: f64,
    with_q_max: q_max: f64,
    with_decrease: decrease: f64,
    with_increase: increase: f64,
    with_err_i: err_i: f64,
    with_reenable_after: reenable_after: Option<u32>,
    with_admission: with_admission: bool,
});

impl QualityConfig {
    /// Defaults for a target: quality 0.05..1, x0.8 down, +0.02 up, err_i -0.2, admission
    /// re-enabled after 3 samples at the floor.
    pub fn with_target(target: Duration) -> Self {
        Self {
            target,
            q_min: 0.05,
            q_max: 1.0,
            decrease: 0.8,
            increase: 0.02,
            err_i: -0.2,
            reenable_after: Some(3),
            with_admission: false,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(!self.target.is_zero(), || {
            "quality controller: target must be positive".into()
        })?;
        check(
            self.q_min > 0.0 && self.q_min <= self.q_max && self.q_max <= 1.0,
            || "quality controller: need 0 < q_min <= q_max <= 1".into(),
        )?;
        check(self.decrease > 0.0 && self.decrease < 1.0, || {
            "quality controller: decrease must be in (0, 1)".into()
        })?;
        check(self.increase > 0.0, || {
            "quality controller: increase must be positive".into()
        })?;
        check(self.err_i < 0.0, || {
            "quality controller: err_i must be negative".into()
        })
    }
}

/// What the stage should do after a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct QualityDecision {
    /// Quality to run at, in `[q_min, q_max]`.
    pub quality: f64,
    /// Whether admission control should be on.
    pub admission: bool,
}

/// The degradation controller. See the module docs for the law.
#[derive(Clone, Debug)]
pub struct QualityController {
    cfg: QualityConfig,
    quality: f64,
    at_floor_over: u32,
    admission: bool,
}

impl QualityController {
    /// A controller at full quality with admission off (on with `with_admission`).
    pub fn new(cfg: QualityConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            quality: cfg.q_max,
            admission: cfg.with_admission,
            cfg,
            at_floor_over: 0,
        })
    }

    /// Current decision.
    pub fn decision(&self) -> QualityDecision {
        QualityDecision {
            quality: self.quality,
            admission: self.admission,
        }
    }

    /// One sample of the stage's p90 estimate.
    pub fn step(&mut self, p90: Option<Duration>) -> QualityDecision {
        self.step_refusing(p90, false)
    }

    /// One sample of the stage's p90 estimate and whether its admission control
    /// refused anything since the previous sample (read with `with_admission`).
    pub fn step_refusing(&mut self, p90: Option<Duration>, refused: bool) -> QualityDecision {
        if self.cfg.with_admission {
            return self.step_with_admission(p90, refused);
        }
        let Some(p90) = p90 else {
            return self.decision();
        };
        let c = &self.cfg;
        let t = c.target.as_secs_f64();
        let err = (p90.as_secs_f64() - t) / t;
        if err > 0.0 {
            if self.quality <= c.q_min {
                self.at_floor_over += 1;
                if c.reenable_after.is_some_and(|n| self.at_floor_over >= n) {
                    self.admission = true;
                }
            }
            self.quality = (self.quality * c.decrease).max(c.q_min);
        } else if err < c.err_i {
            self.at_floor_over = 0;
            self.quality = (self.quality + c.increase).min(c.q_max);
            if self.quality >= c.q_max {
                self.admission = false;
            }
        } else {
            self.at_floor_over = 0;
        }
        self.decision()
    }

    fn step_with_admission(&mut self, p90: Option<Duration>, refused: bool) -> QualityDecision {
        let c = &self.cfg;
        let t = c.target.as_secs_f64();
        let err = p90.map(|p| (p.as_secs_f64() - t) / t);
        if refused || err.is_some_and(|e| e > 0.0) {
            self.quality = (self.quality * c.decrease).max(c.q_min);
        } else if err.is_some_and(|e| e < c.err_i) {
            self.quality = (self.quality + c.increase).min(c.q_max);
        }
        self.decision()
    }
}
