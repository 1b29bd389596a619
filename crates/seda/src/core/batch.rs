//! Taking a batch from the queue and running a batch (queued or inline).
//!
//! Clock reads are amortised per batch: one at its start (also the enqueue instant
//! of every event the handler emits, see `Origin::enqueue_instant`), one at its end
//! (the completion time of all its events). So an emitted event's queueing delay
//! may include up to the emitting batch's duration, and a batch's events share one
//! service time (batch time / n) and one completion instant.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

use crate::admission::Completion;
use crate::color::Unpark;
use crate::envelope::{Class, Color, Envelope, Meta};
use crate::exec::StageObj;
use crate::handler::{Batch, Context, Items};
use crate::lifecycle::Current;
use crate::loom::{fence, spin};
use crate::runtime::Runtime;

use super::{Exec, StageCore, defer};

thread_local! {
    /// The runtime of the batch this thread runs, so that an inline handoff inside
    /// it needs no `Weak` upgrade (two atomic operations per hop).
    static RUNTIME: std::cell::RefCell<Option<Runtime>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with a handle to runtime `id`: the running batch's, else `upgrade()`'s.
pub(super) fn with_runtime<R>(
    id: u64,
    upgrade: impl FnOnce() -> Option<Runtime>,
    f: impl FnOnce(&Runtime) -> R,
) -> Option<R> {
    let mut f = Some(f);
    let done = RUNTIME.with(|r| {
        let rt = r.try_borrow().ok()?;
        let rt = rt.as_ref().filter(|rt| rt.inner.id == id)?;
        f.take().map(|f| f(rt))
    });
    match (done, f) {
        (Some(r), _) => Some(r),
        (None, Some(f)) => upgrade().map(|rt| f(&rt)),
        (None, None) => None,
    }
}

/// What the stats need of a run of consecutive events of a batch after their
/// handler consumed them: events of one upstream batch share their enqueue instant
/// (its batch clock), events handed over inline share everything, so a batch is
/// usually a few runs and the per-event work is one comparison.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamp {
    born: Instant,
    enqueued: Instant,
    class: Class,
    n: u32,
}

