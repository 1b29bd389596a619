//! Throughput of the staged router against a plain forwarding loop ([`PlainLoop`]).
//!
//! Both are driven by the same generator (the simulated peers of `seda load
//! gnutella`) in the same process on the same cores, in alternating rounds, and the
//! result is the ratio of their medians.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use seda_gnutella::{Gnutella, GnutellaStats, RouterConfig};

use super::plain::{BENCH_ADVERTISE, PlainLoop};
use crate::ExperimentError;
use crate::colors::cpu::{CpuCores, CpuSample};
use seda_load::gnutella::{LoadConfig, LoadReport, Mix};

/// Settings of the throughput comparison.
#[derive(Clone, Debug)]
pub struct ThroughputConfig {
    /// Simulated peers. Default 4.
    pub peers: usize,
    /// Seconds per round.
    pub duration: Duration,
    /// Rounds of each (alternating). Default 3.
    pub rounds: usize,
    /// Generator threads. Default 1.
    pub threads: usize,
    /// Message mix.
    pub mix: Mix,
    /// Of the peers, leaves (with query routing tables). With leaves the staged
    /// router runs as an ultrapeer (pong cache on, QRP) and alone: the plain loop
    /// speaks neither. Default 0.
    pub leaves: usize,
    /// Words each query carries when there are leaves. Default 1.
    pub query_words: usize,
    /// Also run, in each round, the staged router with inline handoff between the
    /// socket loops, the server and the router (`seda gnutella --inline`).
    /// Default false.
    pub inline_too: bool,
    /// Router stage threads of the staged router. Default 2.
    pub router_threads: usize,
    /// The staged router's queue bound in time. Default 5 ms.
    pub max_queue_delay: Option<Duration>,
    /// Router queue length (reads) at which the staged router pauses reading a
    /// connection (`RouterConfig::pause_reads_at`; 0: never). Default 0.
    pub pause_reads_at: usize,
    /// Socket event loops of the staged router (`None`: one per core).
    pub event_loops: Option<usize>,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        ThroughputConfig {
            peers: 4,
            duration: Duration::from_secs(10),
            rounds: 3,
            threads: 1,
            mix: Mix::default(),
            leaves: 0,
            query_words: 1,
            inline_too: false,
            router_threads: 2,
            max_queue_delay: Some(Duration::from_millis(5)),
            pause_reads_at: 0,
            event_loops: None,
        }
    }
}

/// What the ultrapeer's query routing and pong cache did in a round (leaves only).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Savings {
    /// Query copies sent to leaves (their tables matched), per second.
    pub leaf_copies_per_s: f64,
    /// Query copies a leaf's table kept from it, per second.
    pub leaf_filtered_per_s: f64,
    /// Query copies the leaves received, per second (generator's count).
    pub leaf_received_per_s: f64,
    /// Pings answered from the pong cache, per second.
    pub pings_answered_per_s: f64,
    /// Ping copies a broadcast would have sent, per second.
    pub ping_copies_saved_per_s: f64,
    /// Pings dropped by the per-peer throttle, per second.
    pub pings_throttled_per_s: f64,
}

/// One round.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Round {
    /// "staged" or "plain".
    pub router: String,
    /// Messages routed per second, counted by the router.
    pub routed_per_s: f64,
    /// Copies delivered per second, counted by the peers.
    pub delivered_per_s: f64,
    /// Messages the peers sent per second.
    pub sent_per_s: f64,
    /// Mean one-way query latency, ms.
    pub query_mean_ms: f64,
    /// Median one-way query latency, ms.
    pub query_p50_ms: f64,
    /// 90th percentile one-way query latency, ms.
    pub query_p90_ms: f64,
    /// Pings and queries the staged router dropped unrouted per second because
    /// their read waited past its queue's delay bound (`router_late`).
    #[serde(default)]
    pub late_per_s: f64,
    /// CPU the router's threads used, in cores (1.0: one core all the round).
    pub router_cores: f64,
    /// CPU the generator's threads used, in cores.
    pub generator_cores: f64,
    /// CPU other processes (and unattributed kernel work) took, in cores.
    pub other_cores: f64,
    /// What QRP and the pong cache did (rounds with leaves).
    #[serde(default)]
    pub savings: Option<Savings>,
    /// Router stats after the round (staged only).
    pub stats: Option<GnutellaStats>,
}

