//! A four-stage pipeline that counts words, with live stage statistics.
//!
//! `cargo run --release -p seda --example pipeline [-- per-stage|shared]`
//!
//! source (this thread) -> split -> normalize -> count (colored by word, so one
//! word's updates never race and arrive in order) -> totals. Every 250 ms it prints
//! each stage's queue length, threads, processed count and p90 response time; at the
//! end, the stage graph observed at run time and the shutdown report.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seda::{Batch, Color, Context, Runtime, Sink, ThreadModel};

const TEXT: &str = "We propose a new design for highly concurrent Internet services which we call \
the staged event-driven architecture SEDA. SEDA is intended to support massive concurrency \
demands and simplify the construction of well-conditioned services. In SEDA applications \
consist of a network of event-driven stages connected by explicit queues. This architecture \
allows services to be well-conditioned to load preventing resources from being overcommitted \
when demand exceeds service capacity.";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model: ThreadModel = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("per-stage")
        .parse()?;
    let rt = Runtime::builder().thread_model(model).build();
    let counts: Arc<Mutex<HashMap<String, u64>>> = Arc::default();

    let totals = Arc::clone(&counts);
    // Typed wiring: each stage's builder returns its sink, which the stage before
    // it takes into its handler (built last to first).
    let count: Sink<String> = rt
        .stage(
            "count",
            move |batch: Batch<'_, String>, _cx: &Context<'_>| {
                let mut map = totals.lock().expect("count map");
                for word in batch {
                    *map.entry(word).or_default() += 1;
                }
            },
        )
        .capacity(8192)
        .build()?;

    let refused = Arc::new(AtomicU64::new(0));
    let refused_words = Arc::clone(&refused);
    let normalize: Sink<String> = rt
        .stage(
            "normalize",
            move |mut batch: Batch<'_, String>, _cx: &Context<'_>| {
                while let Some((word, meta)) = batch.next_with_meta() {
                    let word: String = word
                        .chars()
                        .filter(|c| c.is_alphanumeric())
                        .flat_map(char::to_lowercase)
                        .collect();
                    if word.is_empty() {
                        continue;
                    }
                    let mut h = DefaultHasher::new();
                    word.hash(&mut h);
                    // Color by word: the same word's events are serialised and ordered.
                    let meta = meta.with_color(Color::new(h.finish() % 64));
                    if count.try_enqueue_with(word, meta).is_err() {
                        refused_words.fetch_add(1, Ordering::Relaxed);
                    }
                }
            },
        )
        .capacity(8192)
        .build()?;

    let refused_lines = Arc::clone(&refused);
    let split = rt
        .stage(
            "split",
            move |batch: Batch<'_, &'static str>, _cx: &Context<'_>| {
                for line in batch {
                    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                    // All or none: a line is never half counted. A full queue hands
                    // the line back; we shed it and count it.
                    if normalize.try_enqueue_batch(words).is_err() {
                        refused_lines.fetch_add(1, Ordering::Relaxed);
                    }
                }
            },
        )
        .capacity(1024)
        .build()?;

    rt.start()?;
    println!("thread model: {model}");
    let start = Instant::now();
    let mut next_report = start;
    let mut lines = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        for sentence in TEXT.split(". ") {
            // Backpressure: wait for space instead of dropping input.
            let deadline = Instant::now() + Duration::from_secs(1);
            split
                .enqueue_until(sentence, deadline)
                .map_err(|e| format!("split: {e}"))?;
            lines += 1;
        }
        if Instant::now() >= next_report {
            next_report += Duration::from_millis(250);
            print_stats(&rt);
        }
    }
    let elapsed = start.elapsed();
    let report = rt.shutdown(Duration::from_secs(5));
    print_stats(&rt);
    let map = counts.lock().expect("count map");
    let mut top: Vec<_> = map.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!(
        "\n{lines} lines in {elapsed:.2?}; {} lines or words shed by full queues (counted, not lost); top words:",
        refused.load(Ordering::Relaxed)
    );
    for (w, n) in top.iter().take(5) {
        println!("  {w:<12} {n}");
    }
    println!("\nstage graph (observed):\n{}", rt.snapshot().to_dot());
    println!(
        "shutdown: drained={} unfinished={} in {} ms",
        report.drained,
        report.unfinished(),
        report.elapsed_ms
    );
    Ok(())
}

fn print_stats(rt: &Runtime) {
    let snap = rt.snapshot();
    let row: Vec<String> = snap
        .stages
        .iter()
        .map(|s| {
            format!(
                "{}: q={} thr={} done={} p90={:.2}ms",
                s.name,
                s.queue_len,
                s.threads,
                s.processed,
                s.rt_p90_ms.unwrap_or(0.0)
            )
        })
        .collect();
    println!("{}", row.join(" | "));
}
