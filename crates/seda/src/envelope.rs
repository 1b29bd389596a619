//! Event metadata carried with every event through the stage graph.
//!
//! # Invariants
//! - `born` never changes once a request has entered the service: an event emitted
//!   while handling another inherits it (and `class`) unless the handler overrides it,
//!   so `now - born` at any stage is the request's response time so far (USITS'03 3.2).
//! - `born` is kept as nanoseconds on the runtime's clock ([`crate::clock`]): a
//!   `u64`, cheap to copy, compare and subtract.

use std::time::Instant;

use crate::clock;

/// A color (libasync-mp, chapter 3): events with the same color never run at the same
/// time anywhere in the runtime, and run in the order they were enqueued.
///
/// # Examples
/// ```
/// use seda::{Color, Meta};
/// let conn = Color::new(17);
/// let meta = Meta::new().with_color(conn);
/// assert_eq!(meta.color(), Some(conn));
/// assert_eq!(conn.get(), 17);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Color(u64);

impl Color {
    /// The color named `id` (a connection, a session, a cache: any id the
    /// application picks).
    pub const fn new(id: u64) -> Self {
        Color(id)
    }

    /// The id this color was made with.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// Priority class of a request; 0 is the lowest.
pub type Class = u8;

/// Metadata of one event: when its request was born, its class, its color and a
/// scheduling hint. `Copy`, so that it is cheap to read and to propagate.
///
/// # Examples
/// ```
/// use seda::Meta;
/// use std::time::Instant;
///
/// let t = Instant::now();
/// let meta = Meta::born_at(t).with_class(2);
/// assert_eq!(meta.class(), 2);
/// assert_eq!(meta.color(), None);
/// // `born` is kept to the nanosecond.
/// assert!(meta.born().duration_since(t).as_nanos() < 1_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// When the request entered the service, on the runtime's clock.
    born: u64,
    color: Option<Color>,
    class: Class,
    priority: u8,
}

impl Meta {
    /// Metadata of a request entering the service now, class 0, uncolored.
    pub fn new() -> Self {
        Self::born_ns(clock::now())
    }

    /// Metadata of a request that entered the service at `born`.
    pub fn born_at(born: Instant) -> Self {
        Self::born_ns(clock::nanos(born))
    }

    pub(crate) const fn born_ns(born: u64) -> Self {
        Meta {
            born,
            color: None,
            class: 0,
            priority: 0,
        }
    }

    /// When the request entered the service.
    pub fn born(&self) -> Instant {
        clock::instant(self.born)
    }

    /// When the request entered the service, in nanoseconds on the runtime's
    /// clock ([`crate::clock`]): `born` without converting to an [`Instant`], for a
    /// handler that does its own arithmetic on it (a connection's clock, say).
    ///
    /// # Examples
    ///
    /// ```
    /// let m = seda::Meta::new();
    /// assert!(m.born_nanos() <= seda::clock::now());
    /// assert_eq!(m.with_born_nanos(42).born_nanos(), 42);
    /// ```
    #[inline]
    pub fn born_nanos(&self) -> u64 {
        self.born
    }

    /// Priority class, 0 lowest. Admission control cuts lower classes first.
    pub fn class(&self) -> Class {
        self.class
    }

    /// The color, if any: mutual exclusion and ordering among same-colored events.
    pub fn color(&self) -> Option<Color> {
        self.color
    }

    /// Scheduling hint among runnable colored events: higher runs first.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// The same metadata for a request born at another instant.
    #[must_use]
    pub fn with_born(mut self, born: Instant) -> Self {
        self.born = clock::nanos(born);
        self
    }

    /// The same metadata for a request born `ns` nanoseconds after the clock's
    /// epoch (see [`Meta::born_nanos`]).
    #[must_use]
    #[inline]
    pub fn with_born_nanos(mut self, ns: u64) -> Self {
        self.born = ns;
        self
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
    /// When it was admitted to the queue, on the runtime's clock (queueing delay).
    pub(crate) enqueued: u64,
    /// Ticket in its color slot's order (0 when uncolored).
    pub(crate) ticket: u32,
}
