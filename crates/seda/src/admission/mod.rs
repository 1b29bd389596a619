//! Admission control: the policy that guards each stage's input queue.
//!
//! Every enqueue to a stage is first offered to the stage's [`AdmissionPolicy`]; a
//! refusal hands the event back to the caller as `EnqueueError::Rejected`, an overload
//! signal the upstream stage turns into a 503, a redirect or degraded service (SEDA
//! 3.2, USITS'03 2.3). Policies also observe every completed event (its response time
//! since `born`, its queueing delay) and a periodic tick from the controller thread,
//! which is how the response-time controllers (USITS'03 3.2-3.3) close their loop.
//!
//! # Contract
//! - `admit` is called on the enqueue path, from any thread, at most once per event
//!   offered, after the queue has room; it must not block. Returning `true` consumes
//!   whatever the policy meters (a token, a slot).
//! - `on_complete` is called once per event a handler finished, from the worker that
//!   ran it, in no particular order across workers.
//! - `on_tick` is called by the controller thread at the stage's control interval.
//! - A stage may switch its admission control off (service degradation, USITS'03 3.4):
//!   the stage then admits without calling `admit`, but keeps calling `on_complete`.
//!
//! # Policies
//! | policy | law | source |
//! |---|---|---|
//! | [`Unbounded`] | admit everything (the queue's capacity still applies) | SEDA 3.2 |
//! | [`QueueThreshold`] | admit while queue length < threshold | SEDA 3.2 |
//! | [`Red`] | drop with probability rising linearly in the averaged queue length | Floyd & Jacobson 1993 |
//! | [`TokenBucketPolicy`] | fixed-rate token bucket | USITS'03 3.2 (the actuator) |
//! | [`ResponseTimePolicy`] | token bucket tuned AIMD from the p90 response time | USITS'03 3.2 |
//! | [`MulticlassPolicy`] | per-class buckets, lower classes cut first | USITS'03 3.3 |
//! | [`CoDel`] | shed when the queue delay stayed above target for an interval | Nichols & Jacobson 2012; adaptive CoDel |
//! | [`GradientLimit`] | concurrency limit from the ratio of long to short latency | Netflix concurrency-limits, Gradient2 |
//! | [`AimdLimit`] | concurrency limit, +1 on success, x backoff on slow responses | Netflix concurrency-limits, AIMD |
//! | [`DelayBudget`] | refuse when the predicted response time exceeds a budget the p90 loop sets | USITS'03 3.2's loop on a queue-delay actuator |

mod budget;
mod codel;
mod limit;
mod policy;
mod response_time;
mod simple;

pub use budget::{BudgetLoop, DelayBudget, DelayBudgetConfig};
pub use codel::{CoDel, CoDelConfig};
pub use limit::{AimdLimit, AimdLimitConfig, GradientLimit, GradientLimitConfig};
pub use policy::{AdmissionPolicy, AdmissionState, ClassState, Completion, Offer};
pub use response_time::{
    MulticlassConfig, MulticlassPolicy, ResponseTimeConfig, ResponseTimePolicy,
};
pub use simple::{QueueThreshold, Red, TokenBucket, TokenBucketPolicy, Unbounded};
