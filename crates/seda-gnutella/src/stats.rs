//! The router's counters and their serialisable snapshot.
//!
//! Hot-path counts are tallied per batch in a [`Tally`] and added to the shared
//! atomics once per batch, so router threads do not bounce a cache line per
//! message. The snapshot is one serde type that the CLI, the admin listener and the
//! tests all read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

use crate::outq::{CLASSES, Value};
use crate::proto::message::{Malformed, MsgType};
use crate::routing::Dropped;

/// Message types in stats order.
pub(crate) const TYPES: [MsgType; 10] = [
    MsgType::Ping,
    MsgType::Pong,
    MsgType::Bye,
    MsgType::Qrp,
    MsgType::Vendor,
    MsgType::StdVendor,
    MsgType::Push,
    MsgType::Query,
    MsgType::QueryHit,
    MsgType::Unknown(0xff),
];

fn type_index(k: MsgType) -> usize {
    match k {
        MsgType::Ping => 0,
        MsgType::Pong => 1,
        MsgType::Bye => 2,
        MsgType::Qrp => 3,
        MsgType::Vendor => 4,
        MsgType::StdVendor => 5,
        MsgType::Push => 6,
        MsgType::Query => 7,
        MsgType::QueryHit => 8,
        MsgType::Unknown(_) => 9,
    }
}

const N_DROPS: usize = 9;
const DROPS: [Dropped; N_DROPS] = [
    Dropped::Duplicate,
    Dropped::TtlExpired,
    Dropped::NoRoute,
    Dropped::Loop,
    Dropped::SlowPeer,
    Dropped::NotRouted,
    Dropped::Overload,
    Dropped::Throttled,
    Dropped::Late,
];
const MALFORMED: [Malformed; 6] = [
    Malformed::TooShort,
    Malformed::AncientQuery,
    Malformed::UnterminatedQuery,
    Malformed::ImproperHopsTtl,
    Malformed::ZeroTtl,
    Malformed::UnusableAddress,
];

/// Connection-level events, counted by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Event {
    HandshakeOk,
    HandshakeMalformed,
    HandshakeOversized,
    HandshakeLegacy,
    HandshakeTimeout,
    RefusedNormal,
    RefusedLeaf,
    RefusedFull,
    RefusedByPeer,
    TooLarge,
    InflateError,
    ByeReceived,
    ByeSent,
    SlowPeerClosed,
    OwnPong,
    PongSuppressed,
    VendorAnswered,
    ConnectFailed,
    Connected,
    RouterRefusedJoin,
    RefusedLeavesFull,
    RateLimited,
    RateLimitedNet,
    ReadPaused,
}

const N_EVENTS: usize = 24;
const EVENTS: [(Event, &str); N_EVENTS] = [
    (Event::HandshakeOk, "handshake_ok"),
    (Event::HandshakeMalformed, "handshake_malformed"),
    (Event::HandshakeOversized, "handshake_oversized"),
    (Event::HandshakeLegacy, "handshake_legacy_0_4"),
    (Event::HandshakeTimeout, "handshake_timeout"),
    (Event::RefusedNormal, "refused_normal_node"),
    (Event::RefusedLeaf, "refused_leaf"),
    (Event::RefusedFull, "refused_full"),
    (Event::RefusedByPeer, "refused_by_peer"),
    (Event::TooLarge, "payload_too_large"),
    (Event::InflateError, "inflate_error"),
    (Event::ByeReceived, "bye_received"),
    (Event::ByeSent, "bye_sent"),
    (Event::SlowPeerClosed, "slow_peer_closed"),
    (Event::OwnPong, "own_pong_sent"),
    (Event::PongSuppressed, "own_pong_suppressed"),
    (Event::VendorAnswered, "vendor_answered"),
    (Event::ConnectFailed, "connect_failed"),
    (Event::Connected, "outgoing_connected"),
    (Event::RouterRefusedJoin, "router_refused_join"),
    (Event::RefusedLeavesFull, "refused_leaves_full"),
    (Event::RateLimited, "refused_rate_limit"),
    (Event::RateLimitedNet, "refused_rate_limit_net"),
    (Event::ReadPaused, "read_paused"),
];

