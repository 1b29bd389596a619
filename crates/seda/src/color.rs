//! The runtime-wide color table (libasync-mp, thesis chapter 3).
//!
//! Colors hash to a fixed array of slots; each slot is one atomic word holding the
//! ticket being served, the next ticket to hand out, and whether an event of the
//! slot runs (or was handed its turn). The common path is lock-free and allocation
//! free: drawing a ticket is one CAS, taking an idle color one CAS, releasing it one
//! CAS. Only an event that finds its color busy takes a lock, to park in the slot's
//! shard (and its successor takes that lock once, to hand the color over).
//!
//! Two colors that hash to the same slot share it: they are serialised together and
//! keep one order between them. That costs parallelism, never correctness (as the
//! thesis says of colors that collide by convention, 3.1); with [`SLOTS`] slots and
//! Fibonacci hashing, a few thousand live colors rarely meet.
//!
//! # Invariants
//! - At most one event of a slot runs at any instant, in any stage, on any worker.
//! - Events of one slot run in the order their tickets were drawn: each admitted
//!   colored event draws the next ticket of its slot; it runs only when its ticket
//!   is the slot's `serving` ticket.
//! - An event claimed out of turn is parked; finishing ticket `t` hands the slot to
//!   the parked ticket `t + 1`, if any, without freeing it in between.
//! - `PARKED` is set while the slot's shard holds a parked ticket of the slot, and
//!   changes only with the shard's lock held, so a release that sees it clear needs
//!   no lock.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use crate::envelope::Color;
use crate::loom::{AtomicU64, Mutex, Ordering::*};

/// Runs a parked event's continuation: puts it on its stage's ready list.
pub(crate) type Unpark = Box<dyn FnOnce() + Send>;

/// Slots of the table (a power of two; a few under loom, whose models track every
/// atomic).
pub(crate) const SLOTS: usize = if cfg!(loom) { 16 } else { 4096 };
const SHARDS: usize = 16;

const TICKET_BITS: u32 = 31;
const TICKET: u64 = (1 << TICKET_BITS) - 1;
const NEXT_SHIFT: u32 = TICKET_BITS;
const RUNNING: u64 = 1 << 62;
const PARKED: u64 = 1 << 63;

/// A ticket in a slot's order (31 bits, wrapping).
pub(crate) type Ticket = u32;

fn serving(w: u64) -> Ticket {
    (w & TICKET) as Ticket
}

fn next(w: u64) -> Ticket {
    ((w >> NEXT_SHIFT) & TICKET) as Ticket
}

fn with_serving(w: u64, t: Ticket) -> u64 {
    (w & !TICKET) | (u64::from(t) & TICKET)
}

fn with_next(w: u64, t: Ticket) -> u64 {
    (w & !(TICKET << NEXT_SHIFT)) | ((u64::from(t) & TICKET) << NEXT_SHIFT)
}

fn succ(t: Ticket) -> Ticket {
    t.wrapping_add(1) & TICKET as Ticket
}

/// Whether ticket `b` comes right after `a` in a slot's order.
#[inline]
pub(crate) fn follows(a: Ticket, b: Ticket) -> bool {
    succ(a) == b
}

/// One shard of parked events: `(slot, ticket) -> continuation`, and how many
/// tickets of each slot are parked.
#[derive(Default)]
struct Shard {
    parked: HashMap<(u32, Ticket), Unpark, RandomState>,
    count: HashMap<u32, u32, RandomState>,
}

/// The color table shared by every stage of a runtime.
pub(crate) struct ColorTable {
    slots: Box<[AtomicU64]>,
    shards: Box<[Mutex<Shard>]>,
}

impl std::fmt::Debug for ColorTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColorTable").finish_non_exhaustive()
    }
}

/// The slot of a color.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotId(u32);

