//! The state every service made by one layer shares: the policy, the requests in
//! flight, the counters and the lazily driven tick clock. A [`Permit`] is one admitted
//! request; dropping it is the request's completion.
//!
//! # Invariants
//! - `in_flight` counts live [`Permit`]s: it is raised before the policy is asked
//!   (so concurrent offers see distinct counts and a limit of `n` admits at most `n`),
//!   lowered again if the request is refused, and lowered by exactly one when a permit
//!   drops.
//! - The policy gets exactly one `on_complete` per admitted request, from the permit's
//!   `Drop`, whether the response future finished, failed or was dropped.
//! - Ticks are at least `tick_interval` apart, whoever drives them (admissions,
//!   [`AdmissionHandle::tick`](super::AdmissionHandle::tick), a
//!   [`Ticker`](super::Ticker)): one compare-and-swap on `next_tick_ns` elects the one
//!   caller that ticks.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seda::Class;
use seda::admission::{AdmissionPolicy, Completion, Offer};

use super::error::{Overloaded, Refusal};

/// Settings of one layer, fixed when it is built.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) policy: Arc<dyn AdmissionPolicy>,
    pub(crate) max_in_flight: usize,
    pub(crate) retry_after: Duration,
    pub(crate) tick_interval: Duration,
    pub(crate) clock: fn() -> Instant,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("policy", &self.policy.name())
            .field("max_in_flight", &self.max_in_flight)
            .field("retry_after", &self.retry_after)
            .field("tick_interval", &self.tick_interval)
            .finish_non_exhaustive()
    }
}

/// Admitted and refused requests per class (`Class` is a `u8`, so a fixed table).
struct ClassCounters {
    admitted: [AtomicU64; 256],
    rejected: [AtomicU64; 256],
}

pub(crate) struct Gate {
    pub(crate) settings: Settings,
    in_flight: AtomicUsize,
    /// `clock()` when the gate was made; tick times are nanoseconds since then.
    origin: Instant,
    next_tick_ns: AtomicU64,
    tick_ns: u64,
    counters: Box<ClassCounters>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("settings", &self.settings)
            .field("in_flight", &self.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Gate {
    pub(crate) fn new(settings: Settings) -> Self {
        let origin = (settings.clock)();
        let tick_ns = u64::try_from(settings.tick_interval.as_nanos()).unwrap_or(u64::MAX);
        Self {
            settings,
            in_flight: AtomicUsize::new(0),
            origin,
            next_tick_ns: AtomicU64::new(tick_ns),
            tick_ns,
            counters: Box::new(ClassCounters {
                admitted: std::array::from_fn(|_| AtomicU64::new(0)),
                rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        }
    }

    pub(crate) fn now(&self) -> Instant {
        (self.settings.clock)()
    }

    pub(crate) fn policy(&self) -> &dyn AdmissionPolicy {
        &*self.settings.policy
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(crate) fn counts(&self, class: Class) -> (u64, u64) {
        let c = &self.counters;
        (
            c.admitted[usize::from(class)].load(Ordering::Relaxed),
            c.rejected[usize::from(class)].load(Ordering::Relaxed),
        )
    }

    /// Ticks the policy if `tick_interval` has passed since the last tick; returns
    /// whether this call ticked.
    pub(crate) fn tick_if_due(&self, now: Instant) -> bool {
        let t = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX);
        let next = self.next_tick_ns.load(Ordering::Relaxed);
        if t < next {
            return false;
        }
        let won = self
            .next_tick_ns
            .compare_exchange(
                next,
                t.saturating_add(self.tick_ns),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok();
        if won {
            self.policy().on_tick(now);
        }
        won
    }

    /// Offers one request of `class` to the cap and the policy.
    pub(crate) fn admit(
        self: &Arc<Self>,
        class: Class,
        born: Option<Instant>,
    ) -> Result<Permit, Overloaded> {
        let now = self.now();
        self.tick_if_due(now);
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let refusal = if before >= self.settings.max_in_flight {
            Some(Refusal::InFlightLimit)
        } else {
            let offer = Offer {
                class,
                queue_len: 0,
                in_flight: before,
                capacity: self.settings.max_in_flight,
                now,
            };
            (!self.policy().admit(&offer)).then_some(Refusal::Policy)
        };
        let counters = &self.counters;
        if let Some(refusal) = refusal {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            counters.rejected[usize::from(class)].fetch_add(1, Ordering::Relaxed);
            return Err(Overloaded::new(class, refusal, self.settings.retry_after));
        }
        counters.admitted[usize::from(class)].fetch_add(1, Ordering::Relaxed);
        Ok(Permit {
            gate: Arc::clone(self),
            class,
            seen: now,
            queue_delay: born.map_or(Duration::ZERO, |b| now.saturating_duration_since(b)),
        })
    }
}

/// One admitted request. Dropping it completes the request: the slot is released and
/// the policy learns the response time.
pub(crate) struct Permit {
    gate: Arc<Gate>,
    class: Class,
    /// When the layer saw the request.
    seen: Instant,
    /// `seen - born`: how long the request existed before the layer saw it.
    queue_delay: Duration,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("class", &self.class)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let gate = &*self.gate;
        let now = gate.now();
        let before = gate.in_flight.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "permit dropped with no request in flight");
        let service_time = now.saturating_duration_since(self.seen);
        gate.policy().on_complete(&Completion {
            class: self.class,
            response_time: self.queue_delay + service_time,
            queue_delay: self.queue_delay,
            service_time,
            in_flight: before.saturating_sub(1),
            now,
        });
    }
}
