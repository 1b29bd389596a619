//! Stages, sinks, metadata, stats and lifecycle, as a user of the runtime sees them.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seda::admission::{AdmissionPolicy, Offer};
use seda::{
    Batch, Context, EnqueueError, InitError, Meta, Runtime, RuntimeError, Sink, ThreadModel,
};
use support::{MODELS, eventually};

/// A three-stage pipeline: events pass through `a -> b -> c` in both thread models,
/// keep their `born` and class, and the graph shows the edges that were used.
#[test]
fn pipeline_delivers_and_propagates_metadata() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let seen: Arc<Mutex<Vec<(u64, Meta)>>> = Arc::default();
        let out = seen.clone();
        let c: Sink<u64> = rt
            .stage("c", move |batch: Batch<'_, u64>, cx: &Context<'_>| {
                for v in batch {
                    out.lock().unwrap().push((v, cx.meta()));
                }
            })
            .build()
            .unwrap();
        let b: Sink<u64> = rt
            .stage("b", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                for v in batch {
                    c.try_enqueue(v * 10).unwrap();
                }
            })
            .build()
            .unwrap();
        let a = rt
            .stage("a", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                for v in batch {
                    b.try_enqueue(v + 1).unwrap();
                }
            })
            .build()
            .unwrap();
        rt.start().unwrap();
        let born = Instant::now() - Duration::from_millis(500);
        for i in 0..200u64 {
            a.try_enqueue_with(i, Meta::born_at(born).with_class((i % 3) as u8))
                .unwrap();
        }
        assert!(
            eventually(Duration::from_secs(10), || seen.lock().unwrap().len()
                == 200),
            "{model}"
        );
        let seen = seen.lock().unwrap();
        for (v, meta) in seen.iter() {
            let i = v / 10 - 1;
            assert_eq!(meta.born(), born, "born is inherited through every stage");
            assert_eq!(meta.class(), (i % 3) as u8, "class is inherited");
        }
        let snap = rt.snapshot();
        assert_eq!(
            snap.edges,
            vec![
                ("a".to_owned(), "b".to_owned()),
                ("b".to_owned(), "c".to_owned())
            ]
        );
        let c_stats = snap.stage("c").unwrap();
        assert_eq!(c_stats.processed, 200);
        assert!(
            c_stats.response_time.p50_ms >= 500.0,
            "response time counts from born"
        );
        assert_eq!(c_stats.thread_model, model.as_str());
        let dot = snap.to_dot();
        assert!(
            dot.contains("\"a\" -> \"b\"") && dot.contains("\"b\" -> \"c\""),
            "{dot}"
        );
        let prom = snap.to_prometheus();
        assert!(
            prom.contains("seda_stage_processed_total{stage=\"c\"} 200"),
            "{prom}"
        );
        let json: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
        assert_eq!(json["stages"].as_array().unwrap().len(), 3);
        let report = rt.shutdown(Duration::from_secs(5));
        assert!(report.drained);
        assert_eq!(report.unfinished(), 0);
    }
}

#[test]
fn full_queue_hands_the_event_back() {
    let rt = Runtime::builder().build();
    // Not started: events queue up and nothing drains them.
    let sink = rt
        .stage("s", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
        .capacity(2)
        .build()
        .unwrap();
    sink.try_enqueue("one".into()).unwrap();
    sink.try_enqueue("two".into()).unwrap();
    match sink.try_enqueue("three".into()) {
        Err(EnqueueError::Full(e)) => assert_eq!(e, "three"),
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(sink.queue_len(), 2);
    assert!(!sink.enqueue_lossy("four".into()));
    let snap = rt.snapshot();
    let s = snap.stage("s").unwrap();
    assert_eq!((s.admitted, s.full, s.dropped), (2, 2, 1));
}

#[test]
fn blocking_enqueue_waits_for_space_or_deadline() {
    let rt = Runtime::builder().build();
    let sink = rt
        .stage("s", |b: Batch<'_, u32>, _cx: &Context<'_>| {
            b.for_each(drop);
        })
        .capacity(1)
        .build()
        .unwrap();
    sink.try_enqueue(1).unwrap();
    let t0 = Instant::now();
    let r = sink.enqueue_until(2, Instant::now() + Duration::from_millis(60));
    assert_eq!(r, Err(EnqueueError::Full(2)));
    assert!(
        t0.elapsed() >= Duration::from_millis(60),
        "waited until the deadline"
    );
    // Space appears when the runtime starts and drains the queue.
    let starter = {
        let rt = rt.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            rt.start().unwrap();
        })
    };
    let t0 = Instant::now();
    sink.enqueue_until(3, Instant::now() + Duration::from_secs(10))
        .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "it blocked until space appeared"
    );
    starter.join().unwrap();
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
}

