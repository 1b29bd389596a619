//! Thread models: who runs a stage's batches.
//!
//! Both models sit behind the same stage API and can be mixed in one runtime:
//! - [`ThreadModel::PerStage`] (Sandstorm's thread-per-stage, TPS; [`per_stage`]): a
//!   stage owns a pool of threads that only run its batches, sized between min and
//!   max by the thread-pool controller (SEDA 3.4). Right for stages that block.
//! - [`ThreadModel::Shared`] (thread-per-processor, TPP; SEDA footnote 2;
//!   [`shared`]): a fixed set of workers, one per core by default, runs the batches
//!   of every stage that has work. Right for CPU-bound stages: no more runnable
//!   threads than cores.
//!
//! Invariant a shared-model handler must keep: it never blocks, not even waiting for
//! space in a downstream queue. A worker that waits holds one of the few per-core
//! threads, and the stage it waits for may need exactly that thread to drain: with
//! two workers, two stages spinning on full successors stall the whole graph. On
//! `Full`, a shared-model handler hands the event back, rejects the request upstream
//! or drops it counted; blocking handlers belong on per-stage pools.

pub(crate) mod per_stage;
pub(crate) mod shared;

use std::thread::JoinHandle;
use std::time::Instant;

use crate::error::InitError;
use crate::lifecycle::Lifecycle;
use crate::stats::StageSnapshot;

/// How a stage's batches are run. `#[non_exhaustive]`: a match outside seda needs a
/// `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ThreadModel {
    /// The stage has its own pool, sized by the thread-pool controller.
    #[default]
    PerStage,
    /// The stage's batches run on the runtime's shared per-core workers. Its handler
    /// must never block (not even for space downstream): a waiting worker can hold the
    /// thread the stage it waits for needs, and the graph stalls.
    Shared,
}

impl ThreadModel {
    /// `"per-stage"` or `"shared"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadModel::PerStage => "per-stage",
            ThreadModel::Shared => "shared",
        }
    }
}

impl std::str::FromStr for ThreadModel {
    type Err = crate::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "per-stage" | "tps" => Ok(ThreadModel::PerStage),
            "shared" | "tpp" => Ok(ThreadModel::Shared),
            other => Err(crate::UnknownName::new(
                "thread model",
                "per-stage or shared",
                other,
            )),
        }
    }
}

impl std::fmt::Display for ThreadModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type-erased face of a stage, for the runtime, the driver and the shared pool.
pub(crate) trait StageObj: Send + Sync + 'static {
    fn id(&self) -> usize;
    fn name(&self) -> &str;
    fn model(&self) -> ThreadModel;
    /// Shared pool: takes one batch, hands the schedule token on, runs the batch.
    fn run_once(&self);
    /// Runs the stage's `init` hook, then its threads (or schedules it).
    fn start(&self) -> Result<(), InitError>;
    fn set_lifecycle(&self, state: Lifecycle);
    fn lifecycle(&self) -> Lifecycle;
    fn in_flight(&self) -> usize;
    fn control(&self, now: Instant);
    fn snapshot(&self) -> StageSnapshot;
    fn incoming(&self) -> Vec<usize>;
    fn take_handles(&self) -> Vec<JoinHandle<()>>;
    /// Forgets what is still queued; returns the (waiting, running) counts.
    fn abandon(&self) -> (usize, usize);
    fn destroy(&self);
}
