//! The paths into a stage: one event, a batch (all or none), with backpressure,
//! and the inline handoff within a domain (see [`crate::domain`]).
//!
//! A queued enqueue is one push on the stage's ring (its CAS is the reservation),
//! the caller's own counter slot (`stats::recorder`) and a look for sleepers. With
//! an admission policy, the policy decides first, on the queue's counts; a push
//! that then finds the ring full returns `Full` and the policy's token for it is not
//! refunded (as for a refused batch's admitted part).
//!
//! A colored event draws its color ticket before its push; if the push is refused
//! the ticket is voided (served and released at once when its turn comes), so the
//! color's later events are never stuck behind it.

use crate::admission::Offer;
use crate::clock;
use crate::domain::MAX_INLINE_DEPTH;
use crate::envelope::{Envelope, Meta};
use crate::error::EnqueueError;
use crate::handler::Items;
use crate::lifecycle::Origin;
use crate::queue::Refusal;

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
    #[inline]
    pub(super) fn record_edge(&self, origin: &Origin) {
        if origin.inside(self.runtime_id)
            && let Some(from) = origin.cur.stage()
        {
            self.incoming.record(from);
        }
    }

    /// Counts a refused enqueue of `n` events and wraps the event(s).
    #[cold]
    fn refused<T>(&self, closed: bool, back: T, n: u64) -> EnqueueError<T> {
        if closed {
            self.stats.tally().closed(n);
            EnqueueError::Closed(back)
        } else {
            self.stats.tally().full(n);
            EnqueueError::Full(back)
        }
    }

    /// The admission policy's decision (true without a policy or with it off);
    /// `now` is the caller's clock (0: read it if the policy needs it).
    pub(super) fn admit(&self, class: u8, now: u64) -> bool {
        let Some(policy) = self.policy() else {
            return true;
        };
        let now = if now == 0 { clock::now() } else { now };
        let offer = Offer {
            class,
            queue_len: self.queue.waiting(),
            in_flight: self.queue.in_flight(),
            capacity: self.queue.capacity(),
            now: clock::instant(now),
        };
        let ok = policy.admit(&offer);
        if !ok {
            self.stats.tally().rejected(class, 1);
        }
        ok
    }

    /// One admission decision per event of a batch; any refusal refuses all, and
    /// every event of a refused batch counts as rejected.
    fn admit_all(&self, n: usize, class: u8, now: u64) -> bool {
        for _ in 0..n {
            if !self.admit(class, now) {
                self.stats.tally().rejected(class, (n - 1) as u64);
                return false;
            }
        }
        true
    }

    #[inline]
    fn may_inline(&self, origin: &Origin) -> bool {
        match &self.domain {
            Some(d) => {
                origin.cur.domain == d.id && origin.cur.depth < MAX_INLINE_DEPTH && d.inline()
            }
            None => false,
        }
    }

    /// Enqueues one event (or runs it inline, see [`crate::domain`]).
    #[inline]
    pub(crate) fn offer(
        &self,
        event: E,
        meta: &Meta,
        origin: &Origin,
    ) -> Result<(), EnqueueError<E>> {
        if let Some(d) = &self.domain
            && d.inline()
        {
            return self.offer_in_domain(event, meta, origin);
        }
        self.offer_queued(event, meta, origin)
    }

    /// [`StageCore::offer`] for a stage of a domain: inline if the rules allow.
    #[inline(never)]
    fn offer_in_domain(
        &self,
        event: E,
        meta: &Meta,
        origin: &Origin,
    ) -> Result<(), EnqueueError<E>> {
        let meta = *meta;
        let event = if self.may_inline(origin) {
            // From a handler's batch, uncolored: at the end of that batch, as one
            // group (the first handoff of a batch of one runs at once; see `defer`).
            let mut seen = std::ptr::null();
            if origin.cur.in_batch && meta.color().is_none() {
                if let Err(open) = self.handoff_now() {
                    return match self.defer(event, meta, origin, open) {
                        Deferral::Deferred => Ok(()),
                        Deferral::Refused(e) => Err(EnqueueError::Rejected(e)),
                        Deferral::No(e) => self.offer_queued(e, &meta, origin),
                    };
                }
                seen = self.handoff_key();
            }
            let back = match self.try_inline_one(event, meta, origin, seen) {
                Inline::Done => return Ok(()),
                Inline::Refused(e) => Err(EnqueueError::Rejected(e)),
                Inline::Queue(e) => Ok(e),
            };
            // Handed at once but not run here: the calling frame still records it.
            if !seen.is_null() {
                super::defer::mark_seen(seen);
            }
            back?
        } else {
            event
        };
        self.offer_queued(event, &meta, origin)
    }

    /// Enqueues one event in the queue (no inline attempt). The common case (no
    /// policy) is a push, a counter bump, a look for sleepers and the graph edge's
    /// bit test; a colored event also draws its ticket (one `fetch_add`).
    #[inline]
    fn offer_queued(&self, event: E, meta: &Meta, origin: &Origin) -> Result<(), EnqueueError<E>> {
        if self.admission.is_some() {
            return self.offer_queued_slow(event, meta, origin);
        }
        let ticket = match meta.color() {
            None => 0,
            Some(c) => self.colors.ticket(c),
        };
        let env = Envelope {
            event,
            meta: *meta,
            enqueued: origin.enqueue_instant(meta),
            ticket,
        };
        match self.queue.push(env, origin.inside(self.runtime_id)) {
            Ok(()) => {
                self.stats.tally().admitted(meta.class(), 1);
                self.wake();
                self.record_edge(origin);
                Ok(())
            }
            Err(r) => Err(self.refused_push(r, meta)),
        }
    }

    /// A refused push: counted, the ticket of a colored event voided, the event
    /// handed back.
    #[cold]
    fn refused_push(&self, r: Refusal<Envelope<E>>, meta: &Meta) -> EnqueueError<E> {
        let (closed, env) = match r {
            Refusal::Closed(e) => (true, e),
            Refusal::Full(e) => (false, e),
        };
        if let Some(c) = meta.color() {
            self.void_ticket(c, env.ticket);
        }
        self.refused(closed, env.event, 1)
    }

    /// [`StageCore::offer_queued`] with an admission policy.
    #[inline(never)]
    fn offer_queued_slow(
        &self,
        event: E,
        meta: &Meta,
        origin: &Origin,
    ) -> Result<(), EnqueueError<E>> {
        let inside = origin.inside(self.runtime_id);
        if self.policy_on() {
            if !self.queue.accepts(inside) {
                return Err(self.refused(true, event, 1));
            }
            if self.queue.waiting() >= self.queue.capacity() {
                return Err(self.refused(false, event, 1));
            }
            if !self.admit(meta.class(), origin.clock_hint(meta)) {
                return Err(EnqueueError::Rejected(event));
            }
        }
        let ticket = meta.color().map_or(0, |c| self.colors.ticket(c));
        let env = Envelope {
            event,
            meta: *meta,
            enqueued: origin.enqueue_instant(meta),
            ticket,
        };
        match self.queue.push(env, inside) {
            Ok(()) => {
                self.stats.tally().admitted(meta.class(), 1);
                self.wake();
                self.record_edge(origin);
                Ok(())
            }
            Err(r) => Err(self.refused_push(r, meta)),
        }
    }

    /// A ticket drawn for an event that was then refused: served and released when
    /// its turn comes, so the color's later events do not wait for it.
    fn void_ticket(&self, color: crate::Color, ticket: crate::color::Ticket) {
        let colors = std::sync::Arc::clone(&self.colors);
        let voided = self.colors.acquire(color, ticket, (), move |()| {
            Box::new(move || colors.release(color, ticket))
        });
        if voided.is_ok() {
            self.colors.release(color, ticket);
        }
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
            && meta.color().is_none()
            && n <= self.batch.load(std::sync::atomic::Ordering::Relaxed)
        {
            match self.try_inline(events, meta, &origin) {
                Inline::Done => return Ok(()),
                Inline::Refused(e) => return Err(EnqueueError::Rejected(e)),
                Inline::Queue(e) => e,
            }
        } else {
            events
        };
        let inside = origin.inside(self.runtime_id);
        if self.policy_on() {
            if !self.queue.accepts(inside) {
                return Err(self.refused(true, events, n as u64));
            }
            if self.queue.waiting() + n > self.queue.capacity() {
                return Err(self.refused(false, events, n as u64));
            }
            // All or none. Tokens taken by the admitted part of a refused batch are not
            // refunded.
            if !self.admit_all(n, meta.class(), origin.clock_hint(&meta)) {
                return Err(EnqueueError::Rejected(events));
            }
        }
        let enqueued = origin.enqueue_instant(&meta);
        let envs: Vec<Envelope<E>> = match meta.color() {
            None => events
                .into_iter()
                .map(|event| Envelope {
                    event,
                    meta,
                    enqueued,
                    ticket: 0,
                })
                .collect(),
            Some(c) => events
                .into_iter()
                .map(|event| Envelope {
                    event,
                    meta,
                    enqueued,
                    ticket: self.colors.ticket(c),
                })
                .collect(),
        };
        match self.queue.push_all(envs, inside) {
            Ok(()) => {
                self.stats.tally().admitted(meta.class(), n as u64);
                if n > 1 {
                    self.queue.workers.notify_all();
                }
                self.wake();
                self.record_edge(&origin);
                Ok(())
            }
            Err(r) => {
                let (closed, envs) = match r {
                    Refusal::Closed(e) => (true, e),
                    Refusal::Full(e) => (false, e),
                };
                if let Some(c) = meta.color() {
                    for e in &envs {
                        self.void_ticket(c, e.ticket);
                    }
                }
                let events = envs.into_iter().map(|e| e.event).collect();
                Err(self.refused(closed, events, n as u64))
            }
        }
    }

    /// Enqueues, waiting while the queue is full until `deadline` (backpressure).
    pub(crate) fn offer_until(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
        deadline: std::time::Instant,
    ) -> Result<(), EnqueueError<E>> {
        let inside = origin.inside(self.runtime_id);
        let mut event = event;
        let mut origin = origin;
        loop {
            match self.offer(event, &meta, &origin) {
                Err(EnqueueError::Full(e)) => {
                    event = e;
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return Err(EnqueueError::Full(event));
                    }
                    let key = self.queue.space.prepare();
                    if self.queue.waiting() < self.queue.capacity() || !self.queue.accepts(inside) {
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

    /// Runs `events` inline, as one batch, if the domain rules allow (see
    /// [`crate::domain`]), else hands them back.
    fn try_inline(&self, events: Vec<E>, meta: Meta, origin: &Origin) -> Inline<Vec<E>> {
        let n = events.len();
        let entered = match self.enter_inline(n, &meta, origin) {
            Ok(entered) => entered,
            Err(Inline::Refused(())) => return Inline::Refused(events),
            Err(_) => return Inline::Queue(events),
        };
        let ticket = entered.ticket();
        let mut envs: Vec<Envelope<E>> = events
            .into_iter()
            .map(|event| Envelope {
                event,
                meta,
                enqueued: meta.born_nanos(),
                ticket,
            })
            .collect();
        self.run_inline(
            Items::Drain(envs.drain(..)),
            n,
            meta,
            (entered.depth, entered.clock),
            entered.tally,
            std::ptr::null(),
        );
        self.leave_inline(entered);
        Inline::Done
    }

    /// One event inline, the common hop: the event is moved once, into the slot
    /// the handler's batch takes it from.
    #[inline]
    fn try_inline_one(&self, event: E, meta: Meta, origin: &Origin, seen: *const ()) -> Inline<E> {
        let entered = match self.enter_inline(1, &meta, origin) {
            Ok(entered) => entered,
            Err(Inline::Refused(())) => return Inline::Refused(event),
            Err(_) => return Inline::Queue(event),
        };
        let mut slot = Some(Envelope {
            event,
            meta,
            enqueued: meta.born_nanos(),
            ticket: entered.ticket(),
        });
        self.run_inline(
            Items::One(&mut slot),
            1,
            meta,
            (entered.depth, entered.clock),
            entered.tally,
            seen,
        );
        self.leave_inline(entered);
        Inline::Done
    }

    /// The checks and reservations of an inline run of `n` events (no event is
    /// touched): the one-thread token, the count (or the covering batch's), the
    /// color, the callee's admission. `Err(Refused)` when admission said no,
    /// `Err(Queue)` when the event must be queued instead.
    #[inline]
    fn enter_inline(
        &self,
        n: usize,
        meta: &Meta,
        origin: &Origin,
    ) -> Result<Entered<'_>, Inline<()>> {
        let inside = origin.inside(self.runtime_id);
        let Some(serial) = self.serial_try() else {
            return Err(Inline::Queue(()));
        };
        // A thread that a running batch of this runtime covers needs no count of its
        // own (the batch's held count covers what it runs inline); any other thread
        // counts the events held while they run.
        let counted = !origin.covered(self.runtime_id);
        let entered = if counted {
            self.queue.enter_counted(n, inside)
        } else {
            self.queue.inline_ok(inside)
        };
        if !entered {
            return Err(Inline::Queue(()));
        }
        let done = |this: &Self| {
            if counted {
                this.queue.finish(n);
            }
        };
        // A color runs inline only if it is idle with no ticket outstanding; it is
        // then held until the handler returns.
        let held = match meta.color() {
            None => None,
            Some(c) => match self.colors.try_take(c) {
                Some(t) => Some((c, t)),
                None => {
                    done(self);
                    return Err(Inline::Queue(()));
                }
            },
        };
        let clock = origin.clock_hint(meta);
        if !self.admit_all(n, meta.class(), clock) {
            if let Some((c, t)) = held {
                self.colors.release(c, t);
            }
            done(self);
            return Err(Inline::Refused(()));
        }
        let tally = self.stats.tally();
        tally.admitted(meta.class(), n as u64);
        self.record_edge(origin);
        Ok(Entered {
            tally,
            _serial: serial,
            counted,
            n,
            held,
            depth: origin.cur.depth + 1,
            clock: if clock == 0 { clock::now() } else { clock },
        })
    }

    /// Gives back what [`StageCore::enter_inline`] reserved, after the run.
    #[inline]
    fn leave_inline(&self, entered: Entered<'_>) {
        if let Some((c, t)) = entered.held {
            self.colors.release(c, t);
        }
        if entered.counted {
            self.queue.finish(entered.n);
        }
    }
}

/// What an inline run holds while it runs (see [`StageCore::enter_inline`]).
struct Entered<'a> {
    /// The one-thread stage's token, released when dropped.
    _serial: super::batch::SerialGuard<'a>,
    counted: bool,
    n: usize,
    held: Option<(crate::Color, crate::color::Ticket)>,
    depth: u8,
    clock: u64,
    /// The thread's counters in the callee (one lookup per hop).
    tally: crate::stats::Tally<'a>,
}

impl Entered<'_> {
    fn ticket(&self) -> crate::color::Ticket {
        self.held.map_or(0, |(_, t)| t)
    }
}