/// Counts of the ultrapeer's query routing and pong cache (see [`QrpStats`] and
/// [`PongCacheStats`] for their meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    QrpMessages = 0,
    QrpTables,
    QrpMalformed,
    QrpOverMemory,
    QrpTablesSent,
    QrpLeafCopies,
    QrpLeafFiltered,
    QrpUltrapeerFiltered,
    PingsAnswered,
    PongsFromCache,
    PingCopiesSaved,
    PongRefreshes,
    PingsThrottled,
}

const N_COUNTS: usize = 13;

/// Counts of one batch, added to [`Counters`] at its end.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) received: [u64; 10],
    pub(crate) routed: [u64; 10],
    pub(crate) sent: [u64; 10],
    pub(crate) dropped: [u64; N_DROPS],
    pub(crate) malformed: [u64; 6],
    pub(crate) slow: [u64; CLASSES],
    pub(crate) counts: [u64; N_COUNTS],
}

impl Tally {
    pub(crate) fn count(&mut self, c: Count, n: u64) {
        self.counts[c as usize] += n;
    }
    pub(crate) fn received(&mut self, k: MsgType) {
        self.received[type_index(k)] += 1;
    }
    pub(crate) fn routed(&mut self, k: MsgType) {
        self.routed[type_index(k)] += 1;
    }
    pub(crate) fn sent(&mut self, k: MsgType, n: u64) {
        self.sent[type_index(k)] += n;
    }
    pub(crate) fn dropped(&mut self, d: Dropped) {
        self.dropped_n(d, 1);
    }
    pub(crate) fn dropped_n(&mut self, d: Dropped, n: u64) {
        if let Some(i) = DROPS.iter().position(|x| *x == d) {
            self.dropped[i] += n;
        }
    }
    pub(crate) fn malformed(&mut self, m: Malformed) {
        if let Some(i) = MALFORMED.iter().position(|x| *x == m) {
            self.malformed[i] += 1;
        }
    }
    pub(crate) fn slow_drops(&mut self, d: &[u32; CLASSES]) {
        for (a, b) in self.slow.iter_mut().zip(d) {
            *a += u64::from(*b);
        }
    }
}

fn atomics<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

fn add<const N: usize>(to: &[AtomicU64; N], from: &[u64; N]) {
    for (a, b) in to.iter().zip(from) {
        if *b != 0 {
            a.fetch_add(*b, Relaxed);
        }
    }
}

/// Levels (not counts) a stage publishes: the stage that owns the state sets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gauge {
    /// Connections in the handshake (server).
    Handshaking = 0,
    /// Entries of the duplicate/reverse-path table (router, at each tick).
    RouteEntries = 1,
    /// Entries of the push table (router, at each tick).
    PushEntries = 2,
    /// Hosts in the host cache (catcher).
    KnownHosts = 3,
    /// Complete query routing tables held (router).
    QrpTables = 4,
    /// Bytes the received query routing tables hold (router).
    QrpBytes = 5,
    /// Pongs in the pong cache (router).
    CachedPongs = 6,
}

const GAUGES: usize = 7;

const VALUES: [Value; CLASSES] = [
    Value::Ping,
    Value::Pong,
    Value::Query,
    Value::Reply,
    Value::Control,
];

/// The counters of one stage. Each stage owns its own and is the only writer;
/// [`GnutellaStats::from_counters`] sums them.
#[derive(Debug)]
pub(crate) struct Counters {
    received: [AtomicU64; 10],
    routed: [AtomicU64; 10],
    sent: [AtomicU64; 10],
    dropped: [AtomicU64; N_DROPS],
    malformed: [AtomicU64; 6],
    slow: [AtomicU64; CLASSES],
    events: [AtomicU64; N_EVENTS],
    gauges: [AtomicU64; GAUGES],
    counts: [AtomicU64; N_COUNTS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            received: atomics(),
            routed: atomics(),
            sent: atomics(),
            dropped: atomics(),
            malformed: atomics(),
            slow: atomics(),
            events: atomics(),
            gauges: atomics(),
            counts: atomics(),
        }
    }
}

impl Counters {
    pub(crate) fn add(&self, t: &Tally) {
        add(&self.received, &t.received);
        add(&self.routed, &t.routed);
        add(&self.sent, &t.sent);
        add(&self.dropped, &t.dropped);
        add(&self.malformed, &t.malformed);
        add(&self.slow, &t.slow);
        add(&self.counts, &t.counts);
    }

    /// Adds `n` to count `c` (outside a batch's tally).
    pub(crate) fn count(&self, c: Count, n: u64) {
        self.counts[c as usize].fetch_add(n, Relaxed);
    }

