//! Routing decisions and routing tables, independent of stages (the plain
//! forwarding loop of the throughput benchmark uses them too).
//!
//! Rules (Gnutella 0.6; SEDA 5.2's router):
//! - Ping and Query are broadcast to every other connection with TTL-1 and Hops+1;
//!   TTL+Hops is first trimmed to `max_ttl`; a message whose TTL would reach 0 is
//!   not forwarded. Each (GUID, type) is routed once: later copies are duplicates.
//! - Pong and QueryHit go back along the reverse path: to the connection the Ping or
//!   Query with the same GUID came from.
//! - Push goes to the connection that delivered a QueryHit from the named servent.
//! - A reply whose request we sent ourselves is [`Action::Local`]; a reply without
//!   a routing entry is dropped as [`Dropped::NoRoute`].
//!
//! # Invariants
//! - [`GuidTable`] holds at most `capacity` entries and forgets an entry between
//!   `ttl / 2` and `ttl` after it was inserted (sooner only when the capacity forces
//!   a rotation): two generations per shard, the older dropped whole at rotation.
//! - Connection ids are never reused, so an entry pointing at a closed connection
//!   can only miss (the caller finds no such peer), never misroute.

use std::time::{Duration, Instant};

use seda_io::ConnId;

use crate::error::ConfigError;
use crate::proto::message::{Guid, HEADER_LEN, Header, MsgType, push_servent, queryhit_servent};

mod table;

pub use table::{GuidTable, TableOp};

/// The origin of messages this router sends itself (connection ids start at 1).
pub const LOCAL: ConnId = ConnId(0);

/// Settings of the routing tables and TTL rules. `#[non_exhaustive]`: start from
/// `Default` and use the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RoutingConfig {
    /// Largest TTL + Hops of a forwarded broadcast (advertised as `X-Max-TTL`).
    /// Default 4, 1..=255.
    pub max_ttl: u8,
    /// Most entries of each routing table (duplicates/reverse paths, push routes).
    /// Default 262,144; at least 64.
    pub table_entries: usize,
    /// How long an entry is kept at most. Default 10 minutes.
    pub table_ttl: Duration,
}

crate::setters::setters!(RoutingConfig {
    with_max_ttl: max_ttl: u8,
    with_table_entries: table_entries: usize,
    with_table_ttl: table_ttl: Duration,
});

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            max_ttl: 4,
            table_entries: 262_144,
            table_ttl: Duration::from_secs(600),
        }
    }
}

impl RoutingConfig {
    /// Checks each field's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_ttl == 0 {
            return Err(ConfigError::new(
                "routing.max_ttl",
                "max TTL must be 1..=255",
            ));
        }
        if self.table_entries < 64 {
            return Err(ConfigError::new(
                "routing.table_entries",
                "routing table entries must be at least 64",
            ));
        }
        if self.table_ttl < Duration::from_millis(10) {
            return Err(ConfigError::new(
                "routing.table_ttl",
                "routing table TTL must be at least 10 ms",
            ));
        }
        Ok(())
    }
}

/// Why the router dropped a message. Counted in stats under [`Dropped::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dropped {
    /// The (GUID, type) was routed before.
    Duplicate,
    /// Its TTL would reach 0 (or hops passed the max TTL).
    TtlExpired,
    /// A reply or push without a routing entry (or the entry's connection is gone).
    NoRoute,
    /// A reply routed back to the connection it came from.
    Loop,
    /// The destination's outgoing queue was over its threshold and this message had
    /// the lowest value.
    SlowPeer,
    /// A type the router does not forward.
    NotRouted,
    /// The router stage's queue refused it (overload).
    Overload,
    /// A ping from a peer that pinged again within its throttle period (pong
    /// caching).
    Throttled,
    /// A ping or query whose read waited longer than the router's delay bound
    /// (`RouterConfig::max_queue_delay`) in its queue.
    Late,
}

impl Dropped {
    /// Name in stats.
    pub fn name(self) -> &'static str {
        match self {
            Dropped::Duplicate => "duplicate",
            Dropped::TtlExpired => "ttl_expired",
            Dropped::NoRoute => "no_route",
            Dropped::Loop => "loop",
            Dropped::SlowPeer => "slow_peer",
            Dropped::NotRouted => "not_routed",
            Dropped::Overload => "router_overload",
            Dropped::Throttled => "ping_throttled",
            Dropped::Late => "router_late",
        }
    }
}

