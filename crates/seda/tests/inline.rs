//! Domains and inline handoff: an event handed over inline is counted by the callee
//! exactly as a queued one, refused by its admission as ever, never runs beside a
//! same-colored event or inside a busy one-thread stage, survives a panic, and
//! respects draining and the depth bound. Every case runs in both thread models.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seda::admission::{AdmissionPolicy, Offer};
use seda::{Batch, Color, Context, EnqueueError, MAX_INLINE_DEPTH, Meta, Runtime};
use support::{MODELS, eventually};

/// Refuses every event.
#[derive(Debug)]
struct RefuseAll;

impl AdmissionPolicy for RefuseAll {
    fn name(&self) -> &'static str {
        "refuse-all"
    }
    fn admit(&self, _offer: &Offer) -> bool {
        false
    }
}

#[test]
fn an_inline_event_is_counted_by_the_callee_as_a_queued_one() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        let seen: Arc<Mutex<Vec<(u8, std::thread::ThreadId)>>> = Arc::default();
        let s = seen.clone();
        // With an admission policy every inline run is timed (the policy needs every
        // response time), so the histograms count each event once, as for queued
        // ones; without one, inline runs are sampled (see the next test).
        let b = rt
            .stage("b", move |batch: Batch<'_, u32>, cx: &Context<'_>| {
                for _ in batch {
                    s.lock()
                        .unwrap()
                        .push((cx.meta().class(), std::thread::current().id()));
                }
            })
            .domain(&d)
            .admission(seda::admission::Unbounded)
            .build()
            .unwrap();
        let caller: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::default();
        let c = caller.clone();
        let a = rt
            .stage("a", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    c.lock().unwrap().push(std::thread::current().id());
                    b.try_enqueue(v).unwrap();
                }
            })
            .domain(&d)
            .batch(1)
            .build()
            .unwrap();
        rt.start().unwrap();
        for i in 0..50 {
            a.try_enqueue_with(i, Meta::new().with_class(3)).unwrap();
            // One at a time, so `b`'s queue is empty at each handoff.
            assert!(eventually(Duration::from_secs(5), || seen
                .lock()
                .unwrap()
                .len()
                == i as usize + 1));
        }
        let snap = rt.snapshot();
        let sb = snap.stage("b").unwrap();
        assert_eq!(sb.inlined, 50, "{model}: {sb:?}");
        assert_eq!(
            (sb.enqueued, sb.admitted, sb.processed),
            (50, 50, 50),
            "{model}"
        );
        assert_eq!(sb.response_time.count, 50, "{model}");
        assert_eq!(sb.service_time.count, 50, "{model}");
        assert_eq!(
            sb.queue_delay.max_ms, 0.001,
            "{model}: inline never waits in a queue"
        );
        assert_eq!(sb.classes.len(), 1);
        assert_eq!(sb.classes[0].class, 3, "{model}: class propagates inline");
        assert_eq!(sb.domain.as_deref(), Some("d"));
        assert!(
            snap.edges.contains(&("a".to_owned(), "b".to_owned())),
            "{model}: edge"
        );
        // Ran on the caller's thread, with the caller's metadata.
        let seen = seen.lock().unwrap();
        let caller = caller.lock().unwrap();
        assert!(
            seen.iter()
                .zip(caller.iter())
                .all(|(s, c)| s.0 == 3 && s.1 == *c)
        );
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
    }
}

/// Without an admission policy, a busy stage's inline runs are timed one time in
/// eight (or once a millisecond per thread); a timed run's samples weigh one more
/// than the runs skipped before it, so the histograms' count adds up to the events
/// (but the few skipped since the last record) while the counts stay exact.
#[test]
fn untimed_inline_runs_are_counted_exactly_and_sampled_for_latency() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        let b = rt
            .stage(
                "b",
                |batch: Batch<'_, u32>, _cx: &Context<'_>| for _ in batch {},
            )
            .domain(&d)
            .build()
            .unwrap();
        rt.start().unwrap();
        const N: u64 = 4_000;
        for i in 0..N {
            d.enter(|| b.try_enqueue(i as u32)).unwrap();
        }
        let sb = rt.snapshot().stage("b").cloned().unwrap();
        assert_eq!(
            (sb.admitted, sb.processed, sb.inlined),
            (N, N, N),
            "{model}"
        );
        let c = sb.response_time.count;
        assert!((N - 200..=N).contains(&c), "{model}: {c} estimated of {N}");
        assert_eq!(sb.queue_delay.max_ms, 0.001, "{model}: never queued");
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
    }
}

