//! One stage and a 5-stage pipeline, in both thread models, with and without batch
//! forwarding and inline handoff, against a raw `crossbeam-channel` pipeline with one
//! thread per stage, measured in the same run.
//!
//! `cargo bench -p seda --bench pipeline` runs `ROUNDS` rounds (env
//! `SEDA_BENCH_ROUNDS`, default 7). Each round measures every configuration once, in
//! a rotated order, so raw and seda runs interleave and drift in the machine's load
//! (a shared 2-core box) hits them alike. It prints, per configuration, the median
//! events/s and its spread (min-max) over the rounds, the median of the per-round
//! ratios to the raw channel of the same round, and the same for the median hop
//! latency of a round trip.
//!
//! Configurations: `-each` stages forward event by event (`try_enqueue`), `-batch`
//! forward their batch with one `try_enqueue_batch`; `-inline` puts every stage in
//! one domain, so stage-to-stage handoffs may run inline (the source thread stays
//! outside: events cross one real queue into the pipeline); `-colors64` gives event
//! `i` the color `i % 64` (each stage's forward inherits it), the price of colors per
//! hop against the same configuration uncolored.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use seda::{Batch, Color, Context, Meta, Runtime, Sink, ThreadModel};

const EVENTS: u64 = 20_000;
/// Every queue (raw and staged) holds a whole iteration's events, so no stage ever
/// waits for space downstream. Shared-model handlers must not block (see
/// `ThreadModel::Shared`): with a smaller capacity the 5-stage shared pipeline stalls as
/// soon as both per-core workers spin on full successors.
const CAPACITY: usize = EVENTS as usize;
/// Throughput iterations per configuration and round (the round keeps the median).
const ITERS: usize = 3;
/// Round trips per configuration and round (the round keeps the median).
const TRIPS: usize = 1000;

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
    colors: u64,
}

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    model: ThreadModel,
    batch_emit: bool,
    inline: bool,
    /// 0: uncolored; else event `v` has color `v % colors`.
    colors: u64,
}

impl Staged {
    fn new(stages: usize, c: Config) -> Self {
        let rt = Runtime::builder().thread_model(c.model).build();
        let domain = rt.domain("pipeline");
        domain.set_inline(c.inline);
        let (tx, output) = bounded::<u64>(CAPACITY);
        let mut next: Option<Sink<u64>> = None;
        for i in (0..stages).rev() {
            let name = format!("s{i}");
            let b = match next.take() {
                Some(sink) if c.batch_emit => {
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
                        // Not taken while CAPACITY >= EVENTS.
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
                    .batch(64)
                    .domain(&domain)
                    .build()
                    .expect("stage"),
            );
        }
        rt.start().expect("start");
        Staged {
            rt,
            input: next.expect("at least one stage"),
            output,
            colors: c.colors,
        }
    }
}

impl Pipeline for Staged {
    fn push(&self, v: u64) {
        if self.colors > 0 {
            let meta = Meta::new().with_color(Color::new(v % self.colors));
            let mut v = v;
            // Not taken while CAPACITY >= EVENTS.
            while let Err(e) = self.input.try_enqueue_with(v, meta) {
                v = e.into_inner();
                std::thread::yield_now();
            }
            return;
        }
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

/// Events/s of pushing `EVENTS` events from one thread while this one drains.
fn throughput(p: &(dyn Pipeline + Sync)) -> f64 {
    push_through(p, EVENTS)
}

/// Events/s of pushing `n` events from one thread while this one drains.
fn push_through(p: &(dyn Pipeline + Sync), n: u64) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                p.push(i);
            }
        });
        for _ in 0..n {
            p.out().recv().expect("pipeline output");
        }
    });
    n as f64 / start.elapsed().as_secs_f64()
}