/// What to do with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send to every other connection with this header. `fresh` is always true
    /// here; the router also answers a fresh ping with its own pong.
    Broadcast(Header),
    /// A fresh broadcast whose TTL is spent: answer it (pings) but send it nowhere.
    Absorb,
    /// Send to one connection with this header.
    Forward(ConnId, Header),
    /// A reply to a request this router sent itself.
    Local,
    /// Not sent anywhere.
    Drop(Dropped),
}

/// A message of a batch for [`Routes::route_many`]: where its header lies in the
/// batch's buffer, the header, and the decision (filled in).
#[derive(Clone, Copy, Debug)]
pub struct Routed {
    /// Offset of its header in the buffer.
    pub at: usize,
    /// Its header (as received).
    pub header: Header,
    /// What to do with it.
    pub action: Action,
}

impl Routed {
    /// The message with header `header` at `at`, not decided yet.
    pub fn new(at: usize, header: Header) -> Routed {
        Routed {
            at,
            header,
            action: Action::Drop(Dropped::NotRouted),
        }
    }
}

/// A message's operation on the duplicate/reverse-path table: a broadcast or push
/// claims its (GUID, type) for the connection it came from; a reply looks up its
/// request's.
fn seen_op(from: ConnId, h: &Header) -> Option<TableOp<(Guid, u8), ConnId>> {
    match h.kind {
        MsgType::Ping | MsgType::Query | MsgType::Push => {
            Some(TableOp::InsertNew((h.guid, h.kind.byte()), from))
        }
        MsgType::Pong => Some(TableOp::Get((h.guid, MsgType::Ping.byte()))),
        MsgType::QueryHit => Some(TableOp::Get((h.guid, MsgType::Query.byte()))),
        _ => None,
    }
}

/// The routing state of one router.
#[derive(Debug)]
pub struct Routes {
    cfg: RoutingConfig,
    /// (GUID, type) of broadcasts and pushes -> the connection it came from.
    seen: GuidTable<(Guid, u8), ConnId>,
    /// Servent id of a QueryHit -> the connection that delivered it.
    push: GuidTable<Guid, ConnId>,
}

