//! A stage's input queue: a bounded lock-free ring ([`ring`]) whose slot claim is
//! the admission reservation, a lifecycle, the colored events that left the ring to
//! wait for their color, and two event counts.
//!
//! The uncontended enqueue is one CAS (the ring's `tail`) plus a look for sleepers
//! (one fence and one load, see [`event_count`]); a worker claims a whole batch with
//! one CAS on `head`, which also counts the batch as *held* until the worker
//! acknowledges it. Nothing else is touched per event.
//!
//! # Counts
//! - `ring.len()`: admitted events waiting in the ring.
//! - `outside`: colored events claimed out of turn and parked in the color table,
//!   or handed back ready (they run before the ring's events, by priority hint).
//! - `ring.held()`: events a worker claimed (or a thread outside the runtime entered
//!   inline) whose handler has not returned.
//!
//! `waiting = ring.len() + outside`, `in_flight = waiting + held`.
//!
//! # Invariants
//! - Bounded: an enqueue never makes `waiting` exceed the capacity (the ring has
//!   `capacity` slots, and while `outside > 0` a push also checks `ring.len() +
//!   outside` against the capacity). Parking moves a claimed event back into
//!   `waiting` without a check (it cannot be refused any more), so while colored
//!   events wait for their color `waiting` may pass the capacity by at most the
//!   events workers have claimed at that moment (workers x batch); memory stays
//!   bounded.
//! - Exactly once: a pushed event is claimed once (the ring) or refused and handed
//!   back; a parked event is handed back by the color table once; every claim is
//!   acknowledged once, after its handler (and the deferred groups it opened) ran.
//! - Exact shutdown accounting: `Stopped` closes the ring (a mark in `tail`), so no
//!   enqueue straddles it; `in_flight` never undercounts (a claim moves events from
//!   `len` to `held` in one CAS; parking adds to `outside` before acknowledging).
//! - No lost wake-up: an enqueuer pushes (a `SeqCst` CAS), then fences and looks for
//!   sleepers; a worker counts itself a sleeper, fences, then looks at the ring
//!   (see [`event_count`]). The shared pool's schedule token uses the same fences.
//!
//! Model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p seda --lib
//! --release loom_`), see `loom_tests.rs`.

pub(crate) mod event_count;
pub(crate) mod ring;

#[cfg(test)]
mod loom_tests;

use std::collections::VecDeque;

use crate::envelope::Envelope;
use crate::lifecycle::Lifecycle;
use crate::loom::{AtomicU32, AtomicUsize, Mutex, Ordering::*};
use event_count::EventCount;
use ring::{Push, Ring};

/// Largest queue capacity a stage can have.
pub(crate) const MAX_CAPACITY: usize = (1 << 22) - 1;

