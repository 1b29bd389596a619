//! Models of the queue's protocol: the event count (no lost wake-up), the ring's
//! push and batch claim (exactly once, bounded, held counts never undercount), the
//! closed mark racing enqueues (exact accounting), the shared pool's schedule-token
//! handshake (no stranded event), and the color table's park/hand-over (never two
//! events of a color at once, in ticket order).
//!
//! Under `RUSTFLAGS="--cfg loom" cargo test -p seda --lib --release loom_` each test
//! is explored by loom with a preemption bound of 2. In a normal
//! build the same bodies run as threaded stress tests (many rounds on real threads),
//! so `cargo test` still exercises them.

use std::time::Duration;

use super::{Refusal, StageQueue};
use crate::color::ColorTable;
use crate::envelope::{Color, Envelope, Meta};
use crate::lifecycle::Lifecycle;
use crate::loom::{AtomicBool, AtomicUsize, Ordering::*, fence};

#[cfg(loom)]
use loom::{sync::Arc, thread};
#[cfg(not(loom))]
use std::{sync::Arc, thread};

#[cfg(loom)]
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

#[cfg(not(loom))]
fn model(f: impl Fn() + Sync + Send + 'static) {
    for _ in 0..300 {
        f();
    }
}

fn yield_now() {
    thread::yield_now();
}

fn env(v: u32) -> Envelope<u32> {
    Envelope {
        event: v,
        meta: Meta::born_ns(1),
        enqueued: 1,
        ticket: 0,
    }
}

/// A long timeout: loom does not model timeouts (a lost wake-up is a deadlock it
/// reports); real threads would sleep this long only after a lost wake-up.
const FOREVER: Duration = Duration::from_secs(60);

#[test]
fn loom_event_count_has_no_lost_wake_up() {
    model(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let ec = Arc::new(super::EventCount::new());
        let (f2, e2) = (Arc::clone(&flag), Arc::clone(&ec));
        let t = thread::spawn(move || {
            f2.store(true, Relaxed);
            e2.notify_one();
        });
        loop {
            if flag.load(Relaxed) {
                break;
            }
            let key = ec.prepare();
            if flag.load(Relaxed) {
                ec.cancel();
                break;
            }
            ec.wait(key, FOREVER);
        }
        t.join().unwrap();
    });
}

/// Two producers, one sleeping consumer, capacity 1: every event is received once,
/// a refused one is handed back, the bound holds, the counts return to zero.
#[test]
fn loom_queue_is_exactly_once_and_bounded() {
    model(|| {
        let q = Arc::new(StageQueue::<u32>::new(1));
        q.set_lifecycle(Lifecycle::Running);
        let mut producers = Vec::new();
        for v in 1..=2u32 {
            let q = Arc::clone(&q);
            producers.push(thread::spawn(move || match q.push(env(v), false) {
                Ok(()) => {
                    assert!(q.waiting() <= 1, "bound exceeded");
                    q.workers.notify_one();
                    1usize
                }
                Err(Refusal::Full(e)) => {
                    assert_eq!(e.event, v, "the refused event comes back");
                    0
                }
                Err(Refusal::Closed(_)) => panic!("closed while running"),
            }));
        }
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let k = q.claim(4, |e, _| got.push(e.event));
                    q.finish(k);
                    if q.lifecycle() == Lifecycle::Stopped {
                        return got;
                    }
                    if k > 0 {
                        continue;
                    }
                    let key = q.workers.prepare();
                    if q.has_work() || q.lifecycle() == Lifecycle::Stopped {
                        q.workers.cancel();
                        continue;
                    }
                    q.workers.wait(key, FOREVER);
                }
            })
        };
        let sent: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        assert!(sent >= 1, "an empty queue of capacity 1 took nothing");
        // Draining keeps claims going; stop once everything sent was claimed.
        q.set_lifecycle(Lifecycle::Draining);
        while q.in_flight() > 0 {
            yield_now();
        }
        q.set_lifecycle(Lifecycle::Stopped);
        let mut got = consumer.join().unwrap();
        got.sort_unstable();
        assert_eq!(got.len(), sent, "received {got:?}, sent {sent}");
        got.dedup();
        assert_eq!(got.len(), sent, "an event ran twice");
        assert_eq!(q.in_flight(), 0);
    });
}