impl Routes {
    /// Empty tables.
    pub fn new(cfg: RoutingConfig) -> Routes {
        Routes {
            seen: GuidTable::new(cfg.table_entries, cfg.table_ttl),
            push: GuidTable::new(cfg.table_entries, cfg.table_ttl),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RoutingConfig {
        &self.cfg
    }

    /// Entries of the duplicate/reverse-path table and of the push table.
    pub fn sizes(&self) -> (usize, usize) {
        (self.seen.len(), self.push.len())
    }

    /// Records a request this router sends itself (its replies come back `Local`).
    pub fn originate(&self, guid: Guid, kind: MsgType, now: Instant) {
        self.seen.upsert((guid, kind.byte()), LOCAL, now);
    }

    /// Decides what to do with message `h` (payload `p`) that arrived from `from`,
    /// updating the tables. The payload has passed [`crate::proto::message::check`].
    pub fn route(&self, from: ConnId, h: &Header, p: &[u8], now: Instant) -> Action {
        let seen = match seen_op(from, h) {
            Some(TableOp::InsertNew(k, v)) => self.seen.insert_new(k, v, now).err(),
            Some(TableOp::Get(k)) => self.seen.get(&k, now),
            None => None,
        };
        self.decide(from, h, p, seen, now)
    }

    /// Decides, as [`Routes::route`] one by one, for the messages `items` that
    /// arrived from `from`, back to back in `buf` (each at its `at`), filling in
    /// their `action`. The duplicate/reverse-path table is consulted with one lock
    /// per shard for the whole batch ([`GuidTable::apply`]).
    pub fn route_many(&self, from: ConnId, buf: &[u8], items: &mut [Routed], now: Instant) {
        let mut ops = Vec::with_capacity(items.len());
        let mut which = Vec::with_capacity(items.len());
        for it in items.iter() {
            match seen_op(from, &it.header) {
                Some(op) => {
                    which.push(ops.len() as u32);
                    ops.push(op);
                }
                None => which.push(u32::MAX),
            }
        }
        let mut found = Vec::new();
        self.seen.apply(&ops, &mut found, from.0 as usize, now);
        for (it, w) in items.iter_mut().zip(which) {
            let seen = found.get(w as usize).copied().flatten();
            let start = it.at + HEADER_LEN;
            let p = &buf[start..start + it.header.len as usize];
            it.action = self.decide(from, &it.header, p, seen, now);
        }
    }

    /// The rest of [`Routes::route`], once the duplicate/reverse-path table gave
    /// `seen`: the answer of [`seen_op`]'s operation.
    fn decide(
        &self,
        from: ConnId,
        h: &Header,
        p: &[u8],
        seen: Option<ConnId>,
        now: Instant,
    ) -> Action {
        match h.kind {
            MsgType::Ping | MsgType::Query => {
                if seen.is_some() {
                    return Action::Drop(Dropped::Duplicate);
                }
                match self.next_hop(h, true) {
                    Some(next) => Action::Broadcast(next),
                    None => Action::Absorb,
                }
            }
            MsgType::Pong | MsgType::QueryHit => {
                if h.kind == MsgType::QueryHit
                    && let Some(servent) = queryhit_servent(p)
                {
                    self.push.upsert(servent, from, now);
                }
                match seen {
                    None => Action::Drop(Dropped::NoRoute),
                    Some(LOCAL) => Action::Local,
                    Some(back) if back == from => Action::Drop(Dropped::Loop),
                    Some(back) => match self.next_hop(h, false) {
                        Some(next) => Action::Forward(back, next),
                        None => Action::Drop(Dropped::TtlExpired),
                    },
                }
            }
            MsgType::Push => {
                if seen.is_some() {
                    return Action::Drop(Dropped::Duplicate);
                }
                let Some(servent) = push_servent(p) else {
                    return Action::Drop(Dropped::NoRoute);
                };
                match self.push.get(&servent, now) {
                    None => Action::Drop(Dropped::NoRoute),
                    Some(LOCAL) => Action::Local,
                    Some(to) if to == from => Action::Drop(Dropped::Loop),
                    Some(to) => match self.next_hop(h, false) {
                        Some(next) => Action::Forward(to, next),
                        None => Action::Drop(Dropped::TtlExpired),
                    },
                }
            }
            _ => Action::Drop(Dropped::NotRouted),
        }
    }

    /// The header to forward `h` with: TTL+Hops trimmed to the max TTL (broadcasts),
    /// then TTL-1, Hops+1; `None` if the TTL would reach 0.
    fn next_hop(&self, h: &Header, trim: bool) -> Option<Header> {
        let max = self.cfg.max_ttl;
        let mut ttl = h.ttl;
        if trim && u16::from(ttl) + u16::from(h.hops) > u16::from(max) {
            ttl = max.saturating_sub(h.hops);
        }
        if ttl <= 1 || h.hops == u8::MAX {
            return None;
        }
        Some(Header {
            ttl: ttl - 1,
            hops: h.hops + 1,
            ..*h
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(kind: MsgType, g: u8, ttl: u8, hops: u8) -> Header {
        Header {
            guid: Guid([g; 16]),
            kind,
            ttl,
            hops,
            len: 0,
        }
    }

    #[test]
    fn broadcasts_decrement_trim_and_suppress_duplicates() {
        let r = Routes::new(RoutingConfig::default());
        let now = Instant::now();
        let a = ConnId(1);
        match r.route(a, &h(MsgType::Query, 1, 3, 0), &[], now) {
            Action::Broadcast(n) => assert_eq!((n.ttl, n.hops), (2, 1)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.route(ConnId(2), &h(MsgType::Query, 1, 3, 0), &[], now),
            Action::Drop(Dropped::Duplicate)
        );
        // Same GUID, other type: not a duplicate.
        assert!(matches!(
            r.route(a, &h(MsgType::Ping, 1, 2, 0), &[], now),
            Action::Broadcast(_)
        ));
        // TTL 7 + hops 2 > 4: trimmed to TTL 2, forwarded as TTL 1 hops 3.
        match r.route(a, &h(MsgType::Query, 2, 7, 2), &[], now) {
            Action::Broadcast(n) => assert_eq!((n.ttl, n.hops), (1, 3)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.route(a, &h(MsgType::Ping, 3, 1, 0), &[], now),
            Action::Absorb
        );
        assert_eq!(
            r.route(a, &h(MsgType::Query, 4, 9, 4), &[], now),
            Action::Absorb
        );
    }

    #[test]
    fn replies_follow_the_reverse_path_and_pushes_the_servent() {
        let r = Routes::new(RoutingConfig::default());
        let now = Instant::now();
        let (a, b) = (ConnId(1), ConnId(2));
        r.route(a, &h(MsgType::Query, 9, 3, 0), &[], now);
        let mut hit = vec![0u8; 11];
        hit.extend_from_slice(&[0xab; 16]);
        match r.route(b, &h(MsgType::QueryHit, 9, 2, 0), &hit, now) {
            Action::Forward(to, n) => {
                assert_eq!(to, a);
                assert_eq!((n.ttl, n.hops), (1, 1));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.route(b, &h(MsgType::Pong, 9, 2, 0), &[], now),
            Action::Drop(Dropped::NoRoute)
        );
        let mut push = vec![0xab; 16];
        push.extend_from_slice(&[0; 10]);
        match r.route(a, &h(MsgType::Push, 5, 3, 0), &push, now) {
            Action::Forward(to, _) => assert_eq!(to, b),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.route(b, &h(MsgType::Push, 6, 3, 0), &push, now),
            Action::Drop(Dropped::Loop)
        );
        r.originate(Guid([7; 16]), MsgType::Ping, now);
        assert_eq!(
            r.route(a, &h(MsgType::Pong, 7, 1, 0), &[], now),
            Action::Local
        );
        assert_eq!(
            r.route(a, &h(MsgType::Pong, 9, 1, 0), &[], now),
            Action::Drop(Dropped::NoRoute)
        );
    }

    /// A batch routed at once decides exactly as its messages one by one:
    /// duplicates within the batch, replies to requests earlier in it, pushes
    /// after the hit that named their servent.
    #[test]
    fn a_batch_is_routed_as_its_messages_one_by_one() {
        let kinds = [
            MsgType::Ping,
            MsgType::Query,
            MsgType::Pong,
            MsgType::QueryHit,
            MsgType::Push,
        ];
        let (one, many) = (
            Routes::new(RoutingConfig::default()),
            Routes::new(RoutingConfig::default()),
        );
        let now = Instant::now();
        let mut rng = fastrand::Rng::with_seed(7);
        for batch in 0..200 {
            let from = ConnId(1 + rng.u64(..4));
            let mut buf = Vec::new();
            let mut items = Vec::new();
            for _ in 0..rng.usize(1..40) {
                let kind = kinds[rng.usize(..kinds.len())];
                let payload: Vec<u8> = match kind {
                    MsgType::QueryHit => {
                        let mut p = vec![0u8; 11];
                        p.extend_from_slice(&[rng.u8(..3); 16]);
                        p
                    }
                    MsgType::Push => {
                        let mut p = vec![rng.u8(..3); 16];
                        p.extend_from_slice(&[0; 10]);
                        p
                    }
                    _ => Vec::new(),
                };
                let head = Header {
                    guid: Guid([rng.u8(..24); 16]),
                    kind,
                    ttl: rng.u8(1..5),
                    hops: rng.u8(..3),
                    len: payload.len() as u32,
                };
                items.push(Routed::new(buf.len(), head));
                head.write(&mut buf);
                buf.extend_from_slice(&payload);
            }
            let want: Vec<Action> = items
                .iter()
                .map(|it| {
                    let p = &buf[it.at + HEADER_LEN..it.at + HEADER_LEN + it.header.len as usize];
                    one.route(from, &it.header, p, now)
                })
                .collect();
            many.route_many(from, &buf, &mut items, now);
            let got: Vec<Action> = items.iter().map(|it| it.action).collect();
            assert_eq!(got, want, "batch {batch}");
        }
    }
}
