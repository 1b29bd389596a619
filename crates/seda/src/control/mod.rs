//! Controllers: the feedback loops that tune a stage while it runs (SEDA 3.4, USITS'03 3).
//!
//! Every controller here is a *pure* state machine: it is fed an observation and
//! returns an adjustment, with no threads, clocks or locks of its own. The runtime's
//! controller thread samples each stage and applies the adjustments; tests replay
//! synthetic traces through the same `step` functions.
//!
//! | controller | paper | observation | adjustment |
//! |---|---|---|---|
//! | `ThreadPoolController` | SEDA 3.4, Fig. 8 | queue length, idle threads | grow / shrink the pool |
//! | `BatchingController` | SEDA 3.4, Fig. 9 | output rate | batching factor |
//! | [`QualityController`] | USITS'03 3.4 | p90 vs target | quality factor, admission on/off |
//!
//! The runtime drives the thread-pool and batching controllers itself; a user sets
//! their configurations ([`ThreadPoolConfig`], [`BatchingConfig`]) on the stage
//! builder, and the controllers and their observations are the crate's own (their
//! trace tests are in `control/tests.rs`). An application drives the quality
//! controller from its own hooks (Haboob's bottleneck does), so it is public. The
//! response-time controllers of USITS'03 3.2-3.3 live with the policies they tune, in
//! [`crate::admission`] ([`ResponseTimeConfig`](crate::admission::ResponseTimeConfig),
//! [`MulticlassConfig`](crate::admission::MulticlassConfig)).

mod batching;
mod error;
mod quality;
#[cfg(test)]
mod tests;
mod thread_pool;

pub use batching::BatchingConfig;
pub(crate) use batching::{BatchObservation, BatchingController};
pub use error::ConfigError;
pub(crate) use error::check;
pub use quality::{QualityConfig, QualityController, QualityDecision};
pub use thread_pool::ThreadPoolConfig;
pub(crate) use thread_pool::{PoolAdjustment, PoolObservation, ThreadPoolController};
