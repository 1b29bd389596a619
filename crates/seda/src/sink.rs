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
use crate::handler::Context;
use crate::lifecycle::{Frame, Origin};
use crate::runtime::Runtime;
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
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(sink.stage_name(), "log");
    /// ```
    pub fn stage_name(&self) -> &str {
        &self.slot.name
    }

    /// Enqueue one event, or hand it back. Inside a handler the event inherits the
    /// metadata of the event being handled.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// // Not started: the events wait in the queue, and the third does not fit.
    /// sink.try_enqueue("a".to_owned()).unwrap();
    /// sink.try_enqueue("b".to_owned()).unwrap();
    /// let err = sink.try_enqueue("c".to_owned()).unwrap_err();
    /// assert!(err.is_full());
    /// assert_eq!(err.into_inner(), "c"); // the event comes back
    /// ```
    pub fn try_enqueue(&self, event: E) -> Result<(), EnqueueError<E>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(event));
        };
        let (meta, origin) = Origin::current();
        core.offer(event, &meta, &origin)
    }

    /// Enqueue one event with explicit metadata, or hand it back.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Meta, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("work", |mut b: Batch<'_, u32>, _cx: &Context<'_>| {
    ///         while let Some((n, meta)) = b.next_with_meta() {
    ///             assert_eq!((n, meta.class()), (7, 2));
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// // A request of class 2 (USITS'03 3.3: higher classes are cut last).
    /// sink.try_enqueue_with(7, Meta::new().with_class(2)).unwrap();
    /// assert_eq!(sink.queue_len(), 1);
    /// ```
    pub fn try_enqueue_with(&self, event: E, meta: Meta) -> Result<(), EnqueueError<E>> {
        match self.core() {
            Some(core) => core.offer(event, &meta, &Origin::here()),
            None => Err(EnqueueError::Closed(event)),
        }
    }

    /// Enqueue, or drop the event if it cannot be enqueued. Returns whether it was
    /// enqueued; a drop is counted in the stage's `dropped` statistic.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// assert!(sink.enqueue_lossy("a".to_owned()));
    /// assert!(sink.enqueue_lossy("b".to_owned()));
    /// assert!(!sink.enqueue_lossy("c".to_owned())); // full: dropped and counted
    /// assert_eq!(rt.snapshot().stages[0].dropped, 1);
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// let three = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
    /// let back = sink.try_enqueue_batch(three).unwrap_err().into_inner();
    /// assert_eq!(back, ["a", "b", "c"]); // none was enqueued
    /// sink.try_enqueue_batch(vec!["a".to_owned(), "b".to_owned()]).unwrap();
    /// assert_eq!(sink.queue_len(), 2);
    /// ```
    pub fn try_enqueue_batch(&self, events: Vec<E>) -> Result<(), EnqueueError<Vec<E>>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(events));
        };
        let (meta, origin) = Origin::current();
        core.offer_batch(events, meta, origin)
    }

    /// Enqueue, waiting while the queue is full until there is space or `deadline`
    /// passes (backpressure). Rejection and a closed stage return at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// use std::time::{Duration, Instant};
    ///
    /// let soon = Instant::now() + Duration::from_millis(10);
    /// sink.enqueue_until("a".to_owned(), soon).unwrap();
    /// sink.enqueue_until("b".to_owned(), soon).unwrap();
    /// // Nobody drains the queue (the runtime is not started): waits, then Full.
    /// assert!(sink.enqueue_until("c".to_owned(), soon).unwrap_err().is_full());
    /// ```
    pub fn enqueue_until(&self, event: E, deadline: Instant) -> Result<(), EnqueueError<E>> {
        let Some(core) = self.core() else {
            return Err(EnqueueError::Closed(event));
        };
        let (meta, origin) = Origin::current();
        core.offer_until(event, meta, origin, deadline)
    }

    /// Events waiting in the queue now.
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let sink = rt
    ///     .stage("log", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
    ///     .capacity(2)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(sink.queue_len(), 0);
    /// sink.try_enqueue("a".to_owned()).unwrap();
    /// assert_eq!(sink.queue_len(), 1);
    /// ```
    pub fn queue_len(&self) -> usize {
        self.core().map_or(0, |c| c.queue_len())
    }

    /// The queue's capacity (0 while the stage is declared and not built).
    ///
    /// # Examples
    ///
    /// ```
    /// use seda::{Batch, Context, Runtime};
    ///
    /// let rt = Runtime::builder().build();
    /// let (sink, declared) = rt.declare::<u32>("later").unwrap();
    /// assert_eq!(sink.capacity(), 0); // no handler yet
    /// declared
    ///     .handler(|_b: Batch<'_, u32>, _cx: &Context<'_>| {})
    ///     .capacity(64)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(sink.capacity(), 64);
    /// ```
    pub fn capacity(&self) -> usize {
        self.core().map_or(0, |c| c.capacity())
    }
}

impl Runtime {
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

/// The timer methods of a handler's [`Context`] that name a [`Sink`]: here, so that
/// `handler.rs` (which `core` imports) does not import this file (which imports
/// `core`).
impl Context<'_> {
    /// Enqueues `event` to `sink` after `delay`; from a batch, the event inherits the
    /// metadata of the event being handled. A refusal when the timer fires is counted
    /// in the target stage's statistics.
    pub fn schedule<E: Send + 'static>(
        &self,
        delay: Duration,
        sink: &Sink<E>,
        event: E,
    ) -> TimerId {
        self.schedule_with(delay, sink, event, self.meta())
    }

    /// As [`Context::schedule`], with explicit metadata.
    pub fn schedule_with<E: Send + 'static>(
        &self,
        delay: Duration,
        sink: &Sink<E>,
        event: E,
        meta: Meta,
    ) -> TimerId {
        match self.stage.runtime() {
            Some(rt) => rt.schedule_with(delay, sink, event, meta),
            // The runtime is gone: nothing fires any more.
            None => TimerId::NONE,
        }
    }
}
