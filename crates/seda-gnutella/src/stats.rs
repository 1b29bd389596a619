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

const DROPS: [Dropped; 7] = [
    Dropped::Duplicate,
    Dropped::TtlExpired,
    Dropped::NoRoute,
    Dropped::Loop,
    Dropped::SlowPeer,
    Dropped::NotRouted,
    Dropped::Overload,
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
    QrpConsumed,
    ConnectFailed,
    Connected,
    RouterRefusedJoin,
}

const N_EVENTS: usize = 21;
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
    (Event::QrpConsumed, "qrp_consumed"),
    (Event::ConnectFailed, "connect_failed"),
    (Event::Connected, "outgoing_connected"),
    (Event::RouterRefusedJoin, "router_refused_join"),
];

/// Counts of one batch, added to [`Counters`] at its end.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) received: [u64; 10],
    pub(crate) routed: [u64; 10],
    pub(crate) sent: [u64; 10],
    pub(crate) dropped: [u64; 7],
    pub(crate) malformed: [u64; 6],
    pub(crate) slow: [u64; CLASSES],
}

impl Tally {
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
}

const GAUGES: usize = 4;

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
    dropped: [AtomicU64; 7],
    malformed: [AtomicU64; 6],
    slow: [AtomicU64; CLASSES],
    events: [AtomicU64; N_EVENTS],
    gauges: [AtomicU64; GAUGES],
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
            ..GnutellaStats::default()
        }
    }
}

/// One connection in a [`GnutellaStats`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
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
}

/// A snapshot of a router's counters. Maps leave out zero counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GnutellaStats {
    /// Established connections.
    pub peers: usize,
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
        use std::fmt::Write as _;
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
            let _ = writeln!(out, "# HELP seda_gnutella_{name} {help}");
            let _ = writeln!(out, "# TYPE seda_gnutella_{name} counter");
            for (k, v) in map {
                let _ = writeln!(out, "seda_gnutella_{name}{{{label}=\"{k}\"}} {v}");
            }
        }
        let gauges = [
            ("peers", "Established connections.", self.peers),
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
            let _ = writeln!(out, "# HELP seda_gnutella_{name} {help}");
            let _ = writeln!(out, "# TYPE seda_gnutella_{name} gauge");
            let _ = writeln!(out, "seda_gnutella_{name} {v}");
        }
    }
}
