//! Per-thread recording of a stage's counters and latency samples, merged off the
//! hot path.
//!
//! Every thread that touches a stage gets a slot of its own in the stage's stats:
//! a process-wide index in `0..SLOTS`, leased for the thread's life and returned
//! when it exits. A slot has one writer, so its counters are bumped with a plain
//! load and store (no read-modify-write, no shared cache line); threads beyond
//! `SLOTS` share one overflow slot and bump it atomically. Latency samples go to
//! the slot's pending buffer (runs of equal microsecond values, under the slot's own
//! lock, which only its writer and the controller thread take) and reach the
//! stage's histograms when the controller thread drains the slots at its tick, when
//! a snapshot is taken, or when a buffer fills.
//!
//! # Sampling
//! A run (a queued batch or an inline run) records its latency samples if its
//! stage has an admission policy switched on (the policy needs every response time),
//! or if it is drawn, with probability `1 / INLINE_SAMPLE`, from a generator kept
//! in the thread's slot of the stage (a plain load and store: no thread-local
//! access, which costs a call of ~26 instructions per hop under callgrind), or if its thread recorded nothing at this stage for `SAMPLE_GAP`
//! (so a quiet stage's every run is recorded). A recorded run's samples weigh one
//! more than the runs its thread skipped at the stage since its last record, so the
//! histograms' counts add up to the events (up to the runs skipped since the last
//! record) and their percentiles estimate every event's latency. Counts
//! (`processed`, `inlined`, ...) are never sampled.
//!
//! # Error this introduces in the controllers' inputs
//! - Counters are sums over slots read with relaxed loads: each is exact at some
//!   instant during the read, none is lost.
//! - Histograms and the stats window lag the completions by at most one control
//!   interval (default 50 ms); the tick drains every slot before it closes a
//!   window, and a snapshot drains first.
//! - Percentiles of a window with `m` sampled inline runs (and any number of timed
//!   queued events) are those of a weighted sample: the rank of the estimated
//!   quantile `q` is within `3 * sqrt(q (1 - q) / m)` of `q` with probability
//!   99.7 %; for `q = 0.9` and `m = 2,500` (20,000 inline events), within
//!   `q +- 0.018`. HdrHistogram's 3 significant digits add at most 0.1 % of the
//!   value. `stats::tests` checks both on recorded traces.
//! - Queue length, in-flight and running counts come from the queue, never from
//!   these buffers: they are exact. Admission policies see every completion.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Slots owned by one thread each; one more slot is shared by the rest.
pub(crate) const SLOTS: usize = 64;
const SHARED: u16 = SLOTS as u16;
const UNSET: u16 = u16::MAX;
/// Pending runs (per list) at which a writer merges its slot itself; the
/// controller's tick normally merges long before.
const FLUSH_AT: usize = 16_384;
/// Classes tracked individually in per-class counters; higher classes share the last.
pub(crate) const TRACKED_CLASSES: usize = 8;
/// One run in this many is recorded at a busy stage (see the module docs).
pub(crate) const INLINE_SAMPLE: u32 = 8;
/// A thread records a run at a stage at least this often (nanoseconds).
pub(crate) const SAMPLE_GAP: u64 = 1_000_000;

thread_local! {
    static SLOT: Cell<u16> = const { Cell::new(UNSET) };
    static LEASE: Lease = const { Lease };
}

/// Free slot indices and the next never-used one.
static FREE: Mutex<(Vec<u16>, u16)> = Mutex::new((Vec::new(), 0));

/// Returns the thread's slot index when the thread exits.
struct Lease;

impl Drop for Lease {
    fn drop(&mut self) {
        let i = SLOT.with(|s| s.replace(SHARED));
        if i < SHARED {
            FREE.lock().0.push(i);
        }
    }
}

/// This thread's slot index (`SHARED` once the thread is exiting, or if every
/// owned slot is taken).
#[inline]
fn slot_index() -> u16 {
    let i = SLOT.with(Cell::get);
    if i != UNSET { i } else { lease() }
}

