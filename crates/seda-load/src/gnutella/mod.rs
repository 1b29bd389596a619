//! `seda load gnutella`: simulated peers against a router.
//!
//! Each simulated peer is a real 0.6 connection (an ultrapeer handshake, then
//! binary messages). Peers send a mix of pings and queries (SEDA 5.2.3's traffic
//! model: 15 % queries, ~32-byte query payloads) at a total rate, or as fast as the
//! router takes them; they answer a fraction of the queries they receive with query
//! hits; and they time every message the router delivers (the GUIDs of generated
//! messages carry their send time). The report gives per-type latency (one way for
//! pings and queries, round trip for hits and the router's own pongs), delivered
//! copies and estimated drops, routed messages per second, and Jain's fairness over
//! peers. The peers speak the protocol through their own small codec ([`wire`]).

mod config;
mod sim;
pub mod wire;

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::LoadError;
use config::{KIND_NAMES, Kind, N_KINDS};
pub use config::{LoadConfig, Mix};

/// Latency summary of one kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct KindStats {
    /// Messages of this kind the peers sent.
    pub sent: u64,
    /// Copies received by the peers.
    pub received: u64,
    /// Copies expected (broadcasts: sent x (peers - 1) when TTL >= 2).
    pub expected: Option<u64>,
    /// Mean latency, ms (after the warm-up).
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

/// One second of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct LoadPoint {
    /// Seconds since the start.
    pub t: u64,
    /// Copies received that second, by kind (ping, query, pong, queryhit).
    pub received: [u64; N_KINDS],
    /// Mean latency that second, ms, by kind (0 when none arrived).
    pub mean_ms: [f64; N_KINDS],
}

/// What a load run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct LoadReport {
    /// Simulated peers.
    pub peers: usize,
    /// Of which leaves.
    #[serde(default)]
    pub leaves: usize,
    /// Query copies the leaves received (the router forwards a leaf only the
    /// queries its table matches).
    #[serde(default)]
    pub leaf_query_copies: u64,
    /// Offered rate, messages/s (`None`: as fast as possible).
    pub rate: Option<f64>,
    /// Measured seconds.
    pub duration_s: f64,
    /// Per kind: ping, query, pong (router's own, round trip), queryhit (round trip).
    pub kinds: std::collections::BTreeMap<String, KindStats>,
    /// Messages the peers sent per second.
    pub sent_per_s: f64,
    /// Copies the peers received per second.
    pub delivered_per_s: f64,
    /// Distinct messages the router routed per second, as the peers saw them:
    /// broadcast copies / (peers - 1) + query hits + pongs.
    pub routed_per_s: f64,
    /// Expected broadcast copies that never arrived (0 with leaves, whose copies
    /// depend on their tables, or with the router's pong cache).
    pub lost_copies: u64,
    /// Jain's fairness index over the copies each peer's messages got delivered.
    pub fairness: Option<f64>,
    /// Times a peer had `max_pending_bytes` unsent and skipped generating.
    pub write_stalls: u64,
    /// Peers the router closed.
    pub closed_by_router: u64,
    /// Per second.
    pub series: Vec<LoadPoint>,
}

fn summary(h: &Histogram<u64>, sent: u64, received: u64, expected: Option<u64>) -> KindStats {
    use crate::metrics::quantile_ms;
    KindStats {
        sent,
        received,
        expected,
        mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
        p50_ms: quantile_ms(h, 0.5),
        p90_ms: quantile_ms(h, 0.9),
        p99_ms: quantile_ms(h, 0.99),
        max_ms: if h.is_empty() {
            0.0
        } else {
            h.max() as f64 / 1000.0
        },
    }
}

/// Slots of a simulated leaf's query routing table (2^16, as LimeWire's).
const QRP_BITS: u32 = 16;

/// A GUID for a leaf's QRP messages (never timed: byte 15 is not the timed mark).
fn qrp_guid(i: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&(i as u64).to_le_bytes());
    g[8] = 0xff;
    g
}

