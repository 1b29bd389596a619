//! Each controller replayed on synthetic traces as a pure function (no threads, no
//! clocks): the laws of SEDA 3.4 and USITS'03 3.4 (the response-time controllers'
//! are in `admission/response_time/tests.rs`).

use std::time::Duration;

use super::*;

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
