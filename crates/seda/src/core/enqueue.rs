//! The paths into a stage: one event, a batch (all or none), with backpressure,
//! and the inline handoff within a domain (see [`crate::domain`]).
//!
//! Admission is decided without a lock of the stage's: with a policy, the state
//! word is read once for the policy's `Offer` (queue length, in flight) and the
//! lifecycle/capacity pre-check; the reservation CAS then decides for good. A
//! reservation that loses a race for the last slot after the policy admitted
//! returns `Full`; the policy's token for it is not refunded (as for a refused
//! batch's admitted part).

use std::time::Instant;

use crate::admission::Offer;
use crate::domain::MAX_INLINE_DEPTH;
use crate::envelope::{Class, Envelope, Meta};
use crate::error::EnqueueError;
use crate::handler::Items;
use crate::lifecycle::Origin;
use crate::queue::Refusal;
use crate::queue::state::Word;

use super::StageCore;
use super::defer::Deferral;

/// What an inline attempt did with the event.
enum Inline<T> {
    /// Ran inline.
    Done,
    /// The callee's admission refused it.
    Refused(T),
    /// Not runnable inline now: queue it.
    Queue(T),
}

impl<E: Send + 'static> StageCore<E> {
    pub(super) fn record_edge(&self, origin: &Origin) {
        if origin.inside(self.runtime_id)
            && let Some(from) = origin.cur.stage
        {
            self.incoming.record(from);
        }
    }

    /// Counts a refused reservation of `n` events and wraps the event(s).
    fn refused<T>(&self, r: Refusal, back: T, n: u64) -> EnqueueError<T> {
        let c = self.stats.counters();
        match r {
            Refusal::Closed => {
                c.closed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                EnqueueError::Closed(back)
            }
            Refusal::Full => {
                c.full.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                EnqueueError::Full(back)
            }
        }
    }

    /// The admission policy's decision (true without a policy or with it off).
    pub(super) fn admit(&self, class: Class, w: Word) -> bool {
        let Some(policy) = &self.admission else {
            return true;
        };
        if !self.admission_on.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        let offer = Offer {
            class,
            queue_len: w.waiting(),
            in_flight: w.in_flight(),
            capacity: self.queue.capacity(),
            now: Instant::now(),
        };
        let ok = policy.admit(&offer);
        if !ok {
            self.stats.rejected(class);
        }
        ok
    }

    /// One admission decision per event of a batch; any refusal refuses all, and
    /// every event of a refused batch counts as rejected.
    fn admit_all(&self, n: usize, class: Class, w: Word) -> bool {
        for i in 0..n {
            if !self.admit(class, w) {
                for _ in i + 1..n {
                    self.stats.rejected(class);
                }
                for _ in 0..i {
                    self.stats.rejected(class);
                }
                return false;
            }
        }
        true
    }

    fn may_inline(&self, origin: &Origin) -> bool {
        match &self.domain {
            Some(d) => {
                origin.cur.domain == Some(d.id) && origin.cur.depth < MAX_INLINE_DEPTH && d.inline()
            }
            None => false,
        }
    }

    /// Enqueues one event (or runs it inline, see [`crate::domain`]).
    pub(crate) fn offer(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
    ) -> Result<(), EnqueueError<E>> {
        let event = if self.may_inline(&origin) {
            // From a handler's batch, uncolored: at the end of that batch, as one
            // group (the first handoff of a batch of one runs at once; see `defer`).
            let event = match (origin.cur.clock, meta.color) {
                (Some(clock), None) => match self.defer(event, meta, &origin, clock) {
                    Deferral::Deferred => return Ok(()),
                    Deferral::Refused(e) => return Err(EnqueueError::Rejected(e)),
                    Deferral::No(e) => return self.offer_queued(e, meta, origin),
                    Deferral::Now(e) => e,
                },
                _ => event,
            };
            match self.try_inline(vec_or_one::One(event), meta, &origin) {
                Inline::Done => return Ok(()),
                Inline::Refused(e) => return Err(EnqueueError::Rejected(e.one())),
                Inline::Queue(e) => e.one(),
            }
        } else {
            event
        };
        self.offer_queued(event, meta, origin)
    }

    /// Enqueues one event in the queue (no inline attempt).
    fn offer_queued(&self, event: E, meta: Meta, origin: Origin) -> Result<(), EnqueueError<E>> {
        let inside = origin.inside(self.runtime_id);
        let has_policy = self.admission.is_some();
        if has_policy {
            let w = self.queue.word();
            if !w.accepts(inside) {
                return Err(self.refused(Refusal::Closed, event, 1));
            }
            if w.waiting() >= self.queue.capacity() {
                return Err(self.refused(Refusal::Full, event, 1));
            }
            if !self.admit(meta.class, w) {
                return Err(EnqueueError::Rejected(event));
            }
        }
        if let Err(r) = self.queue.reserve(1, inside) {
            return Err(self.refused(r, event, 1));
        }
        self.stats.admitted(meta.class, 1);
        let env = Envelope {
            event,
            meta,
            enqueued: origin.enqueue_instant(&meta),
            ticket: 0,
        };
        match meta.color {
            None => self.queue.write(env),
            Some(c) => self
                .queue
                .write_colored(std::iter::once(env), || self.colors.ticket(c)),
        }
        self.wake();
        self.record_edge(&origin);
        Ok(())
    }

    /// Enqueues all events or none (or runs them inline as one batch).
    pub(crate) fn offer_batch(
        &self,
        events: Vec<E>,
        meta: Meta,
        origin: Origin,
    ) -> Result<(), EnqueueError<Vec<E>>> {
        let n = events.len();
        if n == 0 {
            return Ok(());
        }
        let events = if self.may_inline(&origin)
            && meta.color.is_none()
            && n <= self.batch.load(std::sync::atomic::Ordering::Relaxed)
        {
            match self.try_inline(vec_or_one::Many(events), meta, &origin) {
                Inline::Done => return Ok(()),
                Inline::Refused(e) => return Err(EnqueueError::Rejected(e.many())),
                Inline::Queue(e) => e.many(),
            }
        } else {
            events
        };
        let inside = origin.inside(self.runtime_id);
        let w = self.queue.word();
        if !w.accepts(inside) {
            return Err(self.refused(Refusal::Closed, events, n as u64));
        }
        if w.waiting() + n > self.queue.capacity() {
            return Err(self.refused(Refusal::Full, events, n as u64));
        }
        // All or none. Tokens taken by the admitted part of a refused batch are not
        // refunded.
        if !self.admit_all(n, meta.class, w) {
            return Err(EnqueueError::Rejected(events));
        }
        if let Err(r) = self.queue.reserve(n, inside) {
            return Err(self.refused(r, events, n as u64));
        }
        self.stats.admitted(meta.class, n as u64);
        let now = origin.enqueue_instant(&meta);
        let envs = events.into_iter().map(|event| Envelope {
            event,
            meta,
            enqueued: now,
            ticket: 0,
        });
        match meta.color {
            None => envs.for_each(|env| self.queue.write(env)),
            Some(c) => self.queue.write_colored(envs, || self.colors.ticket(c)),
        }
        if n > 1 {
            self.queue.workers.notify_all();
        }
        self.wake();
        self.record_edge(&origin);
        Ok(())
    }

    /// Enqueues, waiting while the queue is full until `deadline` (backpressure).
    pub(crate) fn offer_until(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
        deadline: Instant,
    ) -> Result<(), EnqueueError<E>> {
        let inside = origin.inside(self.runtime_id);
        let mut event = event;
        let mut origin = origin;
        loop {
            match self.offer(event, meta, origin) {
                Err(EnqueueError::Full(e)) => {
                    event = e;
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(EnqueueError::Full(event));
                    }
                    let key = self.queue.space.prepare();
                    let w = self.queue.word();
                    if w.waiting() < self.queue.capacity() || !w.accepts(inside) {
                        self.queue.space.cancel();
                    } else {
                        self.queue.space.wait(key, deadline - now);
                    }
                    // Its enqueue instant is when it finally goes in.
                    origin = origin.waited();
                }
                other => return other,
            }
        }
    }

    /// Runs `events` inline if the domain rules allow (see [`crate::domain`]).
    fn try_inline(
        &self,
        events: vec_or_one::Events<E>,
        meta: Meta,
        origin: &Origin,
    ) -> Inline<vec_or_one::Events<E>> {
        let mut events = Some(events);
        let ran = super::batch::with_runtime(
            self.runtime_id,
            || self.runtime(),
            |rt| self.try_inline_in(&mut events, meta, origin, rt),
        );
        match (ran, events) {
            (Some(Inline::Done), _) => Inline::Done,
            (Some(Inline::Refused(())), Some(e)) => Inline::Refused(e),
            (_, Some(e)) => Inline::Queue(e),
            (_, None) => Inline::Done,
        }
    }

    /// `try_inline` with the runtime at hand; takes the events out of `slot` only
    /// when they run.
    fn try_inline_in(
        &self,
        slot: &mut Option<vec_or_one::Events<E>>,
        meta: Meta,
        origin: &Origin,
        rt: &crate::runtime::Runtime,
    ) -> Inline<()> {
        let n = slot.as_ref().map_or(0, vec_or_one::Events::len);
        let inside = origin.inside(self.runtime_id);
        let Some(_serial) = self.serial_try() else {
            return Inline::Queue(());
        };
        if !self.queue.enter_inline(n, inside) {
            return Inline::Queue(());
        }
        // A color runs inline only if it is idle with no ticket outstanding; it is
        // then held until the handler returns.
        let held = match meta.color {
            None => None,
            Some(c) => match self.colors.try_take(c) {
                Some(t) => Some((c, t)),
                None => {
                    self.queue.finish(n);
                    return Inline::Queue(());
                }
            },
        };
        let w = self.queue.word();
        if !self.admit_all(n, meta.class, w) {
            if let Some((c, t)) = held {
                self.colors.release(c, t);
            }
            self.queue.finish(n);
            return Inline::Refused(());
        }
        self.stats.admitted(meta.class, n as u64);
        self.record_edge(origin);
        let ticket = held.map_or(0, |(_, t)| t);
        let wrap = |event| Envelope {
            event,
            meta,
            enqueued: meta.born,
            ticket,
        };
        match slot.take() {
            None => {}
            Some(vec_or_one::Events::One(e)) => {
                self.run_inline(Items::One(Some(wrap(e))), 1, meta, origin.cur.depth + 1, rt);
            }
            Some(vec_or_one::Events::Many(v)) => {
                let mut envs: Vec<Envelope<E>> = v.into_iter().map(wrap).collect();
                self.run_inline(
                    Items::Drain(envs.drain(..)),
                    n,
                    meta,
                    origin.cur.depth + 1,
                    rt,
                );
            }
        }
        if let Some((c, t)) = held {
            self.colors.release(c, t);
        }
        self.queue.finish(n);
        Inline::Done
    }
}

/// One event or a batch, handed through the inline attempt and back.
mod vec_or_one {
    pub(super) use Events::{Many, One};

    pub(super) enum Events<E> {
        One(E),
        Many(Vec<E>),
    }

    impl<E> Events<E> {
        pub(super) fn len(&self) -> usize {
            match self {
                Events::One(_) => 1,
                Events::Many(v) => v.len(),
            }
        }

        pub(super) fn one(self) -> E {
            match self {
                Events::One(e) => e,
                Events::Many(_) => unreachable!("a single event went in"),
            }
        }

        pub(super) fn many(self) -> Vec<E> {
            match self {
                Events::Many(v) => v,
                Events::One(e) => vec![e],
            }
        }
    }
}