/// Both routers' rounds and the ratio of their medians.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// Every round, in the order run.
    pub rounds: Vec<Round>,
    /// Median routed/s of the staged router.
    pub staged_median: f64,
    /// Median routed/s of the plain loop.
    pub plain_median: f64,
    /// staged / plain.
    pub ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn load(cfg: &ThroughputConfig, router: SocketAddr) -> Result<LoadReport, ExperimentError> {
    seda_load::gnutella::run(
        &LoadConfig::default()
            .with_router(router)
            .with_peers(cfg.peers)
            .with_threads(cfg.threads)
            .with_rate(None)
            .with_duration(cfg.duration)
            .with_mix(cfg.mix.clone())
            .with_hit_fraction(0.0)
            // Time every query but one ping in 16: millions of copies a second.
            .with_ping_sample(16)
            .with_leaves(cfg.leaves)
            .with_query_words(cfg.query_words),
    )
    .map_err(ExperimentError::other)
}

/// Threads of the generator (seda-load names them so).
const GENERATOR: &str = "gnutella-load";

fn round(
    router: &str,
    routed: u64,
    secs: f64,
    r: &LoadReport,
    cpu: CpuCores,
    stats: Option<GnutellaStats>,
) -> Round {
    let q = r.kinds.get("query");
    Round {
        router: router.to_owned(),
        routed_per_s: routed as f64 / secs,
        delivered_per_s: r.delivered_per_s,
        sent_per_s: r.sent_per_s,
        query_mean_ms: q.map_or(0.0, |k| k.mean_ms),
        query_p50_ms: q.map_or(0.0, |k| k.p50_ms),
        query_p90_ms: q.map_or(0.0, |k| k.p90_ms),
        late_per_s: 0.0,
        router_cores: cpu.server,
        generator_cores: cpu.client,
        other_cores: cpu.others,
        savings: None,
        stats,
    }
}

/// Runs the load against `router` and measures the CPU of both sides meanwhile.
/// The generator's threads live only while the load runs, so a sampler thread
/// samples inside the run: from 1 s after its start (the peers have connected) to
/// 0.5 s before its end.
fn measured(
    cfg: &ThroughputConfig,
    router: SocketAddr,
) -> Result<(LoadReport, CpuCores), ExperimentError> {
    let window = cfg.duration.saturating_sub(Duration::from_millis(1500));
    let sampler = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        let before = CpuSample::now(GENERATOR);
        let t0 = std::time::Instant::now();
        std::thread::sleep(window);
        CpuSample::now(GENERATOR).cores_since(&before, t0.elapsed().as_secs_f64())
    });
    let r = load(cfg, router);
    let cpu = sampler.join().unwrap_or_default();
    Ok((r?, cpu))
}

/// Runs the comparison; `log` gets a line per round.
pub fn throughput(
    cfg: &ThroughputConfig,
    log: &mut dyn FnMut(&str),
) -> Result<Throughput, ExperimentError> {
    let mut rounds = Vec::new();
    let secs = cfg.duration.as_secs_f64();
    for i in 0..cfg.rounds {
        if cfg.leaves > 0 {
            rounds.push(ultrapeer_round(cfg, i, log)?);
            continue;
        }
        let plain = PlainLoop::start().map_err(|e| ExperimentError::step("plain loop", e))?;
        let before = plain.routed();
        let (r, cpu) = measured(cfg, plain.addr())?;
        let routed = plain.routed() - before;
        drop(plain);
        let p = round("plain", routed, secs, &r, cpu, None);
        log(&format!(
            "round {}: plain loop {:.0} routed/s ({:.0} copies/s), query p50 {:.1} ms, cores {:.2} router + {:.2} generator",
            i + 1,
            p.routed_per_s,
            p.delivered_per_s,
            p.query_p50_ms,
            p.router_cores,
            p.generator_cores
        ));
        rounds.push(p);

        rounds.push(staged_round(cfg, i, false, log)?);
        if cfg.inline_too {
            rounds.push(staged_round(cfg, i, true, log)?);
        }
    }
    let pick = |name: &str| {
        median(
            rounds
                .iter()
                .filter(|r| r.router == name)
                .map(|r| r.routed_per_s)
                .collect(),
        )
    };
    let (staged, plain) = (pick("staged").max(pick("ultrapeer")), pick("plain"));
    Ok(Throughput {
        rounds,
        staged_median: staged,
        plain_median: plain,
        ratio: if plain > 0.0 { staged / plain } else { 0.0 },
    })
}

/// The staged router's settings in a round without leaves (pong cache off: every
/// ping broadcast, as the plain loop and SEDA's router do); `inline`: the
/// "staged-inline" variant. `examples/gnutella_replay.rs` (instruction counts) runs
/// the router with these settings too.
pub fn staged_config(cfg: &ThroughputConfig, inline: bool) -> RouterConfig {
    RouterConfig::default()
        .with_max_peers(cfg.peers + 4)
        .with_min_outgoing(0)
        .with_advertise(Some(SocketAddr::from(BENCH_ADVERTISE)))
        .with_pong_cache(None)
        .with_inline(inline)
        .with_router_threads((cfg.router_threads, cfg.router_threads))
        .with_max_queue_delay(cfg.max_queue_delay)
        .with_pause_reads_at(cfg.pause_reads_at)
        .with_event_loops(cfg.event_loops)
}