/// Why an enqueue was refused; the envelope comes back.
#[derive(Debug)]
pub(crate) enum Refusal<E> {
    Full(E),
    Closed(E),
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct StageQueue<E> {
    ring: Ring<Envelope<E>>,
    life: AtomicU32,
    /// Colored events parked in the color table or ready to run again.
    outside: AtomicUsize,
    /// Parked events whose color was handed to them, by priority hint.
    ready: Mutex<VecDeque<Envelope<E>>>,
    /// Own-pool workers waiting for an event.
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
            ring: Ring::new(capacity),
            life: AtomicU32::new(Lifecycle::Created as u32),
            outside: AtomicUsize::new(0),
            ready: Mutex::new(VecDeque::new()),
            workers: EventCount::new(),
            space: EventCount::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    pub(crate) fn lifecycle(&self) -> Lifecycle {
        Lifecycle::from_u8(self.life.load(SeqCst) as u8)
    }

    /// Whether an enqueue from inside (`inside`) or outside the runtime is accepted.
    #[inline]
    pub(crate) fn accepts(&self, inside: bool) -> bool {
        self.lifecycle().accepts(inside)
    }

    /// Whether workers may claim events now.
    pub(crate) fn runs(&self) -> bool {
        self.lifecycle().runs()
    }

    /// Events waiting (ring and outside).
    pub(crate) fn waiting(&self) -> usize {
        self.ring.len() + self.outside.load(SeqCst)
    }

    /// Events claimed or entered and not finished.
    pub(crate) fn held(&self) -> usize {
        self.ring.held()
    }

    /// Events in the stage: waiting plus held.
    pub(crate) fn in_flight(&self) -> usize {
        // `held` first: a claim moves events from the ring to `held` in one CAS,
        // and reading `held` before `len` can only count such events twice.
        let held = self.ring.held();
        held + self.waiting()
    }

    /// Whether an event is ready to be claimed (read after a sleeper's fence).
    pub(crate) fn has_work(&self) -> bool {
        self.ring.ready() || self.outside_ready()
    }

    fn outside_ready(&self) -> bool {
        self.outside.load(SeqCst) > 0 && !self.ready.lock().is_empty()
    }

    /// Enqueues one envelope (an enqueue from inside the runtime if `inside`), or
    /// hands it back.
    #[inline]
    pub(crate) fn push(&self, env: Envelope<E>, inside: bool) -> Result<(), Refusal<Envelope<E>>> {
        if !self.accepts(inside) {
            return Err(Refusal::Closed(env));
        }
        let outside = self.outside.load(Relaxed);
        if outside > 0 && self.ring.len() + outside >= self.capacity() {
            return Err(Refusal::Full(env));
        }
        match self.ring.push(env) {
            Ok(()) => Ok(()),
            Err(Push::Full(e)) => Err(Refusal::Full(e)),
            Err(Push::Closed(e)) => Err(Refusal::Closed(e)),
        }
    }

    /// Enqueues every envelope or none, or hands them back.
    pub(crate) fn push_all(
        &self,
        envs: Vec<Envelope<E>>,
        inside: bool,
    ) -> Result<(), Refusal<Vec<Envelope<E>>>> {
        if !self.accepts(inside) {
            return Err(Refusal::Closed(envs));
        }
        let outside = self.outside.load(Relaxed);
        if outside > 0 && self.ring.len() + outside + envs.len() > self.capacity() {
            return Err(Refusal::Full(envs));
        }
        match self.ring.push_all(envs) {
            Ok(()) => Ok(()),
            Err(Push::Full(e)) => Err(Refusal::Full(e)),
            Err(Push::Closed(e)) => Err(Refusal::Closed(e)),
        }
    }

    /// Claims up to `max` events for a worker (they count as held until
    /// [`StageQueue::finish`]) and hands each to `take` with whether it already owns
    /// its color (a parked event handed back). Ready colored events come first.
    pub(crate) fn claim(&self, max: usize, mut take: impl FnMut(Envelope<E>, bool)) -> usize {
        if !self.runs() {
            return 0;
        }
        let mut n = 0;
        if self.outside.load(SeqCst) > 0 {
            let mut ready = self.ready.lock();
            while n < max {
                let Some(env) = ready.pop_front() else { break };
                // Held before it leaves `outside`: in_flight never undercounts.
                self.ring.hold(1);
                self.outside.fetch_sub(1, SeqCst);
                n += 1;
                take(env, true);
            }
        }
        let max = u32::try_from(max - n).unwrap_or(u32::MAX);
        n + self.ring.claim(max, |env| take(env, false)) as usize
    }

    /// A claimed colored event went to the color table: held -> outside.
    pub(crate) fn parked(&self) {
        self.outside.fetch_add(1, SeqCst);
        self.ring.ack(1);
    }

    /// A parked event now owns its color: it joins the ready list (by priority
    /// hint); it stays counted in `outside` until claimed. The caller wakes a worker.
    pub(crate) fn unpark(&self, env: Envelope<E>) {
        let mut ready = self.ready.lock();
        // Usually every event has the same hint: it goes to the back, no search.
        if ready
            .back()
            .is_none_or(|e| e.meta.priority() >= env.meta.priority())
        {
            ready.push_back(env);
            return;
        }
        let pos = ready
            .iter()
            .position(|e| e.meta.priority() < env.meta.priority())
            .unwrap_or(ready.len());
        ready.insert(pos, env);
    }

    /// `n` held events finished.
    pub(crate) fn finish(&self, n: usize) {
        self.ring.ack(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Whether events may run inline now: the stage runs, accepts the caller, and
    /// nothing waits (an inline event never overtakes a queued one).
    #[inline]
    pub(crate) fn inline_ok(&self, inside: bool) -> bool {
        let life = self.lifecycle();
        life.runs() && life.accepts(inside) && self.waiting() == 0
    }

    /// Enters `n` events to run inline on a thread that no running batch of this
    /// runtime covers (counted held, so a shutdown waits for them). Refused unless
    /// [`StageQueue::inline_ok`] still holds after counting them.
    pub(crate) fn enter_counted(&self, n: usize, inside: bool) -> bool {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        self.ring.hold(n32);
        // Dekker with `set_lifecycle` + `in_flight`: counted first, then the
        // lifecycle is read (both `SeqCst`).
        if self.inline_ok(inside) {
            true
        } else {
            self.ring.ack(n32);
            false
        }
    }

    /// Sets the lifecycle; stopping closes the ring and wakes every sleeper.
    pub(crate) fn set_lifecycle(&self, life: Lifecycle) {
        self.life.store(life as u32, SeqCst);
        if life == Lifecycle::Stopped {
            self.ring.close();
            self.workers.notify_all();
            self.space.notify_all();
        }
    }

    /// After `Stopped`: forgets the waiting events (the ring's drop with the stage,
    /// the ready ones now). Returns (waiting, held) as they were.
    pub(crate) fn abandon(&self) -> (usize, usize) {
        debug_assert!(self.ring.is_closed(), "abandon before Stopped");
        let held = self.ring.held();
        let waiting = self.waiting();
        let dropped = std::mem::take(&mut *self.ready.lock());
        self.outside.fetch_sub(dropped.len(), SeqCst);
        (waiting, held)
    }
}
