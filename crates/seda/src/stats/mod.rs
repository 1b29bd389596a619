//! Per-stage statistics and the runtime snapshot.
//!
//! Metrics are API (STYLE.md 7): controllers, the dashboard and the admin endpoints
//! read only what [`RuntimeSnapshot`] exposes. Counters and latency samples are
//! recorded per worker and merged off the hot path (see [`recorder`] for the error
//! this introduces in the controllers' inputs: none in counts, at most one control
//! interval of lag in the histograms, none in snapshots).
//!
//! # Invariants
//! - `admitted == processed + queue_len + running + unfinished-at-shutdown`, where
//!   `running` is the number of events inside a handler; every offered event is
//!   counted in exactly one of `admitted`, `rejected`, `full`, `closed`.

mod graph;
pub(crate) mod prometheus;
pub(crate) mod recorder;
mod snapshot;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

use crate::admission::AdmissionState;
use recorder::{Pending, Recorder, Totals};
pub(crate) use recorder::{Run, TRACKED_CLASSES, Tally};

/// What a stage knows of itself beyond its stats.
#[derive(Debug)]
pub(crate) struct SnapshotInput<'a> {
    pub(crate) name: &'a str,
    pub(crate) state: &'static str,
    pub(crate) thread_model: &'static str,
    pub(crate) domain: Option<&'a str>,
    pub(crate) queue_len: usize,
    pub(crate) capacity: usize,
    /// `(threads, busy, idle)`.
    pub(crate) threads: (usize, usize, usize),
    pub(crate) batch_size: usize,
    pub(crate) admission: Option<AdmissionState>,
    pub(crate) admission_enabled: bool,
    pub(crate) p90: Option<Duration>,
}

/// Histogram bounds: 1 microsecond to 1 hour, 3 significant digits.
fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

pub(crate) struct Histograms {
    pub(crate) queue_delay: Histogram<u64>,
    pub(crate) service_time: Histogram<u64>,
    /// Response times of closed windows; the open window is in `recent`.
    pub(crate) response_time: Histogram<u64>,
    /// Response times since the last window rotation (for the current p90); folded
    /// into `response_time` when the window closes (one histogram record per event
    /// instead of two).
    pub(crate) recent: Histogram<u64>,
}

impl Histograms {
    fn merge(&mut self, p: &mut Pending) {
        for &(v, n) in &p.queue_delay {
            self.queue_delay
                .saturating_record_n(u64::from(v), u64::from(n));
        }
        for &(v, n) in &p.response {
            self.recent.saturating_record_n(u64::from(v), u64::from(n));
        }
        for &(v, n) in &p.service {
            self.service_time
                .saturating_record_n(u64::from(v), u64::from(n));
        }
        p.clear();
    }
}

pub(crate) struct StageStats {
    recorder: Recorder,
    pub(crate) panics: AtomicU64,
    /// p90 of the last closed window, microseconds (0 = no samples yet).
    recent_p90_us: AtomicU64,
    pub(crate) hist: Mutex<Histograms>,
    pub(crate) last_panic: Mutex<Option<String>>,
}

impl StageStats {
    pub(crate) fn new() -> Self {
        StageStats {
            recorder: Recorder::new(),
            panics: AtomicU64::new(0),
            recent_p90_us: AtomicU64::new(0),
            hist: Mutex::new(Histograms {
                queue_delay: new_hist(),
                service_time: new_hist(),
                response_time: new_hist(),
                recent: new_hist(),
            }),
            last_panic: Mutex::new(None),
        }
    }

