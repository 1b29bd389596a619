//! The cost of colors: one pipeline of trivial stages (each adds one to a number and
//! forwards it) pushed with uncolored events, with events of 64 colors, and with
//! events all of one color, in the same rounds, in both thread models.
//!
//! A colored event takes the runtime's slower path: a ticket from the color table
//! when it is admitted, the color acquired before it runs and released (or handed
//! to the next ticket) after its batch. The ratio colored / uncolored prices that
//! path per hop; with one color the pipeline also loses its parallelism (at most
//! one event of the color runs anywhere), which is what the single-color server
//! baseline pays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::ExperimentError;
use seda::{Batch, Color, Context, Meta, Runtime, Sink, ThreadModel};
use serde::{Deserialize, Serialize};

/// How the benchmark's events are colored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No color.
    Uncolored,
    /// Event `i` has color `i % 64`.
    Colors64,
    /// Every event has color 1.
    OneColor,
}

const KINDS: [Kind; 3] = [Kind::Uncolored, Kind::Colors64, Kind::OneColor];

impl std::str::FromStr for Kind {
    type Err = seda::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uncolored" => Ok(Kind::Uncolored),
            "colors64" => Ok(Kind::Colors64),
            "one-color" => Ok(Kind::OneColor),
            other => Err(seda::UnknownName::new(
                "kind",
                "uncolored, colors64 or one-color",
                other,
            )),
        }
    }
}

impl Kind {
    fn meta(self, i: u64) -> Meta {
        match self {
            Kind::Uncolored => Meta::new(),
            Kind::Colors64 => Meta::new().with_color(Color::new(i % 64)),
            Kind::OneColor => Meta::new().with_color(Color::new(1)),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct CostConfig {
    /// Events per measurement (plus a tenth as warm-up). At least 1,000.
    pub events: u64,
    /// Rounds; each measures every configuration once. At least 1.
    pub rounds: usize,
    /// Pipeline lengths.
    pub stages: Vec<usize>,
    /// Shared workers (the shared model) .
    pub workers: usize,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            events: 200_000,
            rounds: 5,
            stages: vec![1, 5],
            workers: 2,
        }
    }
}

/// One pipeline configuration: medians over the rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    /// Stages in the pipeline.
    pub stages: usize,
    /// `shared` (with `workers` workers) or `per-stage` (one thread per stage).
    pub model: String,
    /// Events per second through the pipeline, uncolored.
    pub uncolored_per_s: f64,
    /// Events per second with 64 colors.
    pub colored_per_s: f64,
    /// Events per second with one color.
    pub one_color_per_s: f64,
    /// Median over rounds of colored / uncolored in the same round.
    pub colored_ratio: f64,
    /// Median over rounds of one-color / uncolored in the same round.
    pub one_color_ratio: f64,
    /// Extra time per event per hop of 64 colors over uncolored, ns.
    pub colored_extra_ns_per_hop: f64,
}

