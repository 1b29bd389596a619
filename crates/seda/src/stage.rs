//! Stages: an event handler behind a bounded, admission-controlled queue.
//!
//! A handler processes a *batch* of events per call (SEDA 3.2); the batching
//! controller sizes the batch (SEDA 3.4). Iterating a [`Batch`] makes each event the
//! *current* event of the worker, so events the handler enqueues meanwhile inherit its
//! `born`, class and color (see [`crate::Sink`]).
//!
//! # Call order
//! `init` once, before any batch, when the runtime starts (or when the stage is added
//! to a running runtime); then `handle_events` any number of times, concurrently from
//! several workers unless the stage has one thread; `destroy` once, after the last
//! batch. A panic in `handle_events` is caught, counted and logged; the stage keeps
//! running and the batch's events count as processed.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::AdmissionPolicy;
use crate::control::{BatchingConfig, ThreadPoolConfig};
use crate::core::{Current, StageCore};
use crate::envelope::{Envelope, Meta};
use crate::exec::ThreadModel;
use crate::runtime::Runtime;

/// Error an `init` hook returns to stop the runtime from starting.
#[derive(Debug)]
pub struct InitError(pub String);

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InitError {}

impl From<String> for InitError {
    fn from(s: String) -> Self {
        InitError(s)
    }
}

impl From<&str> for InitError {
    fn from(s: &str) -> Self {
        InitError(s.to_owned())
    }
}

/// The code of a stage. See the module docs for the call order.
pub trait EventHandler<E>: Send + Sync + 'static {
    /// Called once before the first batch; look up downstream sinks here.
    fn init(&self, _cx: &Context<'_>) -> Result<(), InitError> {
        Ok(())
    }

    /// Handle a batch of events.
    fn handle_events(&self, batch: Batch<'_, E>, cx: &Context<'_>);

    /// Called once after the last batch.
    fn destroy(&self) {}
}

impl<E, F> EventHandler<E> for F
where
    F: Fn(Batch<'_, E>, &Context<'_>) + Send + Sync + 'static,
{
    fn handle_events(&self, batch: Batch<'_, E>, cx: &Context<'_>) {
        self(batch, cx)
    }
}

/// A batch of events handed to a handler. Iterating it yields the events in queue
/// order and makes each the worker's current event (for metadata propagation).
pub struct Batch<'a, E> {
    pub(crate) items: std::vec::Drain<'a, Envelope<E>>,
    pub(crate) current: &'a Cell<Option<Current>>,
}

impl<E> fmt::Debug for Batch<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.items.len())
            .finish()
    }
}

impl<E> Batch<'_, E> {
    /// Events left in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no events are left.
    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    /// The next event with its metadata.
    pub fn next_with_meta(&mut self) -> Option<(E, Meta)> {
        let env = self.items.next()?;
        self.set_current(env.meta);
        Some((env.event, env.meta))
    }

    fn set_current(&self, meta: Meta) {
        if let Some(mut cur) = self.current.get() {
            cur.meta = meta;
            self.current.set(Some(cur));
        }
    }
}

impl<E> Iterator for Batch<'_, E> {
    type Item = E;

    fn next(&mut self) -> Option<E> {
        self.next_with_meta().map(|(e, _)| e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.items.len(), Some(self.items.len()))
    }
}

impl<E> ExactSizeIterator for Batch<'_, E> {}

/// What a handler can see and change of its stage and runtime.
pub struct Context<'a> {
    pub(crate) stage: &'a dyn StageControl,
    pub(crate) runtime: &'a Runtime,
    pub(crate) current: Option<&'a Cell<Option<Current>>>,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("stage", &self.stage.control_name())
            .finish()
    }
}

/// The stage-level controls a context exposes, independent of the event type.
pub(crate) trait StageControl: Send + Sync {
    fn control_name(&self) -> &str;
    fn p90(&self) -> Option<Duration>;
    fn target(&self) -> Option<Duration>;
    fn admission_enabled(&self) -> bool;
    fn set_admission_enabled(&self, on: bool);
    fn queue_len(&self) -> usize;
}

impl Context<'_> {
    /// Name of the stage.
    pub fn stage_name(&self) -> &str {
        self.stage.control_name()
    }

    /// The runtime, to look up other stages' sinks.
    pub fn runtime(&self) -> &Runtime {
        self.runtime
    }

    /// Metadata of the event being handled (the one the batch yielded last), or fresh
    /// metadata outside a batch.
    pub fn meta(&self) -> Meta {
        self.current
            .and_then(|c| c.get())
            .map_or_else(Meta::new, |c| c.meta)
    }

    /// The stage's current 90th-percentile response time estimate: the admission
    /// controller's smoothed estimate if it keeps one, else the p90 of the last stats
    /// window (USITS'03 3.4: the input to service degradation).
    pub fn p90(&self) -> Option<Duration> {
        self.stage.p90()
    }

    /// The stage's response-time target, if its admission policy has one.
    pub fn rt_target(&self) -> Option<Duration> {
        self.stage.target()
    }

    /// Whether the stage's admission control is on.
    pub fn admission_enabled(&self) -> bool {
        self.stage.admission_enabled()
    }

    /// Switch the stage's admission control on or off (service degradation hook).
    pub fn set_admission_enabled(&self, on: bool) {
        self.stage.set_admission_enabled(on);
    }

    /// Events waiting in the stage's queue.
    pub fn queue_len(&self) -> usize {
        self.stage.queue_len()
    }
}

