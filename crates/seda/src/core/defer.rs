//! Deferred inline handoff: events a handler hands, one by one, to a stage of its
//! domain run inline as one batch when the handler's batch is done, instead of one
//! nested handler call per event.
//!
//! Why: a handler that forwards event by event (`for v in batch { next.try_enqueue(v) }`)
//! used to pay a whole inline run per event (two clock reads, the stats slot's lock,
//! a panic guard, the thread's frame): measured 2026-11-24 on the 5-stage pipeline
//! bench, 1,107 instructions per hop and 0.14x the raw channel, worse than queueing.
//! Deferred, the callee gets the caller's events as one batch, read one clock, and
//! the per-event work is an enter CAS and a push.
//!
//! Rules (in addition to those of [`crate::domain`], which still decide whether an
//! event may run inline at all):
//! - Only uncolored events from a handler running a batch are deferred; colored
//!   events and enqueues from a thread outside any batch (a thread inside
//!   `Domain::enter`) run inline at once, as before.
//! - A batch of one event hands its first event to a stage inline at once; a group
//!   opens at its second handoff to the stage it last handed an event to (the frame
//!   remembers that one stage). A batch of several events defers every handoff. A group costs an allocation and a second handler run, which
//!   only pays when events join it: Haboob, whose stages hand one event per batch
//!   to the next, measured +2,600 instructions per request (10,414 -> 13,010) when
//!   every handoff was deferred.
//! - Each event is checked (refused unless the callee runs, accepts the caller and
//!   has nothing queued), admitted by the callee's policy, counted `admitted` and its
//!   edge recorded *when it is offered*, so the caller gets the callee's verdict
//!   synchronously. Until its group has run, the caller's batch is not acknowledged
//!   (it runs its groups first), so a shutdown counts the deferred events in flight
//!   through the caller's held count.
//! - A one-thread callee's token is taken when its group opens and held until the
//!   group has run (its worker waits meanwhile, so it still never runs two batches
//!   at once); if the token is busy the event is queued.
//! - The groups of one batch run after that batch has been accounted for (its
//!   `complete`), in the order they were opened; a group that reaches the callee's
//!   batch size runs at once. A group's events keep the order they were offered in;
//!   no deferred event is overtaken by one the same thread offers later to the same
//!   stage. They run at the caller's depth + 1 (bounded by `MAX_INLINE_DEPTH`).
//! - Accounting: as any inline run (processed, inlined; timed like any inline run,
//!   see `core::batch`); an untimed group starts at the end instant of the batch
//!   that ran before it on this thread and reads no clock. A deferred event's wait
//!   for the rest of the caller's batch is part of its response time (measured from
//!   `born`), not of its queueing delay.
//!
//! # Invariants
//! - Every deferred event runs exactly once: the group that holds it runs (a
//!   panicking handler is caught inside the run); nothing else removes a group from
//!   the thread's list.
//! - A thread's groups beyond `base` belong to the batch running on it now.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, Release};

use crate::envelope::{Envelope, Meta};
use crate::handler::Items;
use crate::lifecycle::Origin;

use super::StageCore;
use super::scratch::{Scratch, Stamp, Timing};

/// A group of events deferred for one stage, type-erased.
trait Group {
    /// The stage it feeds (its `StageCore`'s address).
    fn key(&self) -> *const ();
    fn as_any(&mut self) -> &mut dyn Any;
    /// Runs the group, starting at `start`; returns the end instant.
    fn run(self: Box<Self>, start: u64) -> u64;
}

struct Deferred<E: Send + 'static> {
    core: Arc<StageCore<E>>,
    scratch: Scratch<E>,
    depth: u8,
    /// Whether the group holds the callee's one-thread token.
    serial: bool,
}

impl<E: Send + 'static> Group for Deferred<E> {
    fn key(&self) -> *const () {
        Arc::as_ptr(&self.core).cast()
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
    fn run(self: Box<Self>, start: u64) -> u64 {
        let Deferred {
            core,
            scratch,
            depth,
            serial,
        } = *self;
        core.run_deferred(scratch, start, depth, serial)
    }
}

/// The frame of the innermost batch running on this thread, in a `const` cell
/// without a destructor: reading or writing it is a plain thread-local access (no
/// lazy-init or destructor-registration check), which matters because every inline
/// hop reads it (`handoff_now`) and every run opens and flushes a frame. The groups
/// themselves live in [`GROUPS`], touched only when a batch defers something.
#[derive(Clone, Copy)]
struct Frame {
    /// First group of the innermost running batch.
    base: usize,
    /// How many groups [`GROUPS`] holds (kept equal to its length).
    len: usize,
    /// The stage the innermost running batch last handed an event to at once (its
    /// `StageCore`'s address; null: none yet).
    seen: *const (),
    /// The innermost running batch holds one event.
    single: bool,
}

