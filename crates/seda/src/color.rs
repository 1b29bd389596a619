//! The runtime-wide color table (libasync-mp, thesis chapter 3).
//!
//! Colors hash to a fixed array of slots; each slot is one atomic word holding the
//! ticket being served, the next ticket to hand out, and whether events of the slot
//! are parked. An event's turn is the state of one word, so the common path (the
//! color free, or held by the batch that runs the event) is lock-free, allocation
//! free and touches that one word three times per event at most:
//!
//! - admission draws the next ticket: one `fetch_add` (no CAS loop);
//! - before it runs, the event's turn is one load (`serving == ticket`); a batch
//!   that already holds the slot's previous ticket runs the event after it without
//!   looking at the table at all (the worker's own list, see `core::batch`);
//! - after its batch, the slot is released: one CAS that moves `serving` past the
//!   batch's last ticket of the slot.
//!
//! Only an event that finds its turn not come yet (an earlier ticket runs on another
//! worker, or was claimed by another worker and not run yet) takes a lock, to park in
//! the slot's shard; the release that serves its ticket takes that lock once and
//! hands the slot to it, without freeing it in between.
//!
//! There is no "running" bit: the event whose ticket is `serving` owns the slot
//! until its release moves `serving` on, and no other event holds that ticket, so
//! `serving` alone says who may run. An inline run takes a slot only if no ticket is
//! outstanding (`serving == next`), drawing the next ticket as it takes it.
//!
//! Two colors that hash to the same slot share it: they are serialised together and
//! keep one order between them. That costs parallelism, never correctness (as the
//! thesis says of colors that collide by convention, 3.1); with [`SLOTS`] slots and
//! Fibonacci hashing, a few thousand live colors rarely meet.
//!
//! # Invariants
//! - At most one event of a slot runs at any instant, in any stage, on any worker:
//!   only the holder of ticket `serving` runs (with the later tickets its own batch
//!   holds consecutively), and `serving` moves only at its release.
//! - Events of one slot run in the order their tickets were drawn (admission
//!   order): ticket `t + 1` is served only by the release of ticket `t`.
//! - None lost, none run twice: an event out of turn is parked exactly once, and
//!   the release that serves its ticket removes it and hands it back exactly once;
//!   a ticket drawn for an event that is then refused is voided (served and released
//!   at once when its turn comes, `core::enqueue`), so no later ticket waits on it.
//! - `PARKED` is set while the slot's shard holds a parked ticket of the slot, and
//!   changes only with the shard's lock held, so a release that sees it clear needs
//!   no lock, and a parker that sets it (under the lock, in the same CAS that finds
//!   its turn not come) is seen by the release that serves its ticket.
//! - Shutdown drains parked events: a parked event is counted `outside` in its
//!   stage's queue (`queue`), which a stop waits for; the releases that serve them
//!   run while the workers drain the earlier tickets.
//!
//! Model-checked with loom (`queue::loom_tests`: `loom_color_*`).

use std::collections::VecDeque;

use crate::envelope::Color;
use crate::loom::{AtomicU64, Mutex, Ordering::*};

/// Runs a parked event's continuation: puts it on its stage's ready list.
pub(crate) type Unpark = Box<dyn FnOnce() + Send>;

/// Slots of the table (a power of two; a few under loom, whose models track every
/// atomic).
pub(crate) const SLOTS: usize = if cfg!(loom) { 16 } else { 4096 };
const SHARDS: usize = 16;

// The word: `serving` in bits 0..31, `PARKED` bit 31, `next` in bits 33..64 (at the
// top, so that drawing a ticket is one `fetch_add` whose carry falls off the word:
// `next` wraps at 31 bits by itself). Bit 32 stays 0.
const TICKET_BITS: u32 = 31;
const TICKET: u64 = (1 << TICKET_BITS) - 1;
const PARKED: u64 = 1 << 31;
const NEXT_SHIFT: u32 = 33;
const ONE_TICKET: u64 = 1 << NEXT_SHIFT;

/// A ticket in a slot's order (31 bits, wrapping).
pub(crate) type Ticket = u32;

fn serving(w: u64) -> Ticket {
    (w & TICKET) as Ticket
}

fn next(w: u64) -> Ticket {
    (w >> NEXT_SHIFT) as Ticket
}

fn with_serving(w: u64, t: Ticket) -> u64 {
    (w & !TICKET) | (u64::from(t) & TICKET)
}