/// Median round-trip time of one event, microseconds.
fn round_trip(p: &dyn Pipeline) -> f64 {
    let mut v: Vec<f64> = (0..TRIPS)
        .map(|_| {
            let t = Instant::now();
            p.push(1);
            p.out().recv().expect("pipeline output");
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(&mut v)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const fn cfg(name: &'static str, model: ThreadModel, batch_emit: bool, inline: bool) -> Config {
    Config {
        name,
        model,
        batch_emit,
        inline,
        colors: 0,
    }
}

const fn colors64(name: &'static str, model: ThreadModel) -> Config {
    Config {
        colors: 64,
        ..cfg(name, model, false, false)
    }
}

const CONFIGS: [Config; 10] = [
    cfg("seda-per-stage-each", ThreadModel::PerStage, false, false),
    cfg("seda-per-stage-batch", ThreadModel::PerStage, true, false),
    cfg("seda-shared-each", ThreadModel::Shared, false, false),
    cfg("seda-shared-batch", ThreadModel::Shared, true, false),
    cfg(
        "seda-per-stage-each-inline",
        ThreadModel::PerStage,
        false,
        true,
    ),
    cfg(
        "seda-per-stage-batch-inline",
        ThreadModel::PerStage,
        true,
        true,
    ),
    cfg("seda-shared-each-inline", ThreadModel::Shared, false, true),
    cfg("seda-shared-batch-inline", ThreadModel::Shared, true, true),
    colors64("seda-per-stage-each-colors64", ThreadModel::PerStage),
    colors64("seda-shared-each-colors64", ThreadModel::Shared),
];

/// One measurement of one configuration: (events/s, hop latency us).
fn measure(stages: usize, config: Option<Config>) -> (f64, f64) {
    let p: Box<dyn Pipeline + Sync> = match config {
        None => Box::new(Raw::new(stages)),
        Some(c) => Box::new(Staged::new(stages, c)),
    };
    throughput(p.as_ref()); // warm-up
    let mut tp: Vec<f64> = (0..ITERS).map(|_| throughput(p.as_ref())).collect();
    let lat = round_trip(p.as_ref()) / stages as f64;
    (median(&mut tp), lat)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("SEDA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
        .max(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "pipeline bench: {rounds} rounds, {EVENTS} events x {ITERS} per throughput sample, {TRIPS} round trips; load at start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // SEDA_BENCH_ONLY=NAME keeps crossbeam and the configurations whose name
    // contains NAME; SEDA_BENCH_STAGES=N runs one pipeline length (for profiling).
    let only = std::env::var("SEDA_BENCH_ONLY").unwrap_or_default();
    let all: Vec<Option<Config>> = std::iter::once(None)
        .chain(
            CONFIGS
                .iter()
                .copied()
                .filter(|c| {
                    let exact = CONFIGS.iter().any(|c| c.name == only);
                    if exact {
                        c.name == only
                    } else {
                        c.name.contains(&only)
                    }
                })
                .map(Some),
        )
        .collect();
    // SEDA_BENCH_COUNT=N: push N events once through each selected pipeline and
    // stop (for instruction counts: bench/callgrind/hops.sh runs two N under
    // callgrind and divides the difference).
    if let Some(n) = std::env::var("SEDA_BENCH_COUNT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        let stages = std::env::var("SEDA_BENCH_STAGES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5);
        for c in &all {
            if c.is_none() && !only.is_empty() && only != "crossbeam" {
                continue;
            }
            let p: Box<dyn Pipeline + Sync> = match c {
                None => Box::new(Raw::new(stages)),
                Some(c) => Box::new(Staged::new(stages, *c)),
            };
            push_through(p.as_ref(), n);
        }
        return;
    }
    let lengths: Vec<usize> = match std::env::var("SEDA_BENCH_STAGES")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(n) => vec![n],
        None => vec![1, 5],
    };
    for stages in lengths {
        // results[config][round] = (tp, lat)
        let mut results = vec![Vec::new(); all.len()];
        for r in 0..rounds {
            for k in 0..all.len() {
                let i = (k + r) % all.len();
                results[i].push(measure(stages, all[i]));
            }
        }
        print_table(stages, &all, &results);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load at end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn print_table(stages: usize, all: &[Option<Config>], results: &[Vec<(f64, f64)>]) {
    println!(
        "\n{:<9} {:<28} {:>11} {:>21} {:>7} {:>9} {:>7}",
        "pipeline", "config", "events/s", "spread (min-max)", "ratio", "hop us", "ratio"
    );
    let raw = &results[0];
    for (c, res) in all.iter().zip(results) {
        let mut tp: Vec<f64> = res.iter().map(|r| r.0).collect();
        let mut lat: Vec<f64> = res.iter().map(|r| r.1).collect();
        let mut tp_ratio: Vec<f64> = res.iter().zip(raw).map(|(s, b)| s.0 / b.0).collect();
        let mut lat_ratio: Vec<f64> = res.iter().zip(raw).map(|(s, b)| s.1 / b.1).collect();
        let (lo, hi) = tp
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        println!(
            "{:<9} {:<28} {:>11.0} {:>10.0}-{:<10.0} {:>6.2}x {:>9.2} {:>6.2}x",
            format!("{stages}-stage"),
            c.map_or("crossbeam", |c| c.name),
            median(&mut tp),
            lo,
            hi,
            median(&mut tp_ratio),
            median(&mut lat),
            median(&mut lat_ratio),
        );
    }
    println!(
        "(ratios: median over rounds of seda / crossbeam of the same round; throughput: higher is better, latency: lower is better)"
    );
}
