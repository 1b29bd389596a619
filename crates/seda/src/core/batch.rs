//! Taking a batch from the queue and running a batch (queued or inline).
//!
//! Clock reads (see [`crate::clock`]): a queued batch starts at its worker's last
//! reading (the end of its previous batch, or a fresh reading after the worker
//! slept) and reads the clock once at its end; that end is the completion time of
//! all its events and the start of the worker's next batch. An inline run reads the
//! clock only when it is timed. What a run records: its counts always; its latency
//! samples under an admission policy that is on (every run), else when drawn as a
//! sample (one run in `INLINE_SAMPLE`, weighed that much, `stats::recorder`). So an
//! event's queueing delay may include the emitting batch's duration and a batch's
//! events share one service time (batch time / n) and one completion instant.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering::*};

use crate::admission::Completion;
use crate::clock;
use crate::color::{ColorTable, Unpark};
use crate::envelope::Meta;
use crate::exec::StageObj;
use crate::handler::{Batch, Context, Items};
use crate::lifecycle::Frame;
use crate::loom::{fence, spin};
use crate::stats::{Run, Tally};

use super::scratch::{Scratch, Stamp, Timing};
use super::{Exec, StageCore, defer};

/// Releases a one-thread stage's token when the batch is done.
pub(crate) struct SerialGuard<'a>(Option<&'a AtomicBool>);

impl Drop for SerialGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.0 {
            s.store(false, Release);
        }
    }
}

