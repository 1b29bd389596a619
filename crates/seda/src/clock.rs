//! The runtime's clock: nanoseconds since a process-wide epoch, as a `u64`.
//!
//! Times inside the runtime (`born`, enqueue instants, batch start and end) are
//! `u64` nanoseconds: 8 bytes to copy, one subtraction to compare. The clock is read
//! where a measurement needs it, not per event:
//! - a worker reads it once at the end of each batch; that reading is also the start
//!   of its next batch unless the worker slept in between (then it reads again);
//! - an event-loop thread reads it once per turn and passes it as `born`;
//! - an inline run reads it only when it is *timed* (its stage has an admission
//!   policy, which needs every response time, or it is recorded as a sample, see
//!   `stats::recorder`); an untimed inline run reads nothing;
//! - an enqueue from a thread outside the runtime with no explicit metadata reads it
//!   for the new request's `born`.
//!
//! The epoch is set at the clock's first use, a day back, so that every instant a
//! process takes, even before its first runtime, reads exactly; earlier instants
//! read as 0. (Reading `CLOCK_MONOTONIC` through rustix's vDSO call instead of
//! `Instant` was tried: it crashes valgrind's callgrind, which the instruction-count
//! benchmarks need.)
//!
//! Public: [`now`], [`nanos`] and [`instant`], for an application that keeps times
//! of its own on the same scale as its events' `born` (`Meta::born_nanos`): a `u64`
//! to subtract instead of an `Instant` (whose subtraction costs ~37 instructions).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// How far back of its first use the epoch lies.
const BACK: Duration = Duration::from_secs(86_400);

/// The clock's origin.
#[inline]
pub(crate) fn epoch() -> Instant {
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(BACK).unwrap_or(now)
    })
}

/// Now, in nanoseconds since the clock's epoch: the scale of
/// [`Meta::born_nanos`](crate::Meta::born_nanos). Compare readings only with each
/// other.
///
/// # Examples
///
/// ```
/// let a = seda::clock::now();
/// let b = seda::clock::now();
/// assert!(a > 0 && b >= a);
/// ```
#[inline]
pub fn now() -> u64 {
    nanos(Instant::now())
}

/// `t` in nanoseconds since the clock's epoch (0 before it).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// let t = Instant::now();
/// let later = t + Duration::from_millis(3);
/// assert_eq!(seda::clock::nanos(later) - seda::clock::nanos(t), 3_000_000);
/// ```
#[inline]
pub fn nanos(t: Instant) -> u64 {
    let d = t.saturating_duration_since(epoch());
    d.as_secs()
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(d.subsec_nanos()))
}

/// The instant `ns` nanoseconds after the clock's epoch (the inverse of [`nanos`]).
///
/// # Examples
///
/// ```
/// let t = std::time::Instant::now();
/// assert_eq!(seda::clock::instant(seda::clock::nanos(t)), t);
/// ```
#[inline]
pub fn instant(ns: u64) -> Instant {
    epoch() + Duration::from_nanos(ns)
}

/// The duration between two readings (0 if `later` is earlier).
#[inline]
pub(crate) fn between(earlier: u64, later: u64) -> Duration {
    Duration::from_nanos(later.saturating_sub(earlier))
}

thread_local! {
    /// The end of the last batch this thread ran (0: it slept since, read anew).
    static LAST_END: Cell<u64> = const { Cell::new(0) };
}

/// The calling worker is about to sleep: its next batch reads the clock anew.
pub(crate) fn clock_stale() {
    LAST_END.with(|c| c.set(0));
}

/// The start of a queued batch on this thread: the end of its last batch, or a
/// fresh reading if the worker slept since.
pub(crate) fn batch_start() -> u64 {
    match LAST_END.with(Cell::get) {
        0 => now(),
        t => t,
    }
}

/// Records the end of a batch on this thread (the start of its next one).
pub(crate) fn batch_end(end: u64) {
    LAST_END.with(|c| c.set(end));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings and instants are one scale: a reading and an `Instant` taken
    /// together agree, and instants convert both ways exactly.
    #[test]
    fn readings_and_instants_agree() {
        for _ in 0..100 {
            let a = now();
            let t = Instant::now();
            let b = now();
            let n = nanos(t);
            assert!(a <= n && n <= b, "{a} {n} {b}");
            assert_eq!(instant(n), t);
        }
        assert!(
            now() >= BACK.as_secs() * 1_000_000_000,
            "the epoch is a day back"
        );
    }
}