/// Connects the peers and runs the load. `progress` gets a line per connected peer
/// group and at the end.
pub fn run(cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    cfg.validate()?;
    let mut streams = Vec::with_capacity(cfg.peers);
    for i in 0..cfg.peers {
        let leaf = cfg.is_leaf(i);
        let mut s = wire::handshake(
            cfg.router,
            &format!("seda-load-gnutella/{i}"),
            leaf,
            Duration::from_secs(10),
        )
        .map_err(LoadError::io(format!("peer {i}")))?;
        if leaf {
            // The leaf's table first: the router forwards it no query before.
            let words = cfg.leaf_share(i);
            for p in wire::qrp_payloads(&words, QRP_BITS) {
                let mut m = Vec::with_capacity(wire::HEADER_LEN + p.len());
                wire::write_message(&mut m, qrp_guid(i), wire::QRP, 1, 0, &p);
                std::io::Write::write_all(&mut s, &m)
                    .map_err(LoadError::io(format!("leaf {i}")))?;
            }
        }
        streams.push((i, s));
    }
    // Let the router finish establishing, take the leaves' tables and send its
    // opening messages.
    std::thread::sleep(Duration::from_millis(if cfg.leaves > 0 {
        500
    } else {
        200
    }));
    let epoch = Instant::now();
    let start = epoch;
    let end = start + cfg.duration;
    let mut groups: Vec<Vec<(usize, std::net::TcpStream)>> =
        (0..cfg.threads).map(|_| Vec::new()).collect();
    for (i, s) in streams {
        groups[i % cfg.threads].push((i, s));
    }
    let results: Vec<Result<sim::ThreadResult, LoadError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|g| {
                // Named, so that CPU accounting tells the generator from the router.
                std::thread::Builder::new()
                    .name(format!("gnutella-load-{}", g.first().map_or(0, |p| p.0)))
                    .spawn_scoped(scope, move || {
                        sim::run_thread(cfg, g, cfg.peers, epoch, start, end)
                            .map_err(LoadError::io("generator thread"))
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or(Err(LoadError::Panicked("generator thread"))),
                Err(e) => Err(LoadError::io("cannot start a generator thread")(e)),
            })
            .collect()
    });
    let mut sent = [0u64; N_KINDS];
    let mut received = [0u64; N_KINDS];
    let mut lat: Vec<Histogram<u64>> = (0..N_KINDS)
        .map(|_| crate::metrics::rt_histogram(3))
        .collect();
    let secs = cfg.duration.as_secs() as usize + 2;
    let mut series = vec![sim::Second::default(); secs];
    let mut delivered_from = vec![0u64; cfg.peers];
    let (mut stalls, mut closed, mut leaf_queries) = (0, 0, 0);
    for r in results {
        let r = r?;
        for k in 0..N_KINDS {
            sent[k] += r.sent[k];
            received[k] += r.received[k];
            let _ = lat[k].add(&r.latency[k]);
        }
        for (a, b) in series.iter_mut().zip(&r.series) {
            for k in 0..N_KINDS {
                a.received[k] += b.received[k];
                a.timed[k] += b.timed[k];
                a.sum_us[k] += b.sum_us[k];
            }
        }
        for (a, b) in delivered_from.iter_mut().zip(&r.delivered_from) {
            *a += b;
        }
        stalls += r.write_stalls;
        closed += r.closed_by_router;
        leaf_queries += r.leaf_query_copies;
    }
    let d = cfg.duration.as_secs_f64();
    let fanout = (cfg.peers - 1) as u64;
    // With leaves every ultrapeer gets every broadcast but leaves only what their
    // tables match (and pings may be answered from a pong cache): no expectation.
    let broadcast = |k: usize| (cfg.ttl >= 2 && cfg.leaves == 0).then_some(sent[k] * fanout);
    let mut kinds = std::collections::BTreeMap::new();
    for (k, name) in KIND_NAMES.iter().enumerate() {
        let expected = if k <= Kind::Query as usize {
            broadcast(k)
        } else {
            None
        };
        kinds.insert(
            (*name).to_owned(),
            summary(&lat[k], sent[k], received[k], expected),
        );
    }
    let lost = (0..=Kind::Query as usize)
        .filter_map(|k| broadcast(k).map(|e| e.saturating_sub(received[k])))
        .sum();
    let routed =
        (received[0] + received[1]) as f64 / fanout as f64 + (received[2] + received[3]) as f64;
    Ok(LoadReport {
        peers: cfg.peers,
        leaves: cfg.leaves,
        leaf_query_copies: leaf_queries,
        rate: cfg.rate,
        duration_s: d,
        kinds,
        sent_per_s: sent[..2].iter().sum::<u64>() as f64 / d,
        delivered_per_s: received.iter().sum::<u64>() as f64 / d,
        routed_per_s: routed / d,
        lost_copies: lost,
        fairness: crate::metrics::jain_index(&delivered_from),
        write_stalls: stalls,
        closed_by_router: closed,
        series: series
            .iter()
            .enumerate()
            .take(cfg.duration.as_secs() as usize)
            .map(|(t, sec)| LoadPoint {
                t: t as u64,
                received: sec.received,
                mean_ms: std::array::from_fn(|k| {
                    if sec.timed[k] == 0 {
                        0.0
                    } else {
                        sec.sum_us[k] as f64 / sec.timed[k] as f64 / 1000.0
                    }
                }),
            })
            .collect(),
    })
}

impl LoadReport {
    /// A short human summary.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} peers, {:.0} s, offered {}: sent {:.0}/s, delivered {:.0} copies/s, routed {:.0} msgs/s, lost copies {}, fairness {}\n",
            self.peers,
            self.duration_s,
            self.rate
                .map_or("as fast as possible".to_owned(), |r| format!(
                    "{r:.0} msgs/s"
                )),
            self.sent_per_s,
            self.delivered_per_s,
            self.routed_per_s,
            self.lost_copies,
            self.fairness.map_or("-".into(), |f| format!("{f:.3}")),
        );
        if self.leaves > 0 {
            s.push_str(&format!(
                "{} of the peers are leaves; they received {} query copies\n",
                self.leaves, self.leaf_query_copies
            ));
        }
        s.push_str("type       sent   received   mean ms    p50 ms    p90 ms    p99 ms\n");
        for (k, v) in &self.kinds {
            s.push_str(&format!(
                "{k:<9} {:>6} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
                v.sent, v.received, v.mean_ms, v.p50_ms, v.p90_ms, v.p99_ms
            ));
        }
        s
    }
}
