//! Colors (libasync-mp): same-colored events never run at once, anywhere in the
//! runtime, and run in the order they were enqueued; uncolored events run freely.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seda::{Batch, Color, Context, Meta, Runtime, Sink, ThreadModel};
use support::MODELS;

const COLORS: u64 = 16;
const PRODUCERS: u64 = 4;
const PER_COLOR: u64 = 300;

/// Watches for overlaps and order violations.
#[derive(Default)]
struct Detector {
    busy: Vec<AtomicBool>,
    last: Mutex<HashMap<u64, u64>>,
    overlaps: AtomicUsize,
    out_of_order: AtomicUsize,
    handled: AtomicUsize,
    uncolored_concurrency: AtomicUsize,
    uncolored_running: AtomicUsize,
}

impl Detector {
    fn new() -> Self {
        Detector {
            busy: (0..COLORS).map(|_| AtomicBool::new(false)).collect(),
            ..Detector::default()
        }
    }

    fn run(&self, color: u64, seq: u64) {
        let c = color as usize;
        if self.busy[c].swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        {
            let mut last = self.last.lock().unwrap();
            let prev = last.insert(color, seq);
            if prev.is_some_and(|p| p >= seq) {
                self.out_of_order.fetch_add(1, Ordering::SeqCst);
            }
        }
        // Widen the window in which an overlap would be seen.
        for _ in 0..200 {
            std::hint::spin_loop();
        }
        if seq % 7 == 0 {
            std::thread::yield_now();
        }
        self.busy[c].store(false, Ordering::SeqCst);
        self.handled.fetch_add(1, Ordering::SeqCst);
    }

