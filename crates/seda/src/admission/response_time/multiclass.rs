//! The multiclass response-time controller (USITS'03 3.3, Fig. 5).
//!
//! One [`ResponseTimeController`] per class `c` with its own target and token rate.
//! When class `c` is evaluated with error `err_c`:
//! - if `err_c > err_d`: every class below `c` is *flagged* (its rate may not rise at
//!   its next evaluation), and
//!   - if some class below `c` is above `rate_min`, all classes below `c` have their rate
//!     divided by `adjlo_d` (default 10): lower classes are cut first, hard;
//!   - otherwise (all lower classes are at `rate_min`) the counter `lc_c` is
//!     incremented; when it reaches `lc_thresh` (default 20) class `c`'s own rate is
//!     divided by `adj_d` and the counter restarts.
//!     The lowest class present has nobody below it; it is cut by `adj_d` at once, as the
//!     single-class controller would (the paper leaves this case implicit; waiting for
//!     `lc_thresh` evaluations would let the lowest class overload the stage for 20
//!     periods).
//! - else if `err_c < err_i` and `c` is not flagged: additive increase as in 3.2.
//! - a class's flag is cleared after its evaluation; `lc_c` is reset when `err_c` is
//!   back at or below `err_d`.
//!
//! Classes are small integers, 0 the lowest priority. Classes are created on first
//! sight with the default target unless configured.

use std::collections::BTreeMap;
use std::time::Duration;

use super::controller::{RateChange, ResponseTimeConfig, ResponseTimeController};
use crate::control::{ConfigError, check};
use crate::envelope::Class;

/// Parameters of the multiclass controller.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MulticlassConfig {
    /// Controller parameters (and target) for classes without their own.
    pub base: ResponseTimeConfig,
    /// Per-class targets.
    pub targets: BTreeMap<Class, Duration>,
    /// Divisor applied to lower classes' rates when a higher class is over target.
    pub adjlo_d: f64,
    /// Evaluations over target, with all lower classes at `rate_min`, before a class's
    /// own rate is cut.
    pub lc_thresh: u32,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(MulticlassConfig {
    with_base: base: ResponseTimeConfig,
    with_targets: targets: BTreeMap<Class, Duration>,
    with_adjlo_d: adjlo_d: f64,
    with_lc_thresh: lc_thresh: u32,
});

impl MulticlassConfig {
    /// Paper defaults with one target for every class.
    pub fn with_target(target: Duration) -> Self {
        Self {
            base: ResponseTimeConfig::with_target(target),
            targets: BTreeMap::new(),
            adjlo_d: 10.0,
            lc_thresh: 20,
        }
    }

    /// Sets the target of one class.
    pub fn class_target(mut self, class: Class, target: Duration) -> Self {
        self.targets.insert(class, target);
        self
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.base.validate()?;
        check(self.adjlo_d > 1.0, || {
            "multiclass controller: adjlo_d must be above 1".into()
        })?;
        check(self.lc_thresh >= 1, || {
            "multiclass controller: lc_thresh must be at least 1".into()
        })?;
        for (c, t) in &self.targets {
            check(!t.is_zero(), || {
                format!("multiclass controller: class {c} target must be positive")
            })?;
        }
        Ok(())
    }

    fn config_for(&self, class: Class) -> ResponseTimeConfig {
        let mut cfg = self.base.clone();
        if let Some(t) = self.targets.get(&class) {
            cfg.target = *t;
        }
        cfg
    }
}

#[derive(Clone, Debug)]
struct ClassCtl {
    ctl: ResponseTimeController,
    lc: u32,
    flagged: bool,
}

/// The USITS'03 multiclass controller. See the module docs for the law.
#[derive(Clone, Debug)]
pub struct MulticlassController {
    cfg: MulticlassConfig,
    classes: BTreeMap<Class, ClassCtl>,
}