#[derive(Debug)]
struct RejectClassZero;

impl AdmissionPolicy for RejectClassZero {
    fn name(&self) -> &'static str {
        "reject-class-zero"
    }
    fn admit(&self, offer: &Offer) -> bool {
        offer.class > 0
    }
}

#[test]
fn admission_rejects_and_can_be_switched_off_by_the_stage() {
    let rt = Runtime::builder().build();
    let sink = rt
        .stage("s", |batch: Batch<'_, u32>, cx: &Context<'_>| {
            for v in batch {
                if v == 999 {
                    cx.set_admission_enabled(false);
                }
            }
        })
        .admission(RejectClassZero)
        .build()
        .unwrap();
    rt.start().unwrap();
    assert_eq!(
        sink.try_enqueue_with(7, Meta::new()),
        Err(EnqueueError::Rejected(7))
    );
    sink.try_enqueue_with(999, Meta::new().with_class(1))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || !rt
        .snapshot()
        .stage("s")
        .unwrap()
        .admission_enabled));
    sink.try_enqueue_with(8, Meta::new())
        .expect("admission control is off");
    let snap = rt.snapshot();
    let s = snap.stage("s").unwrap();
    assert_eq!(s.rejected, 1);
    let class0 = s.classes.iter().find(|c| c.class == 0).unwrap();
    assert_eq!((class0.admitted, class0.rejected), (1, 1));
    rt.shutdown(Duration::from_secs(5));
}

#[test]
fn batch_enqueue_is_all_or_nothing() {
    let rt = Runtime::builder().build();
    let sink = rt
        .stage("s", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
        .capacity(5)
        .build()
        .unwrap();
    sink.try_enqueue_batch(vec![1, 2, 3]).unwrap();
    assert_eq!(
        sink.try_enqueue_batch(vec![4, 5, 6]),
        Err(EnqueueError::Full(vec![4, 5, 6]))
    );
    assert_eq!(sink.queue_len(), 3);
    sink.try_enqueue_batch(vec![4, 5]).unwrap();
    assert_eq!(sink.queue_len(), 5);
}

#[test]
fn a_panicking_handler_is_counted_and_the_stage_keeps_running() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        let sink = rt
            .stage("s", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    assert!(v % 10 != 3, "bad event {v}");
                    d.fetch_add(1, Ordering::Relaxed);
                }
            })
            .batch(1)
            .build()
            .unwrap();
        rt.start().unwrap();
        for i in 0..30 {
            sink.try_enqueue(i).unwrap();
        }
        let report = rt.shutdown(Duration::from_secs(5));
        assert!(report.drained);
        assert_eq!(done.load(Ordering::Relaxed), 27);
        let snap = rt.snapshot();
        let s = snap.stage("s").unwrap();
        assert_eq!(s.panics, 3);
        assert_eq!(s.processed, 30);
        assert!(s.last_panic.as_deref().unwrap().contains("bad event"));
    }
}