/// Configuration of one stage; built with [`crate::Runtime::stage`].
pub struct StageConfig {
    pub(crate) name: String,
    pub(crate) capacity: usize,
    pub(crate) admission: Option<Arc<dyn AdmissionPolicy>>,
    pub(crate) thread_model: Option<ThreadModel>,
    pub(crate) pool: ThreadPoolConfig,
    pub(crate) pool_controller: bool,
    pub(crate) batch: usize,
    pub(crate) batching: Option<BatchingConfig>,
}

impl fmt::Debug for StageConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageConfig")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("admission", &self.admission.as_ref().map(|a| a.name()))
            .field("thread_model", &self.thread_model)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// Builder of a stage, returned by [`crate::Runtime::stage`]; `build` registers it.
pub struct StageBuilder<'r, E: Send + 'static> {
    pub(crate) runtime: &'r Runtime,
    pub(crate) config: StageConfig,
    pub(crate) handler: Box<dyn EventHandler<E>>,
}

impl<E: Send + 'static> fmt::Debug for StageBuilder<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

/// Default queue capacity of a stage.
pub const DEFAULT_CAPACITY: usize = 4096;

impl<'r, E: Send + 'static> StageBuilder<'r, E> {
    pub(crate) fn new(runtime: &'r Runtime, name: &str, handler: Box<dyn EventHandler<E>>) -> Self {
        StageBuilder {
            runtime,
            config: StageConfig {
                name: name.to_owned(),
                capacity: DEFAULT_CAPACITY,
                admission: None,
                thread_model: None,
                pool: ThreadPoolConfig::default(),
                pool_controller: true,
                batch: 32,
                batching: None,
            },
            handler,
        }
    }

    /// Hard bound of the input queue (default [`DEFAULT_CAPACITY`]); at least 1.
    #[must_use]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.config.capacity = capacity;
        self
    }

    /// Admission policy guarding the queue (default: none, i.e. only the capacity).
    #[must_use]
    pub fn admission(mut self, policy: impl AdmissionPolicy) -> Self {
        self.config.admission = Some(Arc::new(policy));
        self
    }

    /// Admission policy shared with the caller (to read its state or tune it).
    #[must_use]
    pub fn admission_shared(mut self, policy: Arc<dyn AdmissionPolicy>) -> Self {
        self.config.admission = Some(policy);
        self
    }

    /// Thread model of this stage, overriding the runtime's default.
    #[must_use]
    pub fn thread_model(mut self, model: ThreadModel) -> Self {
        self.config.thread_model = Some(model);
        self
    }

    /// Own-pool size bounds: starts at `min`, the thread-pool controller grows it up
    /// to `max`. Only for the per-stage thread model.
    #[must_use]
    pub fn threads(mut self, min: usize, max: usize) -> Self {
        self.config.pool.min_threads = min;
        self.config.pool.max_threads = max;
        self
    }

    /// Full thread-pool controller configuration (per-stage thread model).
    #[must_use]
    pub fn thread_pool(mut self, config: ThreadPoolConfig) -> Self {
        self.config.pool = config;
        self
    }

    /// Turn the thread-pool controller off: the pool stays at its minimum size.
    #[must_use]
    pub fn fixed_threads(mut self, n: usize) -> Self {
        self.config.pool.min_threads = n;
        self.config.pool.max_threads = n;
        self.config.pool_controller = false;
        self
    }

    /// Fixed batching factor: at most `n` events per handler call (default 32).
    #[must_use]
    pub fn batch(mut self, n: usize) -> Self {
        self.config.batch = n;
        self.config.batching = None;
        self
    }

    /// Let the batching controller choose the batching factor.
    #[must_use]
    pub fn batching(mut self, config: BatchingConfig) -> Self {
        self.config.batching = Some(config);
        self
    }

    /// Registers the stage and returns its sink. A stage added to a running runtime
    /// starts at once.
    pub fn build(self) -> Result<crate::Sink<E>, crate::runtime::RuntimeError> {
        let core = StageCore::build(self.runtime, self.config, self.handler)?;
        self.runtime.register(core)
    }
}