    /// The calling thread's counters.
    #[inline]
    pub(crate) fn tally(&self) -> Tally<'_> {
        self.recorder.tally()
    }

    pub(crate) fn totals(&self) -> Totals {
        self.recorder.totals()
    }

    /// Records the samples of a timed run of `n` events (`service` ns each), given
    /// as runs of equal queueing delay and response time, each counted `weight`
    /// times (see [`recorder`]).
    pub(crate) fn record(
        &self,
        service: u64,
        n: u32,
        weight: u32,
        runs: impl Iterator<Item = Run>,
    ) {
        self.recorder
            .record(service, n, weight, runs, |p| self.hist.lock().merge(p));
    }

    /// Moves every pending sample into the histograms.
    pub(crate) fn drain(&self) {
        self.recorder.drain(|p| self.hist.lock().merge(p));
    }

    /// Closes the current window: its p90 becomes the stage's current estimate.
    /// An empty window keeps the previous estimate (no news is not good news).
    /// Pending samples are merged first, so the window holds every event that
    /// finished before this call.
    pub(crate) fn rotate_window(&self) {
        self.drain();
        let mut h = self.hist.lock();
        if !h.recent.is_empty() {
            self.recent_p90_us
                .store(h.recent.value_at_quantile(0.9), Relaxed);
            let h = &mut *h;
            // Same bounds on both sides: `add` cannot fail.
            let _ = h.response_time.add(&h.recent);
            h.recent.reset();
        }
    }

    /// Current p90 response-time estimate from the last window, if any.
    pub(crate) fn recent_p90(&self) -> Option<Duration> {
        match self.recent_p90_us.load(Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// Summary of a latency histogram, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct LatencySummary {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl ClassCounts {
    /// The counts of `class` (for a layer that keeps its own, as `seda-tower` does).
    pub fn new(class: u8, admitted: u64, rejected: u64) -> ClassCounts {
        ClassCounts {
            class,
            admitted,
            rejected,
        }
    }
}

impl LatencySummary {
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// Admitted and rejected counts of one class at one stage.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct ClassCounts {
    /// The class (the last tracked class also counts all higher ones).
    pub class: u8,
    /// Events of this class admitted.
    pub admitted: u64,
    /// Events of this class refused by admission control.
    pub rejected: u64,
}

/// One stage's statistics at one instant. Read-only for users: the fields are public
/// to read, the struct is `#[non_exhaustive]` so that a new counter is not a breaking
/// change (the same holds for every snapshot type here).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct StageSnapshot {
    /// Stage name.
    pub name: String,
    /// Lifecycle state: `created`, `running`, `draining` or `stopped`.
    pub state: String,
    /// Thread model: `per-stage` or `shared`.
    pub thread_model: String,
    /// The domain the stage belongs to, if any.
    pub domain: Option<String>,
    /// Events waiting in the queue.
    pub queue_len: usize,
    /// Queue capacity.
    pub capacity: usize,
    /// Threads of the stage's own pool (0 under the shared pool).
    pub threads: usize,
    /// Threads inside the handler now (own pool) or events being handled (shared).
    pub threads_busy: usize,
    /// Idle threads of the stage's own pool.
    pub threads_idle: usize,
    /// Enqueue attempts.
    pub enqueued: u64,
    /// Events admitted to the queue.
    pub admitted: u64,
    /// Events refused by admission control.
    pub rejected: u64,
    /// Events refused because the queue was full.
    pub full: u64,
    /// Events refused because the stage was closed.
    pub closed: u64,
    /// Events dropped by lossy enqueues.
    pub dropped: u64,
    /// Events handled.
    pub processed: u64,
    /// Of `processed`, events handed over inline by a stage of the same domain
    /// (never queued; see [`crate::Domain`]).
    pub inlined: u64,
    /// Handler panics caught.
    pub panics: u64,
    /// Message of the last panic, if any.
    pub last_panic: Option<String>,
    /// Current batching factor.
    pub batch_size: usize,
    /// Whether admission control is on.
    pub admission_enabled: bool,
    /// Current admission rate (tokens per second), for rate-based policies.
    pub admission_rate: Option<f64>,
    /// Current p90 response time: the admission controller's estimate if it has one,
    /// otherwise the p90 of the last stats window; milliseconds.
    pub rt_p90_ms: Option<f64>,
    /// Response-time target, milliseconds, if a policy has one.
    pub rt_target_ms: Option<f64>,
    /// State of the admission policy.
    pub admission: Option<AdmissionState>,
    /// Per-class admitted/rejected counts (classes seen so far).
    pub classes: Vec<ClassCounts>,
    /// Time waiting in the queue.
    pub queue_delay: LatencySummary,
    /// Handler time per event.
    pub service_time: LatencySummary,
    /// Response time since the request was born, measured as each event finished here.
    pub response_time: LatencySummary,
}

/// A whole runtime's statistics and its stage graph at one instant.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct RuntimeSnapshot {
    /// Milliseconds since the runtime was built.
    pub uptime_ms: u64,
    /// Default thread model of the runtime.
    pub thread_model: String,
    /// Workers of the shared pool (0 when unused).
    pub shared_workers: usize,
    /// Timers scheduled and not yet fired.
    pub timers_pending: usize,
    /// Every stage, in registration order.
    pub stages: Vec<StageSnapshot>,
    /// Edges of the stage graph observed at run time, `[from, to]`.
    pub edges: Vec<(String, String)>,
}

