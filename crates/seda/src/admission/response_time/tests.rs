//! The response-time controllers replayed on synthetic traces as pure functions (no
//! threads, no clocks): the laws of USITS'03 3.2-3.3.

use std::time::{Duration, Instant};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
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
