//! One stage hop and a 5-stage pipeline, in both thread models, against a raw
//! `crossbeam-channel` pipeline with one thread per stage, in the same run.
//!
//! `cargo bench -p seda --bench pipeline` runs the criterion groups, then prints a
//! table of events/s, median round-trip latency per hop, and the ratio of each seda
//! configuration to the raw channel measured in this run. Each seda configuration
//! runs twice: stages forwarding event by event (`-each`) and stages forwarding their
//! batch with one atomic batch enqueue (`-batch`, the batching the aim refers to).

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_channel::{Receiver, Sender, bounded};
use seda::{Batch, Context, Runtime, Sink, ThreadModel};

const EVENTS: u64 = 20_000;
/// Every queue (raw and staged) holds a whole iteration's events, so no stage ever
/// waits for space downstream. Shared-model handlers must not block (see
/// `ThreadModel::Shared`): with a smaller capacity the 5-stage shared pipeline stalls as
/// soon as both per-core workers spin on full successors.
const CAPACITY: usize = EVENTS as usize;

/// A pipeline under test: push events in, get them out at the end.
trait Pipeline {
    fn push(&self, v: u64);
    fn out(&self) -> &Receiver<u64>;
}

struct Raw {
    input: Sender<u64>,
    output: Receiver<u64>,
    _threads: Vec<std::thread::JoinHandle<()>>,
}

impl Raw {
    fn new(stages: usize) -> Self {
        let (input, mut rx) = bounded::<u64>(CAPACITY);
        let mut threads = Vec::new();
        for _ in 0..stages {
            let (tx, next_rx) = bounded::<u64>(CAPACITY);
            let my_rx = rx;
            threads.push(std::thread::spawn(move || {
                while let Ok(v) = my_rx.recv() {
                    if tx.send(v + 1).is_err() {
                        return;
                    }
                }
            }));
            rx = next_rx;
        }
        Raw {
            input,
            output: rx,
            _threads: threads,
        }
    }
}

impl Pipeline for Raw {
    fn push(&self, v: u64) {
        self.input.send(v).expect("raw pipeline alive");
    }
    fn out(&self) -> &Receiver<u64> {
        &self.output
    }
}

struct Staged {
    rt: Runtime,
    input: Sink<u64>,
    output: Receiver<u64>,
}

impl Staged {
    fn new(stages: usize, model: ThreadModel, batch: usize, batch_emit: bool) -> Self {
        let rt = Runtime::builder().thread_model(model).build();
        let (tx, output) = bounded::<u64>(CAPACITY);
        let mut next: Option<Sink<u64>> = None;
        for i in (0..stages).rev() {
            let name = format!("s{i}");
            let b = match next.take() {
                Some(sink) if batch_emit => {
                    rt.stage(&name, move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                        // One enqueue per batch (all or none); per event if it is full.
                        let out: Vec<u64> = batch.map(|v| v + 1).collect();
                        if let Err(e) = sink.try_enqueue_batch(out) {
                            for mut v in e.into_inner() {
                                while let Err(e) = sink.try_enqueue(v) {
                                    v = e.into_inner();
                                    std::thread::yield_now();
                                }
                            }
                        }
                    })
                }
                Some(sink) => rt.stage(&name, move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                    for v in batch {
                        let mut v = v + 1;
                        // Not taken while CAPACITY >= EVENTS; a smaller capacity waits here
                        // (fine on per-stage pools, a stall on the shared model).
                        while let Err(e) = sink.try_enqueue(v) {
                            v = e.into_inner();
                            std::thread::yield_now();
                        }
                    }
                }),
                None => {
                    let tx = tx.clone();
                    rt.stage(&name, move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
                        for v in batch {
                            let _ = tx.send(v + 1);
                        }
                    })
                }
            };
            next = Some(
                b.capacity(CAPACITY)
                    .fixed_threads(1)
                    .batch(batch)
                    .build()
                    .expect("stage"),
            );
        }
        rt.start().expect("start");
        Staged {
            rt,
            input: next.expect("at least one stage"),
            output,
        }
    }
}