#[cfg(test)]
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

/// One shard of parked events: for each of its slots, the parked tickets in the
/// slot's order with their continuations (a FIFO: tickets are mostly parked in
/// order, so a park appends and a hand-over pops the front).
struct Shard {
    parked: Box<[VecDeque<(Ticket, Unpark)>]>,
}

impl Shard {
    fn new() -> Self {
        Shard {
            parked: (0..SLOTS / SHARDS).map(|_| VecDeque::new()).collect(),
        }
    }

    fn of(&mut self, s: SlotId) -> &mut VecDeque<(Ticket, Unpark)> {
        &mut self.parked[s.0 as usize / SHARDS]
    }
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
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
        }
    }

    /// The slot of `color` (Fibonacci hashing spreads sequential ids).
    #[inline]
    pub(crate) fn slot_of(color: Color) -> SlotId {
        let h = color.get().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros());
        SlotId(h as u32)
    }

    #[inline]
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

    /// Hands out the next ticket of `color`'s slot (an admitted colored event): one
    /// `fetch_add`. Called in the order the events enter their stage's queue, as
    /// nearly as the producers' race allows; a ticket drawn out of queue order only
    /// parks.
    #[inline]
    pub(crate) fn ticket(&self, color: Color) -> Ticket {
        next(
            self.word(Self::slot_of(color))
                .fetch_add(ONE_TICKET, AcqRel),
        )
    }

    /// Takes `color`'s slot and its next ticket if no ticket is outstanding (an
    /// inline handoff); `None` otherwise, and no ticket is drawn. Released with
    /// [`ColorTable::release`].
    pub(crate) fn try_take(&self, color: Color) -> Option<Ticket> {
        let a = self.word(Self::slot_of(color));
        let w = a.load(Acquire);
        let t = next(w);
        if serving(w) != t {
            return None;
        }
        a.compare_exchange(w, w.wrapping_add(ONE_TICKET), AcqRel, Relaxed)
            .ok()
            .map(|_| t)
    }

    /// Whether `ticket` is served now: its event owns the slot and may run. One
    /// load (it synchronises with the release that served it).
    #[inline]
    pub(crate) fn turn(&self, s: SlotId, ticket: Ticket) -> bool {
        serving(self.word(s).load(Acquire)) == ticket
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
        if self.turn(s, ticket) {
            return Ok(item);
        }
        self.park(s, ticket, item, park)
    }

    /// The slow half of [`ColorTable::acquire`], for a ticket whose turn was not
    /// seen: under the shard's lock, runs it if its turn came meanwhile, else marks
    /// the slot `PARKED` (in the CAS that finds the turn not come) and stores
    /// `park(item)` for the release that serves it.
    #[allow(clippy::result_unit_err)]
    #[cold]
    pub(crate) fn park<T>(
        &self,
        s: SlotId,
        ticket: Ticket,
        item: T,
        park: impl FnOnce(T) -> Unpark,
    ) -> Result<T, ()> {
        let a = self.word(s);
        let mut shard = self.shard(s).lock();
        let mut w = a.load(Acquire);
        loop {
            if serving(w) == ticket {
                return Ok(item);
            }
            match a.compare_exchange_weak(w, w | PARKED, AcqRel, Acquire) {
                Ok(_) => break,
                Err(x) => w = x,
            }
        }
        // In the slot's order, counted from the ticket being served.
        let from = serving(w);
        let key = |t: Ticket| t.wrapping_sub(from) & TICKET as Ticket;
        let q = shard.of(s);
        let unpark = park(item);
        match q.back() {
            Some(&(b, _)) if key(b) > key(ticket) => {
                let at = q.partition_point(|&(t, _)| key(t) < key(ticket));
                q.insert(at, (ticket, unpark));
            }
            _ => q.push_back((ticket, unpark)),
        }
        Err(())
    }

    /// [`ColorTable::release_slot`] of `color`'s slot.
    pub(crate) fn release(&self, color: Color, last: Ticket) {
        self.release_slot(Self::slot_of(color), last);
    }

    /// The event(s) holding tickets up to `last` of slot `s` finished (a batch may
    /// run consecutive tickets). Serves ticket `last + 1`, and hands the slot to it
    /// if it is parked.
    #[inline]
    pub(crate) fn release_slot(&self, s: SlotId, last: Ticket) {
        let a = self.word(s);
        let after = succ(last);
        let mut w = a.load(Relaxed);
        while w & PARKED == 0 {
            match a.compare_exchange_weak(w, with_serving(w, after), AcqRel, Relaxed) {
                Ok(_) => return,
                Err(x) => w = x,
            }
        }
        self.release_parked(s, after);
    }

    /// A release that found tickets of the slot parked: under the shard's lock,
    /// serves `after`, handing it the slot if it is parked, and clears `PARKED`
    /// when no ticket of the slot is left parked.
    #[cold]
    fn release_parked(&self, s: SlotId, after: Ticket) {
        let unpark = {
            let mut shard = self.shard(s).lock();
            let q = shard.of(s);
            let unpark = match q.front() {
                Some(&(t, _)) if t == after => q.pop_front().map(|(_, u)| u),
                _ => None,
            };
            let left = q.len();
            self.update(s, |w| {
                let n = with_serving(w, after);
                if left == 0 { n & !PARKED } else { n }
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
        // Idle again, nothing outstanding, nothing parked: an inline take works.
        let s = ColorTable::slot_of(c);
        assert_eq!(t.word(s).load(Relaxed) & PARKED, 0, "PARKED cleared");
        assert_eq!(t.try_take(c), Some(3));
        t.release(c, 3);
        assert_eq!(t.try_take(c), Some(4));
    }

    #[test]
    fn tickets_parked_out_of_order_are_handed_over_in_order() {
        let t = ColorTable::new();
        let c = Color::new(77);
        let k: Vec<Ticket> = (0..5).map(|_| t.ticket(c)).collect();
        let log = Arc::new(StdMutex::new(Vec::new()));
        // Tickets 1..=4 park in the order 3, 1, 4, 2 (two stages' claims race).
        for i in [3, 1, 4, 2] {
            let l = log.clone();
            let r = t.acquire(c, k[i], i, move |n| {
                Box::new(move || l.lock().unwrap().push(n))
            });
            assert!(r.is_err());
        }
        assert!(t.acquire(c, k[0], 0, |_| unreachable!()).is_ok());
        for (i, &tk) in k.iter().enumerate() {
            t.release(c, tk);
            let handed = log.lock().unwrap().clone();
            let want: Vec<usize> = (1..=(i + 1).min(4)).collect();
            assert_eq!(handed, want, "after releasing ticket {i}");
        }
        assert_eq!(t.try_take(c), Some(5));
    }

    #[test]
    fn a_batch_releases_consecutive_tickets_at_once() {
        let t = ColorTable::new();
        let c = Color::new(5);
        let s = ColorTable::slot_of(c);
        let tickets: Vec<Ticket> = (0..4).map(|_| t.ticket(c)).collect();
        assert!(t.turn(s, tickets[0]));
        assert!(!t.turn(s, tickets[1]), "not before the first is released");
        // One batch ran tickets 0..=2; ticket 3 is served next.
        t.release_slot(s, tickets[2]);
        assert!(t.turn(s, tickets[3]));
        t.release_slot(s, tickets[3]);
        assert_eq!(t.try_take(c), Some(4));
    }

    #[test]
    fn a_turn_that_comes_while_parking_runs_instead() {
        let t = ColorTable::new();
        let c = Color::new(11);
        let s = ColorTable::slot_of(c);
        let (a, b) = (t.ticket(c), t.ticket(c));
        assert!(!t.turn(s, b));
        t.release_slot(s, a);
        // The fast look said "not yet"; the locked look finds the turn came.
        assert_eq!(t.park(s, b, "b", |_| unreachable!()), Ok("b"));
        assert_eq!(t.word(s).load(Relaxed) & PARKED, 0);
        t.release_slot(s, b);
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
        // Drawn tickets wrap the same way (the carry falls off the word).
        t.word(s)
            .store(with_next(with_serving(0, near), near), Relaxed);
        let k: Vec<Ticket> = (0..3).map(|_| t.ticket(c)).collect();
        assert_eq!(k, vec![near, TICKET as Ticket, 0]);
        assert_eq!(serving(t.word(s).load(Relaxed)), near, "serving untouched");
        for k in k {
            assert!(t.turn(s, k));
            t.release_slot(s, k);
        }
        assert_eq!(t.try_take(c), Some(1));
    }
}
