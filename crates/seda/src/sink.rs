//! Sinks: the handle to a stage's input queue.
//!
//! A failed enqueue hands the event back (as crossbeam's `TrySendError` does), so the
//! caller decides what overload means for it: a 503, a redirect, a degraded answer, a
//! retry. Nothing is dropped silently: even [`Sink::enqueue_lossy`] counts what it
//! drops in the stage's stats.
//!
//! # Metadata propagation
//! Called from inside a handler, the plain enqueue methods give the new event the
//! `born` time, class and color of the event being handled (SEDA's request
//! lineage; USITS'03 3.2 measures response time from `born`), and record an edge of
//! the stage graph. Use the `*_with` variants to set metadata explicitly.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::core::StageCore;
use crate::envelope::Meta;
pub use crate::error::EnqueueError;
use crate::lifecycle::{Frame, Origin};
use crate::runtime::{Runtime, RuntimeError};
use crate::timer::TimerId;

/// The handle to a stage's input queue. Cheap to clone; `Send + Sync`.
///
/// A sink exists as soon as its stage is built ([`crate::StageBuilder::build`]) or
/// declared ([`Runtime::declare`]); enqueues to a declared stage whose handler has not
/// been given yet are refused with `Closed`.
pub struct Sink<E: Send + 'static> {
    pub(crate) slot: Arc<SinkSlot<E>>,
}

/// What every clone of a sink points at: the stage, once it is built.
pub(crate) struct SinkSlot<E: Send + 'static> {
    pub(crate) core: OnceLock<Arc<StageCore<E>>>,
    pub(crate) name: String,
}

impl<E: Send + 'static> Sink<E> {
    pub(crate) fn declared(name: &str) -> Self {
        Sink {
            slot: Arc::new(SinkSlot {
                core: OnceLock::new(),
                name: name.to_owned(),
            }),
        }
    }

    #[inline]
    pub(crate) fn core(&self) -> Option<&Arc<StageCore<E>>> {
        self.slot.core.get()
    }
}

impl<E: Send + 'static> Clone for Sink<E> {
    fn clone(&self) -> Self {
        Sink {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<E: Send + 'static> fmt::Debug for Sink<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink")
            .field("stage", &self.slot.name)
            .finish()
    }
}

impl<E: Send + 'static> Sink<E> {
    /// Name of the stage this sink feeds.
    pub fn stage_name(&self) -> &str {
        &self.slot.name
    }

    /// Enqueue one event, or hand it back. Inside a handler the event inherits the
    /// metadata of the event being handled.
    pub fn try_enqueue(&self, event: E) -> Result<(), EnqueueError<E>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(event));
        };
        let (meta, origin) = Origin::current();
        core.offer(event, &meta, &origin)
    }

    /// Enqueue one event with explicit metadata, or hand it back.
    pub fn try_enqueue_with(&self, event: E, meta: Meta) -> Result<(), EnqueueError<E>> {
        match self.core() {
            Some(core) => core.offer(event, &meta, &Origin::here()),
            None => Err(EnqueueError::Closed(event)),
        }
    }

    /// Enqueue, or drop the event if it cannot be enqueued. Returns whether it was
    /// enqueued; a drop is counted in the stage's `dropped` statistic.
    pub fn enqueue_lossy(&self, event: E) -> bool {
        match self.try_enqueue(event) {
            Ok(()) => true,
            Err(_) => {
                if let Some(core) = self.core() {
                    core.count_dropped(1);
                }
                false
            }
        }
    }

    /// Enqueue all events or none: on failure every event is handed back, in order.
    pub fn try_enqueue_batch(&self, events: Vec<E>) -> Result<(), EnqueueError<Vec<E>>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(events));
        };
        let (meta, origin) = Origin::current();
        core.offer_batch(events, meta, origin)
    }

    /// Enqueue, waiting while the queue is full until there is space or `deadline`
    /// passes (backpressure). Rejection and a closed stage return at once.
    pub fn enqueue_until(&self, event: E, deadline: Instant) -> Result<(), EnqueueError<E>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(event));
        };
        let (meta, origin) = Origin::current();
        core.offer_until(event, meta, origin, deadline)
    }

    /// Events waiting in the queue now.
    pub fn queue_len(&self) -> usize {
        self.core().map_or(0, |c| c.queue_len())
    }

    /// The queue's capacity (0 while the stage is declared and not built).
    pub fn capacity(&self) -> usize {
        self.core().map_or(0, |c| c.capacity())
    }
}

impl Runtime {
    /// The sink of the stage named `name`, which must take events of type `E`.
    pub fn sink<E: Send + 'static>(&self, name: &str) -> Result<Sink<E>, RuntimeError> {
        let sinks = self.inner.sinks.read();
        let any = sinks
            .get(name)
            .ok_or_else(|| RuntimeError::NoSuchStage(name.to_owned()))?;
        any.downcast_ref::<Sink<E>>()
            .cloned()
            .ok_or_else(|| RuntimeError::WrongEventType {
                stage: name.to_owned(),
                requested: std::any::type_name::<E>(),
            })
    }

    /// Enqueues `event` to `sink` after `delay`. Scheduled from a handler, the event
    /// inherits the current event's metadata. If the enqueue fails when the timer
    /// fires, the refusal is counted in the target stage's statistics.
    pub fn schedule<E: Send + 'static>(
        &self,
        delay: Duration,
        sink: &Sink<E>,
        event: E,
    ) -> TimerId {
        let (meta, _) = Origin::current();
        self.schedule_with(delay, sink, event, meta)
    }

    /// As [`Runtime::schedule`], with explicit metadata.
    pub fn schedule_with<E: Send + 'static>(
        &self,
        delay: Duration,
        sink: &Sink<E>,
        event: E,
        meta: Meta,
    ) -> TimerId {
        let sink = sink.clone();
        let rt = self.inner.id;
        self.inner.timers.schedule(
            Instant::now() + delay,
            Box::new(move || {
                Frame::enter_timer(rt, meta, || {
                    if let Err(e) = sink.try_enqueue_with(event, meta) {
                        tracing::debug!(stage = sink.stage_name(), "timer event refused: {e}");
                    }
                });
            }),
        )
    }
}
