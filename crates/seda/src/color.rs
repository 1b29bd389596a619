//! The runtime-wide color table (libasync-mp, thesis chapter 3).
//!
//! # Invariants
//! - At most one event of a color runs at any instant, in any stage, on any worker.
//! - Events of one color run in the order they were admitted to their queues: each
//!   admitted colored event gets the next *ticket* of its color (under its queue's
//!   lock, so a queue's FIFO order and ticket order agree); an event runs only when
//!   its ticket is the color's `serving` ticket.
//! - An event dequeued out of turn (its color busy or an earlier ticket still queued
//!   elsewhere) is *parked* here; finishing ticket `t` hands the color directly to the
//!   parked ticket `t + 1`, if any, so the color never becomes free in between.
//!
//! Lock order: a stage's queue lock may be held while taking a shard lock, never the
//! reverse; unparking runs after the shard lock is released.

use std::collections::{BTreeMap, HashMap};

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use crate::envelope::Color;

/// Runs a parked event's continuation: puts it on its stage's ready list.
pub(crate) type Unpark = Box<dyn FnOnce() + Send>;

const SHARDS: usize = 16;

#[derive(Default)]
struct ColorState {
    /// Next ticket to hand out at admission.
    next: u64,
    /// The ticket allowed to run next.
    serving: u64,
    /// Whether an event of this color is running (or handed to a ready list).
    running: bool,
    /// Events dequeued out of turn, by ticket.
    parked: BTreeMap<u64, Unpark>,
}

/// One shard of the table. Colors are ids the application picks (a connection, a
/// session), looked up two or three times per colored event: foldhash (randomly
/// seeded) hashes a `u64` in a few instructions where std's SipHash takes ~150.
type Shard = Mutex<HashMap<Color, ColorState, RandomState>>;

/// The color table shared by every stage of a runtime.
pub(crate) struct ColorTable {
    shards: Vec<Shard>,
}

impl std::fmt::Debug for ColorTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColorTable").finish_non_exhaustive()
    }
}

impl ColorTable {
    pub(crate) fn new() -> Self {
        ColorTable {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::default())))
                .collect(),
        }
    }

    fn shard(&self, color: Color) -> &Shard {
        // Fibonacci hashing spreads sequential color ids over the shards.
        let h = color.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60;
        &self.shards[h as usize % SHARDS]
    }

    /// Hands out the next ticket of `color`. Called once per admitted colored event,
    /// under the admitting queue's lock.
    pub(crate) fn ticket(&self, color: Color) -> u64 {
        let mut shard = self.shard(color).lock();
        let st = shard.entry(color).or_default();
        let t = st.next;
        st.next += 1;
        t
    }

    /// Tries to run `item`, the event holding `ticket`: `Ok(item)` if it owns the
    /// color now; otherwise `park(item)` is stored and called when the color is handed
    /// to this ticket, and `Err(())` is returned.
    #[allow(clippy::result_unit_err)]
    pub(crate) fn acquire<T>(
        &self,
        color: Color,
        ticket: u64,
        item: T,
        park: impl FnOnce(T) -> Unpark,
    ) -> Result<T, ()> {
        let mut shard = self.shard(color).lock();
        let st = shard.entry(color).or_default();
        if !st.running && st.serving == ticket {
            st.running = true;
            Ok(item)
        } else {
            debug_assert!(
                ticket >= st.serving,
                "ticket {ticket} of {color:?} already served"
            );
            st.parked.insert(ticket, park(item));
            Err(())
        }
    }

    /// Takes the next ticket of `color` and the color with it, if the color is idle
    /// and no ticket is outstanding (an inline handoff); `None` otherwise, and no
    /// ticket is drawn.
    pub(crate) fn try_take(&self, color: Color) -> Option<u64> {
        let mut shard = self.shard(color).lock();
        let st = shard.entry(color).or_default();
        if !st.running && st.next == st.serving {
            let t = st.next;
            st.next += 1;
            st.running = true;
            Some(t)
        } else {
            None
        }
    }

    /// The event holding `ticket` finished (and any consecutive tickets it ran in the
    /// same batch, up to `last`). Hands the color on to the next ticket if it is
    /// parked; otherwise frees it.
    pub(crate) fn release(&self, color: Color, last: u64) {
        let next = {
            let mut shard = self.shard(color).lock();
            let Some(st) = shard.get_mut(&color) else {
                debug_assert!(false, "release of unknown color {color:?}");
                return;
            };
            debug_assert!(st.running, "release of idle color {color:?}");
            st.serving = last + 1;
            match st.parked.remove(&st.serving) {
                Some(unpark) => Some(unpark),
                None => {
                    st.running = false;
                    if st.parked.is_empty() && st.next == st.serving {
                        shard.remove(&color);
                    }
                    None
                }
            }
        };
        if let Some(unpark) = next {
            unpark();
        }
    }
}