impl MulticlassController {
    /// A controller with the configured classes present.
    pub fn new(cfg: MulticlassConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut me = Self {
            cfg,
            classes: BTreeMap::new(),
        };
        let known: Vec<Class> = me.cfg.targets.keys().copied().collect();
        for c in known {
            me.ensure(c);
        }
        Ok(me)
    }

    fn ensure(&mut self, class: Class) -> &mut ClassCtl {
        let cfg = &self.cfg;
        self.classes.entry(class).or_insert_with(|| ClassCtl {
            ctl: ResponseTimeController::new(cfg.config_for(class)).expect("validated config"),
            lc: 0,
            flagged: false,
        })
    }

    /// Makes sure a class is tracked (its rate starts at `initial_rate`).
    pub fn add_class(&mut self, class: Class) {
        self.ensure(class);
    }

    /// Current rate of a class, per second (`initial_rate` if never seen).
    pub fn rate(&self, class: Class) -> f64 {
        self.classes
            .get(&class)
            .map_or(self.cfg.base.initial_rate, |c| c.ctl.rate())
    }

    /// Smoothed p90 estimate of a class.
    pub fn estimate(&self, class: Class) -> Option<Duration> {
        self.classes.get(&class).and_then(|c| c.ctl.estimate())
    }

    /// Target of a class.
    pub fn target(&self, class: Class) -> Duration {
        self.cfg
            .targets
            .get(&class)
            .copied()
            .unwrap_or(self.cfg.base.target)
    }

    /// Whether a class is flagged (its rate will not rise at its next evaluation).
    #[cfg(test)]
    pub fn is_flagged(&self, class: Class) -> bool {
        self.classes.get(&class).is_some_and(|c| c.flagged)
    }

    /// Classes tracked, lowest first.
    pub fn classes(&self) -> impl Iterator<Item = Class> + '_ {
        self.classes.keys().copied()
    }

    /// Folds in a p90 sample of `class`; returns what happened to that class's own rate.
    pub fn update(&mut self, class: Class, samp: Duration) -> RateChange {
        let err_d = self.cfg.base.err_d;
        let err_i = self.cfg.base.err_i;
        let rate_min = self.cfg.base.rate_min;
        let adjlo_d = self.cfg.adjlo_d;
        let lc_thresh = self.cfg.lc_thresh;
        let entry = self.ensure(class);
        entry.ctl.smooth(samp);
        let err = entry.ctl.error().unwrap_or(0.0);
        let flagged = std::mem::take(&mut entry.flagged);
        let rate = entry.ctl.rate();
        if err > err_d {
            let mut lower = self.classes.range_mut(..class).map(|(_, c)| c).peekable();
            if lower.peek().is_none() {
                let me = self.classes.get_mut(&class).expect("present");
                let cut = rate / me.ctl.config().adj_d;
                me.ctl.set_rate(cut);
                return RateChange::Decreased(me.ctl.rate());
            }
            let mut any_above_min = false;
            for c in lower {
                c.flagged = true;
                if c.ctl.rate() > rate_min {
                    any_above_min = true;
                    let r = c.ctl.rate() / adjlo_d;
                    c.ctl.set_rate(r);
                }
            }
            let me = self.classes.get_mut(&class).expect("present");
            if any_above_min {
                RateChange::Held(me.ctl.rate())
            } else {
                me.lc += 1;
                if me.lc >= lc_thresh {
                    me.lc = 0;
                    let cut = rate / me.ctl.config().adj_d;
                    me.ctl.set_rate(cut);
                    RateChange::Decreased(me.ctl.rate())
                } else {
                    RateChange::Held(rate)
                }
            }
        } else {
            let me = self.classes.get_mut(&class).expect("present");
            me.lc = 0;
            if err < err_i && !flagged {
                let c_i = me.ctl.config().c_i;
                let adj_i = me.ctl.config().adj_i;
                me.ctl.set_rate(rate - (err - c_i) * adj_i);
                RateChange::Increased(me.ctl.rate())
            } else {
                RateChange::Held(rate)
            }
        }
    }
}
