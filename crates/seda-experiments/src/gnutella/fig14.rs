//! SEDA Fig. 14 on this machine: a router whose query handling costs 20 ms, with
//! a single router thread and with the thread-pool controller.
//!
//! SEDA 5.2.3: "every query message induces a servicing delay of 20 ms ... query
//! messages constitute 15% of the generated packets". One thread serves at most
//! `1 / (0.15 x 20 ms) = 333` packets/s, so at 400 and 1000 packets/s its queue
//! grows without bound (the paper's router ran out of memory at 1000); the
//! controller adds threads when the queue passes its threshold, and Little's law
//! predicts `n = lambda p L = 1000 x 0.15 x 20 ms = 3` threads at 1000 packets/s.
//! Our router queue is bounded (65,536 events), so where the paper crashed we drop
//! and count.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use seda_gnutella::{Gnutella, GnutellaStats, ROUTER_STAGE, RouterConfig};
use seda_load::gnutella::{KindStats, LoadConfig, LoadReport};

use super::plain::BENCH_ADVERTISE;
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::{date_utc, machine_summary, write_runs_and_table};

/// Settings of the rerun.
#[derive(Clone, Debug)]
pub struct Fig14Config {
    /// Offered loads, packets/s. Default 100, 200, 400, 1000 (the paper's).
    pub rates: Vec<f64>,
    /// Seconds per run.
    pub duration: Duration,
    /// Latency before this offset is left out of the means.
    pub warmup: Duration,
    /// Cost per query. Default 20 ms.
    pub query_delay: Duration,
    /// Simulated peers. Default 4.
    pub peers: usize,
    /// Router queue length above which the controller adds a thread. Default 100.
    pub queue_threshold: usize,
    /// Most router threads with the controller. Default 20.
    pub max_threads: usize,
    /// Of the peers, leaves with query routing tables (SEDA's rerun: 0). With
    /// leaves the router runs as a full ultrapeer: pong cache on (pings are no
    /// longer broadcast), queries to leaves filtered by their tables.
    pub leaves: usize,
}

impl Default for Fig14Config {
    fn default() -> Self {
        Fig14Config {
            rates: vec![100.0, 200.0, 400.0, 1000.0],
            duration: Duration::from_secs(40),
            warmup: Duration::from_secs(10),
            query_delay: Duration::from_millis(20),
            peers: 4,
            queue_threshold: 100,
            max_threads: 20,
            leaves: 0,
        }
    }
}

/// One sample of the router stage, every 100 ms.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StageSample {
    /// Seconds since the run started.
    pub t: f64,
    /// Events waiting in the router's queue.
    pub queue_len: usize,
    /// Router threads.
    pub threads: usize,
}

/// One (mode, rate) run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fig14Run {
    /// Whether the thread-pool controller sized the router stage.
    pub controller: bool,
    /// Offered packets/s.
    pub rate: f64,
    /// Leaves among the peers.
    #[serde(default)]
    pub leaves: usize,
    /// Ping one-way latency (after the warm-up).
    pub ping: KindStats,
    /// Query one-way latency (after the warm-up).
    pub query: KindStats,
    /// Most router threads seen.
    pub max_threads: usize,
    /// Longest router queue seen.
    pub max_queue: usize,
    /// Messages the router dropped because its queue was full.
    pub overload_drops: u64,
    /// Router stage samples.
    pub samples: Vec<StageSample>,
    /// The generator's report (per-second series included).
    pub load: LoadReport,
    /// The router's counters at the end.
    pub router: GnutellaStats,
}

/// Everything the rerun measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fig14Results {
    /// Date (UTC) of the run.
    pub date: String,
    /// Machine summary.
    pub machine: String,
    /// Load average when the run started.
    pub loadavg_start: String,
    /// Settings, as text.
    pub settings: String,
    /// Every run.
    pub runs: Vec<Fig14Run>,
}

