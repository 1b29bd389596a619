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
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        ThroughputConfig {
            peers: 4,
            duration: Duration::from_secs(10),
            rounds: 3,
            threads: 1,
            mix: Mix::default(),
        }
    }
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

fn load(cfg: &ThroughputConfig, router: SocketAddr) -> Result<LoadReport, String> {
    seda_load::gnutella::run(&LoadConfig {
        router,
        peers: cfg.peers,
        threads: cfg.threads,
        rate: None,
        duration: cfg.duration,
        mix: cfg.mix.clone(),
        hit_fraction: 0.0,
        ..LoadConfig::default()
    })
}

fn round(
    router: &str,
    routed: u64,
    secs: f64,
    r: &LoadReport,
    stats: Option<GnutellaStats>,
) -> Round {
    Round {
        router: router.to_owned(),
        routed_per_s: routed as f64 / secs,
        delivered_per_s: r.delivered_per_s,
        sent_per_s: r.sent_per_s,
        query_mean_ms: r.kinds.get("query").map_or(0.0, |k| k.mean_ms),
        stats,
    }
}

/// Runs the comparison; `log` gets a line per round.
pub fn throughput(cfg: &ThroughputConfig, log: &mut dyn FnMut(&str)) -> Result<Throughput, String> {
    let mut rounds = Vec::new();
    let secs = cfg.duration.as_secs_f64();
    for i in 0..cfg.rounds {
        let plain = PlainLoop::start().map_err(|e| format!("plain loop: {e}"))?;
        let before = plain.routed();
        let r = load(cfg, plain.addr())?;
        let routed = plain.routed() - before;
        drop(plain);
        let p = round("plain", routed, secs, &r, None);
        log(&format!(
            "round {}: plain loop {:.0} routed/s ({:.0} copies/s)",
            i + 1,
            p.routed_per_s,
            p.delivered_per_s
        ));
        rounds.push(p);

        let rt = seda::Runtime::builder().name("gnutella-bench").build();
        let g = Gnutella::start(
            &rt,
            RouterConfig {
                max_peers: cfg.peers + 4,
                min_outgoing: 0,
                advertise: Some(SocketAddr::from(BENCH_ADVERTISE)),
                // The plain loop broadcasts every ping, as SEDA's router did.
                pong_cache: None,
                ..RouterConfig::default()
            },
        )
        .map_err(|e| e.to_string())?;
        rt.start().map_err(|e| e.to_string())?;
        let before = GnutellaStats::total(&g.stats().routed);
        let r = load(cfg, g.local_addr())?;
        let stats = g.stats();
        let routed = GnutellaStats::total(&stats.routed) - before;
        g.stop();
        rt.shutdown(Duration::from_secs(2));
        let s = round("staged", routed, secs, &r, Some(stats));
        log(&format!(
            "round {}: staged router {:.0} routed/s ({:.0} copies/s)",
            i + 1,
            s.routed_per_s,
            s.delivered_per_s
        ));
        rounds.push(s);
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
    let (staged, plain) = (pick("staged"), pick("plain"));
    Ok(Throughput {
        rounds,
        staged_median: staged,
        plain_median: plain,
        ratio: if plain > 0.0 { staged / plain } else { 0.0 },
    })
}

/// The comparison as Markdown.
pub fn table(r: &Throughput, cfg: &ThroughputConfig, loadavg: &str) -> String {
    let mut s = format!(
        "Gnutella router throughput, {} ({}; load average at start {loadavg}).\n\
         {} simulated peers sending as fast as the router takes them (mix {:.0} % pings, \
         {:.0} % queries, TTL 2: every message is broadcast to the {} other peers), \
         generator and router in one process on the same cores, {} rounds of {:.0} s each, alternating.\n\n",
        crate::harness::date_utc(),
        crate::harness::machine_summary(),
        cfg.peers,
        cfg.mix.ping * 100.0,
        cfg.mix.query * 100.0,
        cfg.peers.saturating_sub(1),
        cfg.rounds,
        cfg.duration.as_secs_f64(),
    );
    s.push_str("| round | router | routed msgs/s | delivered copies/s | sent msgs/s | query mean ms |\n|---:|---|---:|---:|---:|---:|\n");
    for (i, x) in r.rounds.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} |\n",
            i / 2 + 1,
            x.router,
            x.routed_per_s,
            x.delivered_per_s,
            x.sent_per_s,
            x.query_mean_ms
        ));
    }
    s.push_str(&format!(
        "\nMedian routed msgs/s: staged {:.0}, plain loop {:.0}; ratio staged / plain = {:.2}.\n",
        r.staged_median, r.plain_median, r.ratio
    ));
    s
}