impl ColorTable {
    pub(crate) fn new() -> Self {
        ColorTable {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// The slot of `color` (Fibonacci hashing spreads sequential ids).
    #[inline]
    pub(crate) fn slot_of(color: Color) -> SlotId {
        let h = color.get().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros());
        SlotId(h as u32)
    }

    fn word(&self, s: SlotId) -> &AtomicU64 {
        &self.slots[s.0 as usize]
    }

    fn shard(&self, s: SlotId) -> &Mutex<Shard> {
        &self.shards[s.0 as usize % SHARDS]
    }

    /// Applies `f` until the CAS succeeds; returns the old word.
    fn update(&self, s: SlotId, mut f: impl FnMut(u64) -> u64) -> u64 {
        let a = self.word(s);
        let mut w = a.load(Relaxed);
        loop {
            match a.compare_exchange_weak(w, f(w), AcqRel, Relaxed) {
                Ok(_) => return w,
                Err(x) => w = x,
            }
        }
    }

    /// Hands out the next ticket of `color`'s slot (an admitted colored event).
    /// Called in the order the events enter their stage's queue, as nearly as the
    /// producers' race allows; a ticket drawn out of queue order only parks.
    pub(crate) fn ticket(&self, color: Color) -> Ticket {
        let s = Self::slot_of(color);
        next(self.update(s, |w| with_next(w, succ(next(w)))))
    }

    /// Takes `color`'s slot and its next ticket if the slot is idle with no ticket
    /// outstanding (an inline handoff); `None` otherwise, and no ticket is drawn.
    pub(crate) fn try_take(&self, color: Color) -> Option<Ticket> {
        let a = self.word(Self::slot_of(color));
        let w = a.load(Acquire);
        if w & RUNNING != 0 || serving(w) != next(w) {
            return None;
        }
        let t = next(w);
        let taken = with_next(w, succ(t)) | RUNNING;
        a.compare_exchange(w, taken, AcqRel, Relaxed)
            .ok()
            .map(|_| t)
    }

    /// Tries to run `item`, the event holding `ticket` of `color`: `Ok(item)` if it
    /// owns the slot now; otherwise `park(item)` is stored and called when the slot
    /// is handed to this ticket, and `Err(())` is returned.
    #[allow(clippy::result_unit_err)]
    pub(crate) fn acquire<T>(
        &self,
        color: Color,
        ticket: Ticket,
        item: T,
        park: impl FnOnce(T) -> Unpark,
    ) -> Result<T, ()> {
        let s = Self::slot_of(color);
        let a = self.word(s);
        let w = a.load(Acquire);
        if w & RUNNING == 0
            && serving(w) == ticket
            && a.compare_exchange(w, w | RUNNING, AcqRel, Relaxed).is_ok()
        {
            return Ok(item);
        }
        let mut shard = self.shard(s).lock();
        let mut w = a.load(Acquire);
        loop {
            if w & RUNNING == 0 && serving(w) == ticket {
                match a.compare_exchange_weak(w, w | RUNNING, AcqRel, Acquire) {
                    Ok(_) => return Ok(item),
                    Err(x) => w = x,
                }
            } else {
                match a.compare_exchange_weak(w, w | PARKED, AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(x) => w = x,
                }
            }
        }
        shard.parked.insert((s.0, ticket), park(item));
        *shard.count.entry(s.0).or_default() += 1;
        Err(())
    }

    /// The event holding tickets up to `last` of `color` finished (it may have run
    /// consecutive tickets in one batch). Hands the slot to ticket `last + 1` if it
    /// is parked; otherwise frees it.
    pub(crate) fn release(&self, color: Color, last: Ticket) {
        let s = Self::slot_of(color);
        let a = self.word(s);
        let after = succ(last);
        let mut w = a.load(Acquire);
        while w & PARKED == 0 {
            debug_assert!(w & RUNNING != 0, "release of idle color {color:?}");
            match a.compare_exchange_weak(w, with_serving(w, after) & !RUNNING, AcqRel, Acquire) {
                Ok(_) => return,
                Err(x) => w = x,
            }
        }
        // Something of this slot is parked: under the shard's lock, hand the slot to
        // the next ticket if it waits, else free it.
        let unpark = {
            let mut shard = self.shard(s).lock();
            let unpark = shard.parked.remove(&(s.0, after));
            let left = if unpark.is_some() {
                let c = shard.count.entry(s.0).or_default();
                *c -= 1;
                let left = *c;
                if left == 0 {
                    shard.count.remove(&s.0);
                }
                left
            } else {
                shard.count.get(&s.0).copied().unwrap_or(0)
            };
            self.update(s, |w| {
                let mut n = with_serving(w, after);
                if unpark.is_none() {
                    n &= !RUNNING;
                }
                if left == 0 {
                    n &= !PARKED;
                }
                n
            });
            unpark
        };
        if let Some(unpark) = unpark {
            unpark();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    #[test]
    fn tickets_run_in_order_and_a_parked_one_is_handed_the_color() {
        let t = ColorTable::new();
        let c = Color::new(42);
        let (a, b, d) = (t.ticket(c), t.ticket(c), t.ticket(c));
        assert_eq!((a, b, d), (0, 1, 2));
        assert!(t.try_take(c).is_none(), "tickets outstanding");
        let log = Arc::new(StdMutex::new(Vec::new()));
        // b and d arrive before a: both park.
        for (tk, name) in [(b, "b"), (d, "d")] {
            let l = log.clone();
            let r = t.acquire(c, tk, name, move |n| {
                Box::new(move || l.lock().unwrap().push(n))
            });
            assert!(r.is_err(), "{name} must park");
        }
        assert_eq!(t.acquire(c, a, "a", |_| unreachable!()), Ok("a"));
        t.release(c, a);
        assert_eq!(*log.lock().unwrap(), vec!["b"], "b is handed the color");
        t.release(c, b);
        assert_eq!(*log.lock().unwrap(), vec!["b", "d"]);
        t.release(c, d);
        // Idle again, nothing outstanding: an inline take works.
        assert_eq!(t.try_take(c), Some(3));
        t.release(c, 3);
        assert_eq!(t.try_take(c), Some(4));
    }

    #[test]
    fn tickets_wrap_around_31_bits() {
        let t = ColorTable::new();
        let c = Color::new(7);
        let s = ColorTable::slot_of(c);
        let near = TICKET as Ticket - 1;
        t.word(s)
            .store(with_next(with_serving(0, near), near), Relaxed);
        for _ in 0..4 {
            let k = t.try_take(c).expect("idle");
            t.release(c, k);
        }
        assert_eq!(serving(t.word(s).load(Relaxed)), 2);
    }
}
