//! Concurrency limits in the manner of Netflix's concurrency-limits library: admit
//! while the events in the stage (`in_flight`, queued plus in service) are below a
//! limit that adapts to the latency the stage delivers. The sample is the time an
//! event spent in this stage (queueing delay + service time).
//!
//! [`GradientLimit`] (Gradient2). Samples are averaged over a `window`; then
//! - `long = long + (short - long) / long_window` (an EWMA over ~`long_window`
//!   windows), with drift correction: if `long > 2 * short`, `long *= 0.95`;
//! - `gradient = clamp(tolerance * long / short, 0.5, 1.0)`;
//! - `new = limit * gradient + sqrt(limit)` (the `sqrt` term is the queue allowance);
//! - if the stage is app-limited (`in_flight < limit / 2`) the limit may not grow;
//! - `limit = (1 - smoothing) * limit + smoothing * new`, clamped to `[min, max]`.
//!
//! [`AimdLimit`]. Per sample: if the in-stage latency exceeds `timeout`, `limit *=
//! backoff` (at most once per `timeout`, so one slow burst is one cut); else if
//! `in_flight * 2 >= limit`, `limit += 1`; clamped to `[min, max]`.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{AdmissionPolicy, AdmissionState, Completion, Offer};
use crate::control::{ConfigError, check};

/// Parameters of [`GradientLimit`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GradientLimitConfig {
    /// Starting limit.
    pub initial: f64,
    /// Lowest limit.
    pub min: f64,
    /// Highest limit.
    pub max: f64,
    /// Latency growth tolerated before the limit shrinks (`long / short` ratio).
    pub tolerance: f64,
    /// Weight of a new limit estimate, in `(0, 1]`.
    pub smoothing: f64,
    /// Windows in the long-term latency average.
    pub long_window: f64,
    /// Length of one sampling window.
    pub window: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(GradientLimitConfig {
    with_initial: initial: f64,
    with_min: min: f64,
    with_max: max: f64,
    with_tolerance: tolerance: f64,
    with_smoothing: smoothing: f64,
    with_long_window: long_window: f64,
    with_window: window: Duration,
});

impl Default for GradientLimitConfig {
    fn default() -> Self {
        Self {
            initial: 20.0,
            min: 1.0,
            max: 1000.0,
            tolerance: 1.5,
            smoothing: 0.2,
            long_window: 600.0,
            window: Duration::from_millis(100),
        }
    }
}

#[derive(Debug)]
struct Gradient {
    limit: f64,
    long: Option<f64>,
    sum: f64,
    count: u32,
    max_in_flight: usize,
    window_start: Instant,
}

/// Gradient concurrency limit. See the module docs for the law.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, GradientLimit, GradientLimitConfig};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// let p = GradientLimit::new(GradientLimitConfig::default()).unwrap(); // limit 20
/// assert!(p.admit(&offer(0, 19)));
/// assert!(!p.admit(&offer(0, 20))); // 20 events in the stage already
/// assert_eq!(p.state().limit, Some(20.0));
/// ```
#[derive(Debug)]
pub struct GradientLimit {
    cfg: GradientLimitConfig,
    state: Mutex<Gradient>,
}

impl GradientLimit {
    /// A limit with these parameters.
    pub fn new(cfg: GradientLimitConfig) -> Result<Self, ConfigError> {
        check(cfg.min >= 1.0 && cfg.min <= cfg.max, || {
            "gradient limit: need 1 <= min <= max".into()
        })?;
        check((cfg.min..=cfg.max).contains(&cfg.initial), || {
            "gradient limit: initial outside [min, max]".into()
        })?;
        check(cfg.tolerance >= 1.0, || {
            "gradient limit: tolerance must be at least 1".into()
        })?;
        check(cfg.smoothing > 0.0 && cfg.smoothing <= 1.0, || {
            "gradient limit: smoothing must be in (0, 1]".into()
        })?;
        check(cfg.long_window >= 1.0, || {
            "gradient limit: long_window must be at least 1".into()
        })?;
        check(!cfg.window.is_zero(), || {
            "gradient limit: window must be positive".into()
        })?;
        let g = Gradient {
            limit: cfg.initial,
            long: None,
            sum: 0.0,
            count: 0,
            max_in_flight: 0,
            window_start: Instant::now(),
        };
        Ok(Self {
            cfg,
            state: Mutex::new(g),
        })
    }

    /// Current limit.
    pub fn limit(&self) -> f64 {
        self.state.lock().limit
    }