impl Stamp {
    /// Adds an event to the last run if it shares it, else starts a run.
    pub(super) fn push(runs: &mut Vec<Stamp>, born: Instant, enqueued: Instant, class: Class) {
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
    /// Colors the batch holds, with the last ticket of each.
    held: Vec<(Color, u64)>,
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

    /// Claims up to a batch and pops it into `s`; colored events out of turn are
    /// parked in the color table instead. Returns the events to run.
    pub(super) fn take(&self, s: &mut Scratch<E>) -> usize {
        let k = self.queue.claim(self.batch.load(Relaxed).max(1));
        if k == 0 {
            return 0;
        }
        for _ in 0..k {
            let (env, owned) = self.queue.pop_claimed();
            let Some(color) = env.meta.color else {
                s.envs.push(env);
                continue;
            };
            if owned {
                s.held.push((color, env.ticket));
                s.envs.push(env);
                continue;
            }
            // The next ticket of a color this batch already holds runs in the same
            // batch, after it: same order, still never concurrent.
            if let Some(h) = s
                .held
                .iter_mut()
                .find(|h| h.0 == color && h.1 + 1 == env.ticket)
            {
                h.1 = env.ticket;
                s.envs.push(env);
                continue;
            }
            let ticket = env.ticket;
            let weak = self.self_weak.clone();
            let acquired = self
                .colors
                .acquire(color, ticket, env, move |env| -> Unpark {
                    Box::new(move || {
                        if let Some(core) = weak.upgrade() {
                            core.queue.unpark(env);
                            core.wake();
                        }
                    })
                });
            match acquired {
                Ok(env) => {
                    s.held.push((color, ticket));
                    s.envs.push(env);
                }
                Err(()) => self.queue.parked(),
            }
        }
        self.queue.space.notify_all();
        s.envs.len()
    }

    /// Runs the batch in `s` (taken by `take`) and accounts for it.
    pub(super) fn run_batch(&self, s: &mut Scratch<E>, rt: &Runtime) {
        let n = s.envs.len();
        if n == 0 {
            s.held.clear();
            return;
        }
        let start = Instant::now();
        s.stamps.clear();
        for e in &s.envs {
            Stamp::push(&mut s.stamps, e.meta.born, e.enqueued, e.meta.class);
        }
        let first = s.envs[0].meta;
        let outer = defer::open(n);
        self.invoke(Items::Drain(s.envs.drain(..)), first, start, 0, rt);
        let end = self.complete(start, n, &s.stamps, false);
        for (color, last) in s.held.drain(..) {
            self.colors.release(color, last);
        }
        self.queue.finish(n);
        defer::flush(outer, end, rt);
    }

    /// Runs events already entered inline (counted running) on this thread.
    pub(super) fn run_inline(
        &self,
        items: Items<'_, E>,
        n: usize,
        meta: Meta,
        depth: u8,
        rt: &Runtime,
    ) {
        let start = Instant::now();
        let stamp = Stamp {
            born: meta.born,
            enqueued: start,
            class: meta.class,
            n: u32::try_from(n).unwrap_or(u32::MAX),
        };
        let outer = defer::open(n);
        self.invoke(items, meta, start, depth, rt);
        let end = self.complete(start, n, &[stamp], true);
        defer::flush(outer, end, rt);
    }

    /// Calls the handler with the thread marked as this stage's; catches a panic.
    pub(super) fn invoke(
        &self,
        items: Items<'_, E>,
        first: Meta,
        start: Instant,
        depth: u8,
        rt: &Runtime,
    ) {
        let cur = Current {
            runtime: self.runtime_id,
            stage: Some(self.id),
            meta: Some(first),
            domain: self.domain.as_ref().map(|d| d.id),
            depth,
            clock: Some(start),
        };
        // Publish the runtime for inline handoffs of this batch (unless an outer
        // batch on this thread already did).
        let publish = RUNTIME.with(|r| {
            let mut r = r.try_borrow_mut().ok()?;
            if r.as_ref().is_some_and(|x| x.inner.id == self.runtime_id) {
                None
            } else {
                Some(r.replace(rt.clone()))
            }
        });
        let outcome = Current::scope(cur, || {
            let cx = Context {
                stage: self,
                runtime: rt,
                in_batch: true,
            };
            catch_unwind(AssertUnwindSafe(|| {
                self.handler.handle_events(Batch { items }, &cx);
            }))
        });
        if let Some(prev) = publish {
            RUNTIME.with(|r| {
                if let Ok(mut r) = r.try_borrow_mut() {
                    *r = prev;
                }
            });
        }
        if let Err(panic) = outcome {
            let msg = panic_message(&*panic);
            self.stats.panics.fetch_add(1, Relaxed);
            tracing::error!(stage = %self.name, "event handler panicked: {msg}");
            *self.stats.last_panic.lock() = Some(msg);
        }
    }

    /// Records a finished batch (inline: no queueing delay) and feeds the admission
    /// policy its completions. Returns the batch's end instant.
    pub(super) fn complete(
        &self,
        start: Instant,
        n: usize,
        stamps: &[Stamp],
        inline: bool,
    ) -> Instant {
        let end = Instant::now();
        let batch = end.saturating_duration_since(start);
        // No 64-bit division for the usual one-event batch (an inline hop).
        let service = match n {
            0 | 1 => batch,
            n => batch / u32::try_from(n).unwrap_or(u32::MAX),
        };
        let queue_delay = |s: &Stamp| {
            if inline {
                Duration::ZERO
            } else {
                start.saturating_duration_since(s.enqueued)
            }
        };
        // Runs that differ only in `born` (one upstream batch of distinct requests)
        // share their enqueue instant: reuse the last queueing delay.
        let mut last_qd: Option<(Instant, Duration)> = None;
        self.stats.record(
            service,
            n,
            inline,
            stamps.iter().map(|s| {
                let rt = end.saturating_duration_since(s.born);
                let qd = match last_qd {
                    _ if inline => Duration::ZERO,
                    Some((at, d)) if at == s.enqueued => d,
                    // Enqueued when born (fresh metadata from outside the runtime):
                    // start - born = (end - born) - (end - start), exactly, without a
                    // second `Instant` subtraction per event.
                    _ if s.enqueued == s.born => rt.saturating_sub(batch),
                    _ => {
                        let d = queue_delay(s);
                        last_qd = Some((s.enqueued, d));
                        d
                    }
                };
                (qd, rt, s.n)
            }),
        );
        // Completions feed the policy only while admission control is on: events that
        // entered while it was off (service degradation, USITS'03 3.4) never passed
        // the policy, and their response times would drive its state (a token rate cut
        // to the floor, say) for a regime that no longer holds when it is switched on.
        if let Some(policy) = self
            .admission
            .as_ref()
            .filter(|_| self.admission_on.load(Relaxed))
        {
            let in_flight = self.queue.word().in_flight();
            for s in stamps {
                let c = Completion {
                    class: s.class,
                    response_time: end.saturating_duration_since(s.born),
                    queue_delay: queue_delay(s),
                    service_time: service,
                    in_flight,
                    now: end,
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
        if !self.queue.word().runs() {
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
            if self.queue.word().queued() > 0 {
                pool.push(me as std::sync::Arc<dyn StageObj>);
            } else {
                self.scheduled.store(false, Relaxed);
                fence(SeqCst);
                if self.queue.word().queued() > 0 && !self.scheduled.swap(true, AcqRel) {
                    pool.push(me);
                }
            }
        }
        match self.runtime() {
            Some(rt) => self.run_batch(&mut s, &rt),
            None => {
                // The runtime is gone: nobody will count these events.
                let n = s.envs.len();
                s.envs.clear();
                s.held.clear();
                self.queue.finish(n);
            }
        }
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