#[cold]
fn lease() -> u16 {
    let i = {
        let mut free = FREE.lock();
        match free.0.pop() {
            Some(i) => i,
            None if free.1 < SHARED => {
                free.1 += 1;
                free.1 - 1
            }
            None => SHARED,
        }
    };
    SLOT.with(|s| s.set(i));
    if i < SHARED {
        // Registers the lease's destructor; if the thread is already tearing its
        // locals down, give the index back now and use the shared slot.
        if LEASE.try_with(|_| ()).is_err() {
            SLOT.with(|s| s.set(SHARED));
            FREE.lock().0.push(i);
            return SHARED;
        }
    }
    i
}

/// One step of the samplers' xorshift32 generator (`x` never 0).
#[inline]
pub(crate) fn xorshift(mut x: u32) -> u32 {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    x
}

/// Whether a generator state `x` draws a run to record (1 in `INLINE_SAMPLE`).
#[inline]
pub(crate) fn drawn(x: u32) -> bool {
    x % INLINE_SAMPLE == 0
}

/// Microseconds of a nanosecond duration, clamped to the histograms' range.
#[inline]
pub(crate) fn micros(ns: u64) -> u32 {
    u32::try_from(ns / 1_000).unwrap_or(u32::MAX).max(1)
}

/// Samples not yet in the histograms, as runs of `(value in microseconds, count)`.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) queue_delay: Vec<(u32, u32)>,
    pub(crate) response: Vec<(u32, u32)>,
    /// Service time per event.
    pub(crate) service: Vec<(u32, u32)>,
}

/// Appends `n` samples of `v` to `runs`.
#[inline]
fn push_run(runs: &mut Vec<(u32, u32)>, v: u32, n: u32) {
    match runs.last_mut() {
        Some(last) if last.0 == v && last.1 <= u32::MAX - n => last.1 += n,
        _ => runs.push((v, n)),
    }
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.service.is_empty() && self.response.is_empty()
    }

    /// Forgets the merged samples.
    pub(crate) fn clear(&mut self) {
        self.queue_delay.clear();
        self.response.clear();
        self.service.clear();
    }
}

/// Counters of one slot.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    class_admitted: [AtomicU64; TRACKED_CLASSES],
    class_rejected: [AtomicU64; TRACKED_CLASSES],
    full: AtomicU64,
    closed: AtomicU64,
    dropped: AtomicU64,
    processed: AtomicU64,
    inlined: AtomicU64,
    /// Runs not recorded since the last recorded one (owner only).
    skipped: AtomicU64,
    /// Clock of the last recorded run (owner only).
    last_sample: AtomicU64,
    /// The sampler's xorshift32 state (owner only; 0: not seeded yet). In the
    /// shared overflow slot racing writers may repeat a draw: harmless.
    draw: AtomicU32,
}

#[derive(Debug, Default)]
struct Slot {
    counters: Counters,
    pending: Mutex<Pending>,
}

/// The calling thread's counters in one stage (see the module docs).
#[derive(Clone, Copy)]
pub(crate) struct Tally<'a> {
    c: &'a Counters,
    /// The overflow slot: bump atomically.
    shared: bool,
}

impl Tally<'_> {
    #[inline]
    fn add(self, a: &AtomicU64, n: u64) {
        if self.shared {
            a.fetch_add(n, Relaxed);
        } else {
            // One writer: a plain load and store cannot lose an update.
            a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
        }
    }

    #[inline]
    pub(crate) fn admitted(self, class: u8, n: u64) {
        self.add(&self.c.class_admitted[class_slot(class)], n);
    }

    #[inline]
    pub(crate) fn rejected(self, class: u8, n: u64) {
        self.add(&self.c.class_rejected[class_slot(class)], n);
    }

    pub(crate) fn full(self, n: u64) {
        self.add(&self.c.full, n);
    }

    pub(crate) fn closed(self, n: u64) {
        self.add(&self.c.closed, n);
    }

    pub(crate) fn dropped(self, n: u64) {
        self.add(&self.c.dropped, n);
    }

    /// Whether the run that ends (or starts) at `now` records its samples: drawn,
    /// or the first in `SAMPLE_GAP`. If so, returns the weight of its samples and
    /// resets the skip count; else counts it skipped.
    #[inline]
    pub(crate) fn sample(self, now: u64) -> Option<u32> {
        if self.draw() || now.saturating_sub(self.c.last_sample.load(Relaxed)) >= SAMPLE_GAP {
            let skipped = self.c.skipped.swap(0, Relaxed);
            self.c.last_sample.store(now, Relaxed);
            Some(u32::try_from(skipped + 1).unwrap_or(u32::MAX))
        } else {
            self.add(&self.c.skipped, 1);
            None
        }
    }

    /// Draws from this slot's generator: whether the run is drawn as a sample.
    #[inline]
    fn draw(self) -> bool {
        let mut x = self.c.draw.load(Relaxed);
        if x == 0 {
            // Seeded per slot from its address: slots of different stages and
            // threads draw independently.
            x = (std::ptr::from_ref(self.c) as usize as u32) | 1;
        }
        x = xorshift(x);
        self.c.draw.store(x, Relaxed);
        drawn(x)
    }

    #[inline]
    pub(crate) fn processed(self, n: u64, inline: bool) {
        self.add(&self.c.processed, n);
        if inline {
            self.add(&self.c.inlined, n);
        }
    }
}

