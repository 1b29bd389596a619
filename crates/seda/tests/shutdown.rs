//! No event vanishes: under concurrent producers, closing and shutdown, every event
//! offered is handled exactly once, handed back to its sender, or counted in the
//! shutdown report.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use seda::{Batch, Context, Runtime, Sink, ThreadModel};

#[derive(Default)]
struct Ledger {
    handled: Mutex<HashSet<u64>>,
    duplicates: AtomicU64,
    handed_back_inside: AtomicU64,
}

fn run_case(
    model: ThreadModel,
    producers: u64,
    per_producer: u64,
    capacity: usize,
    stop_after_us: u64,
    grace_ms: u64,
) {
    let rt = Runtime::builder()
        .thread_model(model)
        .shared_workers(3)
        .build();
    let ledger = Arc::new(Ledger::default());
    let l = ledger.clone();
    let last: Sink<u64> = rt
        .stage("last", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
            for id in batch {
                if id % 97 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                if !l.handled.lock().unwrap().insert(id) {
                    l.duplicates.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
        .capacity(capacity)
        .build()
        .unwrap();
    let l = ledger.clone();
    let first = rt
        .stage("first", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
            for id in batch {
                // A refusal downstream hands the event back to this handler, which
                // counts it: handed back, not lost.
                if last.try_enqueue(id).is_err() {
                    l.handed_back_inside.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
        .capacity(capacity)
        .batch(8)
        .build()
        .unwrap();
    rt.start().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let (first, accepted, refused) = (first.clone(), accepted.clone(), refused.clone());
            std::thread::spawn(move || {
                for i in 0..per_producer {
                    let id = p * 1_000_000 + i;
                    let r = if i % 5 == 0 {
                        first
                            .try_enqueue_batch(vec![id])
                            .map_err(|e| e.into_inner()[0])
                    } else {
                        first
                            .try_enqueue(id)
                            .map_err(seda::EnqueueError::into_inner)
                    };
                    match r {
                        Ok(()) => accepted.fetch_add(1, Ordering::SeqCst),
                        Err(back) => {
                            assert_eq!(back, id, "the refused event is the one handed back");
                            refused.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_micros(stop_after_us));
    let report = rt.shutdown(Duration::from_millis(grace_ms));
    for t in threads {
        t.join().unwrap();
    }
    let handled = ledger.handled.lock().unwrap().len() as u64;
    let accepted = accepted.load(Ordering::SeqCst);
    let inside = ledger.handed_back_inside.load(Ordering::SeqCst);
    assert_eq!(
        ledger.duplicates.load(Ordering::SeqCst),
        0,
        "an event was handled twice"
    );
    assert_eq!(
        accepted + refused.load(Ordering::SeqCst),
        producers * per_producer
    );
    assert_eq!(
        accepted,
        handled + inside + report.unfinished(),
        "accepted events must be handled, handed back, or reported ({report:?})"
    );
    if report.drained {
        assert_eq!(report.unfinished(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_event_is_handled_handed_back_or_reported(
        shared in any::<bool>(),
        producers in 1u64..4,
        per_producer in 1u64..800,
        capacity in 1usize..64,
        stop_after_us in 0u64..3000,
        grace_ms in 0u64..20,
    ) {
        let model = if shared { ThreadModel::Shared } else { ThreadModel::PerStage };
        run_case(model, producers, per_producer, capacity, stop_after_us, grace_ms);
    }
}

/// A shutdown whose deadline passes while a handler is stuck reports the stuck event
/// and what is still queued behind it.
#[test]
fn a_stuck_handler_is_reported_at_the_deadline() {
    let rt = Runtime::builder().build();
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    let sink = rt
        .stage("stuck", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
            for _ in batch {
                drop(g.lock().unwrap());
            }
        })
        .fixed_threads(1)
        .batch(1)
        .build()
        .unwrap();
    rt.start().unwrap();
    for i in 0..5 {
        sink.try_enqueue(i).unwrap();
    }
    let report = rt.shutdown(Duration::from_millis(100));
    assert!(!report.drained);
    let s = &report.stages[0];
    assert_eq!((s.running, s.queued, s.unfinished), (1, 4, 5), "{report:?}");
    assert_eq!(report.threads_detached, 1);
    drop(held);
}

#[test]
fn a_long_running_handler_sees_the_runtime_draining_and_returns() {
    let rt = Runtime::builder().build();
    let saw_draining = Arc::new(AtomicU64::new(0));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let started_tx = Mutex::new(started_tx);
    let saw = saw_draining.clone();
    // An event-loop-like handler: runs until the runtime drains.
    let sink = rt
        .stage("loop", move |batch: Batch<'_, ()>, cx: &Context<'_>| {
            for () in batch {
                let _ = started_tx.lock().unwrap().send(());
                let until = std::time::Instant::now() + Duration::from_secs(10);
                while !cx.is_draining() && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if cx.is_draining() {
                    saw.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
        .fixed_threads(1)
        .build()
        .unwrap();
    assert!(!rt.is_draining(), "created");
    rt.start().unwrap();
    assert!(!rt.is_draining(), "running");
    sink.try_enqueue(()).unwrap();
    started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let report = rt.shutdown(Duration::from_secs(5));
    assert!(report.drained, "{report:?}");
    assert!(report.elapsed_ms < 2000, "{report:?}");
    assert_eq!(saw_draining.load(Ordering::SeqCst), 1);
    assert!(rt.is_draining(), "stopped");
}
