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
}

const EVENTS: [(Event, &str); 20] = [
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

/// Shared counters of one router.
#[derive(Debug)]
pub(crate) struct Counters {
    received: [AtomicU64; 10],
    routed: [AtomicU64; 10],
    sent: [AtomicU64; 10],
    dropped: [AtomicU64; 7],
    malformed: [AtomicU64; 6],
    slow: [AtomicU64; CLASSES],
    events: [AtomicU64; 20],
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

    pub(crate) fn event(&self, e: Event) {
        if let Some(i) = EVENTS.iter().position(|(x, _)| *x == e) {
            self.events[i].fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn fill(&self, s: &mut GnutellaStats) {
        let by_type = |a: &[AtomicU64; 10]| -> BTreeMap<String, u64> {
            TYPES
                .iter()
                .zip(a)
                .map(|(t, v)| (t.name().to_owned(), v.load(Relaxed)))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        s.received = by_type(&self.received);
        s.routed = by_type(&self.routed);
        s.sent = by_type(&self.sent);
        s.dropped = DROPS
            .iter()
            .zip(&self.dropped)
            .map(|(d, v)| (d.name().to_owned(), v.load(Relaxed)))
            .chain(
                MALFORMED
                    .iter()
                    .zip(&self.malformed)
                    .map(|(m, v)| (format!("malformed_{}", m.name()), v.load(Relaxed))),
            )
            .filter(|(_, v)| *v > 0)
            .collect();
        s.slow_peer_drops = (0..CLASSES)
            .map(|i| {
                let v = [
                    Value::Ping,
                    Value::Pong,
                    Value::Query,
                    Value::Reply,
                    Value::Control,
                ][i];
                (v.name().to_owned(), self.slow[i].load(Relaxed))
            })
            .filter(|(_, v)| *v > 0)
            .collect();
        s.events = EVENTS
            .iter()
            .zip(&self.events)
            .map(|((_, n), v)| ((*n).to_owned(), v.load(Relaxed)))
            .filter(|(_, v)| *v > 0)
            .collect();
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
    /// Copies sent, by type (a broadcast counts once per connection).
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
