//! What a run of a batch carries from its start to its accounting, shared by the
//! queued path (`batch`) and the deferred inline path (`defer`): the worker's reusable
//! buffers, the stats stamps of a run of events, and how the run is timed. A leaf:
//! it imports neither of the two.

use crate::color::{SlotId, Ticket};
use crate::envelope::{Class, Envelope};

/// What the stats need of a run of consecutive events of a batch after their
/// handler consumed them: events of one upstream batch share their enqueue instant
/// (its batch clock), events handed over inline share everything, so a batch is
/// usually a few runs and the per-event work is one comparison.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamp {
    pub(super) born: u64,
    pub(super) enqueued: u64,
    pub(super) class: Class,
    pub(super) n: u32,
}

impl Stamp {
    /// Adds an event to the last run if it shares it, else starts a run.
    #[inline]
    pub(super) fn push(runs: &mut Vec<Stamp>, born: u64, enqueued: u64, class: Class) {
        match runs.last_mut() {
            Some(r)
                if r.enqueued == enqueued
                    && r.born == born
                    && r.class == class
                    && r.n < u32::MAX =>
            {
                r.n += 1;
            }
            _ => runs.push(Stamp {
                born,
                enqueued,
                class,
                n: 1,
            }),
        }
    }
}

/// Reusable buffers of one worker (or of one shared-pool batch).
#[derive(Debug)]
pub(crate) struct Scratch<E> {
    pub(super) envs: Vec<Envelope<E>>,
    /// Color slots the batch holds, with the last ticket of each.
    pub(super) held: Vec<(SlotId, Ticket)>,
    pub(super) stamps: Vec<Stamp>,
}

impl<E> Default for Scratch<E> {
    fn default() -> Self {
        Scratch {
            envs: Vec::new(),
            held: Vec::new(),
            stamps: Vec::new(),
        }
    }
}

/// How a run was timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timing {
    /// A queued batch: queueing delays from the envelopes, every event recorded.
    Queued,
    /// An inline run, timed: no queueing delay; samples weigh `weight` each.
    Inline { weight: u32 },
    /// An inline run, untimed: counts only.
    Untimed,
}
