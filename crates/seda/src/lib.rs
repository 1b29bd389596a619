//! # seda: the staged event-driven runtime
//!
//! A service is a graph of *stages* joined by bounded queues (SEDA, SOSP'01 section
//! 3). Each stage has an event handler that processes batches, an admission policy on
//! its input queue, a thread model, and controllers that tune it while it runs: the
//! thread-pool and batching controllers (SEDA 3.4) and the response-time admission
//! controllers (USITS'03 3.2-3.3). Events may carry a *color* (libasync-mp): events of
//! one color never run concurrently and run in enqueue order.
//!
//! Stages may be grouped in thread-pool *domains* ([`Domain`], Welsh's retrospective):
//! within a domain an enqueue may run the next stage's handler inline, still counted,
//! admitted and graphed by that stage, when its queue is empty; a thread that is not
//! a stage's (an event loop) joins a domain with [`Domain::enter`].
//!
//! The hot path: a stage's queue is a bounded lock-free ring plus one atomic state
//! word (lifecycle and counts, so admission and shutdown need no lock); a worker is
//! woken only if one sleeps; clock reads are per batch; counters and latency samples
//! go to per-worker slots that the controller thread merges at its tick (see the
//! `queue` and `stats::recorder` modules for the invariants and the error bounds).
//!
//! ```
//! use seda::{Runtime, Batch, Context};
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let rt = Runtime::builder().build();
//! let seen = Arc::new(AtomicUsize::new(0));
//! let count = seen.clone();
//! let sink = rt
//!     .stage("count", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
//!         count.fetch_add(batch.count(), Ordering::Relaxed);
//!     })
//!     .capacity(1024)
//!     .build()
//!     .unwrap();
//! rt.start().unwrap();
//! for i in 0..100 {
//!     sink.try_enqueue(i).unwrap();
//! }
//! let report = rt.shutdown(Duration::from_secs(5));
//! assert!(report.drained);
//! assert_eq!(seen.load(Ordering::Relaxed), 100);
//! ```

pub mod clock;
mod color;
mod core;
mod domain;
mod envelope;
mod error;
mod exec;
mod handler;
mod lifecycle;
mod loom;
mod queue;
mod runtime;
mod setters;
mod sink;
mod stage;
mod stats;
mod timer;
mod unknown;

pub mod admission;
pub mod control;

pub(crate) use crate::setters::setters;

pub use crate::domain::{Domain, MAX_INLINE_DEPTH};
pub use crate::envelope::{Class, Color, Meta};
pub use crate::error::{EnqueueError, InitError};
pub use crate::exec::ThreadModel;
pub use crate::handler::{Batch, Context, EventHandler};
pub use crate::lifecycle::Lifecycle;
pub use crate::runtime::{Runtime, RuntimeBuilder, RuntimeError, ShutdownReport, StageShutdown};
pub use crate::sink::Sink;
pub use crate::stage::{DEFAULT_CAPACITY, Declared, StageBuilder};
pub use crate::stats::prometheus::{MetricKind, MetricValue, PrometheusText};
pub use crate::stats::{ClassCounts, LatencySummary, RuntimeSnapshot, StageSnapshot};
pub use crate::timer::TimerId;
pub use crate::unknown::UnknownName;
