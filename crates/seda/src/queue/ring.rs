//! The bounded lock-free ring that holds a stage's events.
//!
//! Dmitry Vyukov's bounded MPMC queue (as crossbeam's `ArrayQueue` implements it:
//! every slot has a stamp; positions are `lap | index` with `one_lap` the next power
//! of two above the capacity), with three changes that make it the stage's
//! accounting word as well as its storage:
//! - **The slot claim is the admission reservation.** A push is one CAS on `tail`;
//!   the ring never holds more than `capacity` events because a slot is free only
//!   once its stamp says so. There is no second counter to reserve.
//! - **A closed mark in `tail`.** [`Ring::close`] sets it with one `fetch_or`; every
//!   push that has not won its CAS by then fails with `Closed`, so the length read at
//!   close counts every event that got in (exact shutdown accounting).
//! - **Batch claims and a held count in `head`.** `head` packs the position (low 32
//!   bits) and `held` (high 32 bits): events claimed by a worker and not yet
//!   acknowledged ([`Ring::ack`]). A worker claims up to `max` ready slots with one
//!   CAS that moves the position and adds to `held` together, so `len() + held()`
//!   never undercounts the events in the stage, at any instant.
//!
//! # Invariants
//! - A slot is written only by the push that won the CAS for its position, and read
//!   only by the claim that won the CAS covering it; its stamp hands it from one to
//!   the other (`Release` store, `Acquire` load).
//! - At most `capacity` slots hold a value or are being written or read.
//! - Once `tail` carries the closed mark, no push succeeds.
//! - `held` counts claims minus acknowledgements (and [`Ring::hold`]s): never negative.
//!
//! Model-checked with loom (`queue::loom_tests`), which checks the slot accesses
//! for data races through [`crate::loom::UnsafeCell`].
#![allow(unsafe_code)]

use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::loom::{AtomicU32, AtomicU64, Ordering::*, UnsafeCell, spin};

/// The closed mark in `tail` (above the 32 position bits).
const CLOSED: u64 = 1 << 32;
/// One held event in `head`.
const ONE_HELD: u64 = 1 << 32;
const POS: u64 = u32::MAX as u64;

struct Slot<T> {
    /// `pos` when free for the push at `pos`; `pos + 1` when written by it and ready
    /// for the claim at `pos`.
    stamp: AtomicU32,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Why a push failed; the value comes back.
#[derive(Debug)]
pub(crate) enum Push<T> {
    Full(T),
    Closed(T),
}

/// See the module docs.
pub(crate) struct Ring<T> {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    slots: Box<[Slot<T>]>,
    cap: u32,
    one_lap: u32,
}

// SAFETY: values move between threads only through the stamp protocol (a slot is
// accessed by one thread at a time, handed over with Release/Acquire), so the ring
// is `Send`/`Sync` when its values are `Send`.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above; `&Ring` only gives access to slots a CAS made exclusive.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("cap", &self.cap)
            .field("len", &self.len())
            .field("held", &self.held())
            .finish()
    }
}

