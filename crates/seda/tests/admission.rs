//! Admission policies on synthetic traces (time is passed in), and one end-to-end run
//! of the response-time policy guarding a slow stage.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use seda::admission::*;
use seda::{Batch, Context, EnqueueError, Meta, Runtime};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn offer(class: u8, queue_len: usize, in_flight: usize, now: Instant) -> Offer {
    Offer {
        class,
        queue_len,
        in_flight,
        capacity: 10_000,
        now,
    }
}

fn done(
    class: u8,
    rt: Duration,
    queue_delay: Duration,
    service: Duration,
    in_flight: usize,
    now: Instant,
) -> Completion {
    Completion {
        class,
        response_time: rt,
        queue_delay,
        service_time: service,
        in_flight,
        now,
    }
}

/// Offers one event every `step` for `total`; returns how many were admitted.
fn admitted_over(
    p: &dyn AdmissionPolicy,
    class: u8,
    start: Instant,
    total: Duration,
    step: Duration,
) -> usize {
    let n = (total.as_nanos() / step.as_nanos()) as u32;
    (0..n)
        .filter(|i| p.admit(&offer(class, 0, 0, start + step * *i)))
        .count()
}

#[test]
fn unbounded_and_queue_threshold() {
    let now = Instant::now();
    assert!(Unbounded.admit(&offer(0, 1_000_000, 0, now)));
    let q = QueueThreshold::new(10);
    assert!(q.admit(&offer(0, 9, 9, now)));
    assert!(!q.admit(&offer(0, 10, 10, now)));
    assert_eq!(q.state().limit, Some(10.0));
}

#[test]
fn red_drop_probability_rises_linearly_between_thresholds() {
    let red = Red::new(10, 30, 0.5, 1.0);
    assert_eq!(red.drop_probability(5.0), 0.0);
    assert!((red.drop_probability(20.0) - 0.25).abs() < 1e-12);
    assert_eq!(red.drop_probability(30.0), 1.0);
    let now = Instant::now();
    // weight 1: the average is the instantaneous length.
    let admitted = (0..10_000)
        .filter(|_| red.admit(&offer(0, 20, 20, now)))
        .count();
    assert!(
        (7_000..=8_000).contains(&admitted),
        "expected ~75% admitted, got {admitted}"
    );
    assert!((0..100).all(|_| red.admit(&offer(0, 0, 0, now))));
    assert!((0..100).all(|_| !red.admit(&offer(0, 40, 40, now))));
}

#[test]
fn token_bucket_admits_at_its_rate() {
    let p = TokenBucketPolicy::new(100.0, 1.0);
    let start = Instant::now() + ms(10);
    // 1 s of offers every 100 us: 100 tokens + the full bucket at the start.
    let n = admitted_over(
        &p,
        0,
        start,
        Duration::from_secs(1),
        Duration::from_micros(100),
    );
    assert!((99..=102).contains(&n), "admitted {n}");
}

#[test]
fn response_time_policy_cuts_its_rate_when_p90_is_over_target_and_restores_it_after() {
    let mut cfg = ResponseTimeConfig::with_target(ms(100));
    cfg.nreq = 10;
    let p = ResponseTimePolicy::new(cfg).unwrap();
    let t0 = Instant::now();
    let before = admitted_over(&p, 0, t0, Duration::from_secs(1), ms(1));
    // 100 tokens in 1 s plus the full bucket at the start (100 ms of burst = 10).
    assert!(
        (105..=112).contains(&before),
        "initial rate 100/s: {before}"
    );
    // Completions at 5x the target: every 10 samples the rate is divided by 1.2.
    let mut now = t0 + Duration::from_secs(1);
    for _ in 0..200 {
        now += ms(1);
        p.on_complete(&done(0, ms(500), ms(400), ms(100), 50, now));
    }
    let st = p.state();
    let rate = st.rate.unwrap();
    assert!(
        (rate - 100.0 / 1.2f64.powi(20)).abs() < 1e-6,
        "20 cuts: {rate}"
    );
    assert!(st.p90_ms.unwrap() > 100.0);
    assert_eq!(st.target_ms, Some(100.0));
    let during = admitted_over(&p, 0, now + ms(1), Duration::from_secs(1), ms(1));
    assert!(during <= 4, "overloaded: {during} admitted in 1 s");
    // Load gone: fast completions raise the rate additively.
    for _ in 0..2000 {
        now += ms(1);
        p.on_complete(&done(0, ms(5), ms(0), ms(5), 1, now));
    }
    assert!(
        p.state().rate.unwrap() > 100.0,
        "rate recovers: {:?}",
        p.state()
    );
}

