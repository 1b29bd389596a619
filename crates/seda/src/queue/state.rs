//! The stage's state word: lifecycle and every count a shutdown, an admission
//! decision or a sleeping worker needs, in one `u64`, so that each transition is one
//! atomic operation and every reader sees a consistent set.
//!
//! Layout (low to high): `queued` 22 bits | `parked` 22 bits | `running` 18 bits |
//! lifecycle 2 bits.
//! - `queued`: admitted events not yet claimed by a worker (in the ring, the colored
//!   list, the ready list, or reserved by an enqueuer that is writing them).
//! - `parked`: colored events claimed out of turn and waiting in the color table.
//! - `running`: events claimed by a worker (or entered inline) whose handler call has
//!   not returned.
//!
//! # Invariants
//! - `queued + parked <= capacity` after every transition (the bound); `capacity`
//!   is at most [`MAX_CAPACITY`].
//! - `running <= MAX_RUNNING`: a claim takes at most the room left.
//! - Nothing is claimed or entered once the lifecycle is `Stopped`.

use crate::lifecycle::Lifecycle;

const QUEUED_BITS: u32 = 22;
const PARKED_BITS: u32 = 22;
const RUNNING_BITS: u32 = 18;
const PARKED_SHIFT: u32 = QUEUED_BITS;
const RUNNING_SHIFT: u32 = QUEUED_BITS + PARKED_BITS;
const LIFE_SHIFT: u32 = RUNNING_SHIFT + RUNNING_BITS;

/// Largest queue capacity a stage can have.
pub(crate) const MAX_CAPACITY: usize = (1 << QUEUED_BITS) - 1;
/// Most events that may be inside one stage's handlers at once.
pub(crate) const MAX_RUNNING: usize = (1 << RUNNING_BITS) - 1;

pub(crate) const ONE_QUEUED: u64 = 1;
pub(crate) const ONE_PARKED: u64 = 1 << PARKED_SHIFT;
pub(crate) const ONE_RUNNING: u64 = 1 << RUNNING_SHIFT;

/// A decoded state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u64);

impl Word {
    pub(crate) fn new(life: Lifecycle) -> Self {
        Word((life as u64) << LIFE_SHIFT)
    }

    pub(crate) fn queued(self) -> usize {
        (self.0 & ((1 << QUEUED_BITS) - 1)) as usize
    }

    pub(crate) fn parked(self) -> usize {
        ((self.0 >> PARKED_SHIFT) & ((1 << PARKED_BITS) - 1)) as usize
    }

    pub(crate) fn running(self) -> usize {
        ((self.0 >> RUNNING_SHIFT) & ((1 << RUNNING_BITS) - 1)) as usize
    }

    pub(crate) fn lifecycle(self) -> Lifecycle {
        Lifecycle::from_u8((self.0 >> LIFE_SHIFT) as u8)
    }

    /// Events counted against the capacity.
    pub(crate) fn waiting(self) -> usize {
        self.queued() + self.parked()
    }

    /// Admitted events not yet finished: waiting plus running.
    pub(crate) fn in_flight(self) -> usize {
        self.waiting() + self.running()
    }

    /// The same counts under another lifecycle.
    pub(crate) fn with_lifecycle(self, life: Lifecycle) -> Self {
        Word((self.0 & !(3 << LIFE_SHIFT)) | ((life as u64) << LIFE_SHIFT))
    }

    /// Whether an enqueue from inside (`inside`) or outside the runtime is accepted
    /// in this lifecycle.
    pub(crate) fn accepts(self, inside: bool) -> bool {
        match self.lifecycle() {
            Lifecycle::Created | Lifecycle::Running => true,
            Lifecycle::Draining => inside,
            Lifecycle::Stopped => false,
        }
    }

    /// Whether workers may claim events now.
    pub(crate) fn runs(self) -> bool {
        matches!(self.lifecycle(), Lifecycle::Running | Lifecycle::Draining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_bleed_into_each_other() {
        let w = Word(
            Word::new(Lifecycle::Draining).0
                + MAX_CAPACITY as u64 * ONE_QUEUED
                + MAX_CAPACITY as u64 * ONE_PARKED
                + MAX_RUNNING as u64 * ONE_RUNNING,
        );
        assert_eq!(w.queued(), MAX_CAPACITY);
        assert_eq!(w.parked(), MAX_CAPACITY);
        assert_eq!(w.running(), MAX_RUNNING);
        assert_eq!(w.lifecycle(), Lifecycle::Draining);
        let moved = Word(w.0 - ONE_RUNNING + ONE_PARKED - ONE_PARKED);
        assert_eq!(moved.running(), MAX_RUNNING - 1);
        assert_eq!(
            moved.with_lifecycle(Lifecycle::Stopped).queued(),
            MAX_CAPACITY
        );
        assert!(!moved.with_lifecycle(Lifecycle::Stopped).accepts(true));
        assert!(w.accepts(true) && !w.accepts(false));
    }
}