/// Runs one (mode, rate) point.
pub fn run_one(
    cfg: &Fig14Config,
    controller: bool,
    rate: f64,
) -> Result<Fig14Run, ExperimentError> {
    let rt = seda::Runtime::builder().name("fig14").build();
    let g = Gnutella::start(
        &rt,
        RouterConfig::default()
            .with_max_peers(cfg.peers + 4)
            .with_max_leaves(cfg.leaves + 4)
            .with_min_outgoing(0)
            .with_query_delay(Some(cfg.query_delay))
            // Fig. 14 shows the queue growing past one thread's capacity: no bound,
            // and no read pause holding the queue in the kernel instead.
            .with_max_queue_delay(None)
            .with_pause_reads_at(0)
            .with_router_threads((1, if controller { cfg.max_threads } else { 1 }))
            .with_router_pool_controller(controller)
            .with_router_queue_threshold(cfg.queue_threshold)
            .with_advertise(Some(std::net::SocketAddr::from(BENCH_ADVERTISE)))
            // SEDA's traffic model: every ping is broadcast, as the paper's router did;
            // with leaves, today's ultrapeer: pings answered from the pong cache.
            .with_pong_cache(if cfg.leaves > 0 {
                RouterConfig::default().pong_cache
            } else {
                None
            }),
    )
    .map_err(ExperimentError::other)?;
    rt.start().map_err(ExperimentError::other)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (rt, stop) = (rt.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut v = Vec::new();
            while !stop.load(Relaxed) {
                if let Some(s) = rt.snapshot().stage(ROUTER_STAGE) {
                    v.push(StageSample {
                        t: t0.elapsed().as_secs_f64(),
                        queue_len: s.queue_len,
                        threads: s.threads,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            v
        })
    };
    let load = seda_load::gnutella::run(
        &LoadConfig::default()
            .with_router(g.local_addr())
            .with_peers(cfg.peers)
            .with_rate(Some(rate))
            .with_duration(cfg.duration)
            .with_warmup(cfg.warmup)
            .with_hit_fraction(0.0)
            .with_leaves(cfg.leaves),
    );
    stop.store(true, Relaxed);
    let samples = sampler.join().unwrap_or_default();
    let router = g.stats();
    g.stop();
    rt.shutdown(Duration::from_secs(1));
    let load = load.map_err(ExperimentError::other)?;
    let kind = |k: &str| load.kinds.get(k).cloned().unwrap_or_default();
    Ok(Fig14Run {
        controller,
        rate,
        leaves: cfg.leaves,
        ping: kind("ping"),
        query: kind("query"),
        max_threads: samples.iter().map(|s| s.threads).max().unwrap_or(0),
        max_queue: samples.iter().map(|s| s.queue_len).max().unwrap_or(0),
        overload_drops: router.drops("router_overload"),
        samples,
        load,
        router,
    })
}

/// Runs every point, single thread first; `log` gets a line per run.
pub fn run(cfg: &Fig14Config, log: &mut dyn FnMut(&str)) -> Result<Fig14Results, ExperimentError> {
    let loadavg_start = crate::harness::load_average_text();
    let mut runs = Vec::new();
    for controller in [false, true] {
        for &rate in &cfg.rates {
            let r = run_one(cfg, controller, rate)?;
            log(&format!(
                "{} {:>5.0} pkt/s: ping {:.1} ms, query {:.1} ms, threads <= {}, queue <= {}, overload drops {}",
                if controller {
                    "controller   "
                } else {
                    "single thread"
                },
                rate,
                r.ping.mean_ms,
                r.query.mean_ms,
                r.max_threads,
                r.max_queue,
                r.overload_drops
            ));
            runs.push(r);
        }
    }
    Ok(Fig14Results {
        date: date_utc(),
        machine: machine_summary(),
        loadavg_start,
        settings: format!(
            "{} peers{}, {:.0} s per run ({:.0} s warm-up left out of the means), {:.0} ms per query, 15 % queries, queue threshold {}, max {} threads",
            cfg.peers,
            if cfg.leaves > 0 {
                format!(
                    " of which {} leaves (the router as an ultrapeer: pong cache, QRP; \
                     one-word queries from 1,000 words, 100 shared per leaf)",
                    cfg.leaves
                )
            } else {
                String::new()
            },
            cfg.duration.as_secs_f64(),
            cfg.warmup.as_secs_f64(),
            cfg.query_delay.as_secs_f64() * 1000.0,
            cfg.queue_threshold,
            cfg.max_threads
        ),
        runs,
    })
}

/// One offered load of the paper's Fig. 14: (rate, single-thread ping, single-thread
/// query, controller ping, controller query), mean ms; `None` where the paper's
/// router crashed.
pub type PaperPoint = (f64, Option<f64>, Option<f64>, f64, f64);

/// The paper's Fig. 14 means.
pub const PAPER: [PaperPoint; 4] = [
    (100.0, Some(13.34), Some(27.272), 12.63, 27.388),
    (200.0, Some(35.8), Some(38.83), 29.42, 42.688),
    (400.0, Some(3455.0), Some(6442.7), 10.934, 29.36),
    (1000.0, None, None, 16.47, 37.67),
];

/// The results as a Markdown table beside the paper's figures.
pub fn table(r: &Fig14Results) -> String {
    let mut s = format!(
        "SEDA Fig. 14 rerun, {} ({}; load average at start {}).\n{}\n\n",
        r.date, r.machine, r.loadavg_start, r.settings
    );
    if r.runs.iter().any(|x| x.leaves > 0) {
        return table_with_leaves(r, s);
    }
    s.push_str("| mode | pkt/s | ping ms | query ms | paper ping | paper query | threads | max queue | overload drops |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for run in &r.runs {
        let paper = PAPER.iter().find(|p| p.0 == run.rate);
        let (pp, pq) = match (paper, run.controller) {
            (Some(p), false) => (p.1, p.2),
            (Some(p), true) => (Some(p.3), Some(p.4)),
            (None, _) => (None, None),
        };
        let f = |v: Option<f64>| v.map_or("crashed".to_owned(), |v| format!("{v:.1}"));
        s.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} |\n",
            if run.controller {
                "controller"
            } else {
                "single thread"
            },
            run.rate,
            run.ping.mean_ms,
            run.query.mean_ms,
            if paper.is_some() { f(pp) } else { "-".into() },
            if paper.is_some() { f(pq) } else { "-".into() },
            run.max_threads,
            run.max_queue,
            run.overload_drops
        ));
    }
    s
}