    /// Counts `n` messages of type `k` sent (our own, outside a batch's tally).
    pub(crate) fn sent(&self, k: MsgType, n: u64) {
        self.sent[type_index(k)].fetch_add(n, Relaxed);
    }

    pub(crate) fn event(&self, e: Event) {
        if let Some(i) = EVENTS.iter().position(|(x, _)| *x == e) {
            self.events[i].fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn gauge(&self, g: Gauge, v: usize) {
        self.gauges[g as usize].store(v as u64, Relaxed);
    }

    pub(crate) fn gauge_add(&self, g: Gauge, d: isize) {
        if d >= 0 {
            self.gauges[g as usize].fetch_add(d as u64, Relaxed);
        } else {
            self.gauges[g as usize].fetch_sub(d.unsigned_abs() as u64, Relaxed);
        }
    }

    fn read<const N: usize>(a: &[AtomicU64; N]) -> [u64; N] {
        std::array::from_fn(|i| a[i].load(Relaxed))
    }
}

fn sum<const N: usize>(parts: &[&Counters], f: impl Fn(&Counters) -> [u64; N]) -> [u64; N] {
    let mut out = [0u64; N];
    for p in parts {
        for (o, v) in out.iter_mut().zip(f(p)) {
            *o += v;
        }
    }
    out
}

fn nonzero<'a, T: 'a>(
    names: impl Iterator<Item = T>,
    values: &[u64],
    name: impl Fn(T) -> String,
) -> BTreeMap<String, u64> {
    names
        .zip(values)
        .filter(|(_, v)| **v > 0)
        .map(|(n, v)| (name(n), *v))
        .collect()
}

impl GnutellaStats {
    /// The counters of the stages (each stage counts its own), summed.
    pub(crate) fn from_counters(parts: &[&Counters]) -> GnutellaStats {
        let received = sum(parts, |c| Counters::read(&c.received));
        let routed = sum(parts, |c| Counters::read(&c.routed));
        let sent = sum(parts, |c| Counters::read(&c.sent));
        let dropped = sum(parts, |c| Counters::read(&c.dropped));
        let malformed = sum(parts, |c| Counters::read(&c.malformed));
        let slow = sum(parts, |c| Counters::read(&c.slow));
        let events = sum(parts, |c| Counters::read(&c.events));
        let gauges = sum(parts, |c| Counters::read(&c.gauges));
        let counts = sum(parts, |c| Counters::read(&c.counts));
        let n = |x: Count| counts[x as usize];
        let g = |x: Gauge| gauges[x as usize] as usize;
        let by_type = |v: &[u64]| nonzero(TYPES.iter(), v, |t| t.name().to_owned());
        let mut d = nonzero(DROPS.iter(), &dropped, |d| d.name().to_owned());
        d.extend(nonzero(MALFORMED.iter(), &malformed, |m| {
            format!("malformed_{}", m.name())
        }));
        GnutellaStats {
            received: by_type(&received),
            routed: by_type(&routed),
            sent: by_type(&sent),
            dropped: d,
            slow_peer_drops: nonzero(VALUES.iter(), &slow, |v| v.name().to_owned()),
            events: nonzero(EVENTS.iter(), &events, |(_, n)| (*n).to_owned()),
            handshaking: g(Gauge::Handshaking),
            route_entries: g(Gauge::RouteEntries),
            push_entries: g(Gauge::PushEntries),
            known_hosts: g(Gauge::KnownHosts),
            qrp: QrpStats {
                tables: g(Gauge::QrpTables),
                table_bytes: g(Gauge::QrpBytes),
                messages: n(Count::QrpMessages),
                tables_received: n(Count::QrpTables),
                malformed: n(Count::QrpMalformed),
                over_memory: n(Count::QrpOverMemory),
                tables_sent: n(Count::QrpTablesSent),
                leaf_copies: n(Count::QrpLeafCopies),
                leaf_filtered: n(Count::QrpLeafFiltered),
                ultrapeer_filtered: n(Count::QrpUltrapeerFiltered),
            },
            pong_cache: PongCacheStats {
                cached: g(Gauge::CachedPongs),
                pings_answered: n(Count::PingsAnswered),
                pongs_sent: n(Count::PongsFromCache),
                copies_saved: n(Count::PingCopiesSaved),
                refreshes: n(Count::PongRefreshes),
                throttled: n(Count::PingsThrottled),
            },
            ..GnutellaStats::default()
        }
    }
}

/// One connection in a [`GnutellaStats`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStats {
    /// Connection id.
    pub conn: u64,
    /// Remote address.
    pub addr: String,
    /// Whether we opened it.
    pub outgoing: bool,
    /// The peer's `User-Agent`.
    pub user_agent: String,
    /// Whether each direction is compressed: (we send, they send).
    pub deflate: (bool, bool),
    /// Messages received from it.
    pub received: u64,
    /// Messages sent to it.
    pub sent: u64,
    /// Messages to it dropped by value.
    pub dropped: u64,
    /// Bytes in our outgoing queue for it.
    pub queued_bytes: usize,
    /// Whether it is one of our leaves.
    pub leaf: bool,
    /// Its query routing table, once complete: (slots, slots present).
    pub qrp_table: Option<(usize, usize)>,
}

/// What query routing did (QRP: leaves' tables, last-hop filtering, our table).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct QrpStats {
    /// Complete tables held (leaves' and ultrapeers').
    pub tables: usize,
    /// Bytes those tables (and inflaters of patches in progress) hold.
    pub table_bytes: usize,
    /// QRP messages (RESET, PATCH) received.
    pub messages: u64,
    /// Patch sequences completed (a table received or updated).
    pub tables_received: u64,
    /// Peers dropped for a malformed QRP message.
    pub malformed: u64,
    /// Peers dropped because their table would pass the memory limit.
    pub over_memory: u64,
    /// Tables (or updates) we sent ultrapeers.
    pub tables_sent: u64,
    /// Query copies sent to leaves whose table matched.
    pub leaf_copies: u64,
    /// Query copies not sent to a leaf because its table did not match (or it
    /// has sent none).
    pub leaf_filtered: u64,
    /// Last-hop query copies not sent to an ultrapeer whose table did not match.
    pub ultrapeer_filtered: u64,
}

