//! Each controller replayed on synthetic traces as a pure function (no threads, no
//! clocks): the laws of SEDA 3.4 and USITS'03 3.2-3.4.

use std::time::{Duration, Instant};

use seda::control::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------- thread pool (Fig. 8)

#[test]
fn thread_pool_grows_one_per_sample_to_max_then_shrinks_idle_threads_to_min() {
    let cfg = ThreadPoolConfig {
        min_threads: 1,
        max_threads: 4,
        queue_threshold: 10,
        ..Default::default()
    };
    cfg.validate().unwrap();
    let mut ctl = ThreadPoolController::new(cfg);
    let mut threads = 1;
    let mut trace = Vec::new();
    // A burst: the queue stays above the threshold for 6 samples.
    for _ in 0..6 {
        let adj = ctl.step(PoolObservation {
            queue_len: 50,
            threads,
            idle_expired: 0,
        });
        if let PoolAdjustment::Grow(n) = adj {
            threads += n;
        }
        trace.push(threads);
    }
    assert_eq!(
        trace,
        [2, 3, 4, 4, 4, 4],
        "one thread per sample, capped at max"
    );
    // Queue at the threshold exactly: hold.
    assert_eq!(
        ctl.step(PoolObservation {
            queue_len: 10,
            threads,
            idle_expired: 0
        }),
        PoolAdjustment::Hold
    );
    // Load gone: idle threads retire, never below min.
    assert_eq!(
        ctl.step(PoolObservation {
            queue_len: 0,
            threads,
            idle_expired: 2
        }),
        PoolAdjustment::Shrink(2)
    );
    threads -= 2;
    assert_eq!(
        ctl.step(PoolObservation {
            queue_len: 0,
            threads,
            idle_expired: 5
        }),
        PoolAdjustment::Shrink(1)
    );
    threads -= 1;
    assert_eq!(threads, 1);
    assert_eq!(
        ctl.step(PoolObservation {
            queue_len: 0,
            threads,
            idle_expired: 1
        }),
        PoolAdjustment::Hold
    );
    // A pool that lost threads is brought back to min.
    assert_eq!(
        ctl.step(PoolObservation {
            queue_len: 0,
            threads: 0,
            idle_expired: 0
        }),
        PoolAdjustment::Grow(1)
    );
}

#[test]
fn thread_pool_config_rejects_nonsense() {
    assert!(ThreadPoolConfig::bounded(0, 4).validate().is_err());
    assert!(ThreadPoolConfig::bounded(5, 4).validate().is_err());
    let e = ThreadPoolConfig {
        interval: Duration::ZERO,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("interval"), "{e}");
    assert_eq!(ThreadPoolConfig::default().queue_threshold, 1000);
    assert_eq!(ThreadPoolConfig::default().max_threads, 20);
}

// ---------------------------------------------------------------- batching (Fig. 9)

fn obs(rate: u64) -> BatchObservation {
    BatchObservation {
        processed: rate / 4,
        elapsed: ms(250),
    }
}

#[test]
fn batching_shrinks_while_throughput_holds_and_stays_in_bounds() {
    let mut ctl = BatchingController::new(BatchingConfig::bounded(2, 64)).unwrap();
    assert_eq!(ctl.batch_size(), 64, "starts at max");
    let mut sizes = vec![];
    for _ in 0..60 {
        sizes.push(ctl.step(obs(100_000)));
    }
    assert!(
        sizes.windows(2).all(|w| w[1] <= w[0]),
        "monotone shrink under steady rate: {sizes:?}"
    );
    assert_eq!(*sizes.last().unwrap(), 2, "reaches min_batch: {sizes:?}");
}

#[test]
fn batching_grows_a_little_when_throughput_degrades() {
    let mut ctl = BatchingController::new(BatchingConfig::bounded(1, 64)).unwrap();
    for _ in 0..20 {
        ctl.step(obs(100_000));
    }
    let small = ctl.batch_size();
    // Throughput sags by 20% (not a sudden drop): the factor grows by a small step.
    let after = ctl.step(obs(80_000));
    assert!(after > small && after <= small + 2, "{small} -> {after}");
    assert!(after < 64, "a sag is not a reset");
}