/// The table of a run with leaves: query latency (pings are answered from the
/// pong cache, so the pong round trip stands beside it), and what query routing
/// and the pong cache did.
fn table_with_leaves(r: &Fig14Results, mut s: String) -> String {
    s.push_str("| mode | pkt/s | query ms | query p90 ms | pong round trip ms | threads | max queue | query copies to leaves | filtered by QRP | pings answered from cache | ping copies saved | pings throttled |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for run in &r.runs {
        let pong = run.load.kinds.get("pong").cloned().unwrap_or_default();
        s.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
            if run.controller {
                "controller"
            } else {
                "single thread"
            },
            run.rate,
            run.query.mean_ms,
            run.query.p90_ms,
            pong.mean_ms,
            run.max_threads,
            run.max_queue,
            run.router.qrp.leaf_copies,
            run.router.qrp.leaf_filtered,
            run.router.pong_cache.pings_answered,
            run.router.pong_cache.copies_saved,
            run.router.pong_cache.throttled
        ));
    }
    s
}

/// Writes `runs.json`, `table.md` and the charts to `out`.
pub fn write_outputs(out: &Path, r: &Fig14Results) -> Result<(), ExperimentError> {
    std::fs::create_dir_all(out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", out.display()), e))?;
    write_runs_and_table(out, r, table(r))?;
    for controller in [false, true] {
        let runs: Vec<&Fig14Run> = r
            .runs
            .iter()
            .filter(|x| x.controller == controller)
            .collect();
        let series = |name: &str, f: &dyn Fn(&Fig14Run) -> f64| Series {
            name: name.to_owned(),
            points: runs.iter().map(|x| (x.rate, f(x))).collect(),
        };
        let (file, title) = if controller {
            (
                "latency-controller.svg",
                "Fig. 14(b): thread-pool controller",
            )
        } else {
            ("latency-single.svg", "Fig. 14(a): single router thread")
        };
        line_chart(
            &out.join(file),
            &Chart {
                title,
                x_label: "offered load (packets/s)",
                y_label: "mean latency (ms)",
                x_log: false,
                y_log: true,
                y_range: None,
            },
            &[
                series("ping", &|x| x.ping.mean_ms),
                series("query", &|x| x.query.mean_ms),
            ],
        )?;
        for run in &runs {
            let mode = if controller { "controller" } else { "single" };
            let over_time = |k: usize, name: &str| Series {
                name: name.to_owned(),
                points: run
                    .load
                    .series
                    .iter()
                    .filter(|p| p.received[k] > 0)
                    .map(|p| (p.t as f64, p.mean_ms[k]))
                    .collect(),
            };
            line_chart(
                &out.join(format!("latency-time-{mode}-{:.0}.svg", run.rate)),
                &Chart {
                    title: &format!("latency over time, {mode}, {:.0} packets/s", run.rate),
                    x_label: "time (s)",
                    y_label: "mean latency that second (ms)",
                    x_log: false,
                    y_log: true,
                    y_range: None,
                },
                &[over_time(0, "ping"), over_time(1, "query")],
            )?;
            let samples = |f: &dyn Fn(&StageSample) -> f64, name: &str| Series {
                name: name.to_owned(),
                points: run.samples.iter().map(|s| (s.t, f(s))).collect(),
            };
            line_chart(
                &out.join(format!("queue-{mode}-{:.0}.svg", run.rate)),
                &Chart {
                    title: &format!(
                        "GnutellaRouter queue and threads, {mode}, {:.0} packets/s",
                        run.rate
                    ),
                    x_label: "time (s)",
                    y_label: "queue length / threads x 100",
                    x_log: false,
                    y_log: false,
                    y_range: None,
                },
                &[
                    samples(&|s| s.queue_len as f64, "queue length"),
                    samples(&|s| s.threads as f64 * 100.0, "threads x 100"),
                ],
            )?;
        }
    }
    Ok(())
}