/// What the pong cache did (0.6 ping/pong scheme).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct PongCacheStats {
    /// Pongs cached now.
    pub cached: usize,
    /// Pings answered from the cache instead of broadcast.
    pub pings_answered: u64,
    /// Cached pongs sent.
    pub pongs_sent: u64,
    /// Ping copies a broadcast would have sent (to every other ultrapeer).
    pub copies_saved: u64,
    /// Times the cache was refilled by pinging our ultrapeers.
    pub refreshes: u64,
    /// Pings dropped: the peer pinged again within its throttle period.
    pub throttled: u64,
}

/// A snapshot of a router's counters. Maps leave out zero counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct GnutellaStats {
    /// Established connections (ultrapeers and leaves).
    pub peers: usize,
    /// Of which leaves.
    pub leaves: usize,
    /// Connections in the handshake.
    pub handshaking: usize,
    /// Messages received, by type.
    pub received: BTreeMap<String, u64>,
    /// Messages routed (sent on to at least one connection), by type.
    pub routed: BTreeMap<String, u64>,
    /// Copies sent, by type (a broadcast counts once per connection); our own
    /// messages (pongs, keep-alive pings, vendor messages, Byes) included.
    pub sent: BTreeMap<String, u64>,
    /// Messages dropped, by reason (`malformed_*`: broke a payload rule).
    pub dropped: BTreeMap<String, u64>,
    /// Messages dropped from slow peers' queues, by value class.
    pub slow_peer_drops: BTreeMap<String, u64>,
    /// Connection events: handshakes, refusals, Byes, bad input.
    pub events: BTreeMap<String, u64>,
    /// Entries of the duplicate/reverse-path table.
    pub route_entries: usize,
    /// Entries of the push-route table.
    pub push_entries: usize,
    /// Hosts in the catcher's cache.
    pub known_hosts: usize,
    /// Bytes in all outgoing queues.
    pub queued_bytes: usize,
    /// Query routing tables.
    pub qrp: QrpStats,
    /// The pong cache.
    pub pong_cache: PongCacheStats,
    /// Per connection.
    pub connections: Vec<PeerStats>,
}

impl GnutellaStats {
    /// Total over a by-type map.
    pub fn total(map: &BTreeMap<String, u64>) -> u64 {
        map.values().sum()
    }

    /// A count of `events` by name (0 if absent).
    pub fn event(&self, name: &str) -> u64 {
        self.events.get(name).copied().unwrap_or(0)
    }