#[test]
fn a_refusal_by_the_callees_admission_is_the_usual_rejected() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let b = rt
            .stage("b", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                r.fetch_add(batch.count(), SeqCst);
            })
            .domain(&d)
            .admission(RefuseAll)
            .build()
            .unwrap();
        rt.start().unwrap();
        let back = d.enter(|| b.try_enqueue(7));
        assert!(
            matches!(back, Err(EnqueueError::Rejected(7))),
            "{model}: {back:?}"
        );
        let back = d.enter(|| b.try_enqueue_batch(vec![1, 2]));
        assert!(matches!(back, Err(EnqueueError::Rejected(ref v)) if v == &[1, 2]));
        let snap = rt.snapshot();
        let sb = snap.stage("b").unwrap();
        assert_eq!((sb.rejected, sb.admitted, sb.inlined), (3, 0, 0), "{model}");
        assert_eq!(ran.load(SeqCst), 0);
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
    }
}

#[test]
fn a_panic_in_an_inlined_handler_is_caught_and_counted_by_the_callee() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        let b = rt
            .stage("b", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    assert!(v != 13, "unlucky {v}");
                }
            })
            .domain(&d)
            .build()
            .unwrap();
        rt.start().unwrap();
        // The caller goes on: the event was taken, its failure is the callee's.
        assert!(d.enter(|| b.try_enqueue(13)).is_ok());
        assert!(d.enter(|| b.try_enqueue(1)).is_ok());
        let snap = rt.snapshot();
        let sb = snap.stage("b").unwrap();
        assert_eq!((sb.panics, sb.processed, sb.inlined), (1, 2, 2), "{model}");
        assert!(sb.last_panic.as_deref().unwrap().contains("unlucky 13"));
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
    }
}

