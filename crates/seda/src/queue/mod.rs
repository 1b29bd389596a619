//! A stage's input queue: a bounded lock-free ring for uncolored events, a locked
//! list for colored ones, one atomic state word, and two event counts.
//!
//! The uncontended enqueue is one CAS on the state word (lifecycle, bound) and one
//! push on the ring (Vyukov's bounded MPMC queue, see [`ring`]); a worker is woken
//! only if one sleeps (an event count: one fence and one load otherwise). Workers
//! *claim* events on the state word (one CAS for a whole batch) before popping them,
//! so every count is exact at every instant.
//!
//! # Invariants
//! - Bounded: `queued + parked <= capacity` (see [`state`]); a reservation that would
//!   pass it fails with `Full` and the event goes back to the caller.
//! - Exactly once: a reserved event is written exactly once (ring or colored list);
//!   a claimed count is popped exactly once; `queued` counts reserved-but-unclaimed
//!   events, so claims never outnumber writes (a claimant spins for a reservation
//!   being written, a window of a few instructions).
//! - Lifecycle and counts change together: an enqueue's lifecycle check is part of
//!   its reservation CAS, so no enqueue straddles `Draining` or `Stopped`, and the
//!   counts a shutdown reads are exact.
//! - Colored events take the locked path: their color ticket is drawn under the
//!   colored lock, after the reservation, so a stage's colored list is in ticket
//!   order and a ticket is never drawn for an event that was refused.
//! - No lost wake-up: an enqueuer changes the word, then fences and looks for
//!   sleepers; a worker counts itself a sleeper, fences, then re-reads the word (see
//!   [`event_count`]). The schedule token of the shared pool uses the same fences.
//!
//! Model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p seda --lib
//! --release loom_`), see `loom_tests.rs`.

pub(crate) mod event_count;
mod ring;
pub(crate) mod state;

#[cfg(test)]
mod loom_tests;

use std::collections::VecDeque;

use crate::envelope::Envelope;
use crate::lifecycle::Lifecycle;
use crate::loom::{AtomicU64, AtomicUsize, Mutex, Ordering::*, spin};
use event_count::EventCount;
use ring::Ring;
use state::{MAX_RUNNING, ONE_PARKED, ONE_QUEUED, ONE_RUNNING, Word};

pub(crate) use state::MAX_CAPACITY;

/// Why a reservation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Full,
    Closed,
}