/// A batch claim racing two pushes: the claimed events and the ones left add up to
/// what was pushed, and `in_flight` (held + waiting) never reads below the events
/// still unfinished.
#[test]
fn loom_batch_claim_never_undercounts() {
    model(|| {
        let q = Arc::new(StageQueue::<u32>::new(2));
        q.set_lifecycle(Lifecycle::Running);
        let pushed = Arc::new(AtomicUsize::new(0));
        let mut producers = Vec::new();
        for v in 1..=2u32 {
            let (q, pushed) = (Arc::clone(&q), Arc::clone(&pushed));
            producers.push(thread::spawn(move || {
                if q.push(env(v), false).is_ok() {
                    pushed.fetch_add(1, SeqCst);
                }
            }));
        }
        let mut got = 0;
        let k = q.claim(2, |_, _| got += 1);
        // While the claimed events are unfinished, the stage counts them.
        assert!(q.in_flight() >= k, "in_flight {} < held {k}", q.in_flight());
        q.finish(k);
        for p in producers {
            p.join().unwrap();
        }
        let rest = q.claim(2, |_, _| got += 1);
        q.finish(rest);
        assert_eq!(got, pushed.load(SeqCst));
        assert_eq!(q.in_flight(), 0);
    });
}

/// An enqueue racing `Stopped`: either refused (handed back) or counted by the
/// shutdown's abandon, never both, never neither.
#[test]
fn loom_stop_racing_an_enqueue_is_counted_exactly() {
    model(|| {
        let q = Arc::new(StageQueue::<u32>::new(2));
        q.set_lifecycle(Lifecycle::Draining);
        let p = {
            let q = Arc::clone(&q);
            thread::spawn(move || match q.push(env(7), true) {
                Ok(()) => true,
                Err(Refusal::Closed(e)) => {
                    assert_eq!(e.event, 7);
                    false
                }
                Err(Refusal::Full(_)) => panic!("capacity 2 full with one event"),
            })
        };
        q.set_lifecycle(Lifecycle::Stopped);
        let (abandoned, _) = q.abandon();
        let accepted = p.join().unwrap();
        assert_eq!(abandoned, usize::from(accepted));
        assert_eq!(
            q.claim(1, |_, _| ()),
            0,
            "a stopped queue handed out an event"
        );
    });
}

/// The shared pool's handshake: the producer pushes, fences, then takes the token
/// if it is free; the worker gives the token up, fences, re-checks. The event must
/// be run (no stranded event), and the stage is never scheduled twice at once.
#[test]
fn loom_schedule_token_strands_no_event() {
    model(|| {
        let q = Arc::new(StageQueue::<u32>::new(4));
        q.set_lifecycle(Lifecycle::Running);
        let scheduled = Arc::new(AtomicBool::new(true)); // a worker holds it now
        let run_queue = Arc::new(AtomicUsize::new(1));
        let schedule = |s: &AtomicBool, rq: &AtomicUsize| {
            if !s.load(Relaxed) && !s.swap(true, AcqRel) {
                let before = rq.fetch_add(1, AcqRel);
                assert_eq!(before, 0, "stage scheduled twice");
            }
        };
        let producer = {
            let (q, s, rq) = (
                Arc::clone(&q),
                Arc::clone(&scheduled),
                Arc::clone(&run_queue),
            );
            thread::spawn(move || {
                q.push(env(1), false).unwrap();
                fence(SeqCst);
                schedule(&s, &rq);
            })
        };
        let mut ran = 0;
        while ran < 1 {
            if run_queue.load(Acquire) == 0 {
                yield_now();
                continue;
            }
            run_queue.fetch_sub(1, AcqRel);
            let k = q.claim(8, |_, _| ());
            // Hand the token on before running the batch.
            if q.has_work() {
                run_queue.fetch_add(1, AcqRel);
            } else {
                scheduled.store(false, Relaxed);
                fence(SeqCst);
                if q.has_work() {
                    schedule(&scheduled, &run_queue);
                }
            }
            q.finish(k);
            ran += k;
        }
        producer.join().unwrap();
    });
}