/// Two stages in one domain get colored events from producers inside the domain:
/// some run inline, some queue, and a color's events still never overlap and keep
/// their enqueue order.
#[test]
fn colored_events_inline_only_when_their_color_is_free() {
    const COLORS: u64 = 4;
    const PER_COLOR: u64 = 400;
    for model in MODELS {
        let rt = Runtime::builder()
            .thread_model(model)
            .shared_workers(2)
            .build();
        let d = rt.domain("d");
        let busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..COLORS).map(|_| AtomicBool::new(false)).collect());
        let last: Arc<Mutex<Vec<Option<u64>>>> = Arc::new(Mutex::new(vec![None; COLORS as usize]));
        let bad = Arc::new(AtomicUsize::new(0));
        let handled = Arc::new(AtomicUsize::new(0));
        let mut sinks = Vec::new();
        for name in ["left", "right"] {
            let (busy, last, bad, handled) =
                (busy.clone(), last.clone(), bad.clone(), handled.clone());
            sinks.push(
                rt.stage(
                    name,
                    move |batch: Batch<'_, (u64, u64)>, _cx: &Context<'_>| {
                        for (color, seq) in batch {
                            let c = color as usize;
                            if busy[c].swap(true, SeqCst) {
                                bad.fetch_add(1, SeqCst);
                            }
                            {
                                let mut l = last.lock().unwrap();
                                if l[c].is_some_and(|p| p >= seq) {
                                    bad.fetch_add(1, SeqCst);
                                }
                                l[c] = Some(seq);
                            }
                            for _ in 0..100 {
                                std::hint::spin_loop();
                            }
                            busy[c].store(false, SeqCst);
                            handled.fetch_add(1, SeqCst);
                        }
                    },
                )
                .domain(&d)
                .threads(2, 2)
                .capacity(10_000)
                .build()
                .unwrap(),
            );
        }
        rt.start().unwrap();
        let producers: Vec<_> = (0..COLORS)
            .map(|color| {
                let (sinks, d) = (sinks.clone(), d.clone());
                std::thread::spawn(move || {
                    d.enter(|| {
                        for seq in 0..PER_COLOR {
                            let meta = Meta::new().with_color(Color::new(color));
                            sinks[(seq % 2) as usize]
                                .try_enqueue_with((color, seq), meta)
                                .unwrap();
                        }
                    });
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        assert!(rt.shutdown(Duration::from_secs(30)).drained);
        assert_eq!(handled.load(SeqCst) as u64, COLORS * PER_COLOR);
        assert_eq!(
            bad.load(SeqCst),
            0,
            "{model}: a color overlapped or ran out of order"
        );
    }
}

/// A one-thread stage never runs two batches at once: an inline handoff while its
/// worker runs a batch goes to the queue instead.
#[test]
fn a_one_thread_stage_is_never_run_inline_beside_its_worker() {
    let rt = Runtime::builder().build();
    let d = rt.domain("d");
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (i2, o2, d2) = (inside.clone(), overlaps.clone(), done.clone());
    let one = rt
        .stage("one", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
            for v in batch {
                if i2.swap(true, SeqCst) {
                    o2.fetch_add(1, SeqCst);
                }
                if v % 10 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                i2.store(false, SeqCst);
                d2.fetch_add(1, SeqCst);
            }
        })
        .domain(&d)
        .fixed_threads(1)
        .build()
        .unwrap();
    rt.start().unwrap();
    let callers: Vec<_> = (0..3)
        .map(|t| {
            let (one, d) = (one.clone(), d.clone());
            std::thread::spawn(move || {
                for i in 0..100 {
                    d.enter(|| one.try_enqueue(t * 1000 + i)).unwrap();
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    assert!(rt.shutdown(Duration::from_secs(30)).drained);
    assert_eq!(done.load(SeqCst), 300);
    assert_eq!(
        overlaps.load(SeqCst),
        0,
        "one-thread stage ran two batches at once"
    );
}

/// A stage that hands events to itself nests inline calls only up to the bound,
/// then queues; every event still runs once.
#[test]
fn inline_nesting_stops_at_the_depth_bound() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        thread_local! {
            static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let deepest = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        let (dm, t) = (deepest.clone(), total.clone());
        let (s, declared) = rt.declare::<u32>("loop").unwrap();
        let me = s.clone();
        declared
            .handler(move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    let now = DEPTH.with(|d| {
                        d.set(d.get() + 1);
                        d.get()
                    });
                    dm.fetch_max(now, SeqCst);
                    t.fetch_add(1, SeqCst);
                    if v > 0 {
                        me.try_enqueue(v - 1).unwrap();
                    }
                    DEPTH.with(|d| d.set(d.get() - 1));
                }
            })
            .domain(&d)
            .build()
            .unwrap();
        rt.start().unwrap();
        d.enter(|| s.try_enqueue(100)).unwrap();
        assert!(eventually(Duration::from_secs(10), || total.load(SeqCst) == 101));
        let deepest = deepest.load(SeqCst);
        assert!(
            deepest <= MAX_INLINE_DEPTH as usize + 1,
            "{model}: nested {deepest} deep"
        );
        assert!(rt.shutdown(Duration::from_secs(5)).drained);
        let snap = rt.snapshot();
        assert_eq!(snap.stage("loop").unwrap().processed, 101);
    }
}

/// While draining, a handler inside the runtime still hands events on inline; a
/// thread outside the runtime that joined the domain gets `Closed`.
#[test]
fn draining_inlines_only_for_callers_inside_the_runtime() {
    for model in MODELS {
        let rt = Runtime::builder().thread_model(model).build();
        let d = rt.domain("d");
        let b = rt
            .stage(
                "b",
                |batch: Batch<'_, u32>, _cx: &Context<'_>| for _ in batch {},
            )
            .domain(&d)
            .build()
            .unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let (st, b2, rt2) = (started.clone(), b.clone(), rt.clone());
        let a = rt
            .stage("a", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
                for v in batch {
                    st.store(true, SeqCst);
                    while !rt2.is_draining() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    b2.try_enqueue(v).unwrap();
                }
            })
            .domain(&d)
            .build()
            .unwrap();
        rt.start().unwrap();
        a.try_enqueue(1).unwrap();
        assert!(eventually(Duration::from_secs(5), || started.load(SeqCst)));
        let rt3 = rt.clone();
        let shutdown = std::thread::spawn(move || rt3.shutdown(Duration::from_secs(10)));
        assert!(eventually(Duration::from_secs(5), || rt.is_draining()));
        assert!(
            d.enter(|| b.try_enqueue(2)).is_err_and(|e| e.is_closed()),
            "{model}"
        );
        let report = shutdown.join().unwrap();
        assert!(report.drained, "{model}: {report:?}");
        let snap = rt.snapshot();
        let sb = snap.stage("b").unwrap();
        assert_eq!(
            (sb.processed, sb.inlined, sb.closed),
            (1, 1, 1),
            "{model}: {sb:?}"
        );
    }
}

/// With inline handoff off, the domain's stages queue as any others.
#[test]
fn inline_off_queues_every_handoff() {
    let rt = Runtime::builder().build();
    let d = rt.domain("d");
    d.set_inline(false);
    let b = rt
        .stage(
            "b",
            |batch: Batch<'_, u32>, _cx: &Context<'_>| for _ in batch {},
        )
        .domain(&d)
        .build()
        .unwrap();
    rt.start().unwrap();
    for i in 0..10 {
        d.enter(|| b.try_enqueue(i)).unwrap();
    }
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
    let snap = rt.snapshot();
    assert_eq!(snap.stage("b").unwrap().inlined, 0);
    assert_eq!(snap.stage("b").unwrap().processed, 10);
}