/// Colored events: admitted ones in ticket order, and unparked ones that own their
/// color (they run first, by priority hint).
#[derive(Debug)]
struct Colored<E> {
    fifo: VecDeque<Envelope<E>>,
    ready: VecDeque<Envelope<E>>,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct StageQueue<E> {
    /// Lifecycle and counts, see [`state`].
    word: AtomicU64,
    capacity: usize,
    /// Uncolored events. Never holds more than `capacity` (every write has a
    /// reservation; a claimed event still in it makes a writer wait a moment).
    ring: Ring<Envelope<E>>,
    colored: Mutex<Colored<E>>,
    /// Events in `colored` (either list); read without the lock to skip it.
    colored_len: AtomicUsize,
    /// Own-pool workers waiting for `queued > 0`.
    pub(crate) workers: EventCount,
    /// `enqueue_until` callers waiting for room.
    pub(crate) space: EventCount,
}

impl<E> StageQueue<E> {
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`] (checked at stage build).
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "capacity out of range"
        );
        StageQueue {
            word: AtomicU64::new(Word::new(Lifecycle::Created).0),
            capacity,
            ring: Ring::new(capacity),
            colored: Mutex::new(Colored {
                fifo: VecDeque::new(),
                ready: VecDeque::new(),
            }),
            colored_len: AtomicUsize::new(0),
            workers: EventCount::new(),
            space: EventCount::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The state word now.
    pub(crate) fn word(&self) -> Word {
        Word(self.word.load(Acquire))
    }

    /// Applies `f` to the word until the CAS succeeds or `f` refuses.
    fn update<R>(&self, mut f: impl FnMut(Word) -> Result<Word, R>) -> Result<Word, R> {
        let mut cur = self.word.load(Relaxed);
        loop {
            let next = f(Word(cur))?;
            match self
                .word
                .compare_exchange_weak(cur, next.0, AcqRel, Relaxed)
            {
                Ok(_) => return Ok(Word(cur)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Reserves room for `n` events (an enqueue from inside the runtime if
    /// `inside`). On success the caller must write exactly `n` events.
    pub(crate) fn reserve(&self, n: usize, inside: bool) -> Result<(), Refusal> {
        let cap = self.capacity;
        self.update(|w| {
            if !w.accepts(inside) {
                Err(Refusal::Closed)
            } else if w.waiting() + n > cap {
                Err(Refusal::Full)
            } else {
                Ok(Word(w.0 + n as u64 * ONE_QUEUED))
            }
        })
        .map(|_| ())
    }

    /// Writes a reserved uncolored event.
    pub(crate) fn write(&self, env: Envelope<E>) {
        let mut env = env;
        let mut round = 0;
        // The ring can be momentarily full of claimed events not yet popped.
        while let Err(back) = self.ring.push(env) {
            env = back;
            spin(&mut round);
        }
    }

    /// Writes reserved colored events: each gets the next ticket `ticket()` draws,
    /// under the colored lock, so the colored list stays in ticket order.
    pub(crate) fn write_colored(
        &self,
        envs: impl Iterator<Item = Envelope<E>>,
        mut ticket: impl FnMut() -> u64,
    ) {
        let mut c = self.colored.lock();
        let before = c.fifo.len();
        for mut env in envs {
            env.ticket = ticket();
            c.fifo.push_back(env);
        }
        self.colored_len.fetch_add(c.fifo.len() - before, Release);
    }

    /// Claims up to `max` queued events for a worker: they move from `queued` to
    /// `running`. Returns how many; the caller pops exactly that many.
    pub(crate) fn claim(&self, max: usize) -> usize {
        let mut k = 0;
        let r = self.update(|w| {
            if !w.runs() {
                return Err(());
            }
            k = w.queued().min(max).min(MAX_RUNNING - w.running());
            if k == 0 {
                return Err(());
            }
            Ok(Word(w.0 - k as u64 * ONE_QUEUED + k as u64 * ONE_RUNNING))
        });
        if r.is_ok() { k } else { 0 }
    }

    /// Pops one claimed event: unparked colored events first (`true`: it already
    /// owns its color), then the colored list, then the ring. Spins while the event
    /// it claimed is still being written.
    pub(crate) fn pop_claimed(&self) -> (Envelope<E>, bool) {
        let mut round = 0;
        loop {
            if self.colored_len.load(Acquire) > 0 {
                let mut c = self.colored.lock();
                let got = match c.ready.pop_front() {
                    Some(env) => Some((env, true)),
                    None => c.fifo.pop_front().map(|env| (env, false)),
                };
                if let Some(got) = got {
                    self.colored_len.fetch_sub(1, Relaxed);
                    return got;
                }
            }
            if let Some(env) = self.ring.pop() {
                return (env, false);
            }
            spin(&mut round);
        }
    }

    /// A claimed colored event went to the color table: running -> parked.
    pub(crate) fn parked(&self) {
        self.word
            .fetch_add(ONE_PARKED.wrapping_sub(ONE_RUNNING), AcqRel);
    }

    /// A parked event now owns its color: it joins the ready list (by priority
    /// hint) and counts as queued again. The caller wakes a worker.
    pub(crate) fn unpark(&self, env: Envelope<E>) {
        let mut c = self.colored.lock();
        let pos = c
            .ready
            .iter()
            .position(|e| e.meta.priority < env.meta.priority)
            .unwrap_or(c.ready.len());
        c.ready.insert(pos, env);
        self.colored_len.fetch_add(1, Release);
        drop(c);
        self.word
            .fetch_add(ONE_QUEUED.wrapping_sub(ONE_PARKED), AcqRel);
    }

    /// `n` running events finished.
    pub(crate) fn finish(&self, n: usize) {
        if n > 0 {
            let prev = Word(self.word.fetch_sub(n as u64 * ONE_RUNNING, AcqRel));
            debug_assert!(prev.running() >= n, "finished more than ran");
        }
    }

    /// Enters `n` events to run inline on the calling thread: only while the stage
    /// runs, accepts the caller, and nothing waits in its queue (an inline event
    /// never overtakes a queued one). Success counts it as running.
    pub(crate) fn enter_inline(&self, n: usize, inside: bool) -> bool {
        self.update(|w| {
            if w.runs() && w.accepts(inside) && w.waiting() == 0 && w.running() + n <= MAX_RUNNING {
                Ok(Word(w.0 + n as u64 * ONE_RUNNING))
            } else {
                Err(())
            }
        })
        .is_ok()
    }

    /// Sets the lifecycle; stopping wakes every sleeper.
    pub(crate) fn set_lifecycle(&self, life: Lifecycle) {
        let _ = self.update(|w| Ok::<_, ()>(w.with_lifecycle(life)));
        if life == Lifecycle::Stopped {
            self.workers.notify_all();
            self.space.notify_all();
        }
    }

    /// After `Stopped`: forgets the queued events and drops what it can of them now.
    /// Returns the word as it was (its counts are the unfinished events).
    pub(crate) fn abandon(&self) -> Word {
        let before = self
            .update(|w| Ok::<_, ()>(Word(w.0 - w.queued() as u64 * ONE_QUEUED)))
            .unwrap_or_else(|()| self.word());
        // Drop at most `queued` events now: claims that raced the stop must still
        // find theirs. Events reserved before the stop and still being written stay
        // in the ring and drop with the stage.
        let mut budget = before.queued();
        let mut c = self.colored.lock();
        while budget > 0 {
            let Some(env) = c.ready.pop_front().or_else(|| c.fifo.pop_front()) else {
                break;
            };
            self.colored_len.fetch_sub(1, Relaxed);
            budget -= 1;
            drop(env);
        }
        drop(c);
        while budget > 0 && self.ring.pop().is_some() {
            budget -= 1;
        }
        before
    }
}
