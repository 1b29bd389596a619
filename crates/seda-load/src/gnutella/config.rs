//! What a run of simulated peers is asked to do: its settings ([`LoadConfig`]), the
//! message mix ([`Mix`]) and the kinds of message the peers time.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::wire;
use crate::error::LoadError;

/// Message kinds the generator times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ping = 0,
    Query = 1,
    Pong = 2,
    QueryHit = 3,
}

pub(crate) const N_KINDS: usize = 4;
pub(crate) const KIND_NAMES: [&str; N_KINDS] = ["ping", "query", "pong", "queryhit"];

impl Kind {
    /// The kind of payload-type byte `t`, if it is one the generator times.
    pub(crate) fn of(t: u8) -> Option<Kind> {
        match t {
            wire::PING => Some(Kind::Ping),
            wire::QUERY => Some(Kind::Query),
            wire::PONG => Some(Kind::Pong),
            wire::QUERY_HIT => Some(Kind::QueryHit),
            _ => None,
        }
    }
}

/// Shares of the generated messages, adding up to 1. `#[non_exhaustive]`: start from
/// `Default`, [`Mix::from_weights`] or [`Mix::parse`].
///
/// ```
/// use seda_load::gnutella::Mix;
///
/// let mix = Mix::from_weights(3.0, 1.0).unwrap();
/// assert_eq!((mix.ping, mix.query), (0.75, 0.25));
/// assert_eq!(Mix::parse("ping=3,query=1").unwrap(), mix);
/// assert!(Mix::from_weights(-1.0, 1.0).is_err() && Mix::from_weights(0.0, 0.0).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Mix {
    /// Share of pings.
    pub ping: f64,
    /// Share of queries.
    pub query: f64,
}

impl Default for Mix {
    /// SEDA 5.2.3: "query messages constitute 15% of the generated packets"; the
    /// rest are pings.
    fn default() -> Self {
        Mix {
            ping: 0.85,
            query: 0.15,
        }
    }
}

impl Mix {
    /// Parses `ping=85,query=15` (weights, normalised).
    pub fn parse(s: &str) -> Result<Mix, LoadError> {
        let mut m = Mix {
            ping: 0.0,
            query: 0.0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                LoadError::parse(format!("mix: expected TYPE=WEIGHT, got {part:?}"))
            })?;
            let w: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| LoadError::parse(format!("mix: bad weight {v:?}")))?;
            match k.trim() {
                "ping" => m.ping = w,
                "query" => m.query = w,
                other => {
                    return Err(LoadError::parse(format!(
                        "mix: unknown type {other:?} (ping, query)"
                    )));
                }
            }
        }
        Mix::from_weights(m.ping, m.query)
    }

    /// The mix of `ping` and `query` weights, normalised to shares; an error if a
    /// weight is negative or not finite, or both are zero.
    pub fn from_weights(ping: f64, query: f64) -> Result<Mix, LoadError> {
        for w in [ping, query] {
            if !(w.is_finite() && w >= 0.0) {
                return Err(LoadError::parse(format!("mix: bad weight {w}")));
            }
        }
        let sum = ping + query;
        if sum <= 0.0 {
            return Err(LoadError::parse("mix: all weights are zero"));
        }
        Ok(Mix {
            ping: ping / sum,
            query: query / sum,
        })
    }

    pub(crate) fn pick(&self, u: f64) -> Kind {
        if u < self.query {
            Kind::Query
        } else {
            Kind::Ping
        }
    }
}

