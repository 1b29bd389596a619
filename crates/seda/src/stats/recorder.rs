//! Per-worker recording of a stage's counters and latency samples, merged off the
//! hot path.
//!
//! Each thread writes to one of [`SLOTS`] cache-padded slots per stage (chosen once
//! per thread, round robin), so counters touched on every enqueue and every batch
//! stay in the writing core's cache instead of bouncing between cores. Latency
//! samples go to the slot's pending buffer (runs of equal microsecond values, one
//! weighted service-time record per batch, under the slot's own lock: uncontended unless two
//! threads share a slot) and reach the stage's histograms when the controller thread
//! drains the slots at its tick, when a snapshot is taken, or when a buffer fills.
//!
//! # Error this introduces in the controllers' inputs
//! - Counters (admitted, rejected, processed, ...) are sums over slots read with
//!   relaxed loads (`processed` and `inlined` under the slot's lock, where a batch
//!   records them with its samples): each is exact at some instant during the read,
//!   none is lost.
//! - Histograms and the stats window behind [`super::StageStats::recent_p90`] lag
//!   the completions by at most one control interval (default 50 ms): the tick
//!   drains every slot *before* it closes a window, so a window's p90 covers every
//!   event that finished before the tick that closed it, as it did before. A
//!   snapshot drains first, so snapshots are exact.
//! - Queue length, in-flight and running counts come from the queue's state word,
//!   never from these buffers: they are exact.
//! - Admission policies still see every completion directly from the worker, once
//!   per event, when its batch returns (`AdmissionPolicy::on_complete`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Slots per stage.
pub(crate) const SLOTS: usize = 8;
/// Pending runs (per list) at which a worker merges its slot itself; the
/// controller's tick normally merges long before (runs of equal values hold many
/// events each), so histogram work stays off the workers.
const FLUSH_AT: usize = 16_384;
/// Classes tracked individually in per-class counters; higher classes share the last.
pub(crate) const TRACKED_CLASSES: usize = 8;

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's slot index.
fn slot_index() -> usize {
    SLOT.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SLOT.fetch_add(1, Relaxed) % SLOTS;
            s.set(i);
        }
        i
    })
}

/// Microseconds, clamped to the histograms' range.
pub(crate) fn micros(d: Duration) -> u32 {
    // No u128 on this path (`as_micros` is one): this runs twice per event.
    let us = d
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(d.subsec_micros()));
    u32::try_from(us).unwrap_or(u32::MAX).max(1)
}

/// Samples not yet in the histograms, as runs of `(value in microseconds, count)`:
/// events that finish together mostly share their microsecond values, so a run
/// costs one histogram record instead of one per event.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) queue_delay: Vec<(u32, u32)>,
    pub(crate) response: Vec<(u32, u32)>,
    /// Service time per event, per batch.
    pub(crate) service: Vec<(u32, u32)>,
    /// Events recorded since the last merge.
    pub(crate) events: usize,
    /// Events processed (cumulative: a merge keeps it). Counted here, under the
    /// lock the batch's samples take anyway, instead of with one more atomic add.
    pub(crate) processed: u64,
    /// Of those, events run inline (cumulative).
    pub(crate) inlined: u64,
}

/// Appends `n` samples of `v` to `runs`.
fn push_run(runs: &mut Vec<(u32, u32)>, v: u32, n: u32) {
    match runs.last_mut() {
        Some(last) if last.0 == v && last.1 <= u32::MAX - n => last.1 += n,
        _ => runs.push((v, n)),
    }
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.service.is_empty()
    }

    /// Forgets the merged samples (not the cumulative counts).
    pub(crate) fn clear(&mut self) {
        self.queue_delay.clear();
        self.response.clear();
        self.service.clear();
        self.events = 0;
    }
}

/// Counters of one slot.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) class_admitted: [AtomicU64; TRACKED_CLASSES],
    pub(crate) class_rejected: [AtomicU64; TRACKED_CLASSES],
    pub(crate) full: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct Slot {
    counters: Counters,
    pending: Mutex<Pending>,
}

/// Sums of every slot's counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Totals {
    pub(crate) class_admitted: [u64; TRACKED_CLASSES],
    pub(crate) class_rejected: [u64; TRACKED_CLASSES],
    pub(crate) full: u64,
    pub(crate) closed: u64,
    pub(crate) dropped: u64,
    pub(crate) processed: u64,
    pub(crate) inlined: u64,
}

impl Totals {
    pub(crate) fn admitted(&self) -> u64 {
        self.class_admitted.iter().sum()
    }
    pub(crate) fn rejected(&self) -> u64 {
        self.class_rejected.iter().sum()
    }
    /// Every enqueue attempt lands in exactly one of these.
    pub(crate) fn offered(&self) -> u64 {
        self.admitted() + self.rejected() + self.full + self.closed
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Recorder {
    slots: Box<[CachePadded<Slot>]>,
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            slots: (0..SLOTS)
                .map(|_| CachePadded::new(Slot::default()))
                .collect(),
        }
    }

    /// This thread's counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.slots[slot_index()].counters
    }

    /// Records one batch of `n` events (run inline if `inline`) in this thread's
    /// slot: `runs` yields `(queue delay, response time, events)` for runs of events
    /// that share both (their counts add up to `n`). Hands the pending buffer to
    /// `merge` when it is full.
    pub(crate) fn record(
        &self,
        service: Duration,
        n: usize,
        inline: bool,
        runs: impl Iterator<Item = (Duration, Duration, u32)>,
        merge: impl FnOnce(&mut Pending),
    ) {
        let mut p = self.slots[slot_index()].pending.lock();
        let p = &mut *p;
        p.processed += n as u64;
        if inline {
            p.inlined += n as u64;
        }
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        push_run(&mut p.service, micros(service), n32);
        if inline {
            // Never queued: one zero-delay run for the batch, not one per run.
            push_run(&mut p.queue_delay, micros(Duration::ZERO), n32);
            for (_, rt, k) in runs {
                push_run(&mut p.response, micros(rt), k);
            }
        } else {
            for (qd, rt, k) in runs {
                push_run(&mut p.queue_delay, micros(qd), k);
                push_run(&mut p.response, micros(rt), k);
            }
        }
        p.events += n;
        if p.response.len().max(p.queue_delay.len()) >= FLUSH_AT {
            merge(p);
        }
    }

    /// Hands every slot's pending samples to `merge` (the controller's tick, a
    /// snapshot).
    pub(crate) fn drain(&self, mut merge: impl FnMut(&mut Pending)) {
        for s in self.slots.iter() {
            let mut p = s.pending.lock();
            if !p.is_empty() {
                merge(&mut p);
            }
        }
    }

    pub(crate) fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in self.slots.iter() {
            let c = &s.counters;
            for i in 0..TRACKED_CLASSES {
                t.class_admitted[i] += c.class_admitted[i].load(Relaxed);
                t.class_rejected[i] += c.class_rejected[i].load(Relaxed);
            }
            t.full += c.full.load(Relaxed);
            t.closed += c.closed.load(Relaxed);
            t.dropped += c.dropped.load(Relaxed);
            let p = s.pending.lock();
            t.processed += p.processed;
            t.inlined += p.inlined;
        }
        t
    }
}