impl RuntimeSnapshot {
    /// The snapshot as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// One stage by name.
    pub fn stage(&self, name: &str) -> Option<&StageSnapshot> {
        self.stages.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn run(qd: u64, rt: u64, n: u32) -> Run {
        Run {
            queue_delay: qd,
            response: rt,
            n,
        }
    }

    /// The staleness bound of the per-thread buffers: a completion recorded before
    /// a tick is in the window that tick closes (never a window later), and a
    /// snapshot sees every completion recorded before it.
    #[test]
    fn a_tick_closes_the_window_with_every_completion_recorded_before_it() {
        let s = StageStats::new();
        // Recorded from two threads, so two slots hold pending samples.
        s.record(MS, 9, 1, std::iter::once(run(0, 10 * MS, 9)));
        std::thread::scope(|t| {
            t.spawn(|| s.record(MS, 1, 1, std::iter::once(run(0, 500 * MS, 1))));
        });
        assert_eq!(s.recent_p90(), None, "no window closed yet");
        s.rotate_window();
        let p90 = s.recent_p90().expect("the tick closed a window");
        assert!(p90 >= ms(10) && p90 < ms(11), "p90 {p90:?}");
        // The next window holds only what came after the tick.
        for _ in 0..10 {
            s.record(MS, 1, 1, std::iter::once(run(0, 500 * MS, 1)));
        }
        s.rotate_window();
        let p90 = s.recent_p90().unwrap();
        assert!(p90 >= ms(500) && p90 < ms(501), "p90 {p90:?}");
        // An empty window keeps the estimate.
        s.rotate_window();
        assert_eq!(s.recent_p90(), Some(p90));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn totals_and_histograms_count_every_completion() {
        let s = StageStats::new();
        s.tally().admitted(2, 5);
        s.tally().rejected(2, 1);
        s.tally().processed(5, false);
        s.record(2 * MS, 5, 1, (0..5).map(|i| run(i * MS, (10 + i) * MS, 1)));
        let h = {
            s.drain();
            let h = s.hist.lock();
            (h.queue_delay.len(), h.recent.len(), h.service_time.len())
        };
        assert_eq!(h, (5, 5, 5));
        let t = s.totals();
        assert_eq!(
            (t.admitted(), t.rejected(), t.processed, t.offered()),
            (5, 1, 5, 6)
        );
    }

    /// The sampling error the recorder's docs state, checked against exact
    /// percentiles of recorded traces: inline runs drawn one in eight (weight 8)
    /// give the p50, p90 and p99 of 20,000 events within 4 standard errors of rank
    /// (the docs quote 3, 99.7 %), plus HdrHistogram's 0.1 % of value.
    #[test]
    fn sampled_percentiles_are_within_the_stated_error_of_the_exact_ones() {
        // Traces: a bimodal service (90 % near 1 ms, 10 % near 20 ms) and a
        // heavy-tailed one, from a fixed generator.
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let traces: Vec<Vec<u64>> = vec![
            (0..20_000)
                .map(|_| {
                    let u = next();
                    let base = if next() < 0.9 { 1.0 } else { 20.0 };
                    ((base * (0.5 + u)) * MS as f64) as u64
                })
                .collect(),
            (0..20_000)
                .map(|_| ((0.2 / (1.0 - next()).max(1e-6)) * MS as f64) as u64)
                .collect(),
        ];
        for (k, trace) in traces.iter().enumerate() {
            for seed in [1u32, 77, 0xdead_beef] {
                let mut x = seed | 1;
                let s = StageStats::new();
                let mut m = 0usize;
                for &rt in trace {
                    x = recorder::xorshift(x);
                    if recorder::drawn(x) {
                        m += 1;
                        s.record(
                            rt,
                            1,
                            recorder::INLINE_SAMPLE,
                            std::iter::once(run(0, rt, 1)),
                        );
                    }
                }
                s.drain();
                let h = s.hist.lock();
                let mut exact = trace.clone();
                exact.sort_unstable();
                let at = |q: f64| exact[((q * exact.len() as f64) as usize).min(exact.len() - 1)];
                for q in [0.5, 0.9, 0.99] {
                    let est_us = h.recent.value_at_quantile(q) as f64;
                    let se = (q * (1.0 - q) / m as f64).sqrt();
                    let (lo, hi) = ((q - 4.0 * se).max(0.0), (q + 4.0 * se).min(1.0));
                    let lo_us = at(lo) as f64 / 1e3 * 0.999 - 1.0;
                    let hi_us = at(hi) as f64 / 1e3 * 1.001 + 1.0;
                    assert!(
                        (lo_us..=hi_us).contains(&est_us),
                        "trace {k} seed {seed}: p{} estimated {est_us} us, exact range {lo_us}..{hi_us} us ({m} samples)",
                        q * 100.0
                    );
                }
            }
        }
    }
}