/// One round of the staged router (pong cache off: every ping broadcast, as the
/// plain loop and SEDA's router do), a queue between every two stages; `inline`:
/// a read framed and routed on the loop thread that read it while the next queue
/// is empty ("staged-inline").
fn staged_round(
    cfg: &ThroughputConfig,
    i: usize,
    inline: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Round, ExperimentError> {
    let secs = cfg.duration.as_secs_f64();
    let rt = seda::Runtime::builder().name("gnutella-bench").build();
    let g = Gnutella::start(&rt, staged_config(cfg, inline)).map_err(ExperimentError::other)?;
    rt.start().map_err(ExperimentError::other)?;
    let b = g.stats();
    let (r, cpu) = measured(cfg, g.local_addr())?;
    let stats = g.stats();
    let routed = GnutellaStats::total(&stats.routed) - GnutellaStats::total(&b.routed);
    let late = stats
        .drops("router_late")
        .saturating_sub(b.drops("router_late"));
    g.stop();
    rt.shutdown(Duration::from_secs(2));
    let name = if inline { "staged-inline" } else { "staged" };
    let mut s = round(name, routed, secs, &r, cpu, Some(stats));
    s.late_per_s = late as f64 / secs;
    log(&format!(
        "round {}: {name} router {:.0} routed/s ({:.0} copies/s, {:.0} late drops/s), query p50 {:.1} ms p90 {:.1} ms, cores {:.2} router + {:.2} generator",
        i + 1,
        s.routed_per_s,
        s.delivered_per_s,
        s.late_per_s,
        s.query_p50_ms,
        s.query_p90_ms,
        s.router_cores,
        s.generator_cores
    ));
    Ok(s)
}

/// One round of the staged router as an ultrapeer with leaves: pong cache on, QRP.
fn ultrapeer_round(
    cfg: &ThroughputConfig,
    i: usize,
    log: &mut dyn FnMut(&str),
) -> Result<Round, ExperimentError> {
    let secs = cfg.duration.as_secs_f64();
    let rt = seda::Runtime::builder().name("gnutella-bench").build();
    let g = Gnutella::start(
        &rt,
        RouterConfig::default()
            .with_max_peers(cfg.peers + 4)
            .with_max_leaves(cfg.leaves + 4)
            .with_min_outgoing(0)
            .with_advertise(Some(SocketAddr::from(BENCH_ADVERTISE)))
            .with_router_threads((cfg.router_threads, cfg.router_threads))
            .with_max_queue_delay(cfg.max_queue_delay)
            .with_pause_reads_at(cfg.pause_reads_at)
            .with_event_loops(cfg.event_loops),
    )
    .map_err(ExperimentError::other)?;
    rt.start().map_err(ExperimentError::other)?;
    let b = g.stats();
    let (r, cpu) = measured(cfg, g.local_addr())?;
    let a = g.stats();
    g.stop();
    rt.shutdown(Duration::from_secs(2));
    let routed = GnutellaStats::total(&a.routed) - GnutellaStats::total(&b.routed);
    let per = |x: u64, y: u64| x.saturating_sub(y) as f64 / secs;
    let late_per_s = per(a.drops("router_late"), b.drops("router_late"));
    let savings = Savings {
        leaf_copies_per_s: per(a.qrp.leaf_copies, b.qrp.leaf_copies),
        leaf_filtered_per_s: per(a.qrp.leaf_filtered, b.qrp.leaf_filtered),
        leaf_received_per_s: r.leaf_query_copies as f64 / secs,
        pings_answered_per_s: per(a.pong_cache.pings_answered, b.pong_cache.pings_answered),
        ping_copies_saved_per_s: per(a.pong_cache.copies_saved, b.pong_cache.copies_saved),
        pings_throttled_per_s: per(a.pong_cache.throttled, b.pong_cache.throttled),
    };
    let mut s = round("ultrapeer", routed, secs, &r, cpu, Some(a));
    s.late_per_s = late_per_s;
    log(&format!(
        "round {}: ultrapeer with {} leaves {:.0} routed/s ({:.0} copies/s), query p50 {:.1} ms, {:.0} leaf copies/s, {:.0} filtered/s, {:.0} ping copies saved/s",
        i + 1,
        cfg.leaves,
        s.routed_per_s,
        s.delivered_per_s,
        s.query_p50_ms,
        savings.leaf_copies_per_s,
        savings.leaf_filtered_per_s,
        savings.ping_copies_saved_per_s
    ));
    s.savings = Some(savings);
    Ok(s)
}

/// The comparison as Markdown.
pub fn table(r: &Throughput, cfg: &ThroughputConfig, loadavg: &str) -> String {
    let fanout = if cfg.leaves > 0 {
        format!(
            "TTL 2; {} of the peers are leaves: queries reach the other ultrapeers and the \
             leaves whose tables match, pings are answered from the pong cache",
            cfg.leaves
        )
    } else {
        format!(
            "TTL 2: every message is broadcast to the {} other peers",
            cfg.peers.saturating_sub(1)
        )
    };
    let mut s = format!(
        "Gnutella router throughput, {} ({}; load average at start {loadavg}).\n\
         {} simulated peers sending as fast as the router takes them (mix {:.0} % pings, \
         {:.0} % queries, {fanout}), generator and router in one process on the same cores, \
         {} rounds of {:.0} s each{}; the staged router with {} router thread(s), {} socket event loop(s), {} and {}. Latency is one way, sender to receiver; cores are CPU \
         time per second of the round's threads (router: every thread but the generator's).\n\n",
        crate::harness::date_utc(),
        crate::harness::machine_summary(),
        cfg.peers,
        cfg.mix.ping * 100.0,
        cfg.mix.query * 100.0,
        cfg.rounds,
        cfg.duration.as_secs_f64(),
        if cfg.leaves > 0 { "" } else { ", alternating" },
        cfg.router_threads,
        cfg.event_loops
            .map_or_else(|| "one per core".to_owned(), |n| n.to_string()),
        match cfg.pause_reads_at {
            0 => "no read pause".to_owned(),
            n => format!("reads paused at {n} queued reads (back-pressure)"),
        },
        match cfg.max_queue_delay {
            Some(d) => format!(
                "a queue delay bound of {:.1} ms (`late drops`: pings and queries shed unrouted)",
                d.as_secs_f64() * 1e3
            ),
            None => "no queue delay bound".to_owned(),
        },
    );
    let per_round = if cfg.leaves > 0 {
        1
    } else if cfg.inline_too {
        3
    } else {
        2
    };
    s.push_str("| round | router | routed msgs/s | late drops/s | delivered copies/s | sent msgs/s | query p50 ms | query p90 ms | query mean ms | router cores | router CPU us per routed msg | generator cores | other cores |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (i, x) in r.rounds.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {:.3} | {:.2} | {:.2} |\n",
            i / per_round + 1,
            x.router,
            x.routed_per_s,
            x.late_per_s,
            x.delivered_per_s,
            x.sent_per_s,
            x.query_p50_ms,
            x.query_p90_ms,
            x.query_mean_ms,
            x.router_cores,
            if x.routed_per_s > 0.0 {
                x.router_cores * 1e6 / x.routed_per_s
            } else {
                0.0
            },
            x.generator_cores,
            x.other_cores
        ));
    }
    if cfg.leaves > 0 {
        s.push_str(&format!(
            "\nWith {} leaves of {} peers (the router as an ultrapeer: pong cache, QRP; {} word(s) per query):\n\n",
            cfg.leaves, cfg.peers, cfg.query_words
        ));
        s.push_str("| round | leaf copies/s | filtered by QRP/s | received by leaves/s | pings answered from cache/s | ping copies saved/s | pings throttled/s |\n|---:|---:|---:|---:|---:|---:|---:|\n");
        for (i, x) in r.rounds.iter().enumerate() {
            if let Some(v) = &x.savings {
                s.push_str(&format!(
                    "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                    i + 1,
                    v.leaf_copies_per_s,
                    v.leaf_filtered_per_s,
                    v.leaf_received_per_s,
                    v.pings_answered_per_s,
                    v.ping_copies_saved_per_s,
                    v.pings_throttled_per_s
                ));
            }
        }
        return s;
    }
    s.push_str(&format!(
        "\nMedian routed msgs/s: staged {:.0}, plain loop {:.0}; ratio staged / plain = {:.2}.\n",
        r.staged_median, r.plain_median, r.ratio
    ));
    if cfg.inline_too {
        let q = median(
            r.rounds
                .iter()
                .filter(|x| x.router == "staged-inline")
                .map(|x| x.routed_per_s)
                .collect(),
        );
        s.push_str(&format!(
            "Median routed msgs/s of the staged router with inline handoff: {q:.0} ({:.2}x the plain loop).\n",
            if r.plain_median > 0.0 { q / r.plain_median } else { 0.0 }
        ));
    }
    s
}