/// The counter slot of a class.
#[inline]
pub(crate) fn class_slot(class: u8) -> usize {
    (class as usize).min(TRACKED_CLASSES - 1)
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

/// One run of a finished batch: events that share their queueing delay and
/// response time (nanoseconds), and how many they are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) queue_delay: u64,
    pub(crate) response: u64,
    pub(crate) n: u32,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Recorder {
    slots: Box<[CachePadded<Slot>]>,
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            slots: (0..=SLOTS)
                .map(|_| CachePadded::new(Slot::default()))
                .collect(),
        }
    }

    #[inline]
    fn slot(&self) -> (&Slot, bool) {
        let i = slot_index();
        (&self.slots[usize::from(i)], i == SHARED)
    }

    /// This thread's counters.
    #[inline]
    pub(crate) fn tally(&self) -> Tally<'_> {
        let (s, shared) = self.slot();
        Tally {
            c: &s.counters,
            shared,
        }
    }

    /// Records the samples of a timed run in this thread's slot: one service time
    /// per event (`service` ns each, `n` events), and the runs' queueing delays and
    /// response times, each counted `weight` times. Hands the pending buffer to
    /// `merge` when it is full.
    pub(crate) fn record(
        &self,
        service: u64,
        n: u32,
        weight: u32,
        runs: impl Iterator<Item = Run>,
        merge: impl FnOnce(&mut Pending),
    ) {
        let (s, _) = self.slot();
        let mut p = s.pending.lock();
        let p = &mut *p;
        push_run(&mut p.service, micros(service), n.saturating_mul(weight));
        for r in runs {
            let k = r.n.saturating_mul(weight);
            push_run(&mut p.queue_delay, micros(r.queue_delay), k);
            push_run(&mut p.response, micros(r.response), k);
        }
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
            t.processed += c.processed.load(Relaxed);
            t.inlined += c.inlined.load(Relaxed);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that exit give their slot back; live threads never share one, so
    /// their plain increments lose nothing.
    #[test]
    fn owned_slots_count_exactly_across_threads_that_come_and_go() {
        let r = Recorder::new();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..8 {
                        std::thread::scope(|s2| {
                            for _ in 0..4 {
                                s2.spawn(|| {
                                    for _ in 0..1_000 {
                                        r.tally().admitted(1, 1);
                                        r.tally().processed(1, true);
                                    }
                                });
                            }
                        });
                    }
                });
            }
        });
        let t = r.totals();
        assert_eq!(t.admitted(), 96_000);
        assert_eq!((t.processed, t.inlined), (96_000, 96_000));
    }

    #[test]
    fn the_sampler_draws_about_one_in_eight() {
        let r = Recorder::new();
        let t = r.tally();
        let n = (0..80_000).filter(|_| t.draw()).count();
        assert!((8_000..12_000).contains(&n), "{n}");
        // Another stage's slot draws its own sequence.
        let r2 = Recorder::new();
        let t2 = r2.tally();
        let a: Vec<bool> = (0..64).map(|_| t.draw()).collect();
        let b: Vec<bool> = (0..64).map(|_| t2.draw()).collect();
        assert_ne!(a, b);
    }
}