/// Two events of one color claimed by two workers in either order: the later
/// ticket parks and is handed the color when the earlier one releases it; never
/// both at once, and the earlier ticket always runs first.
#[test]
fn loom_color_hand_over_keeps_order_and_exclusion() {
    model(|| {
        let table = Arc::new(ColorTable::new());
        let c = Color::new(9);
        let (t0, t1) = (table.ticket(c), table.ticket(c));
        let running = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(AtomicUsize::new(0));
        fn run(table: &ColorTable, running: &AtomicUsize, order: &AtomicUsize, c: Color, t: u32) {
            assert_eq!(
                running.fetch_add(1, SeqCst),
                0,
                "two events of a color at once"
            );
            assert_eq!(
                order.fetch_add(1, SeqCst),
                t as usize,
                "out of ticket order"
            );
            running.fetch_sub(1, SeqCst);
            table.release(c, t);
        }
        let handed = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = [t1, t0]
            .into_iter()
            .map(|t| {
                let (table, running, order, handed) = (
                    Arc::clone(&table),
                    Arc::clone(&running),
                    Arc::clone(&order),
                    Arc::clone(&handed),
                );
                thread::spawn(move || {
                    let h = Arc::clone(&handed);
                    let got =
                        table.acquire(c, t, (), move |()| Box::new(move || h.store(true, SeqCst)));
                    if got.is_ok() {
                        run(&table, &running, &order, c, t);
                        false
                    } else {
                        true
                    }
                })
            })
            .collect();
        let parked: Vec<bool> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        // Whoever parked was handed the color by the other's release: run it now.
        if parked.iter().any(|p| *p) {
            assert!(
                handed.load(SeqCst),
                "a parked ticket was never handed the color"
            );
            run(&table, &running, &order, c, t1);
        }
        assert_eq!(order.load(SeqCst), 2);
        assert_eq!(table.try_take(c), Some(2), "the color is idle again");
    });
}

/// The common path (`turn`: one load) against the slow one: a batch that holds
/// tickets 0 and 1 of a color (run as one batch, released at once with
/// `release_slot`) races a worker that looks at ticket 2's turn, finds it not come
/// and parks it, and an admission that draws ticket 3 meanwhile. Ticket 2 either
/// finds its turn on the locked look or is handed the slot by the release, exactly
/// once; ticket 3 is served only after 2 is released; the slot ends idle with
/// `PARKED` clear (an inline take succeeds).
#[test]
fn loom_color_batch_release_races_a_parker() {
    model(|| {
        let table = Arc::new(ColorTable::new());
        let c = Color::new(3);
        let s = ColorTable::slot_of(c);
        let (t0, t1, t2) = (table.ticket(c), table.ticket(c), table.ticket(c));
        assert!(table.turn(s, t0));
        let handed = Arc::new(AtomicUsize::new(0));
        let releaser = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.release_slot(s, t1))
        };
        let admit = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.ticket(c))
        };
        let h = Arc::clone(&handed);
        let ran_now = if table.turn(s, t2) {
            true
        } else {
            table
                .park(s, t2, (), move |()| {
                    Box::new(move || {
                        h.fetch_add(1, SeqCst);
                    })
                })
                .is_ok()
        };
        releaser.join().unwrap();
        let t3 = admit.join().unwrap();
        assert_eq!(t3, 3, "tickets are drawn in order");
        let handed = handed.load(SeqCst);
        assert_eq!(
            usize::from(ran_now) + handed,
            1,
            "ticket 2 runs exactly once"
        );
        assert!(table.turn(s, t2), "ticket 2 owns the slot");
        assert!(!table.turn(s, t3), "ticket 3 waits for 2's release");
        table.release_slot(s, t2);
        assert!(table.turn(s, t3));
        table.release_slot(s, t3);
        assert_eq!(table.try_take(c), Some(4), "idle, nothing left parked");
    });
}
