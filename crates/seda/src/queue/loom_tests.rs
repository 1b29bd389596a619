//! Models of the queue's protocol: the event count (no lost wake-up), reservation
//! and claim (exactly once, bounded), lifecycle changes racing enqueues (exact
//! accounting), and the shared pool's schedule-token handshake (no stranded event).
//!
//! Under `RUSTFLAGS="--cfg loom" cargo test -p seda --lib --release loom_` each test
//! is explored by loom with a preemption bound of 2. In a normal
//! build the same bodies run as threaded stress tests (many rounds on real threads),
//! so `cargo test` still exercises them.

use std::time::{Duration, Instant};

use super::StageQueue;
use crate::envelope::{Envelope, Meta};
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
        meta: Meta::born_at(Instant::now()),
        enqueued: Instant::now(),
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
            producers.push(thread::spawn(move || match q.reserve(1, false) {
                Ok(()) => {
                    assert!(q.word().waiting() <= 1, "bound exceeded");
                    q.write(env(v));
                    q.workers.notify_one();
                    1usize
                }
                Err(super::Refusal::Full) => 0,
                Err(r) => panic!("unexpected {r:?}"),
            }));
        }
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut got = Vec::new();
                // Runs until told how many to expect (the producers' successes).
                loop {
                    let k = q.claim(4);
                    for _ in 0..k {
                        got.push(q.pop_claimed().0.event);
                    }
                    q.finish(k);
                    if k > 0 || q.word().lifecycle() == Lifecycle::Stopped {
                        if q.word().lifecycle() == Lifecycle::Stopped && q.word().queued() == 0 {
                            return got;
                        }
                        continue;
                    }
                    let key = q.workers.prepare();
                    if q.word().queued() > 0 || q.word().lifecycle() == Lifecycle::Stopped {
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
        while q.word().in_flight() > 0 {
            yield_now();
        }
        q.set_lifecycle(Lifecycle::Stopped);
        let mut got = consumer.join().unwrap();
        got.sort_unstable();
        assert_eq!(got.len(), sent, "received {got:?}, sent {sent}");
        got.dedup();
        assert_eq!(got.len(), sent, "an event ran twice");
        assert_eq!(q.word().in_flight(), 0);
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
            thread::spawn(move || match q.reserve(1, true) {
                Ok(()) => {
                    q.write(env(7));
                    true
                }
                Err(r) => {
                    assert_eq!(r, super::Refusal::Closed);
                    false
                }
            })
        };
        q.set_lifecycle(Lifecycle::Stopped);
        let abandoned = q.abandon().waiting();
        let accepted = p.join().unwrap();
        assert_eq!(abandoned, usize::from(accepted));
        assert_eq!(q.claim(1), 0, "a stopped queue handed out an event");
    });
}

/// The shared pool's handshake: the producer writes, fences, then takes the token
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
                q.reserve(1, false).unwrap();
                q.write(env(1));
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
            let k = q.claim(8);
            for _ in 0..k {
                q.pop_claimed();
            }
            // Hand the token on before running the batch.
            if q.word().queued() > 0 {
                run_queue.fetch_add(1, AcqRel);
            } else {
                scheduled.store(false, Relaxed);
                fence(SeqCst);
                if q.word().queued() > 0 {
                    schedule(&scheduled, &run_queue);
                }
            }
            q.finish(k);
            ran += k;
        }
        producer.join().unwrap();
    });
}