impl<E: Send + 'static> StageCore<E> {
    /// A one-thread stage's worker waits for its token (an inline call may hold it).
    pub(super) fn serial_wait(&self) -> SerialGuard<'_> {
        let Some(s) = &self.serial else {
            return SerialGuard(None);
        };
        let mut round = 0;
        while s.swap(true, Acquire) {
            spin(&mut round);
        }
        SerialGuard(Some(s))
    }

    /// An inline caller takes a one-thread stage's token only if it is free.
    pub(super) fn serial_try(&self) -> Option<SerialGuard<'_>> {
        match &self.serial {
            None => Some(SerialGuard(None)),
            Some(s) if !s.swap(true, Acquire) => Some(SerialGuard(Some(s))),
            Some(_) => None,
        }
    }

    /// Wakes whoever runs this stage after an event became claimable: a sleeping
    /// own-pool worker, or the shared pool through the schedule token.
    #[inline]
    pub(super) fn wake(&self) {
        match &self.exec {
            Exec::PerStage(_) => self.queue.workers.notify_one(),
            Exec::Shared(pool) => {
                // Dekker with `run_shared`: the event is written, fence, then look at
                // the token; the worker clears the token, fence, then looks at the
                // queue. One of the two sees the other.
                fence(SeqCst);
                if !self.scheduled.load(Relaxed)
                    && !self.scheduled.swap(true, AcqRel)
                    && let Some(me) = self.self_weak.upgrade()
                {
                    pool.push(me);
                }
            }
        }
    }

    /// Whether an inline run here must be timed, and with what weight; `hint` is
    /// the caller's notion of now (see `Origin::clock_hint`).
    #[inline]
    pub(super) fn inline_timing(&self, hint: u64, t: Tally<'_>) -> Timing {
        if self.policy_on() {
            return Timing::Inline { weight: 1 };
        }
        match t.sample(hint) {
            Some(weight) => Timing::Inline { weight },
            None => Timing::Untimed,
        }
    }

    /// Claims up to a batch and pops it into `s`; colored events out of turn are
    /// parked in the color table instead. Returns the events to run.
    ///
    /// A colored event's common case is one load of its slot's word (its turn has
    /// come) or none (this batch holds the slot's previous ticket: it runs after it,
    /// in the same batch); only an event out of turn looks through the batch's held
    /// slots and then parks.
    pub(super) fn take(&self, s: &mut Scratch<E>) -> usize {
        let max = self.batch.load(Relaxed).max(1);
        let claimed = self.queue.claim(max, |env, owned| {
            let Some(color) = env.meta.color() else {
                s.envs.push(env);
                return;
            };
            let slot = ColorTable::slot_of(color);
            let ticket = env.ticket;
            if owned || self.colors.turn(slot, ticket) {
                s.held.push((slot, ticket));
                s.envs.push(env);
                return;
            }
            // The next ticket of a slot this batch already holds runs in the same
            // batch, after it: same order, still never concurrent.
            if let Some(h) = s
                .held
                .iter_mut()
                .rev()
                .find(|h| h.0 == slot && crate::color::follows(h.1, ticket))
            {
                h.1 = ticket;
                s.envs.push(env);
                return;
            }
            let weak = self.self_weak.clone();
            // Counted `outside` under the shard's lock, before the release that
            // serves the ticket can see it and hand it on: counted after `park`
            // returned, a claim of the ready list could take it out of `outside`
            // before it was counted there (the count dipped below zero).
            let queue = &self.queue;
            let acquired = self.colors.park(slot, ticket, env, move |env| -> Unpark {
                queue.parked();
                Box::new(move || {
                    if let Some(core) = weak.upgrade() {
                        core.queue.unpark(env);
                        core.wake();
                    }
                })
            });
            if let Ok(env) = acquired {
                s.held.push((slot, ticket));
                s.envs.push(env);
            }
        });
        if claimed > 0 {
            self.queue.space.notify_all();
        }
        s.envs.len()
    }

    /// Runs the batch in `s` (taken by `take`) and accounts for it.
    pub(super) fn run_batch(&self, s: &mut Scratch<E>) {
        let n = s.envs.len();
        if n == 0 {
            s.held.clear();
            return;
        }
        let start = clock::batch_start();
        s.stamps.clear();
        for e in &s.envs {
            Stamp::push(
                &mut s.stamps,
                e.meta.born_nanos(),
                e.enqueued,
                e.meta.class(),
            );
        }
        let first = s.envs[0].meta;
        let outer = defer::open(n);
        self.invoke(Items::Drain(s.envs.drain(..)), first, start, 0);
        let end = self.complete(start, n, &s.stamps, Timing::Queued, self.stats.tally());
        clock::batch_end(end);
        for (slot, last) in s.held.drain(..) {
            self.colors.release_slot(slot, last);
        }
        // Deferred groups run before the batch is acknowledged: until then this
        // batch's held count covers them (see `lifecycle::Frame::in_batch`).
        let end = defer::flush(outer, end);
        clock::batch_end(end);
        self.queue.finish(n);
    }

    /// Runs events already entered inline on this thread. `clock` is the caller's
    /// batch clock (the start of an untimed run); `t` the thread's counters here
    /// (looked up once per hop); `seen`: this stage's handoff key if the calling
    /// batch hands it the event at once (see `defer::open_after`), else null.
    pub(super) fn run_inline(
        &self,
        items: Items<'_, E>,
        n: usize,
        meta: Meta,
        (depth, clock): (u8, u64),
        t: Tally<'_>,
        seen: *const (),
    ) {
        let timing = self.inline_timing(clock.max(meta.born_nanos()), t);
        let start = if timing == Timing::Untimed {
            clock
        } else {
            clock::now()
        };
        let stamp = Stamp {
            born: meta.born_nanos(),
            enqueued: start,
            class: meta.class(),
            n: u32::try_from(n).unwrap_or(u32::MAX),
        };
        let outer = defer::open_after(n, seen);
        self.invoke(items, meta, start, depth);
        let end = self.complete(start, n, &[stamp], timing, t);
        defer::flush(outer, end);
    }

    /// Calls the handler with the thread marked as this stage's; catches a panic.
    pub(super) fn invoke(&self, items: Items<'_, E>, first: Meta, start: u64, depth: u8) {
        let frame = Frame {
            runtime: self.runtime_id,
            stage: self.id as u32,
            domain: self.domain.as_ref().map_or(0, |d| d.id),
            depth,
            in_batch: true,
            clock: start,
        };
        let outcome = Frame::scope(frame, Some(first), || {
            let cx = Context {
                stage: self,
                in_batch: true,
            };
            catch_unwind(AssertUnwindSafe(|| {
                self.handler().handle_events(Batch { items }, &cx);
            }))
        });
        if let Err(panic) = outcome {
            let msg = panic_message(&*panic);
            self.stats.panics.fetch_add(1, Relaxed);
            tracing::error!(stage = %self.name, "event handler panicked: {msg}");
            *self.stats.last_panic.lock() = Some(msg);
        }
    }

    /// Records a finished run (counts always; samples and policy completions when
    /// timed). Returns its end instant (`start` for an untimed run).
    pub(super) fn complete(
        &self,
        start: u64,
        n: usize,
        stamps: &[Stamp],
        timing: Timing,
        t: Tally<'_>,
    ) -> u64 {
        let inline = timing != Timing::Queued;
        t.processed(n as u64, inline);
        let weight = match timing {
            Timing::Untimed => return start,
            // A queued batch reads the clock (its end starts the worker's next
            // batch), but records its samples like an inline run: all of them under
            // a policy, else one batch in INLINE_SAMPLE, weighed that much.
            Timing::Queued if self.policy_on() => 1,
            Timing::Queued => {
                let end = clock::now();
                match t.sample(end) {
                    Some(weight) => return self.record_run(start, end, n, stamps, timing, weight),
                    None => return end,
                }
            }
            Timing::Inline { weight } => weight,
        };
        let end = clock::now();
        self.record_run(start, end, n, stamps, timing, weight)
    }

    /// Records the samples of a run from `start` to `end` (and feeds the policy).
    fn record_run(
        &self,
        start: u64,
        end: u64,
        n: usize,
        stamps: &[Stamp],
        timing: Timing,
        weight: u32,
    ) -> u64 {
        let inline = timing != Timing::Queued;
        let batch = end.saturating_sub(start);
        let n32 = u32::try_from(n).unwrap_or(u32::MAX).max(1);
        // No 64-bit division for the usual one-event batch (an inline hop).
        let service = if n32 == 1 {
            batch
        } else {
            batch / u64::from(n32)
        };
        let queue_delay = |s: &Stamp| {
            if inline {
                0
            } else {
                start.saturating_sub(s.enqueued)
            }
        };
        self.stats.record(
            service,
            n32,
            weight,
            stamps.iter().map(|s| Run {
                queue_delay: queue_delay(s),
                response: end.saturating_sub(s.born),
                n: s.n,
            }),
        );
        // Completions feed the policy only while admission control is on: events that
        // entered while it was off (service degradation, USITS'03 3.4) never passed
        // the policy, and their response times would drive its state (a token rate cut
        // to the floor, say) for a regime that no longer holds when it is switched on.
        if let Some(policy) = self.policy() {
            let in_flight = self.queue.in_flight();
            let now = clock::instant(end);
            for s in stamps {
                let c = Completion {
                    class: s.class,
                    response_time: clock::between(s.born, end),
                    queue_delay: std::time::Duration::from_nanos(queue_delay(s)),
                    service_time: std::time::Duration::from_nanos(service),
                    in_flight,
                    now,
                };
                for _ in 0..s.n {
                    policy.on_complete(&c);
                }
            }
        }
        end
    }

    /// Shared pool: takes one batch, hands the schedule token on, runs the batch.
    pub(super) fn run_shared(&self) {
        let Exec::Shared(pool) = &self.exec else {
            return;
        };
        if !self.queue.runs() {
            // Not runnable now; `start` reschedules a stage that has work.
            self.scheduled.store(false, Release);
            return;
        }
        let mut s = self.spare.pop().unwrap_or_default();
        self.take(&mut s);
        // Hand the schedule token on before running, so that work arriving during
        // this batch runs on another worker meanwhile (a stage's batches may run in
        // parallel; colors still serialise same-colored events):
        // - more waiting: the token goes back to the run queue;
        // - the batch emptied the queue: give the token up, fence, re-check, so an
        //   event enqueued in between is not stranded (see `wake`).
        if let Some(me) = self.self_weak.upgrade() {
            if self.queue.has_work() {
                pool.push(me as std::sync::Arc<dyn StageObj>);
            } else {
                self.scheduled.store(false, Relaxed);
                fence(SeqCst);
                if self.queue.has_work() && !self.scheduled.swap(true, AcqRel) {
                    pool.push(me);
                }
            }
        }
        self.run_batch(&mut s);
        let _ = self.spare.push(s);
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
