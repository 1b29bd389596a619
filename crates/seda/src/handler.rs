//! Event handlers: the code of a stage, the batches it gets, the context it sees.
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
//!
//! A stage in a [`crate::Domain`] may also be called inline, on the thread of the
//! stage (or domain member) that enqueued to it, with a batch of the events that
//! enqueue handed over; a one-thread stage is never called twice at once either way.

use std::fmt;
use std::time::Duration;

use crate::envelope::{Envelope, Meta};
use crate::error::InitError;
use crate::lifecycle::Frame;
use crate::runtime::Runtime;
use crate::timer::TimerId;

/// The code of a stage. See the module docs for the call order.
pub trait EventHandler<E>: Send + Sync + 'static {
    /// Called once before the first batch, when the runtime starts (or the stage is
    /// added to a running one); an error stops the start with
    /// [`RuntimeError::Init`](crate::RuntimeError::Init), which names the stage and
    /// keeps the error as its source.
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
    pub(crate) items: Items<'a, E>,
}

/// Where a batch's events come from: a worker's buffer, or the one event handed
/// over inline.
pub(crate) enum Items<'a, E> {
    Drain(std::vec::Drain<'a, Envelope<E>>),
    /// The one event of an inline hop, left in its caller's frame (an event is
    /// not moved through every layer of the hop).
    One(&'a mut Option<Envelope<E>>),
}

impl<E> Items<'_, E> {
    fn len(&self) -> usize {
        match self {
            Items::Drain(d) => d.len(),
            Items::One(o) => usize::from(o.is_some()),
        }
    }

    fn next(&mut self) -> Option<Envelope<E>> {
        match self {
            Items::Drain(d) => d.next(),
            Items::One(o) => o.take(),
        }
    }
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
        Frame::set_meta(env.meta);
        Some((env.event, env.meta))
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
    /// Whether this context belongs to a batch (else `init`).
    pub(crate) in_batch: bool,
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
    fn rejected(&self) -> u64;
    /// The runtime, while it exists (for timers; not on a hot path).
    fn runtime(&self) -> Option<Runtime>;
}

impl Context<'_> {
    /// Name of the stage.
    pub fn stage_name(&self) -> &str {
        self.stage.control_name()
    }

    /// Cancels a timer; true if it had not fired yet.
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.stage.runtime().is_some_and(|rt| rt.cancel_timer(id))
    }

    /// Whether the runtime is shutting down: a long-running handler (an event loop)
    /// checks it to return and let the drain finish.
    pub fn is_draining(&self) -> bool {
        self.stage.runtime().is_none_or(|rt| rt.is_draining())
    }

    /// Metadata of the event being handled (the one the batch yielded last), or fresh
    /// metadata outside a batch.
    pub fn meta(&self) -> Meta {
        if !self.in_batch {
            return Meta::new();
        }
        Frame::meta().unwrap_or_default()
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

    /// Events the stage's admission control has refused since it started (the
    /// service degradation hook's overload signal while admission control is on).
    pub fn rejected(&self) -> u64 {
        self.stage.rejected()
    }
}