impl<T> Ring<T> {
    /// # Panics
    /// If `cap` is 0 or above 2^22 (checked at stage build).
    pub(crate) fn new(cap: usize) -> Self {
        assert!((1..=1 << 22).contains(&cap), "ring capacity out of range");
        let cap = cap as u32;
        let one_lap = (cap + 1).next_power_of_two();
        let slots = (0..cap)
            .map(|i| Slot {
                stamp: AtomicU32::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Ring {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            slots,
            cap,
            one_lap,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// The position after `pos`.
    #[inline]
    fn next(&self, pos: u32) -> u32 {
        let index = pos & (self.one_lap - 1);
        if index + 1 < self.cap {
            pos.wrapping_add(1)
        } else {
            (pos & !(self.one_lap - 1)).wrapping_add(self.one_lap)
        }
    }

    #[inline]
    fn slot(&self, pos: u32) -> &Slot<T> {
        &self.slots[(pos & (self.one_lap - 1)) as usize]
    }

    /// Pushes `value` with one CAS, or hands it back: `Full` when every slot is
    /// taken, `Closed` after [`Ring::close`]. `SeqCst` on the winning CAS: a waker's
    /// look for sleepers after it cannot be ordered before it.
    #[inline]
    pub(crate) fn push(&self, value: T) -> Result<(), Push<T>> {
        let mut tail = self.tail.load(Relaxed);
        let mut round = 0;
        loop {
            if tail & CLOSED != 0 {
                return Err(Push::Closed(value));
            }
            let pos = (tail & POS) as u32;
            let slot = self.slot(pos);
            let stamp = slot.stamp.load(Acquire);
            if stamp == pos {
                let next = u64::from(self.next(pos));
                match self.tail.compare_exchange_weak(tail, next, SeqCst, Relaxed) {
                    Ok(_) => {
                        // SAFETY: the CAS made position `pos` ours, and the stamp
                        // (== pos) says its last value was taken: nobody else reads
                        // or writes this slot until our stamp store below.
                        slot.value.with_mut(|p| unsafe { (*p).write(value) });
                        slot.stamp.store(pos.wrapping_add(1), Release);
                        return Ok(());
                    }
                    Err(t) => tail = t,
                }
            } else if stamp.wrapping_add(self.one_lap) == pos.wrapping_add(1) {
                // The slot still holds the previous lap's value: full, unless a
                // claim is taking it right now.
                let head = (self.head.load(Acquire) & POS) as u32;
                if head.wrapping_add(self.one_lap) == pos {
                    return Err(Push::Full(value));
                }
                spin(&mut round);
                tail = self.tail.load(Relaxed);
            } else {
                // Another push moved past this position meanwhile.
                spin(&mut round);
                tail = self.tail.load(Relaxed);
            }
        }
    }

    /// Pushes every value of `values` or none: claims `values.len()` consecutive free
    /// slots with one CAS, or hands the vector back (`Full` if they are not all free
    /// now). At most the ring's capacity.
    pub(crate) fn push_all(&self, mut values: Vec<T>) -> Result<(), Push<Vec<T>>> {
        let n = values.len();
        if n == 0 {
            return Ok(());
        }
        if n > self.cap as usize {
            return Err(Push::Full(values));
        }
        let mut tail = self.tail.load(Relaxed);
        let mut round = 0;
        let start = loop {
            if tail & CLOSED != 0 {
                return Err(Push::Closed(values));
            }
            let start = (tail & POS) as u32;
            let mut pos = start;
            let mut free = 0;
            while free < n && self.slot(pos).stamp.load(Acquire) == pos {
                free += 1;
                pos = self.next(pos);
            }
            if free < n {
                // Full unless the blocking slot is being claimed or written now.
                let blocked = self.slot(pos).stamp.load(Acquire);
                if blocked.wrapping_add(self.one_lap) == pos.wrapping_add(1) {
                    let head = (self.head.load(Acquire) & POS) as u32;
                    if head.wrapping_add(self.one_lap) == pos {
                        return Err(Push::Full(values));
                    }
                }
                spin(&mut round);
                tail = self.tail.load(Relaxed);
                continue;
            }
            match self
                .tail
                .compare_exchange_weak(tail, u64::from(pos), SeqCst, Relaxed)
            {
                Ok(_) => break start,
                Err(t) => tail = t,
            }
        };
        let mut pos = start;
        for value in values.drain(..) {
            let slot = self.slot(pos);
            // SAFETY: the CAS made positions start..start+n ours and each stamp said
            // its slot was free: nobody else touches them until our stamp stores.
            slot.value.with_mut(|p| unsafe { (*p).write(value) });
            slot.stamp.store(pos.wrapping_add(1), Release);
            pos = self.next(pos);
        }
        Ok(())
    }

    /// Claims up to `max` ready events with one CAS (they count as held until
    /// [`Ring::ack`]) and hands each to `take`, in order, releasing its slot after
    /// `take` returns. Returns how many it claimed (0: none ready now; a push may be
    /// writing the event at the head, which is then claimable in a moment).
    #[inline]
    pub(crate) fn claim(&self, max: u32, mut take: impl FnMut(T)) -> u32 {
        if max == 0 {
            return 0;
        }
        let mut head = self.head.load(Relaxed);
        let (start, k) = loop {
            let start = (head & POS) as u32;
            let mut pos = start;
            let mut k = 0;
            let max = max.min(self.cap);
            while k < max && self.slot(pos).stamp.load(Acquire) == pos.wrapping_add(1) {
                k += 1;
                pos = self.next(pos);
            }
            if k == 0 {
                return 0;
            }
            let new = (head & !POS).wrapping_add(u64::from(k) * ONE_HELD) | u64::from(pos);
            match self.head.compare_exchange_weak(head, new, SeqCst, Relaxed) {
                Ok(_) => break (start, k),
                Err(h) => head = h,
            }
        };
        let mut pos = start;
        for _ in 0..k {
            let slot = self.slot(pos);
            // SAFETY: the CAS made positions start..start+k ours, and each stamp was
            // `pos + 1` (written and published by its push): nobody else touches the
            // slot until the stamp store below; the value is initialised.
            let value = slot.value.with_mut(|p| unsafe { (*p).assume_init_read() });
            take(value);
            slot.stamp.store(pos.wrapping_add(self.one_lap), Release);
            pos = self.next(pos);
        }
        k
    }

    /// Counts `n` more held events (events of the stage that are not in the ring:
    /// claimed from elsewhere, or run inline by a thread outside the runtime).
    pub(crate) fn hold(&self, n: u32) {
        self.head.fetch_add(u64::from(n) * ONE_HELD, SeqCst);
    }

    /// `n` held events are done.
    pub(crate) fn ack(&self, n: u32) {
        if n > 0 {
            let prev = self.head.fetch_sub(u64::from(n) * ONE_HELD, SeqCst);
            debug_assert!(prev >> 32 >= u64::from(n), "acknowledged more than held");
        }
    }

    /// Events claimed and not acknowledged.
    pub(crate) fn held(&self) -> usize {
        (self.head.load(SeqCst) >> 32) as usize
    }

    /// Events in the ring now (pushed, not claimed). Exact when nothing moves;
    /// otherwise a value it had during the call.
    pub(crate) fn len(&self) -> usize {
        loop {
            let tail = self.tail.load(SeqCst);
            let head = self.head.load(SeqCst);
            if self.tail.load(SeqCst) == tail {
                return self.distance(head as u32, tail as u32);
            }
        }
    }

    fn distance(&self, head: u32, tail: u32) -> usize {
        let mask = self.one_lap - 1;
        let (hix, tix) = (head & mask, tail & mask);
        let n = if hix < tix {
            tix - hix
        } else if hix > tix {
            self.cap - hix + tix
        } else if tail == head {
            0
        } else {
            self.cap
        };
        n as usize
    }

    /// Whether the event at the head is written and claimable now.
    pub(crate) fn ready(&self) -> bool {
        let pos = (self.head.load(SeqCst) & POS) as u32;
        self.slot(pos).stamp.load(SeqCst) == pos.wrapping_add(1)
    }

    /// Sets the closed mark: no push succeeds after this. Idempotent.
    pub(crate) fn close(&self) {
        self.tail.fetch_or(CLOSED, SeqCst);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tail.load(Acquire) & CLOSED != 0
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // `&mut self`: no push or claim runs; drop every written value.
        let head = (self.head.load(Relaxed) & POS) as u32;
        let tail = (self.tail.load(Relaxed) & POS) as u32;
        let mut pos = head;
        for _ in 0..self.distance(head, tail) {
            let slot = self.slot(pos);
            if slot.stamp.load(Relaxed) == pos.wrapping_add(1) {
                // SAFETY: exclusive access; the stamp says the slot holds the value
                // its push wrote and no claim took.
                slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
            pos = self.next(pos);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fills_to_capacity_closes_and_claims_in_order() {
        for cap in [1usize, 2, 3, 7, 8, 1000] {
            let r = Ring::new(cap);
            for i in 0..cap {
                r.push(i).unwrap();
            }
            assert!(matches!(r.push(99), Err(Push::Full(99))), "cap {cap}");
            assert_eq!(r.len(), cap);
            let mut got = Vec::new();
            let k = r.claim(5, |v| got.push(v));
            assert_eq!(k as usize, cap.min(5));
            assert_eq!(r.held(), cap.min(5));
            r.ack(k);
            assert_eq!(r.held(), 0);
            assert_eq!(got, (0..cap.min(5)).collect::<Vec<_>>());
            r.close();
            assert!(matches!(r.push(1), Err(Push::Closed(1))));
            // Wraps around many laps.
            let r = Ring::new(cap);
            let mut next = 0;
            for lap in 0..10 {
                for i in 0..cap {
                    r.push(lap * cap + i).unwrap();
                }
                let k = r.claim(u32::MAX, |v| {
                    assert_eq!(v, next);
                    next += 1;
                });
                r.ack(k);
                assert_eq!(r.len(), 0);
            }
        }
    }

    #[test]
    fn drop_frees_what_is_left() {
        let counter = std::sync::Arc::new(());
        let r = Ring::new(4);
        for _ in 0..3 {
            r.push(std::sync::Arc::clone(&counter)).unwrap();
        }
        let k = r.claim(1, drop);
        r.ack(k);
        drop(r);
        assert_eq!(std::sync::Arc::strong_count(&counter), 1);
    }

    #[test]
    fn many_producers_and_consumers_lose_nothing() {
        use std::sync::atomic::{AtomicU64 as A, Ordering};
        let r = std::sync::Arc::new(Ring::new(64));
        let sum = std::sync::Arc::new(A::new(0));
        let got = std::sync::Arc::new(A::new(0));
        const N: u64 = 20_000;
        std::thread::scope(|s| {
            for p in 0..3u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..N {
                        let mut v = p * N + i;
                        loop {
                            match r.push(v) {
                                Ok(()) => break,
                                Err(Push::Full(b)) => {
                                    v = b;
                                    std::thread::yield_now();
                                }
                                Err(Push::Closed(_)) => unreachable!(),
                            }
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (r, sum, got) = (&r, &sum, &got);
                s.spawn(move || {
                    while got.load(Ordering::Relaxed) < 3 * N {
                        let k = r.claim(8, |v| {
                            sum.fetch_add(v, Ordering::Relaxed);
                        });
                        r.ack(k);
                        got.fetch_add(u64::from(k), Ordering::Relaxed);
                        if k == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        });
        assert_eq!(got.load(Ordering::Relaxed), 3 * N);
        assert_eq!(sum.load(Ordering::Relaxed), (0..3 * N).sum::<u64>());
        assert_eq!(r.len() + r.held(), 0);
    }
}