thread_local! {
    static FRAME: Cell<Frame> = const {
        Cell::new(Frame { base: 0, len: 0, seen: std::ptr::null(), single: false })
    };
    /// The groups of the batches running on this thread (nested inline runs stack).
    static GROUPS: RefCell<Vec<Box<dyn Group>>> = const { RefCell::new(Vec::new()) };
}

/// Adds a group on top of this thread's stack.
fn push_group(g: Box<dyn Group>) {
    GROUPS.with(|gs| gs.borrow_mut().push(g));
    set_len(|len| len + 1);
}

/// Takes the group at `i` off this thread's stack.
fn take_group(i: usize) -> Option<Box<dyn Group>> {
    let g = GROUPS.with(|gs| {
        let mut gs = gs.borrow_mut();
        (i < gs.len()).then(|| gs.remove(i))
    });
    if g.is_some() {
        set_len(|len| len - 1);
    }
    g
}

/// Updates the frame's count of groups (one thread-local access).
fn set_len(f: impl FnOnce(usize) -> usize) {
    FRAME.with(|c| {
        let frame = c.get();
        c.set(Frame {
            len: f(frame.len),
            ..frame
        });
    });
}

/// The frame of the batch that ran before [`open`]: [`flush`] restores it.
pub(super) struct Mark {
    base: usize,
    seen: *const (),
    single: bool,
}

/// Opens a frame for a batch of `n` events about to run on this thread; pass the
/// mark to [`flush`] after the batch is accounted for.
#[inline]
pub(super) fn open(n: usize) -> Mark {
    open_after(n, std::ptr::null())
}

/// [`open`] for an inline run that the calling batch hands at once to the stage
/// `seen` (non-null: the `StageCore`'s address, see [`StageCore::handoff_now`]):
/// the calling frame records that handoff in the same thread-local access.
#[inline]
pub(super) fn open_after(n: usize, seen: *const ()) -> Mark {
    // One thread-local access per call (a get and a set in one `with`): each
    // access is a call of ~24 instructions under callgrind, and every hop opens a
    // frame. `Cell::set` inside `with`, not `LocalKey::set` (which goes through
    // `initialize_with`, ~20 more).
    FRAME.with(|c| {
        let f = c.get();
        c.set(Frame {
            base: f.len,
            len: f.len,
            seen: std::ptr::null(),
            single: n == 1,
        });
        Mark {
            base: f.base,
            seen: if seen.is_null() { f.seen } else { seen },
            single: f.single,
        }
    })
}

/// Records that the calling batch handed an event to the stage `key` at once
/// (what [`open_after`] does) when the hop did not run inline after all.
#[cold]
pub(super) fn mark_seen(key: *const ()) {
    FRAME.with(|c| {
        c.set(Frame {
            seen: key,
            ..c.get()
        })
    });
}

/// Runs the groups the batch opened with `outer = open()` deferred, in order; the
/// first starts at `end` (the batch's end instant). Returns the last end instant.
#[inline]
pub(super) fn flush(outer: Mark, end: u64) -> u64 {
    let mut end = end;
    loop {
        // Restores the outer frame unless a group waits (one access either way).
        let waiting = FRAME.with(|c| {
            let f = c.get();
            if f.len > f.base {
                return Some(f.base);
            }
            c.set(Frame {
                base: outer.base,
                len: f.len,
                seen: outer.seen,
                single: outer.single,
            });
            None
        });
        let Some(base) = waiting else {
            return end;
        };
        match take_group(base) {
            Some(g) => end = g.run(end),
            None => {
                // `len` mirrors the stack's length, so this cannot happen; if it
                // did, forget the phantom groups rather than loop.
                debug_assert!(false, "frame length out of step with its groups");
                set_len(|_| base);
            }
        }
    }
}

/// What [`StageCore::defer`] did with an event.
pub(super) enum Deferral<E> {
    Deferred,
    Refused(E),
    /// Not deferrable now: queue it.
    No(E),
}

