//! What every admission policy shares: the offer and completion it sees, the
//! state it reports, and the [`AdmissionPolicy`] trait. A leaf that the policies
//! import (they are re-exported from `admission`).

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::envelope::Class;

/// What a policy sees of one enqueue attempt.
#[derive(Clone, Copy, Debug)]
pub struct Offer {
    /// Class of the event offered.
    pub class: Class,
    /// Events waiting in the queue now (admitted, not yet handed to a handler).
    pub queue_len: usize,
    /// Events in the stage: waiting plus being handled.
    pub in_flight: usize,
    /// The queue's hard capacity.
    pub capacity: usize,
    /// Time of the attempt.
    pub now: Instant,
}

/// What a policy learns of one finished event.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// Class of the event.
    pub class: Class,
    /// `now - born`: response time of the request so far, as USITS'03 3.2 measures it.
    pub response_time: Duration,
    /// Time the event waited in this stage's queue.
    pub queue_delay: Duration,
    /// Time the handler spent on the batch, divided by the batch's length.
    pub service_time: Duration,
    /// Events in the stage (waiting plus being handled) when it finished.
    pub in_flight: usize,
    /// When the event finished.
    pub now: Instant,
}

/// Read-only view of a policy's state, for stats and dashboards. A policy outside
/// this crate starts from [`AdmissionState::named`] and sets the fields it has
/// (`#[non_exhaustive]`: a new field is not a breaking change).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct AdmissionState {
    /// Policy name, e.g. `"response-time"`.
    pub policy: String,
    /// Current token rate in events per second, for rate-based policies.
    pub rate: Option<f64>,
    /// Current (smoothed) 90th-percentile response time estimate, milliseconds.
    pub p90_ms: Option<f64>,
    /// Response-time target, milliseconds.
    pub target_ms: Option<f64>,
    /// Current limit on queue length or concurrency, for limit-based policies.
    pub limit: Option<f64>,
    /// Per-class state, for multiclass policies (empty otherwise).
    pub classes: Vec<ClassState>,
}

/// Per-class state of a multiclass policy.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct ClassState {
    /// The class.
    pub class: Class,
    /// Current token rate for the class, events per second.
    pub rate: f64,
    /// Smoothed p90 estimate for the class, milliseconds.
    pub p90_ms: Option<f64>,
    /// Target for the class, milliseconds.
    pub target_ms: f64,
}

impl AdmissionState {
    /// The state of policy `policy` with nothing else known yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::admission::AdmissionState;
    ///
    /// let mut st = AdmissionState::named("my-limit");
    /// st.limit = Some(32.0);
    /// assert_eq!(st.policy, "my-limit");
    /// assert_eq!(st.rate, None);
    /// ```
    pub fn named(policy: impl Into<String>) -> AdmissionState {
        AdmissionState {
            policy: policy.into(),
            ..AdmissionState::default()
        }
    }
}

/// The policy guarding a stage's input queue. See the module docs for the contract.
pub trait AdmissionPolicy: Send + Sync + fmt::Debug + 'static {
    /// Short name for stats, e.g. `"queue-threshold"`.
    fn name(&self) -> &'static str;

    /// Whether to admit this event. Must not block.
    fn admit(&self, offer: &Offer) -> bool;

    /// One event finished at this stage.
    fn on_complete(&self, _done: &Completion) {}

    /// Periodic tick from the controller thread.
    fn on_tick(&self, _now: Instant) {}

    /// Current state for stats.
    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().to_owned(),
            ..AdmissionState::default()
        }
    }
}
