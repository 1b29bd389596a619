//! Event metadata carried with every event through the stage graph.
//!
//! # Invariants
//! - `born` never changes once a request has entered the service: an event emitted
//!   while handling another inherits it (and `class`) unless the handler overrides it,
//!   so `now - born` at any stage is the request's response time so far (USITS'03 3.2).

use std::time::Instant;

/// A color (libasync-mp, chapter 3): events with the same color never run at the same
/// time anywhere in the runtime, and run in the order they were enqueued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Color(pub u64);

/// Priority class of a request; 0 is the lowest.
pub type Class = u8;

/// Metadata of one event. `Copy`, so that it is cheap to read and to propagate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// When the request entered the service.
    pub born: Instant,
    /// Priority class, 0 lowest. Admission control cuts lower classes first.
    pub class: Class,
    /// Optional color: mutual exclusion and ordering among same-colored events.
    pub color: Option<Color>,
    /// Scheduling hint among runnable colored events: higher runs first.
    pub priority: u8,
}

impl Meta {
    /// Metadata of a request entering the service now, class 0, uncolored.
    pub fn new() -> Self {
        Self::born_at(Instant::now())
    }

    /// Metadata of a request that entered the service at `born`.
    pub fn born_at(born: Instant) -> Self {
        Meta {
            born,
            class: 0,
            color: None,
            priority: 0,
        }
    }

    /// The same metadata with another class.
    #[must_use]
    pub fn with_class(mut self, class: Class) -> Self {
        self.class = class;
        self
    }

    /// The same metadata with a color (or none).
    #[must_use]
    pub fn with_color(mut self, color: impl Into<Option<Color>>) -> Self {
        self.color = color.into();
        self
    }

    /// The same metadata with a scheduling priority hint.
    #[must_use]
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }
}

impl Default for Meta {
    fn default() -> Self {
        Self::new()
    }
}

/// An event and its metadata, as it sits in a queue.
#[derive(Debug)]
pub(crate) struct Envelope<E> {
    pub(crate) event: E,
    pub(crate) meta: Meta,
    /// When it was admitted to the queue (for the queueing-delay histogram).
    pub(crate) enqueued: Instant,
    /// Ticket in its color's global order (0 when uncolored).
    pub(crate) ticket: u64,
}