#[test]
fn registration_errors() {
    let rt = Runtime::builder().build();
    rt.stage("x", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
        .build()
        .unwrap();
    let dup = rt
        .stage("x", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
        .build();
    assert!(matches!(dup, Err(RuntimeError::DuplicateStage(s)) if s == "x"));
    let zero = rt
        .stage("z", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
        .capacity(0)
        .build();
    assert!(matches!(zero, Err(RuntimeError::InvalidConfig(_))));
}

struct Hooks {
    inits: Arc<AtomicUsize>,
    destroys: Arc<AtomicUsize>,
    fail: bool,
}

impl seda::EventHandler<u32> for Hooks {
    fn init(&self, cx: &Context<'_>) -> Result<(), InitError> {
        self.inits.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            Err(format!("{} cannot start", cx.stage_name()).into())
        } else {
            Ok(())
        }
    }
    fn handle_events(&self, _batch: Batch<'_, u32>, _cx: &Context<'_>) {}
    fn destroy(&self) {
        self.destroys.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn init_and_destroy_hooks_run_once_and_init_errors_stop_start() {
    let (inits, destroys) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let rt = Runtime::builder().build();
    let ok = rt
        .stage(
            "ok",
            Hooks {
                inits: inits.clone(),
                destroys: destroys.clone(),
                fail: false,
            },
        )
        .build()
        .unwrap();
    rt.start().unwrap();
    rt.start().unwrap();
    assert_eq!(rt.snapshot().stage("ok").unwrap().state, "running");
    rt.shutdown(Duration::from_secs(2));
    assert_eq!(
        (
            inits.load(Ordering::SeqCst),
            destroys.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    assert_eq!(rt.snapshot().stage("ok").unwrap().state, "stopped");
    assert!(ok.try_enqueue(1).unwrap_err().is_closed());

    let rt = Runtime::builder().build();
    rt.stage(
        "bad",
        Hooks {
            inits: inits.clone(),
            destroys,
            fail: true,
        },
    )
    .build()
    .unwrap();
    let err = rt.start().unwrap_err();
    assert!(matches!(&err, RuntimeError::Init { stage, .. } if stage == "bad"));
    assert_eq!(
        err.to_string(),
        "stage 'bad' failed to initialise: bad cannot start"
    );
}

/// The handler's own error type, for the test below.
#[derive(Debug, PartialEq)]
struct NoDatabase {
    path: &'static str,
}

impl std::fmt::Display for NoDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no database at {}", self.path)
    }
}

impl std::error::Error for NoDatabase {}

struct NeedsDatabase;

impl seda::EventHandler<u32> for NeedsDatabase {
    fn init(&self, _cx: &Context<'_>) -> Result<(), InitError> {
        Err(NoDatabase { path: "/srv/db" })?
    }
    fn handle_events(&self, _batch: Batch<'_, u32>, _cx: &Context<'_>) {}
}

/// An `init` error keeps its type: `source()` of the runtime's error is the
/// handler's own error, whether the stage starts with the runtime or is added to a
/// running one, and the message still names the stage.
#[test]
fn a_handlers_init_error_is_the_source_of_the_runtime_error() {
    use std::error::Error as _;
    let check = |err: RuntimeError, stage: &str| {
        assert_eq!(
            err.to_string(),
            format!("stage '{stage}' failed to initialise: no database at /srv/db")
        );
        let source = err.source().expect("Init has a source");
        assert_eq!(
            source.downcast_ref::<NoDatabase>(),
            Some(&NoDatabase { path: "/srv/db" })
        );
    };

    let rt = Runtime::builder().build();
    rt.stage("store", NeedsDatabase).build().unwrap();
    check(rt.start().unwrap_err(), "store");

    let rt = Runtime::builder().build();
    rt.start().unwrap();
    check(rt.stage("late", NeedsDatabase).build().unwrap_err(), "late");
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
}

#[test]
fn timers_fire_after_their_delay_and_can_be_cancelled() {
    let rt = Runtime::builder().build();
    let got: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let g = got.clone();
    let sink = rt
        .stage("t", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
            for v in batch {
                g.lock().unwrap().push((v, Instant::now()));
            }
        })
        .build()
        .unwrap();
    rt.start().unwrap();
    let t0 = Instant::now();
    rt.schedule(Duration::from_millis(80), &sink, 1);
    let cancelled = rt.schedule(Duration::from_millis(40), &sink, 2);
    assert!(rt.cancel_timer(cancelled));
    rt.schedule(Duration::from_secs(3600), &sink, 3);
    assert!(eventually(Duration::from_secs(5), || !got
        .lock()
        .unwrap()
        .is_empty()));
    // Timers fire in deadline order and the stage takes events in order: had the
    // 40 ms timer fired, its event would have come first.
    let (v, at) = got.lock().unwrap()[0];
    assert_eq!(v, 1, "the cancelled timer never fired");
    assert!(at.duration_since(t0) >= Duration::from_millis(80));
    assert_eq!(got.lock().unwrap().len(), 1);
    let report = rt.shutdown(Duration::from_secs(2));
    assert_eq!(
        report.timers_cancelled, 1,
        "the hour-long timer is reported"
    );
}

#[test]
fn thread_pool_controller_grows_under_load_and_shrinks_when_idle() {
    let rt = Runtime::builder()
        .control_interval(Duration::from_millis(5))
        .build();
    let sink = rt
        .stage("slow", |batch: Batch<'_, u32>, _cx: &Context<'_>| {
            for _ in batch {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .thread_pool(
            seda::control::ThreadPoolConfig::default()
                .with_min_threads(1)
                .with_max_threads(4)
                .with_queue_threshold(4)
                .with_idle_timeout(Duration::from_millis(50))
                .with_interval(Duration::from_millis(20)),
        )
        .batch(1)
        .capacity(10_000)
        .thread_model(ThreadModel::PerStage)
        .build()
        .unwrap();
    rt.start().unwrap();
    for i in 0..400 {
        sink.try_enqueue(i).unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || rt
            .snapshot()
            .stage("slow")
            .unwrap()
            .threads
            == 4),
        "grew to max under a long queue"
    );
    assert!(
        eventually(Duration::from_secs(20), || {
            let s = rt.snapshot();
            let s = s.stage("slow").unwrap();
            s.queue_len == 0 && s.threads == 1
        }),
        "shrank back to min when idle"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
}

#[test]
fn draining_finishes_work_inside_the_service_but_refuses_new_work() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        let b: Sink<u32> = rt
            .stage("b", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                d.fetch_add(batch.count(), Ordering::Relaxed);
            })
            .build()
            .unwrap();
        let a = rt
            .stage("a", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    std::thread::sleep(Duration::from_micros(200));
                    b.try_enqueue(v).unwrap();
                }
            })
            .build()
            .unwrap();
        rt.start().unwrap();
        for i in 0..500 {
            a.try_enqueue(i).unwrap();
        }
        let closer = {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                a.try_enqueue(9999)
            })
        };
        let report = rt.shutdown(Duration::from_secs(10));
        assert!(
            closer.join().unwrap().unwrap_err().is_closed(),
            "outside enqueue refused while draining"
        );
        assert!(report.drained, "{report:?}");
        assert_eq!(done.load(Ordering::Relaxed), 500, "{model}");
    }
}

