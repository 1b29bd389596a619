//! A stage that sheds load under a response-time target (USITS'03 3.2).
//!
//! `cargo run --release -p seda --example shed [-- TARGET_MS]`
//!
//! One "bottleneck" stage spends 5 ms per request on a single thread (200 requests/s
//! at most). A client offers 50 requests/s for 2 s, then a spike of 500 requests/s
//! for 3 s, then 50/s again for 3 s. The stage's queue is guarded by the response-time
//! controller with a 90th-percentile target (default 50 ms). Every 500 ms the example
//! prints offered/admitted/rejected requests, the controller's token rate and its p90
//! estimate; at the end, the p90 of admitted requests with and without the controller
//! on the same schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::admission::{ResponseTimeConfig, ResponseTimePolicy, Unbounded};
use seda::{Batch, Context, EnqueueError, Runtime};

const PHASES: [(u64, u64); 3] = [(2, 50), (3, 500), (3, 50)];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target_ms: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("TARGET_MS must be a number of milliseconds, got {a:?}"))?,
        None => 50,
    };
    println!("== with the response-time controller, p90 target {target_ms} ms");
    let controlled = run(Some(Duration::from_millis(target_ms)))?;
    println!("\n== without admission control (unbounded queue)");
    let uncontrolled = run(None)?;
    println!("\n                  admitted  rejected  p90 of admitted (ms)  max (ms)");
    for (name, r) in [("controlled", controlled), ("uncontrolled", uncontrolled)] {
        println!(
            "{name:<16} {:>9} {:>9} {:>21.1} {:>9.1}",
            r.admitted, r.rejected, r.p90_ms, r.max_ms
        );
    }
    Ok(())
}

struct Outcome {
    admitted: u64,
    rejected: u64,
    p90_ms: f64,
    max_ms: f64,
}

fn run(target: Option<Duration>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let rt = Runtime::builder()
        .control_interval(Duration::from_millis(50))
        .build();
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let lat = latencies.clone();
    let builder = rt
        .stage(
            "bottleneck",
            move |batch: Batch<'_, Instant>, _cx: &Context<'_>| {
                for sent in batch {
                    let spin = Instant::now();
                    while spin.elapsed() < Duration::from_millis(5) {
                        std::hint::spin_loop();
                    }
                    lat.lock().push(sent.elapsed().as_secs_f64() * 1000.0);
                }
            },
        )
        .capacity(1_000_000)
        .fixed_threads(1)
        .batch(1);
    let sink = match target {
        Some(t) => {
            let mut cfg = ResponseTimeConfig::with_target(t);
            cfg.nreq = 20;
            cfg.timeout = Duration::from_millis(250);
            builder.admission(ResponseTimePolicy::new(cfg)?).build()?
        }
        None => builder.admission(Unbounded).build()?,
    };
    rt.start()?;
    let (admitted, rejected) = (AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    let mut next_report = start + Duration::from_millis(500);
    let mut phase_start = start;
    let (mut last_adm, mut last_rej) = (0, 0);
    println!("   t  offered/s  admitted  rejected  rate/s  p90 est (ms)  queue");
    for (secs, per_sec) in PHASES {
        let gap = Duration::from_secs(1) / per_sec as u32;
        let phase_end = phase_start + Duration::from_secs(secs);
        let mut next = phase_start;
        while next < phase_end {
            let now = Instant::now();
            if now < next {
                std::thread::sleep(next - now);
            }
            match sink.try_enqueue(Instant::now()) {
                Ok(()) => admitted.fetch_add(1, Ordering::Relaxed),
                Err(EnqueueError::Rejected(_) | EnqueueError::Full(_)) => {
                    rejected.fetch_add(1, Ordering::Relaxed)
                }
                Err(e) => return Err(format!("enqueue failed: {e}").into()),
            };
            next += gap;
            if Instant::now() >= next_report {
                next_report += Duration::from_millis(500);
                let snap = rt.snapshot();
                let s = snap.stage("bottleneck").ok_or("stage missing")?;
                let (a, r) = (
                    admitted.load(Ordering::Relaxed),
                    rejected.load(Ordering::Relaxed),
                );
                println!(
                    "{:>4.1} {:>10} {:>9} {:>9} {:>7} {:>13} {:>6}",
                    start.elapsed().as_secs_f64(),
                    per_sec,
                    a - last_adm,
                    r - last_rej,
                    s.admission_rate.map_or("-".into(), |r| format!("{r:.0}")),
                    s.rt_p90_ms.map_or("-".into(), |p| format!("{p:.1}")),
                    s.queue_len
                );
                (last_adm, last_rej) = (a, r);
            }
        }
        phase_start = phase_end;
    }
    let report = rt.shutdown(Duration::from_secs(60));
    if !report.drained {
        return Err(format!("shutdown left {} events unfinished", report.unfinished()).into());
    }
    let mut l = latencies.lock().clone();
    l.sort_by(f64::total_cmp);
    let p90 = l
        .get(((l.len() as f64 * 0.9) as usize).min(l.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    Ok(Outcome {
        admitted: admitted.into_inner(),
        rejected: rejected.into_inner(),
        p90_ms: p90,
        max_ms: l.last().copied().unwrap_or(0.0),
    })
}