    fn close_window(&self, g: &mut Gradient, now: Instant) {
        if g.count == 0 || now.saturating_duration_since(g.window_start) < self.cfg.window {
            return;
        }
        let short = g.sum / f64::from(g.count);
        let c = &self.cfg;
        let mut long = g.long.map_or(short, |l| l + (short - l) / c.long_window);
        if long > 2.0 * short {
            long *= 0.95;
        }
        g.long = Some(long);
        let gradient = if short > 0.0 {
            (c.tolerance * long / short).clamp(0.5, 1.0)
        } else {
            1.0
        };
        let mut new = g.limit * gradient + g.limit.sqrt();
        if (g.max_in_flight as f64) < g.limit / 2.0 {
            new = new.min(g.limit);
        }
        g.limit = ((1.0 - c.smoothing) * g.limit + c.smoothing * new).clamp(c.min, c.max);
        g.sum = 0.0;
        g.count = 0;
        g.max_in_flight = 0;
        g.window_start = now;
    }
}

impl AdmissionPolicy for GradientLimit {
    fn name(&self) -> &'static str {
        "gradient"
    }

    fn admit(&self, offer: &Offer) -> bool {
        (offer.in_flight as f64) < self.state.lock().limit.floor()
    }

    fn on_complete(&self, done: &Completion) {
        let mut g = self.state.lock();
        g.sum += (done.queue_delay + done.service_time).as_secs_f64();
        g.count += 1;
        g.max_in_flight = g.max_in_flight.max(done.in_flight + 1);
        self.close_window(&mut g, done.now);
    }

    fn on_tick(&self, now: Instant) {
        let mut g = self.state.lock();
        self.close_window(&mut g, now);
    }

    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().into(),
            limit: Some(self.limit()),
            ..Default::default()
        }
    }
}

/// Parameters of [`AimdLimit`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AimdLimitConfig {
    /// Starting limit.
    pub initial: f64,
    /// Lowest limit.
    pub min: f64,
    /// Highest limit.
    pub max: f64,
    /// Multiplicative decrease, in `(0, 1)`.
    pub backoff: f64,
    /// In-stage latency above which a sample counts as a drop.
    pub timeout: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(AimdLimitConfig {
    with_initial: initial: f64,
    with_min: min: f64,
    with_max: max: f64,
    with_backoff: backoff: f64,
});

impl AimdLimitConfig {
    /// Defaults (initial 20, 1..1000, backoff 0.9) with this latency bound.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            initial: 20.0,
            min: 1.0,
            max: 1000.0,
            backoff: 0.9,
            timeout,
        }
    }
}

#[derive(Debug)]
struct Aimd {
    limit: f64,
    last_cut: Option<Instant>,
}

/// AIMD concurrency limit. See the module docs for the law.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, AimdLimit, AimdLimitConfig};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// let cfg = AimdLimitConfig::with_timeout(std::time::Duration::from_millis(250));
/// let p = AimdLimit::new(cfg).unwrap(); // starts at 20 in flight
/// assert!(p.admit(&offer(0, 19)));
/// assert!(!p.admit(&offer(0, 20)));
/// ```
#[derive(Debug)]
pub struct AimdLimit {
    cfg: AimdLimitConfig,
    state: Mutex<Aimd>,
}

impl AimdLimit {
    /// A limit with these parameters.
    pub fn new(cfg: AimdLimitConfig) -> Result<Self, ConfigError> {
        check(cfg.min >= 1.0 && cfg.min <= cfg.max, || {
            "aimd limit: need 1 <= min <= max".into()
        })?;
        check((cfg.min..=cfg.max).contains(&cfg.initial), || {
            "aimd limit: initial outside [min, max]".into()
        })?;
        check(cfg.backoff > 0.0 && cfg.backoff < 1.0, || {
            "aimd limit: backoff must be in (0, 1)".into()
        })?;
        check(!cfg.timeout.is_zero(), || {
            "aimd limit: timeout must be positive".into()
        })?;
        Ok(Self {
            state: Mutex::new(Aimd {
                limit: cfg.initial,
                last_cut: None,
            }),
            cfg,
        })
    }

    /// Current limit.
    pub fn limit(&self) -> f64 {
        self.state.lock().limit
    }
}

impl AdmissionPolicy for AimdLimit {
    fn name(&self) -> &'static str {
        "aimd"
    }

    fn admit(&self, offer: &Offer) -> bool {
        (offer.in_flight as f64) < self.state.lock().limit.floor()
    }

    fn on_complete(&self, done: &Completion) {
        let mut a = self.state.lock();
        let c = &self.cfg;
        if done.queue_delay + done.service_time > c.timeout {
            if a.last_cut
                .is_none_or(|t| done.now.saturating_duration_since(t) >= c.timeout)
            {
                a.limit = (a.limit * c.backoff).max(c.min);
                a.last_cut = Some(done.now);
            }
        } else if (done.in_flight + 1) as f64 * 2.0 >= a.limit {
            a.limit = (a.limit + 1.0).min(c.max);
        }
    }

    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().into(),
            limit: Some(self.limit()),
            ..Default::default()
        }
    }
}