#[test]
fn response_time_policy_evaluates_on_timeout_when_traffic_is_thin() {
    let p = ResponseTimePolicy::with_target(ms(100));
    let t0 = Instant::now();
    for i in 0..5 {
        p.on_complete(&done(0, ms(900), ms(800), ms(100), 1, t0 + ms(i)));
    }
    assert_eq!(
        p.state().rate,
        Some(100.0),
        "5 < nreq samples: no evaluation yet"
    );
    p.on_tick(t0 + ms(1100));
    assert!(
        p.state().rate.unwrap() < 100.0,
        "the 1 s timeout evaluates the 5 samples"
    );
}

#[test]
fn multiclass_policy_rejects_the_low_class_before_the_high_class() {
    let mut cfg = MulticlassConfig::with_target(ms(100));
    cfg.base.nreq = 10;
    let p = MulticlassPolicy::new(cfg).unwrap();
    let t0 = Instant::now();
    // Both classes seen.
    assert!(p.admit(&offer(0, 0, 0, t0)));
    assert!(p.admit(&offer(1, 0, 0, t0)));
    // The high class misses its target.
    let mut now = t0;
    for _ in 0..20 {
        now += ms(1);
        p.on_complete(&done(1, ms(400), ms(300), ms(100), 10, now));
    }
    let st = p.state();
    let low = st.classes.iter().find(|c| c.class == 0).unwrap();
    let high = st.classes.iter().find(|c| c.class == 1).unwrap();
    assert!(low.rate < 2.0, "low class cut hard: {st:?}");
    assert_eq!(high.rate, 100.0, "high class untouched: {st:?}");
    let start = now + ms(1);
    let low_n = admitted_over(&p, 0, start, Duration::from_secs(1), ms(1));
    let high_n = admitted_over(&p, 1, start, Duration::from_secs(1), ms(1));
    assert!(low_n <= 3 && high_n >= 95, "low {low_n}, high {high_n}");
}

#[test]
fn codel_sheds_only_a_standing_queue() {
    let p = CoDel::new(CoDelConfig::default()).unwrap();
    let t0 = Instant::now();
    // Service 1 ms per event, one at a time.
    p.on_complete(&done(0, ms(1), ms(0), ms(1), 1, t0));
    // A burst of 50 queued events = 50 ms expected delay < interval: admitted.
    assert!(p.admit(&offer(0, 50, 51, t0)));
    // 200 queued = 200 ms > interval: refused even before overload is detected.
    assert!(!p.admit(&offer(0, 200, 201, t0)));
    // A short burst whose delays fall back under target within the interval: no overload.
    for i in 0..50u64 {
        p.on_complete(&done(0, ms(10), ms(50 - i), ms(1), 1, t0 + ms(i)));
    }
    p.on_tick(t0 + ms(101));
    assert!(!p.overloaded());
    // A standing queue: the minimum delay stays at 20 ms for a whole interval.
    let t1 = t0 + ms(200);
    for i in 0..120u64 {
        p.on_complete(&done(0, ms(30), ms(20), ms(1), 20, t1 + ms(i)));
    }
    p.on_tick(t1 + ms(250));
    assert!(p.overloaded());
    assert!(
        !p.admit(&offer(0, 10, 11, t1)),
        "10 ms expected delay > 5 ms target while overloaded"
    );
    assert!(p.admit(&offer(0, 3, 4, t1)), "3 ms expected delay is fine");
    // Queue drained: one interval with a small minimum clears the verdict.
    let t2 = t1 + ms(400);
    p.on_complete(&done(0, ms(1), ms(0), ms(1), 1, t2));
    p.on_tick(t2 + ms(101));
    assert!(!p.overloaded());
}