/// Settings of a load run. `#[non_exhaustive]`: start from `Default` and set what
/// differs with the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoadConfig {
    /// The router (loopback).
    pub router: SocketAddr,
    /// Simulated peers. Default 8.
    pub peers: usize,
    /// Of which leaves (the last `leaves`): they handshake with `X-Ultrapeer:
    /// False`, send a query routing table of `leaf_words` words of the vocabulary,
    /// and get only the queries it matches. Default 0.
    pub leaves: usize,
    /// Words queries are made of when there are leaves (`k0000`, `k0001`, ...).
    /// Default 1,000.
    pub vocabulary: usize,
    /// Words each leaf shares (drawn from the vocabulary by the seed). Default 100.
    pub leaf_words: usize,
    /// Words per query when there are leaves. Default 1.
    pub query_words: usize,
    /// Generator threads. Default 1.
    pub threads: usize,
    /// Total messages per second over all peers; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Measured time.
    pub duration: Duration,
    /// Latency before this offset into the run is left out of the summary (not of
    /// the time series).
    pub warmup: Duration,
    /// Message mix.
    pub mix: Mix,
    /// TTL of generated pings and queries. Default 2 (the router forwards them
    /// with TTL 1 to every other peer).
    pub ttl: u8,
    /// Query payload bytes (min speed, text, NUL). Default 32.
    pub query_bytes: usize,
    /// Share of received queries a peer answers with a query hit. Default 0.1.
    pub hit_fraction: f64,
    /// Seed of the mix.
    pub seed: u64,
    /// Bytes a peer may have unsent before it stops generating. Default 1 MiB.
    pub max_pending_bytes: usize,
    /// One ping copy in this many is timed (by its sequence number, so the sample
    /// is unbiased); every query, query hit and pong is. Default 1 (every copy); the
    /// throughput experiment samples to keep the generator's cost per copy low.
    pub ping_sample: u16,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            router: SocketAddr::from(([127, 0, 0, 1], 6346)),
            peers: 8,
            leaves: 0,
            vocabulary: 1000,
            leaf_words: 100,
            query_words: 1,
            threads: 1,
            rate: Some(1000.0),
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            mix: Mix::default(),
            ttl: 2,
            query_bytes: 32,
            hit_fraction: 0.1,
            seed: 1,
            max_pending_bytes: 1 << 20,
            ping_sample: 1,
        }
    }
}

crate::setters::setters!(LoadConfig {
    with_router: router: SocketAddr,
    with_peers: peers: usize,
    with_leaves: leaves: usize,
    with_vocabulary: vocabulary: usize,
    with_leaf_words: leaf_words: usize,
    with_query_words: query_words: usize,
    with_threads: threads: usize,
    with_rate: rate: Option<f64>,
    with_duration: duration: Duration,
    with_warmup: warmup: Duration,
    with_mix: mix: Mix,
    with_ttl: ttl: u8,
    with_query_bytes: query_bytes: usize,
    with_hit_fraction: hit_fraction: f64,
    with_seed: seed: u64,
    with_max_pending_bytes: max_pending_bytes: usize,
    with_ping_sample: ping_sample: u16,
});

impl LoadConfig {
    /// Whether peer `i` is a leaf.
    pub(crate) fn is_leaf(&self, i: usize) -> bool {
        i >= self.peers - self.leaves
    }

    /// Word `i` of the vocabulary.
    pub(crate) fn word(i: usize) -> String {
        format!("k{i:04}")
    }

    /// The words leaf `i` shares: `leaf_words` distinct words, drawn by the seed.
    pub(crate) fn leaf_share(&self, i: usize) -> Vec<String> {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ 0x5eda_0000 ^ i as u64);
        let mut picked = std::collections::BTreeSet::new();
        while picked.len() < self.leaf_words.min(self.vocabulary) {
            picked.insert(rng.usize(..self.vocabulary));
        }
        picked.into_iter().map(LoadConfig::word).collect()
    }

    /// Checks each field's range.
    pub fn validate(&self) -> Result<(), LoadError> {
        if !self.router.ip().is_loopback() {
            return Err(LoadError::config(format!(
                "router {} is not on loopback",
                self.router
            )));
        }
        if self.peers < 2 {
            return Err(LoadError::config(
                "at least 2 peers are needed (one to send, one to receive)",
            ));
        }
        if self.leaves >= self.peers {
            return Err(LoadError::config("at least one peer must be an ultrapeer"));
        }
        if self.leaves > 0
            && (self.vocabulary == 0
                || self.leaf_words == 0
                || self.leaf_words > self.vocabulary
                || !(1..=8).contains(&self.query_words))
        {
            return Err(LoadError::config(
                "leaves need 1 <= leaf words <= vocabulary and 1..=8 query words",
            ));
        }
        if self.threads == 0 || self.threads > self.peers {
            return Err(LoadError::config("threads must be 1..=peers"));
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(LoadError::config("rate must be positive"));
        }
        if self.duration.is_zero() {
            return Err(LoadError::config("duration must be positive"));
        }
        if !(3..=4096).contains(&self.query_bytes) {
            return Err(LoadError::config("query bytes must be 3..=4096"));
        }
        if !(0.0..=1.0).contains(&self.hit_fraction) {
            return Err(LoadError::config("hit fraction must be 0..=1"));
        }
        if self.ttl == 0 {
            return Err(LoadError::config("ttl must be at least 1"));
        }
        Ok(())
    }
}