    /// A count of `dropped` by reason (0 if absent).
    pub fn drops(&self, reason: &str) -> u64 {
        self.dropped.get(reason).copied().unwrap_or(0)
    }

    /// Appends the counters in Prometheus text format (`seda_gnutella_*`).
    pub fn write_prometheus(&self, out: &mut String) {
        use seda::MetricKind::{Counter, Gauge};
        let mut w = seda::PrometheusText::new(out);
        let maps: [(&str, &str, &str, &BTreeMap<String, u64>); 6] = [
            (
                "received_total",
                "type",
                "Messages received, by type.",
                &self.received,
            ),
            (
                "routed_total",
                "type",
                "Messages routed to at least one connection, by type.",
                &self.routed,
            ),
            ("sent_total", "type", "Copies sent, by type.", &self.sent),
            (
                "dropped_total",
                "reason",
                "Messages dropped, by reason.",
                &self.dropped,
            ),
            (
                "slow_peer_drops_total",
                "class",
                "Messages dropped from slow peers' queues, by value class.",
                &self.slow_peer_drops,
            ),
            ("events_total", "event", "Connection events.", &self.events),
        ];
        for (name, label, help, map) in maps {
            let name = format!("seda_gnutella_{name}");
            w.family(&name, Counter, help);
            for (k, v) in map {
                w.sample(&name, &[(label, k)], *v);
            }
        }
        let q = &self.qrp;
        let pc = &self.pong_cache;
        let counters = [
            ("qrp_messages_total", "QRP messages received.", q.messages),
            (
                "qrp_tables_received_total",
                "QRP patch sequences completed.",
                q.tables_received,
            ),
            (
                "qrp_malformed_total",
                "Peers dropped for a malformed QRP message.",
                q.malformed,
            ),
            (
                "qrp_over_memory_total",
                "Peers dropped for a table over the memory limit.",
                q.over_memory,
            ),
            (
                "qrp_tables_sent_total",
                "Tables or updates sent to ultrapeers.",
                q.tables_sent,
            ),
            (
                "qrp_leaf_copies_total",
                "Query copies sent to leaves whose table matched.",
                q.leaf_copies,
            ),
            (
                "qrp_leaf_filtered_total",
                "Query copies a leaf's table filtered out.",
                q.leaf_filtered,
            ),
            (
                "qrp_ultrapeer_filtered_total",
                "Last-hop query copies an ultrapeer's table filtered out.",
                q.ultrapeer_filtered,
            ),
            (
                "pong_cache_pings_answered_total",
                "Pings answered from the pong cache.",
                pc.pings_answered,
            ),
            (
                "pong_cache_pongs_sent_total",
                "Cached pongs sent.",
                pc.pongs_sent,
            ),
            (
                "pong_cache_copies_saved_total",
                "Ping copies a broadcast would have sent.",
                pc.copies_saved,
            ),
            (
                "pong_cache_refreshes_total",
                "Pong cache refills.",
                pc.refreshes,
            ),
            (
                "pong_cache_throttled_total",
                "Pings dropped by the per-peer throttle.",
                pc.throttled,
            ),
        ];
        for (name, help, v) in counters {
            w.metric(&format!("seda_gnutella_{name}"), Counter, help, v);
        }
        let gauges = [
            ("peers", "Established connections.", self.peers),
            ("leaves", "Leaves connected.", self.leaves),
            (
                "qrp_tables",
                "Complete query routing tables held.",
                q.tables,
            ),
            (
                "qrp_table_bytes",
                "Bytes of the query routing tables held.",
                q.table_bytes,
            ),
            ("pong_cache_pongs", "Pongs in the pong cache.", pc.cached),
            (
                "handshaking",
                "Connections in the handshake.",
                self.handshaking,
            ),
            (
                "route_entries",
                "Entries of the duplicate/reverse-path table.",
                self.route_entries,
            ),
            (
                "push_entries",
                "Entries of the push-route table.",
                self.push_entries,
            ),
            (
                "known_hosts",
                "Hosts in the catcher's cache.",
                self.known_hosts,
            ),
            (
                "queued_bytes",
                "Bytes in all outgoing queues.",
                self.queued_bytes,
            ),
        ];
        for (name, help, v) in gauges {
            w.metric(&format!("seda_gnutella_{name}"), Gauge, help, v);
        }
    }
}