/// Ping-pong through one stage: every enqueue must be picked up even when it races
/// with the worker giving up the stage's schedule token (a lost wake-up here hangs the
/// round trip, which the 2 s receive timeout turns into a failure).
#[test]
fn round_trips_never_strand_an_event() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let (tx, rx) = crossbeam_channel::bounded::<u64>(1);
        let sink = rt
            .stage("echo", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                for v in batch {
                    tx.send(v).unwrap();
                }
            })
            .build()
            .unwrap();
        rt.start().unwrap();
        for i in 0..30_000u64 {
            sink.try_enqueue(i).unwrap();
            let got = rx.recv_timeout(Duration::from_secs(2));
            assert_eq!(got, Ok(i), "{model:?}: round trip {i} stranded");
        }
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
    }
}

/// On the shared pool, an event that arrives while its stage is busy with a long batch
/// runs on another, idle worker: it does not wait for the batch to end.
#[test]
fn shared_pool_runs_a_late_event_beside_a_long_batch() {
    let rt = Runtime::builder()
        .thread_model(ThreadModel::Shared)
        .shared_workers(2)
        .build();
    // The long batch runs until the test opens its gate, so "beside" is a matter of
    // order, not of time: the late event must finish while the gate is still shut.
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let (open_gate, gate) = crossbeam_channel::bounded::<()>(1);
    let (tx, rx) = crossbeam_channel::unbounded::<&'static str>();
    let sink = rt
        .stage(
            "work",
            move |batch: Batch<'_, &'static str>, _cx: &Context<'_>| {
                for what in batch {
                    if what == "long" {
                        started_tx.send(()).unwrap();
                        gate.recv().unwrap();
                    }
                    tx.send(what).unwrap();
                }
            },
        )
        .batch(1)
        .build()
        .unwrap();
    rt.start().unwrap();
    sink.try_enqueue("long").unwrap();
    started.recv_timeout(Duration::from_secs(10)).unwrap();
    sink.try_enqueue("late").unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok("late"),
        "the late event waited for the long batch"
    );
    open_gate.send(()).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("long"));
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
}