#[test]
fn batching_resets_to_max_after_a_sudden_rate_drop() {
    let mut ctl = BatchingController::new(BatchingConfig::bounded(1, 64)).unwrap();
    for _ in 0..30 {
        ctl.step(obs(100_000));
    }
    assert!(ctl.batch_size() < 8, "shrunk first: {}", ctl.batch_size());
    let after = ctl.step(obs(10_000));
    assert_eq!(after, 64, "sudden drop resets to the maximum");
    // And it starts shrinking again at the new level.
    let next = ctl.step(obs(10_000));
    assert!(next <= 64);
    assert!(ctl.step(obs(10_000)) < 64);
}

#[test]
fn batching_config_is_validated() {
    assert!(BatchingController::new(BatchingConfig::bounded(0, 4)).is_err());
    assert!(BatchingController::new(BatchingConfig::bounded(8, 4)).is_err());
    let e = BatchingController::new(BatchingConfig {
        decrease: 1.5,
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("decrease"));
}

// ---------------------------------------------------------------- response time (USITS 3.2)

#[test]
fn p90_window_takes_the_ninetieth_sample_at_nreq_or_timeout() {
    let t0 = Instant::now();
    let mut w = P90Window::new(100, Duration::from_secs(1), t0);
    let mut out = None;
    for i in 1..=100 {
        out = w.push(ms(i), t0);
        if i < 100 {
            assert!(out.is_none());
        }
    }
    assert_eq!(out, Some(ms(90)), "0.9 * nreq -th sorted sample");
    assert!(w.is_empty());
    // Fewer samples: evaluated at the timeout only.
    for i in 1..=10 {
        assert!(w.push(ms(i * 10), t0).is_none());
    }
    assert_eq!(w.tick(t0 + ms(500)), None);
    assert_eq!(w.tick(t0 + ms(1000)), Some(ms(90)));
    // Empty window at timeout: nothing to evaluate.
    assert_eq!(w.tick(t0 + ms(3000)), None);
}

#[test]
fn response_time_controller_cuts_multiplicatively_above_target_and_adds_below_err_i() {
    let cfg = ResponseTimeConfig::with_target(ms(1000));
    assert_eq!(
        (
            cfg.nreq, cfg.alpha, cfg.adj_d, cfg.adj_i, cfg.err_i, cfg.c_i
        ),
        (100, 0.7, 1.2, 2.0, -0.5, -0.1)
    );
    let mut ctl = ResponseTimeController::new(cfg).unwrap();
    assert_eq!(ctl.rate(), 100.0);
    // p90 at 3x the target for 10 evaluations: each one divides the rate by 1.2.
    let mut rates = vec![];
    for _ in 0..10 {
        match ctl.update(ms(3000)) {
            RateChange::Decreased(r) => rates.push(r),
            other => panic!("expected a decrease, got {other:?}"),
        }
    }
    for (i, r) in rates.iter().enumerate() {
        let want = 100.0 / 1.2f64.powi(i as i32 + 1);
        assert!((r - want).abs() < 1e-9, "step {i}: {r} vs {want}");
    }
    // Response times fall to 10% of the target. The EWMA (alpha 0.7) needs a few
    // evaluations to bring err below err_i = -0.5; until then the rate holds or keeps
    // falling, after that it rises by -(err - c_i) * adj_i each time.
    let mut last = ctl.rate();
    let mut increased = 0;
    for _ in 0..30 {
        let before = ctl.rate();
        let err_before_update = ctl.error().unwrap();
        let change = ctl.update(ms(100));
        let err = ctl.error().unwrap();
        match change {
            RateChange::Increased(r) => {
                assert!(err < -0.5, "increase only below err_i (err {err})");
                let want = before - (err - (-0.1)) * 2.0;
                assert!(
                    (r - want).abs() < 1e-9,
                    "additive step {before} -> {r}, want {want}"
                );
                increased += 1;
            }
            RateChange::Held(_) => assert!((-0.5..=0.0).contains(&err), "dead band (err {err})"),
            RateChange::Decreased(_) => assert!(err > 0.0 && err_before_update > 0.0),
        }
        last = ctl.rate();
    }
    assert!(
        increased >= 20,
        "rate climbs additively once under err_i ({increased})"
    );
    assert!(last > rates[9], "rate recovered: {last}");
    // The estimate is smoothed: one spike does not swing it to the spike.
    let before = ctl.estimate().unwrap();
    ctl.update(ms(10_000));
    let after = ctl.estimate().unwrap();
    let want = 0.7 * before.as_secs_f64() + 0.3 * 10.0;
    assert!((after.as_secs_f64() - want).abs() < 1e-9);
}

#[test]
fn response_time_rate_is_clamped() {
    let mut ctl = ResponseTimeController::new(ResponseTimeConfig::with_target(ms(100))).unwrap();
    for _ in 0..200 {
        ctl.update(ms(10_000));
    }
    assert_eq!(ctl.rate(), 0.05, "floor at rate_min");
    for _ in 0..5000 {
        ctl.update(ms(1));
    }
    assert_eq!(ctl.rate(), 5000.0, "ceiling at rate_max");
}

#[test]
fn response_time_config_is_validated() {
    let mut c = ResponseTimeConfig::with_target(Duration::ZERO);
    assert!(ResponseTimeController::new(c.clone()).is_err());
    c.target = ms(10);
    c.adj_d = 0.9;
    assert!(
        ResponseTimeController::new(c)
            .unwrap_err()
            .to_string()
            .contains("adj_d")
    );
}

// ---------------------------------------------------------------- multiclass (USITS 3.3)

#[test]
fn multiclass_cuts_lower_classes_first_then_counts_to_lc_thresh() {
    let cfg = MulticlassConfig::with_target(ms(1000));
    assert_eq!((cfg.adjlo_d, cfg.lc_thresh), (10.0, 20));
    let mut ctl = MulticlassController::new(cfg).unwrap();
    ctl.add_class(0);
    ctl.add_class(1);
    // The high class is over target: the low class is cut by 10 each time, the high
    // class keeps its rate.
    for i in 1..=4 {
        let change = ctl.update(1, ms(3000));
        assert_eq!(
            change,
            RateChange::Held(100.0),
            "high class untouched at round {i}"
        );
        let want = (100.0 / 10f64.powi(i)).max(0.05);
        assert!(
            (ctl.rate(0) - want).abs() < 1e-9,
            "low class {} vs {want}",
            ctl.rate(0)
        );
        assert!(ctl.is_flagged(0));
    }
    assert_eq!(ctl.rate(0), 0.05, "low class at rate_min");
    // Now all lower classes are at the floor: lc counts up to 20 before the high class
    // is cut by adj_d.
    for i in 1..20 {
        assert_eq!(
            ctl.update(1, ms(3000)),
            RateChange::Held(100.0),
            "round {i} below lc_thresh"
        );
    }
    match ctl.update(1, ms(3000)) {
        RateChange::Decreased(r) => assert!((r - 100.0 / 1.2).abs() < 1e-9),
        other => panic!("expected the high class cut at lc_thresh, got {other:?}"),
    }
}

#[test]
fn multiclass_flag_blocks_one_increase_of_lower_classes() {
    let mut ctl = MulticlassController::new(MulticlassConfig::with_target(ms(1000))).unwrap();
    ctl.add_class(0);
    ctl.add_class(1);
    ctl.update(1, ms(2000)); // high over target: low cut to 10 and flagged
    assert!((ctl.rate(0) - 10.0).abs() < 1e-9);
    // Low class well under target, but flagged: no increase this round.
    assert_eq!(ctl.update(0, ms(10)), RateChange::Held(10.0));
    assert!(!ctl.is_flagged(0));
    // Next round it may rise.
    assert!(matches!(ctl.update(0, ms(10)), RateChange::Increased(_)));
}

#[test]
fn multiclass_lowest_class_alone_behaves_like_the_single_controller() {
    let mut ctl = MulticlassController::new(MulticlassConfig::with_target(ms(100))).unwrap();
    let mut single = ResponseTimeController::new(ResponseTimeConfig::with_target(ms(100))).unwrap();
    for s in [300, 300, 250, 40, 10, 10, 10, 500, 20] {
        let a = ctl.update(0, ms(s));
        let b = single.update(ms(s));
        assert_eq!(a, b, "sample {s}");
    }
}

#[test]
fn multiclass_per_class_targets() {
    let cfg = MulticlassConfig::with_target(ms(1000)).class_target(1, ms(100));
    let mut ctl = MulticlassController::new(cfg).unwrap();
    assert_eq!(ctl.target(1), ms(100));
    assert_eq!(ctl.target(0), ms(1000));
    ctl.add_class(0);
    // 500 ms: under class 0's target, over class 1's.
    assert!(matches!(ctl.update(0, ms(100)), RateChange::Increased(_)));
    ctl.update(1, ms(500));
    assert!(
        ctl.rate(0) < 100.0,
        "class 1 over its own target cuts class 0"
    );
}

// ---------------------------------------------------------------- degradation (USITS 3.4)

#[test]
fn quality_degrades_before_admission_control_and_recovers_slowly() {
    let mut cfg = QualityConfig::with_target(ms(100));
    cfg.reenable_after = Some(3);
    let mut q = QualityController::new(cfg).unwrap();
    assert_eq!(
        q.decision(),
        QualityDecision {
            quality: 1.0,
            admission: false
        }
    );
    let mut steps = vec![];
    // Overload: quality falls multiplicatively to the floor, admission still off.
    loop {
        let d = q.step(Some(ms(400)));
        steps.push(d);
        if d.quality <= 0.05 {
            break;
        }
        assert!(!d.admission, "no rejection while quality can still drop");
        assert!(steps.len() < 50);
    }
    assert!(steps.windows(2).all(|w| w[1].quality < w[0].quality));
    // At the floor and still over target: admission comes on after 3 samples.
    assert!(!q.step(Some(ms(400))).admission);
    assert!(!q.step(Some(ms(400))).admission);
    assert!(
        q.step(Some(ms(400))).admission,
        "re-enabled at the lowest quality"
    );
    // Inside the dead band: hold.
    let hold = q.step(Some(ms(90)));
    assert_eq!(hold.quality, 0.05);
    // Well under target: quality rises by the small additive step; admission control
    // stays on (hysteresis) while quality climbs back.
    let up = q.step(Some(ms(10)));
    assert!((up.quality - 0.07).abs() < 1e-9, "{up:?}");
    assert!(up.admission, "still on while quality recovers");
    // No estimate: no change.
    assert_eq!(q.step(None), up);
    // Back at full quality (0.07 + 47 x 0.02 >= 1): admission control off again.
    let mut last = up;
    for _ in 0..60 {
        last = q.step(Some(ms(10)));
        if !last.admission {
            break;
        }
        assert!(last.quality < 1.0, "on until full quality: {last:?}");
    }
    assert_eq!(
        last,
        QualityDecision {
            quality: 1.0,
            admission: false
        }
    );
}

#[test]
fn quality_alone_never_touches_admission() {
    let mut cfg = QualityConfig::with_target(ms(100));
    cfg.reenable_after = None;
    let mut q = QualityController::new(cfg).unwrap();
    for _ in 0..100 {
        assert!(!q.step(Some(ms(10_000))).admission);
    }
    assert_eq!(q.decision().quality, 0.05);
}

#[test]
fn quality_under_admission_control_falls_while_the_stage_refuses_and_never_switches_it() {
    let mut cfg = QualityConfig::with_target(ms(100));
    cfg.with_admission = true;
    let mut q = QualityController::new(cfg).unwrap();
    assert_eq!(
        q.decision(),
        QualityDecision {
            quality: 1.0,
            admission: true
        },
        "admission control on from the start"
    );
    // The p90 is held under target by admission control, but it refuses: overload.
    let d = q.step_refusing(Some(ms(60)), true);
    assert!((d.quality - 0.8).abs() < 1e-9, "{d:?}");
    // No refusal, p90 well under target: quality climbs back.
    let d = q.step_refusing(Some(ms(60)), false);
    assert!((d.quality - 0.82).abs() < 1e-9, "{d:?}");
    // No refusal, p90 over target: still down.
    let d = q.step_refusing(Some(ms(150)), false);
    assert!(d.quality < 0.82);
    // Inside the dead band without refusals: hold.
    let held = q.step_refusing(Some(ms(90)), false);
    assert_eq!(held.quality, d.quality);
    // Admission control stays on whatever happens.
    for i in 0..200 {
        let d = q.step_refusing(Some(ms(10)), i % 7 == 0);
        assert!(d.admission);
        assert!((0.05..=1.0).contains(&d.quality));
    }
    for _ in 0..50 {
        q.step_refusing(Some(ms(10)), false);
    }
    assert_eq!(q.decision().quality, 1.0, "full quality once refusals stop");
}
