use super::*;

const T: Duration = Duration::from_secs(1);

fn offer(class: Class, in_flight: usize, now: Instant) -> Offer {
    Offer {
        class,
        queue_len: in_flight.saturating_sub(1),
        in_flight,
        capacity: 1024,
        now,
    }
}

fn done(svc_ms: u64, rt_ms: u64, in_flight: usize, now: Instant) -> Completion {
    Completion {
        class: 0,
        response_time: Duration::from_millis(rt_ms),
        queue_delay: Duration::ZERO,
        service_time: Duration::from_millis(svc_ms),
        in_flight,
        now,
    }
}

/// A policy that has seen a busy stage: one event leaving every `gap_ms`, each
/// served in `svc_ms`, with response times `rt_ms`. Returns the time after.
fn busy(p: &DelayBudget, t: Instant, n: u32, gap_ms: u64, svc_ms: u64, rt_ms: u64) -> Instant {
    let mut now = t;
    for _ in 0..n {
        now += Duration::from_millis(gap_ms);
        p.on_complete(&done(svc_ms, rt_ms, 10, now));
    }
    now
}

#[test]
fn the_loop_moves_the_budget_to_put_the_p90_at_the_setpoint() {
    let mut l = BudgetLoop::new(DelayBudgetConfig::with_target(T)).unwrap();
    assert!((l.budget() - 0.5).abs() < 1e-9);
    // p90 1.8 s against a setpoint of 0.8 s: down by at most max_step x target.
    assert!((l.step(Duration::from_millis(1800), true) - 0.25).abs() < 1e-9);
    let mut l = BudgetLoop::new(DelayBudgetConfig::with_target(T)).unwrap();
    // p90 1.0 s: down by gain x error = 0.06 s, binding or not.
    assert!((l.step(Duration::from_secs(1), false) - 0.44).abs() < 1e-9);
    // p90 0.6 s, binding in this window only: no growth (the spike just began).
    assert!((l.step(Duration::from_millis(600), true) - 0.44).abs() < 1e-9);
    // Binding twice in a row: up by 0.06 s.
    assert!((l.step(Duration::from_millis(600), true) - 0.5).abs() < 1e-9);
    // A p90 far under the setpoint: up by at most max_step x target.
    assert!((l.step(Duration::from_millis(10), true) - 0.737).abs() < 1e-9);
    for _ in 0..100 {
        l.step(Duration::from_millis(1), true);
    }
    assert!((l.budget() - 1.0).abs() < 1e-9, "clamped at max_budget");
    for _ in 0..100 {
        l.step(Duration::from_secs(100), false);
    }
    assert!((l.budget() - 0.1).abs() < 1e-9, "clamped at min_budget");
}

#[test]
fn the_loop_settles_where_the_unseen_time_leaves_the_p90_at_the_setpoint() {
    // A plant: p90 = budget + 300 ms the prediction does not see (socket, parse).
    let mut l = BudgetLoop::new(DelayBudgetConfig::with_target(T)).unwrap();
    let mut p90 = 0.0;
    for _ in 0..40 {
        p90 = l.budget() + 0.3;
        l.step(Duration::from_secs_f64(p90), true);
    }
    assert!((p90 - 0.8).abs() < 0.01, "p90 {p90}");
    // The prediction off by 1.5x and the p90 two samples late (a request admitted
    // now completes a budget later): still settles, without hitting the floor.
    let mut l = BudgetLoop::new(DelayBudgetConfig::with_target(T)).unwrap();
    let mut budgets = vec![l.budget(); 2];
    let mut seen = Vec::new();
    for _ in 0..60 {
        p90 = 1.5 * budgets[budgets.len() - 3.min(budgets.len())] + 0.1;
        seen.push(p90);
        budgets.push(l.step(Duration::from_secs_f64(p90), true));
    }
    assert!(
        seen[45..].iter().all(|p| (p - 0.8).abs() < 0.05),
        "{seen:?}"
    );
    assert!(budgets.iter().all(|b| *b > 0.1 + 1e-9), "{budgets:?}");
}

#[test]
fn the_departure_rate_is_measured_while_busy_whatever_the_batches() {
    let p = DelayBudget::new(DelayBudgetConfig::with_target(T)).unwrap();
    let t = Instant::now();
    // Batches of 4 leaving together every 100 ms: 25 ms per event.
    let mut now = t;
    for _ in 0..100 {
        now += Duration::from_millis(100);
        for _ in 0..4 {
            p.on_complete(&done(25, 100, 20, now));
        }
    }
    let rate = p.departure_rate().unwrap();
    assert!((rate - 40.0).abs() < 4.0, "{rate}/s");
    // An idle gap (the stage emptied) is not a departure interval.
    p.on_complete(&done(25, 100, 1, now));
    p.on_complete(&done(25, 100, 5, now + Duration::from_secs(10)));
    let after = p.departure_rate().unwrap();
    assert!((after - rate).abs() < 4.0, "{rate}/s -> {after}/s");
}