/// Runs every configuration `rounds` times, interleaved.
pub fn run(cfg: &CostConfig, log: &mut dyn FnMut(&str)) -> Result<Vec<CostRow>, ExperimentError> {
    if cfg.events < 1000 || cfg.rounds == 0 || cfg.workers == 0 {
        return Err(ExperimentError::run(
            "cost benchmark: events >= 1000, rounds >= 1 and workers >= 1",
        ));
    }
    let models = [ThreadModel::Shared, ThreadModel::PerStage];
    let mut rows = Vec::new();
    for &stages in &cfg.stages {
        for model in models {
            // per[kind][round] = events/s
            let mut per: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
            for round in 0..cfg.rounds {
                for k in 0..KINDS.len() {
                    // Rotate the order so no kind always runs first.
                    let k = (k + round) % KINDS.len();
                    per[k].push(measure(cfg, stages, model, KINDS[k])?);
                }
            }
            let ratio = |k: usize| median(per[k].iter().zip(&per[0]).map(|(c, u)| c / u).collect());
            let (u, c, o) = (
                median(per[0].clone()),
                median(per[1].clone()),
                median(per[2].clone()),
            );
            let row = CostRow {
                stages,
                model: model.as_str().to_owned(),
                uncolored_per_s: u,
                colored_per_s: c,
                one_color_per_s: o,
                colored_ratio: ratio(1),
                one_color_ratio: ratio(2),
                colored_extra_ns_per_hop: (1e9 / c - 1e9 / u) / stages as f64,
            };
            log(&format!(
                "cost: {stages} stage(s), {model}: uncolored {u:.0}/s, 64 colors {c:.0}/s \
                 ({:.2}x), one color {o:.0}/s ({:.2}x)",
                row.colored_ratio, row.one_color_ratio
            ));
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The median of `v` (NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Counts events leaving the pipeline and says when `target` have.
struct Finish {
    done: AtomicU64,
    target: AtomicU64,
    tx: mpsc::SyncSender<()>,
}

/// Events per second of one pipeline of `stages` stages with `kind` events, after a
/// warm-up of a tenth as many (for one configuration alone, e.g. under callgrind).
pub fn measure(
    cfg: &CostConfig,
    stages: usize,
    model: ThreadModel,
    kind: Kind,
) -> Result<f64, ExperimentError> {
    if cfg.events < 1000 || stages == 0 {
        return Err(ExperimentError::run(
            "the cost pipeline needs at least 1,000 events and 1 stage",
        ));
    }
    let warm = cfg.events / 10;
    let capacity = (cfg.events + warm) as usize;
    let rt = Runtime::builder()
        .name("cost")
        .thread_model(model)
        .shared_workers(cfg.workers)
        .build();
    let (tx, rx) = mpsc::sync_channel(1);
    let fin = Arc::new(Finish {
        done: AtomicU64::new(0),
        target: AtomicU64::new(u64::MAX),
        tx,
    });
    let f = fin.clone();
    let last = move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
        let n = batch.count() as u64;
        if f.done.fetch_add(n, Relaxed) + n == f.target.load(Relaxed) {
            let _ = f.tx.try_send(());
        }
    };
    let err = |e: seda::RuntimeError| e.to_string();
    let stage = |name: String, b: seda::StageBuilder<'_, u64>| {
        let b = b.capacity(capacity).batch(32);
        match model {
            ThreadModel::PerStage => b.fixed_threads(1),
            // Shared: the runtime's workers, nothing to size.
            _ => b,
        }
        .build()
        .map_err(|e| ExperimentError::run(format!("stage {name}: {}", err(e))))
    };
    let mut next = stage(
        format!("s{}", stages - 1),
        rt.stage(&format!("s{}", stages - 1), last),
    )?;
    for i in (0..stages - 1).rev() {
        let down = next.clone();
        let h = move |batch: Batch<'_, u64>, _cx: &Context<'_>| {
            for v in batch {
                // The forwarded event inherits the color of the one being handled.
                forward(&down, v + 1);
            }
        };
        next = stage(format!("s{i}"), rt.stage(&format!("s{i}"), h))?;
    }
    rt.start().map_err(ExperimentError::other)?;
    let push = |from: u64, n: u64| -> Result<Duration, ExperimentError> {
        fin.target.store(from + n, Relaxed);
        let t = Instant::now();
        for i in from..from + n {
            let mut v = i;
            while let Err(e) = next.try_enqueue_with(v, kind.meta(i)) {
                if e.is_closed() {
                    return Err(ExperimentError::run("the pipeline closed"));
                }
                v = e.into_inner();
                std::thread::yield_now();
            }
        }
        rx.recv_timeout(Duration::from_secs(120)).map_err(|_| {
            ExperimentError::run(format!("{kind:?} pipeline did not finish in 120 s"))
        })?;
        Ok(t.elapsed())
    };
    push(0, warm)?;
    let took = push(warm, cfg.events)?;
    rt.shutdown(Duration::from_secs(5));
    Ok(cfg.events as f64 / took.as_secs_f64())
}

/// Enqueues `v`, yielding while the queue is full (it is sized never to be).
fn forward(sink: &Sink<u64>, mut v: u64) {
    while let Err(e) = sink.try_enqueue(v) {
        if e.is_closed() {
            return;
        }
        v = e.into_inner();
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn a_small_run_measures_every_configuration() {
        let cfg = CostConfig {
            events: 2000,
            rounds: 1,
            stages: vec![2],
            workers: 2,
        };
        let rows = run(&cfg, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), 2);
        for r in rows {
            assert!(r.uncolored_per_s > 0.0 && r.colored_per_s > 0.0 && r.one_color_per_s > 0.0);
        }
    }
}