impl<E: Send + 'static> StageCore<E> {
    /// Whether the calling batch's handoff to this stage runs at once (see the
    /// module docs) or joins a group: `Err(open)`, with whether this stage's group
    /// is the open (last) one. Checks nothing of the event, so that the common
    /// case moves the event once. On `Ok` the caller records the handoff in the
    /// calling frame: [`open_after`] with [`StageCore::handoff_key`] when the hop
    /// runs inline, else [`mark_seen`] (one thread-local access either way).
    #[inline]
    pub(super) fn handoff_now(&self) -> Result<(), bool> {
        let key = self.handoff_key();
        // Whether this stage's group is open (the last one), else whether a batch
        // of one hands this stage its first event: no group of this stage waits in
        // the frame (the event would overtake it) and the last event handed at once
        // went elsewhere. Then it runs at once.
        let f = FRAME.get();
        if f.len > f.base {
            let open = GROUPS.with(|gs| {
                let gs = gs.borrow();
                gs[f.base..]
                    .iter()
                    .rposition(|g| g.key() == key)
                    .map(|i| f.base + i + 1 == gs.len())
            });
            if let Some(open) = open {
                return Err(open);
            }
        }
        if !f.single || f.seen == key {
            return Err(false);
        }
        Ok(())
    }

    /// This stage's key in the thread's frames and groups (its address).
    #[inline]
    pub(super) fn handoff_key(&self) -> *const () {
        std::ptr::from_ref(self).cast()
    }

    /// Defers `event` for a run at the end of the calling batch (see the module
    /// docs). The caller checked `may_inline` and `handoff_now` (which said `open`).
    pub(super) fn defer(&self, event: E, meta: Meta, origin: &Origin, open: bool) -> Deferral<E> {
        let clock = origin.clock_hint(&meta);
        let inside = origin.inside(self.runtime_id);
        let mut serial = false;
        if !open {
            match &self.serial {
                Some(s) if s.swap(true, std::sync::atomic::Ordering::Acquire) => {
                    return Deferral::No(event);
                }
                Some(_) => serial = true,
                None => {}
            }
        }
        let release = |serial: bool| {
            if serial && let Some(s) = &self.serial {
                s.store(false, Release);
            }
        };
        if !self.queue.inline_ok(inside) {
            release(serial);
            return Deferral::No(event);
        }
        if !self.admit(meta.class(), clock) {
            release(serial);
            return Deferral::Refused(event);
        }
        self.stats.tally().admitted(meta.class(), 1);
        let env = Envelope {
            event,
            meta,
            enqueued: clock,
            ticket: 0,
        };
        let full = if open {
            GROUPS.with(|gs| {
                let mut gs = gs.borrow_mut();
                let g = gs
                    .last_mut()
                    .and_then(|g| g.as_any().downcast_mut::<Deferred<E>>())
                    .expect("the open group is this stage's");
                g.scratch.envs.push(env);
                g.scratch.envs.len() >= self.batch.load(Relaxed)
            })
        } else {
            self.record_edge(origin);
            let Some(core) = self.self_weak.upgrade() else {
                // The stage is being dropped: nobody can run the event.
                release(serial);
                return Deferral::Refused(env.event);
            };
            let mut scratch = self.spare.pop().unwrap_or_default();
            scratch.envs.push(env);
            let full = self.batch.load(Relaxed) <= 1;
            push_group(Box::new(Deferred {
                core,
                scratch,
                depth: origin.cur.depth + 1,
                serial,
            }));
            full
        };
        if full {
            // The group reached the callee's batch size: run it now.
            let top = FRAME.get().len.checked_sub(1);
            if let Some(g) = top.and_then(take_group) {
                g.run(clock);
            }
        }
        Deferral::Deferred
    }

    /// Runs a deferred group (see the module docs).
    fn run_deferred(&self, mut s: Scratch<E>, clock: u64, depth: u8, serial: bool) -> u64 {
        let n = s.envs.len();
        let t = self.stats.tally();
        let timing = self.inline_timing(clock, t);
        let start = if timing == Timing::Untimed {
            clock
        } else {
            crate::clock::now()
        };
        s.stamps.clear();
        for e in &s.envs {
            Stamp::push(&mut s.stamps, e.meta.born_nanos(), start, e.meta.class());
        }
        let first = s.envs[0].meta;
        let outer = open(n);
        self.invoke(Items::Drain(s.envs.drain(..)), first, start, depth);
        let end = self.complete(start, n, &s.stamps, timing, t);
        if serial && let Some(t) = &self.serial {
            t.store(false, Release);
        }
        let _ = self.spare.push(s);
        flush(outer, end)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::{Batch, Context, Runtime, ThreadModel};

    /// A handler that forwards event by event to a stage of its domain: the first
    /// event runs at once (inside the caller's handler), the other nine as one batch
    /// after the caller's handler returned (not once per event), all on the caller's
    /// thread, in order, and every event counts as inline.
    #[test]
    fn events_forwarded_one_by_one_run_as_one_batch_after_the_callers() {
        for model in [ThreadModel::PerStage, ThreadModel::Shared] {
            let rt = Runtime::builder().thread_model(model).build();
            let d = rt.domain("d");
            // (batch length, caller still inside its handler, thread)
            let runs: Arc<Mutex<Vec<(usize, bool, std::thread::ThreadId)>>> = Arc::default();
            let got: Arc<Mutex<Vec<u32>>> = Arc::default();
            let in_caller = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (r, g, ic) = (runs.clone(), got.clone(), in_caller.clone());
            let b = rt
                .stage("b", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                    r.lock().unwrap().push((
                        batch.len(),
                        ic.load(std::sync::atomic::Ordering::SeqCst),
                        std::thread::current().id(),
                    ));
                    g.lock().unwrap().extend(batch);
                })
                .domain(&d)
                .batch(64)
                .build()
                .unwrap();
            let callers: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::default();
            let (c, ic) = (callers.clone(), in_caller.clone());
            let a = rt
                .stage("a", move |batch: Batch<'_, Vec<u32>>, _cx: &Context<'_>| {
                    ic.store(true, std::sync::atomic::Ordering::SeqCst);
                    c.lock().unwrap().push(std::thread::current().id());
                    for v in batch.flatten() {
                        b.try_enqueue(v).unwrap();
                    }
                    ic.store(false, std::sync::atomic::Ordering::SeqCst);
                })
                .domain(&d)
                .fixed_threads(1)
                .build()
                .unwrap();
            rt.start().unwrap();
            for i in 0..10u32 {
                a.try_enqueue((i * 10..i * 10 + 10).collect()).unwrap();
                let want = (i as usize + 1) * 10;
                let t0 = std::time::Instant::now();
                while got.lock().unwrap().len() < want && t0.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            assert!(rt.shutdown(Duration::from_secs(5)).drained);
            assert_eq!(
                *got.lock().unwrap(),
                (0..100).collect::<Vec<_>>(),
                "{model}"
            );
            let runs = runs.lock().unwrap();
            let callers = callers.lock().unwrap();
            assert_eq!(runs.len(), 20, "{model}: two callee runs per caller batch");
            for (pair, caller) in runs.chunks(2).zip(callers.iter()) {
                assert_eq!((pair[0].0, pair[0].1), (1, true), "{model}: first at once");
                assert_eq!((pair[1].0, pair[1].1), (9, false), "{model}: then deferred");
                assert!(
                    pair.iter().all(|r| r.2 == *caller),
                    "{model}: on the caller's thread"
                );
            }
            let snap = rt.snapshot();
            let sb = snap.stage("b").unwrap();
            assert_eq!(
                (sb.admitted, sb.processed, sb.inlined),
                (100, 100, 100),
                "{model}"
            );
            assert!(snap.edges.contains(&("a".to_owned(), "b".to_owned())));
        }
    }

    /// A handler that interleaves handoffs to two stages of its domain (b b c c b,
    /// then c b c): whatever runs at once and whatever is deferred, each stage gets
    /// its events in the order they were handed over.
    #[test]
    fn interleaved_handoffs_keep_each_stages_order() {
        for model in [ThreadModel::PerStage, ThreadModel::Shared] {
            let rt = Runtime::builder().thread_model(model).build();
            let d = rt.domain("d");
            let got: Arc<Mutex<Vec<(char, u32)>>> = Arc::default();
            let sink = |name: char, got: Arc<Mutex<Vec<(char, u32)>>>, rt: &Runtime, d| {
                rt.stage(
                    &name.to_string(),
                    move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                        got.lock().unwrap().extend(batch.map(|v| (name, v)));
                    },
                )
                .domain(d)
                .batch(64)
                .build()
                .unwrap()
            };
            let b = sink('b', got.clone(), &rt, &d);
            let c = sink('c', got.clone(), &rt, &d);
            let a = rt
                .stage(
                    "a",
                    move |batch: Batch<'_, Vec<(char, u32)>>, _cx: &Context<'_>| {
                        for (to, v) in batch.flatten() {
                            let next = if to == 'b' { &b } else { &c };
                            next.try_enqueue(v).unwrap();
                        }
                    },
                )
                .domain(&d)
                .fixed_threads(1)
                .build()
                .unwrap();
            rt.start().unwrap();
            let plan = [
                ('b', 0),
                ('b', 1),
                ('c', 0),
                ('c', 1),
                ('b', 2),
                ('c', 2),
                ('b', 3),
                ('c', 3),
            ];
            a.try_enqueue(plan.to_vec()).unwrap();
            let t0 = std::time::Instant::now();
            while got.lock().unwrap().len() < plan.len() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(rt.shutdown(Duration::from_secs(5)).drained);
            let got = got.lock().unwrap();
            for name in ['b', 'c'] {
                let seq: Vec<u32> = got.iter().filter(|g| g.0 == name).map(|g| g.1).collect();
                assert_eq!(seq, vec![0, 1, 2, 3], "{model}: stage {name}");
            }
        }
    }
}
