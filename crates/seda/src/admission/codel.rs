//! CoDel-style admission on queueing delay (Nichols & Jacobson, "Controlling Queue
//! Delay", 2012), in the adaptive form used by RPC servers (Facebook's wangle/folly
//! CoDel): the queue is *overloaded* when even the smallest queueing delay seen over a
//! whole `interval` stayed above `target` (a standing queue, not a burst).
//!
//! Control law:
//! - every finished event reports its queueing delay; at the end of each `interval`
//!   `overloaded = (min delay over the interval > target)` and the minimum restarts
//!   (an interval with no completions keeps the previous verdict);
//! - a new event's expected queueing delay is estimated as
//!   `queue_len * service_ewma / max(1, handling)`, with `handling = in_flight -
//!   queue_len` the events in service now and `service_ewma` an EWMA (weight 1/8 on the
//!   new sample) of per-event service time;
//! - admit iff the estimate is below `target` while overloaded, below `interval`
//!   otherwise.
//!
//! So a burst may queue up to `interval` of work; a queue that stays long is trimmed
//! to `target` of delay, and requests are refused at the door instead of timing out
//! inside. Defaults: target 5 ms, interval 100 ms.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{AdmissionPolicy, AdmissionState, Completion, Offer};
use crate::control::{ConfigError, check};

/// Parameters of [`CoDel`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CoDelConfig {
    /// Acceptable standing queueing delay.
    pub target: Duration,
    /// Window over which the minimum delay must stay above `target`.
    pub interval: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(CoDelConfig {
    with_target: target: Duration,
    with_interval: interval: Duration,
});

impl Default for CoDelConfig {
    fn default() -> Self {
        Self {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
        }
    }
}

#[derive(Debug)]
struct State {
    window_start: Instant,
    window_min: Option<Duration>,
    overloaded: bool,
    service_ewma: Option<f64>,
}

/// CoDel-style admission. See the module docs for the law.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, CoDel, CoDelConfig};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// let p = CoDel::new(
///     CoDelConfig::default()
///         .with_target(std::time::Duration::from_millis(5))
///         .with_interval(std::time::Duration::from_millis(100)),
/// )
/// .unwrap();
/// assert!(p.admit(&offer(0, 0))); // nothing measured yet: no standing queue
/// assert_eq!(p.state().target_ms, Some(5.0));
/// ```
#[derive(Debug)]
pub struct CoDel {
    cfg: CoDelConfig,
    state: Mutex<State>,
}

impl CoDel {
    /// A policy with these parameters.
    pub fn new(cfg: CoDelConfig) -> Result<Self, ConfigError> {
        check(!cfg.target.is_zero(), || {
            "codel: target must be positive".into()
        })?;
        check(cfg.interval > cfg.target, || {
            "codel: interval must exceed target".into()
        })?;
        let state = State {
            window_start: Instant::now(),
            window_min: None,
            overloaded: false,
            service_ewma: None,
        };
        Ok(Self {
            cfg,
            state: Mutex::new(state),
        })
    }

    /// Whether the queue is judged overloaded now.
    pub fn overloaded(&self) -> bool {
        self.state.lock().overloaded
    }

    fn roll(&self, s: &mut State, now: Instant) {
        if now.saturating_duration_since(s.window_start) >= self.cfg.interval {
            if let Some(min) = s.window_min.take() {
                s.overloaded = min > self.cfg.target;
            }
            s.window_start = now;
        }
    }
}

impl AdmissionPolicy for CoDel {
    fn name(&self) -> &'static str {
        "codel"
    }

    fn admit(&self, offer: &Offer) -> bool {
        let s = self.state.lock();
        let Some(svc) = s.service_ewma else {
            return true;
        };
        let handling = offer.in_flight.saturating_sub(offer.queue_len).max(1);
        let expected = offer.queue_len as f64 * svc / handling as f64;
        let bound = if s.overloaded {
            self.cfg.target
        } else {
            self.cfg.interval
        };
        expected < bound.as_secs_f64()
    }

    fn on_complete(&self, done: &Completion) {
        let mut s = self.state.lock();
        let svc = done.service_time.as_secs_f64();
        s.service_ewma = Some(s.service_ewma.map_or(svc, |e| e + (svc - e) / 8.0));
        s.window_min = Some(
            s.window_min
                .map_or(done.queue_delay, |m| m.min(done.queue_delay)),
        );
        self.roll(&mut s, done.now);
    }

    fn on_tick(&self, now: Instant) {
        let mut s = self.state.lock();
        self.roll(&mut s, now);
    }

    fn state(&self) -> AdmissionState {
        let s = self.state.lock();
        let bound = if s.overloaded {
            self.cfg.target
        } else {
            self.cfg.interval
        };
        AdmissionState {
            policy: self.name().into(),
            target_ms: Some(self.cfg.target.as_secs_f64() * 1000.0),
            limit: Some(bound.as_secs_f64() * 1000.0),
            ..Default::default()
        }
    }
}