impl Pipeline for Staged {
    fn push(&self, v: u64) {
        // Fast path without a clock read; the deadline is computed only when full.
        let mut v = match self.input.try_enqueue(v) {
            Ok(()) => return,
            Err(e) => e.into_inner(),
        };
        loop {
            match self
                .input
                .enqueue_until(v, Instant::now() + Duration::from_secs(10))
            {
                Ok(()) => return,
                Err(e) => v = e.into_inner(),
            }
        }
    }
    fn out(&self) -> &Receiver<u64> {
        &self.output
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.rt.shutdown(Duration::from_secs(5));
    }
}

/// Pushes `EVENTS` events from one thread while this thread drains the output.
fn throughput(p: &(dyn Pipeline + Sync)) {
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..EVENTS {
                p.push(i);
            }
        });
        for _ in 0..EVENTS {
            p.out().recv().expect("pipeline output");
        }
    });
}

fn round_trip(p: &dyn Pipeline) {
    p.push(1);
    p.out().recv().expect("pipeline output");
}

/// `-each`: a stage forwards every event with its own `try_enqueue`; `-batch`: it
/// forwards its whole batch with one `try_enqueue_batch` (one lock per batch).
const CONFIGS: [&str; 5] = [
    "crossbeam",
    "seda-per-stage-each",
    "seda-per-stage-batch",
    "seda-shared-each",
    "seda-shared-batch",
];

fn build(config: &str, stages: usize) -> Box<dyn Pipeline + Sync> {
    match config {
        "crossbeam" => Box::new(Raw::new(stages)),
        "seda-per-stage-each" => Box::new(Staged::new(stages, ThreadModel::PerStage, 64, false)),
        "seda-per-stage-batch" => Box::new(Staged::new(stages, ThreadModel::PerStage, 64, true)),
        "seda-shared-each" => Box::new(Staged::new(stages, ThreadModel::Shared, 64, false)),
        _ => Box::new(Staged::new(stages, ThreadModel::Shared, 64, true)),
    }
}

fn benches(c: &mut Criterion) {
    for stages in [1usize, 5] {
        let mut g = c.benchmark_group(format!("throughput-{stages}-stage"));
        g.throughput(Throughput::Elements(EVENTS));
        g.sample_size(15)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        for config in CONFIGS {
            let p = build(config, stages);
            g.bench_function(BenchmarkId::from_parameter(config), |b| {
                b.iter(|| throughput(p.as_ref()))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("round-trip-{stages}-stage"));
        g.sample_size(30)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for config in CONFIGS {
            let p = build(config, stages);
            g.bench_function(BenchmarkId::from_parameter(config), |b| {
                b.iter(|| round_trip(p.as_ref()))
            });
        }
        g.finish();
    }
}

/// Median time per iteration of one benchmark of this run, from criterion's output.
fn median_ns(group: &str, config: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_owned());
    let path = format!("{dir}/criterion/{group}/{config}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn summary() {
    println!(
        "\n{:<12} {:<22} {:>14} {:>8} {:>16} {:>8}",
        "pipeline", "config", "events/s", "ratio", "hop latency us", "ratio"
    );
    for stages in [1usize, 5] {
        let tp = |c| {
            median_ns(&format!("throughput-{stages}-stage"), c).map(|ns| EVENTS as f64 / (ns / 1e9))
        };
        let lat = |c| {
            median_ns(&format!("round-trip-{stages}-stage"), c)
                .map(|ns| ns / 1000.0 / stages as f64)
        };
        let (base_tp, base_lat) = (tp("crossbeam"), lat("crossbeam"));
        for config in CONFIGS {
            let (t, l) = (tp(config), lat(config));
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}x", a / b),
                _ => "-".to_owned(),
            };
            println!(
                "{:<12} {:<22} {:>14} {:>8} {:>16} {:>8}",
                format!("{stages}-stage"),
                config,
                t.map_or("-".into(), |t| format!("{t:.0}")),
                ratio(t, base_tp),
                l.map_or("-".into(), |l| format!("{l:.2}")),
                ratio(l, base_lat),
            );
        }
    }
    println!(
        "(throughput ratio: seda / crossbeam, higher is better; latency ratio: lower is better)"
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
    summary();
}