#[test]
fn refuses_at_the_door_once_the_stage_holds_the_budget() {
    let p = DelayBudget::new(DelayBudgetConfig::with_target(T)).unwrap();
    let t = Instant::now();
    // Nothing known yet: admits a few, to learn, not a crowd.
    assert!(p.admit(&offer(0, 3, t)));
    assert!(!p.admit(&offer(0, 4, t)));
    // 25 ms between departures, 50 ms of service (two at a time).
    let now = busy(&p, t, 40, 25, 50, 100);
    // Budget 0.5 s: (in_flight + 1) x 25 ms <= 0.5 s up to 19 in the stage.
    assert!(p.admit(&offer(0, 18, now)));
    assert!(!p.admit(&offer(0, 20, now)), "21 x 25 ms > 0.5 s");
    // An idle stage always admits.
    assert!(p.admit(&offer(0, 0, now)));
}

#[test]
fn a_stage_with_idle_threads_is_never_starved_by_a_small_budget() {
    let p = DelayBudget::new(DelayBudgetConfig::with_target(T)).unwrap();
    let t = Instant::now();
    // 200 ms of service, 10 ms between departures (twenty at a time); p90 far over
    // target drives the budget to its floor, 100 ms.
    let now = busy(&p, t, 400, 10, 200, 5000);
    assert!((p.state().limit.unwrap() - 100.0).abs() < 1e-6);
    // 15 in the stage: the new one starts at once (16 x 10 ms <= 200 ms): admitted.
    assert!(p.admit(&offer(0, 15, now)));
    // 20 in the stage: it would wait, 210 ms > 200 ms > 100 ms.
    assert!(!p.admit(&offer(0, 20, now)));
}

#[test]
fn a_higher_class_halves_the_lower_class_budget_and_borrows_the_room_freed() {
    let p = DelayBudget::new(DelayBudgetConfig::with_target(T)).unwrap();
    let t = Instant::now();
    let now = busy(&p, t, 40, 25, 25, 100);
    // 12 in the stage: 325 ms, fine for class 0 alone; 20: 525 ms, over 0.5 s.
    assert!(p.admit(&offer(0, 12, now)));
    assert!(!p.admit(&offer(0, 20, now)));
    // The high class arrives while the stage holds the low class's whole budget: it
    // gets the budget plus the half the low class loses, 0.75 s.
    assert!(p.admit(&offer(1, 20, now)), "the high class arrives");
    assert!(p.admit(&offer(1, 28, now)), "29 x 25 ms <= 0.75 s");
    assert!(!p.admit(&offer(1, 30, now)), "31 x 25 ms > 0.75 s");
    assert!(
        !p.admit(&offer(0, 12, now)),
        "325 ms > half of 0.5 s: the low class is cut first"
    );
    assert!(p.admit(&offer(0, 8, now)), "225 ms: under its half");
    let st = p.state();
    let budgets: Vec<f64> = st.classes.iter().map(|c| c.target_ms).collect();
    assert!((budgets[0] - 250.0).abs() < 1e-6 && (budgets[1] - 750.0).abs() < 1e-6);
    let later = now + Duration::from_secs(3);
    assert!(
        p.admit(&offer(0, 12, later)),
        "the high class left: the low class has the whole budget again"
    );
    assert!(!p.admit(&offer(0, 20, later)));
    // A class alone, however high, gets the budget without a loan.
    let alone = later + Duration::from_secs(3);
    assert!(!p.admit(&offer(1, 20, alone)));
    assert_eq!(p.state().policy, "delay-budget");
    assert_eq!(p.state().target_ms, Some(1000.0));
}

#[test]
fn slow_completions_shrink_the_budget_and_the_admitted_stage() {
    let mut cfg = DelayBudgetConfig::with_target(T);
    cfg.nreq = 10;
    let p = DelayBudget::new(cfg).unwrap();
    let t = Instant::now();
    let before = p.state().limit.unwrap();
    let now = busy(&p, t, 50, 25, 25, 3000);
    let after = p.state().limit.unwrap();
    assert!(after < before * 0.5, "{before} -> {after}");
    assert_eq!(p.state().p90_ms, Some(3000.0));
    // 8 in the stage: 225 ms, over the shrunk budget.
    assert!(!p.admit(&offer(0, 8, now)));
}

#[test]
fn light_load_does_not_wind_the_budget_up_before_a_spike() {
    // Regression (first run of issue 14's experiment): 3 users for 10 s gave p90
    // samples far below the target; the budget grew to its maximum, and the spike's
    // first seconds queued 4 s of work for a 1 s target.
    let mut cfg = DelayBudgetConfig::with_target(T);
    cfg.nreq = 5;
    let p = DelayBudget::new(cfg).unwrap();
    let mut now = Instant::now();
    for _ in 0..200 {
        now += Duration::from_millis(40);
        assert!(p.admit(&offer(0, 1, now)));
        p.on_complete(&done(40, 40, 1, now));
    }
    let b = p.state().limit.unwrap();
    assert!(
        (b - 500.0).abs() < 1e-6,
        "budget stayed at its start: {b} ms"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let base = DelayBudgetConfig::with_target(T);
    let bad: [fn(&mut DelayBudgetConfig); 6] = [
        |c| c.target = Duration::ZERO,
        |c| c.setpoint = 1.5,
        |c| c.gain = 0.0,
        |c| c.max_step = 0.0,
        |c| c.lower_share = 0.0,
        |c| c.initial_budget = 10.0,
    ];
    for f in bad {
        let mut c = base.clone();
        f(&mut c);
        assert!(DelayBudget::new(c).is_err());
    }
    assert!(DelayBudget::new(base).is_ok());
}
