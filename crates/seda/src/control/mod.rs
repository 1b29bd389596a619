//! Controllers: the feedback loops that tune a stage while it runs (SEDA 3.4, USITS'03 3).
//!
//! Every controller here is a *pure* state machine: it is fed an observation and
//! returns an adjustment, with no threads, clocks or locks of its own. The runtime's
//! controller thread samples each stage and applies the adjustments; tests replay
//! synthetic traces through the same `step` functions.
//!
//! | controller | paper | observation | adjustment |
//! |---|---|---|---|
//! | [`ThreadPoolController`] | SEDA 3.4, Fig. 8 | queue length, idle threads | grow / shrink the pool |
//! | [`BatchingController`] | SEDA 3.4, Fig. 9 | output rate | batching factor |
//! | [`ResponseTimeController`] | USITS'03 3.2 | 90th-percentile response time | token-bucket rate |
//! | [`MulticlassController`] | USITS'03 3.3 | per-class p90 | per-class rates |
//! | [`QualityController`] | USITS'03 3.4 | p90 vs target | quality factor, admission on/off |

mod batching;
mod multiclass;
mod quality;
mod response_time;
mod thread_pool;

pub use batching::{BatchObservation, BatchingConfig, BatchingController};
pub use multiclass::{MulticlassConfig, MulticlassController};
pub use quality::{QualityConfig, QualityController, QualityDecision};
pub use response_time::{P90Window, RateChange, ResponseTimeConfig, ResponseTimeController};
pub use thread_pool::{PoolAdjustment, PoolObservation, ThreadPoolConfig, ThreadPoolController};

/// A controller configuration that fails validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError(msg())) }
}