    fn run_uncolored(&self) {
        let now = self.uncolored_running.fetch_add(1, Ordering::SeqCst) + 1;
        self.uncolored_concurrency.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        self.uncolored_running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Two stages receive events of the same colors from several producers; a color's
/// events alternate between the stages, so exclusion and order are checked across
/// stages, not just within one queue.
fn stress(model: ThreadModel) {
    let rt = Runtime::builder()
        .thread_model(model)
        .shared_workers(4)
        .build();
    let det = Arc::new(Detector::new());
    let mut sinks: Vec<Sink<(u64, u64)>> = Vec::new();
    for name in ["left", "right"] {
        let d = det.clone();
        let s = rt
            .stage(
                name,
                move |batch: Batch<'_, (u64, u64)>, _cx: &Context<'_>| {
                    for (color, seq) in batch {
                        d.run(color, seq);
                    }
                },
            )
            .threads(4, 4)
            .batch(4)
            .capacity(100_000)
            .build()
            .unwrap();
        sinks.push(s);
    }
    rt.start().unwrap();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let sinks = sinks.clone();
            std::thread::spawn(move || {
                // Each producer owns the colors c with c % PRODUCERS == p, so each
                // color has one well-defined enqueue order.
                for seq in 0..PER_COLOR {
                    for color in (p..COLORS).step_by(PRODUCERS as usize) {
                        let sink = &sinks[((seq + color) % 2) as usize];
                        let meta = Meta::new()
                            .with_color(Color::new(color))
                            .with_priority((seq % 3) as u8);
                        sink.try_enqueue_with((color, seq), meta).unwrap();
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let report = rt.shutdown(Duration::from_secs(60));
    assert!(report.drained, "{model}: {report:?}");
    assert_eq!(
        det.handled.load(Ordering::SeqCst) as u64,
        COLORS * PER_COLOR,
        "{model}"
    );
    assert_eq!(
        det.overlaps.load(Ordering::SeqCst),
        0,
        "{model}: same color ran concurrently"
    );
    assert_eq!(
        det.out_of_order.load(Ordering::SeqCst),
        0,
        "{model}: same color ran out of enqueue order"
    );
}

#[test]
fn same_color_never_overlaps_and_keeps_enqueue_order_per_stage_pools() {
    stress(ThreadModel::PerStage);
}

#[test]
fn same_color_never_overlaps_and_keeps_enqueue_order_shared_pool() {
    stress(ThreadModel::Shared);
}

/// Uncolored events are not serialised: with four threads, several run at once.
#[test]
fn uncolored_events_run_concurrently() {
    for model in MODELS {
        let rt = Runtime::builder()
            .thread_model(model)
            .shared_workers(4)
            .build();
        let det = Arc::new(Detector::new());
        let d = det.clone();
        let sink = rt
            .stage("free", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for _ in batch {
                    d.run_uncolored();
                }
            })
            .threads(4, 4)
            .batch(1)
            .build()
            .unwrap();
        rt.start().unwrap();
        for i in 0..64 {
            sink.try_enqueue(i).unwrap();
        }
        assert!(rt.shutdown(Duration::from_secs(10)).drained);
        assert!(
            det.uncolored_concurrency.load(Ordering::SeqCst) >= 2,
            "{model}: uncolored events were serialised"
        );
    }
}

/// A colored pipeline: three stages, each forwarding its events to the next under
/// their color, fed by several producers. Downstream events mostly find their
/// color busy upstream and park, and are handed their color by a release on
/// another thread. A color never runs in two stages at once, each stage sees each
/// color's events in order, every event passes every stage exactly once, and the
/// stage's count of parked events never dips below zero (it did when a release
/// handed a parked event on before the parker had counted it: an overflow panic in
/// a debug build).
#[test]
fn a_colored_pipeline_keeps_exclusion_order_and_counts() {
    const STAGES: usize = 3;
    for model in MODELS {
        let rt = Runtime::builder()
            .thread_model(model)
            .shared_workers(2)
            .build();
        let det = Arc::new(Detector::new());
        let last: Arc<Mutex<HashMap<(usize, u64), u64>>> = Arc::default();
        let passed: Arc<Vec<AtomicUsize>> =
            Arc::new((0..STAGES).map(|_| AtomicUsize::new(0)).collect());
        let mut next: Option<Sink<(u64, u64)>> = None;
        for stage in (0..STAGES).rev() {
            let (d, last, passed, fwd) = (det.clone(), last.clone(), passed.clone(), next.take());
            let sink = rt
                .stage(
                    &format!("s{stage}"),
                    move |mut batch: Batch<'_, (u64, u64)>, _cx: &Context<'_>| {
                        while let Some(((color, seq), meta)) = batch.next_with_meta() {
                            let c = color as usize;
                            if d.busy[c].swap(true, Ordering::SeqCst) {
                                d.overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            let prev = last.lock().unwrap().insert((stage, color), seq);
                            if prev.is_some_and(|p| p >= seq) {
                                d.out_of_order.fetch_add(1, Ordering::SeqCst);
                            }
                            for _ in 0..100 {
                                std::hint::spin_loop();
                            }
                            d.busy[c].store(false, Ordering::SeqCst);
                            passed[stage].fetch_add(1, Ordering::SeqCst);
                            if let Some(f) = &fwd {
                                f.try_enqueue_with((color, seq), meta).unwrap();
                            }
                        }
                    },
                )
                .threads(2, 2)
                .batch(8)
                .capacity(100_000)
                .build()
                .unwrap();
            next = Some(sink);
        }
        let first = next.unwrap();
        rt.start().unwrap();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let first = first.clone();
                std::thread::spawn(move || {
                    for seq in 0..PER_COLOR {
                        for color in (p..COLORS).step_by(PRODUCERS as usize) {
                            let meta = Meta::new().with_color(Color::new(color));
                            first.try_enqueue_with((color, seq), meta).unwrap();
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let report = rt.shutdown(Duration::from_secs(60));
        assert!(report.drained, "{model}: {report:?}");
        for (stage, n) in passed.iter().enumerate() {
            assert_eq!(
                n.load(Ordering::SeqCst) as u64,
                COLORS * PER_COLOR,
                "{model}: stage {stage} ran each event exactly once"
            );
        }
        assert_eq!(det.overlaps.load(Ordering::SeqCst), 0, "{model}: overlap");
        assert_eq!(
            det.out_of_order.load(Ordering::SeqCst),
            0,
            "{model}: a stage saw a color's events out of order"
        );
    }
}