/// Typed wiring: a declared stage's sink exists before its handler, refuses events
/// until the stage is built, is the sink of the built stage, and a runtime with a
/// declared stage that never got a handler refuses to start, naming it.
#[test]
fn a_declared_stage_gives_its_sink_before_its_handler() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let (sink, declared) = rt.declare::<u32>("later").unwrap();
        assert_eq!(sink.stage_name(), "later");
        assert!(sink.try_enqueue(1).unwrap_err().is_closed(), "{model}");
        assert!(matches!(
            rt.declare::<u32>("later"),
            Err(RuntimeError::DuplicateStage(s)) if s == "later"
        ));
        let dup = rt
            .stage("later", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
            .build();
        assert!(matches!(dup, Err(RuntimeError::DuplicateStage(s)) if s == "later"));
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let built = declared
            .handler(move |b: Batch<'_, u32>, _cx: &Context<'_>| {
                s.fetch_add(b.count(), Ordering::Relaxed);
            })
            .capacity(8)
            .build()
            .unwrap();
        assert_eq!(sink.capacity(), 8, "the declared sink is the built stage's");
        sink.try_enqueue(1).unwrap();
        built.try_enqueue(2).unwrap();
        let (_orphan, never) = rt.declare::<u32>("orphan").unwrap();
        drop(never);
        let err = rt.start().unwrap_err();
        assert!(
            err.to_string()
                .contains("'orphan' was declared but never given a handler"),
            "{err}"
        );
        let rt2 = Runtime::builder().thread_model(model).build();
        let (s2, d2) = rt2.declare::<u32>("x").unwrap();
        let seen2 = Arc::new(AtomicUsize::new(0));
        let c2 = seen2.clone();
        d2.handler(move |b: Batch<'_, u32>, _cx: &Context<'_>| {
            c2.fetch_add(b.count(), Ordering::Relaxed);
        })
        .build()
        .unwrap();
        rt2.start().unwrap();
        s2.try_enqueue(7).unwrap();
        assert!(eventually(Duration::from_secs(10), || seen2
            .load(Ordering::Relaxed)
            == 1));
        assert!(rt2.shutdown(Duration::from_secs(5)).drained);
        assert_eq!(rt2.snapshot().stage("x").unwrap().processed, 1);
        // The first runtime still has its orphan: it never starts, and the events
        // that went in before are counted unfinished at shutdown.
        let report = rt.shutdown(Duration::from_millis(100));
        assert_eq!(report.unfinished(), 2, "{model}");
        assert_eq!(seen.load(Ordering::Relaxed), 0);
    }
}