#[test]
fn gradient_limit_shrinks_when_latency_rises_and_grows_when_it_recovers() {
    let cfg = GradientLimitConfig::default()
        .with_initial(50.0)
        .with_window(ms(10));
    let p = GradientLimit::new(cfg).unwrap();
    let mut now = Instant::now();
    // Baseline: 10 ms in stage, busy (in flight near the limit).
    for _ in 0..200 {
        now += ms(1);
        p.on_complete(&done(0, ms(10), ms(5), ms(5), 45, now));
    }
    let base = p.limit();
    // Latency jumps 4x: gradient 0.5 drives the limit down.
    for _ in 0..300 {
        now += ms(1);
        p.on_complete(&done(0, ms(40), ms(35), ms(5), 45, now));
    }
    let congested = p.limit();
    assert!(congested < base * 0.6, "limit fell: {base} -> {congested}");
    assert!(!p.admit(&offer(0, 60, 60, now)));
    // Latency back to baseline: the sqrt(limit) term grows it again.
    for _ in 0..300 {
        now += ms(1);
        p.on_complete(&done(0, ms(10), ms(5), ms(5), congested as usize, now));
    }
    assert!(
        p.limit() > congested,
        "limit recovers: {congested} -> {}",
        p.limit()
    );
    assert!(GradientLimit::new(GradientLimitConfig::default().with_min(0.0)).is_err());
}

#[test]
fn gradient_limit_does_not_grow_when_app_limited() {
    let cfg = GradientLimitConfig::default()
        .with_initial(50.0)
        .with_window(ms(10));
    let p = GradientLimit::new(cfg).unwrap();
    let mut now = Instant::now();
    for _ in 0..500 {
        now += ms(1);
        p.on_complete(&done(0, ms(10), ms(0), ms(10), 2, now));
    }
    assert!(p.limit() <= 50.0, "idle stage: limit {}", p.limit());
}

#[test]
fn aimd_limit_backs_off_once_per_timeout_and_grows_additively() {
    let p = AimdLimit::new(AimdLimitConfig::with_timeout(ms(50))).unwrap();
    let mut now = Instant::now();
    for _ in 0..10 {
        now += ms(1);
        p.on_complete(&done(0, ms(10), ms(0), ms(10), 15, now));
    }
    assert_eq!(p.limit(), 30.0, "+1 per sample while in flight >= limit/2");
    // A burst of slow samples within one timeout: one cut.
    for _ in 0..10 {
        now += ms(1);
        p.on_complete(&done(0, ms(100), ms(90), ms(10), 15, now));
    }
    assert!((p.limit() - 27.0).abs() < 1e-9, "{}", p.limit());
    now += ms(60);
    p.on_complete(&done(0, ms(100), ms(90), ms(10), 15, now));
    assert!((p.limit() - 24.3).abs() < 1e-9, "{}", p.limit());
    assert!(!p.admit(&offer(0, 24, 24, now)));
    assert!(p.admit(&offer(0, 23, 23, now)));
}

/// End to end: a 4 ms stage behind the response-time policy with a 40 ms target,
/// flooded by two producers for 2 s. Requests are refused early (handed back as
/// `Rejected`), and the admitted requests' p90 stays within a small multiple of the
/// target, where without control the queue would hold seconds of work.
#[test]
fn response_time_policy_bounds_p90_of_a_flooded_stage() {
    let rt = Runtime::builder().control_interval(ms(20)).build();
    let mut cfg = ResponseTimeConfig::with_target(ms(40));
    cfg.nreq = 20;
    cfg.timeout = ms(200);
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    let sink = rt
        .stage("slow", move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
            for _ in batch {
                std::thread::sleep(ms(4));
                h.fetch_add(1, Ordering::Relaxed);
            }
        })
        .capacity(100_000)
        .fixed_threads(1)
        .batch(1)
        .admission(ResponseTimePolicy::new(cfg).unwrap())
        .build()
        .unwrap();
    rt.start().unwrap();
    let rejected = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(2);
    let producers: Vec<_> = (0..2)
        .map(|_| {
            let sink = sink.clone();
            let rejected = rejected.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while Instant::now() < end {
                    match sink.try_enqueue_with(i, Meta::new()) {
                        Ok(()) => {}
                        Err(EnqueueError::Rejected(_)) => {
                            rejected.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let snap = rt.snapshot();
    let stage = snap.stage("slow").unwrap();
    let report = rt.shutdown(Duration::from_secs(5));
    assert!(report.drained);
    let rejected = rejected.load(Ordering::Relaxed);
    assert!(
        rejected > 1000,
        "offered ~4000/s to a 250/s stage: rejected {rejected}"
    );
    assert_eq!(
        stage.rejected, rejected,
        "the stage counts what it handed back"
    );
    let p90 = stage.rt_p90_ms.expect("a p90 estimate");
    assert!(
        p90 < 400.0,
        "p90 of admitted requests bounded near the 40 ms target: {p90} ms"
    );
    assert!(stage.admission.as_ref().unwrap().rate.unwrap() < 400.0);
}

/// Requests that a batched stage hands on together (microseconds apart) pass while
/// the rate allows them: the bucket holds `rate * burst` tokens. With the paper's
/// fixed depth of 1 only the first of the batch got in.
#[test]
fn response_time_bucket_lets_a_batch_through_at_its_rate() {
    let now = Instant::now();
    let p = ResponseTimePolicy::with_target(ms(1000));
    let n = (0..10).filter(|_| p.admit(&offer(0, 0, 0, now))).count();
    assert_eq!(n, 10, "a batch of 10 at 100/s with 100 ms of burst");
    let mut fixed = ResponseTimeConfig::with_target(ms(1000));
    fixed.burst = Duration::ZERO;
    let p = ResponseTimePolicy::new(fixed).unwrap();
    let n = (0..10).filter(|_| p.admit(&offer(0, 0, 0, now))).count();
    assert_eq!(n, 1, "the paper's depth of 1");
}

/// A rate cut to the floor climbs back while the stage is idle: each timeout with no
/// samples and nothing admitted in flight counts as a zero sample.
#[test]
fn response_time_rate_recovers_from_the_floor_when_the_stage_is_idle() {
    let mut cfg = ResponseTimeConfig::with_target(ms(100));
    cfg.nreq = 1;
    let p = ResponseTimePolicy::new(cfg).unwrap();
    let t0 = Instant::now();
    let mut now = t0;
    for _ in 0..100 {
        now += ms(1);
        p.on_complete(&done(0, ms(5_000), ms(4_000), ms(100), 1, now));
    }
    assert!(
        (p.state().rate.unwrap() - 0.05).abs() < 1e-9,
        "at the floor"
    );
    // 30 idle seconds, ticked as the controller thread does.
    for _ in 0..30 {
        now += Duration::from_secs(1);
        p.on_tick(now);
    }
    let rate = p.state().rate.unwrap();
    assert!(rate > 20.0, "idle seconds raise the rate: {rate}");
    // Work admitted and not finished is not idleness: the rate holds.
    assert!(p.admit(&offer(0, 0, 0, now)));
    let held = p.state().rate.unwrap();
    for _ in 0..5 {
        now += Duration::from_secs(1);
        p.on_tick(now);
    }
    assert_eq!(p.state().rate.unwrap(), held, "in flight: no idle samples");
}

/// While a stage's admission control is switched off (service degradation), its
/// completions do not drive the policy: switched back on, the policy starts from the
/// state it had, not from a rate cut to the floor by a regime that has passed.
#[test]
fn completions_do_not_feed_a_policy_that_is_switched_off() {
    let rt = Runtime::builder().build();
    let mut cfg = ResponseTimeConfig::with_target(ms(1));
    cfg.nreq = 1;
    cfg.burst = Duration::from_secs(10);
    let sink = rt
        .stage("s", move |batch: Batch<'_, bool>, cx: &Context<'_>| {
            for switch_off in batch {
                if switch_off {
                    cx.set_admission_enabled(false);
                }
                std::thread::sleep(ms(5));
            }
        })
        .fixed_threads(1)
        .batch(1)
        .admission(ResponseTimePolicy::new(cfg).unwrap())
        .build()
        .unwrap();
    rt.start().unwrap();
    sink.try_enqueue(true).unwrap();
    let stage = |rt: &Runtime| rt.snapshot().stage("s").unwrap().clone();
    let until = |what: &str, cond: &dyn Fn(&seda::StageSnapshot) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond(&stage(&rt)) {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(ms(2));
        }
    };
    until("admission switched off", &|s| !s.admission_enabled);
    // Events enqueued while admission is off, each 5x over the 1 ms target; the
    // rate is read once every one has completed.
    for _ in 0..20 {
        sink.try_enqueue(false).unwrap();
    }
    until("all 21 events completed", &|s| s.processed == 21);
    let rate = stage(&rt).admission_rate.unwrap();
    rt.shutdown(Duration::from_secs(5));
    // The switching event itself completed after the switch: at most one cut.
    assert!(rate >= 100.0 / 1.2 - 1e-6, "rate driven while off: {rate}");
}
