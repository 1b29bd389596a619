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

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use seda_io::ConnId;

use crate::error::ConfigError;
use crate::proto::message::{Guid, HEADER_LEN, Header, MsgType, push_servent, queryhit_servent};

/// The origin of messages this router sends itself (connection ids start at 1).
pub const LOCAL: ConnId = ConnId(0);

const SHARDS: usize = 16;

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

/// A key with its hash, computed once with the table's keyed SipHash: the shard
/// and the bucket both come from it, so a lookup hashes its key once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hashed<K> {
    hash: u64,
    key: K,
}

impl<K> Hash for Hashed<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Hands a [`Hashed`] key's hash to the map unchanged.
#[derive(Clone, Copy, Debug, Default)]
struct PreHashed;

impl BuildHasher for PreHashed {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

#[derive(Debug)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (by `Hashed`); fold anything else in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A shard: its lock and maps on cache lines of their own.
type Shard<K, V> = CachePadded<Mutex<Generations<K, V>>>;

#[derive(Debug)]
struct Generations<K, V> {
    cur: HashMap<Hashed<K>, V, PreHashed>,
    old: HashMap<Hashed<K>, V, PreHashed>,
    since: Instant,
}

/// A bounded, time-limited map from a GUID key to a value, sharded for concurrent
/// router threads. See the module invariants.
///
/// Keys are hashed once, with a randomly keyed SipHash (GUIDs are chosen by remote
/// peers: a key they could collide at will would make every lookup a scan); the
/// shard is the hash's top bits and the shard's maps use the same hash.
/// [`GuidTable::apply`] takes a shard's lock once for all of a batch's keys in it:
/// with two router threads, each lock taken is a cache line moved between cores
/// (one per message cost a quarter of the router's CPU in a profile). Each shard
/// has cache lines of its own (a shard is ~90 bytes: two threads on neighbouring
/// shards would otherwise still share a line).
#[derive(Debug)]
pub struct GuidTable<K, V> {
    shards: Box<[Shard<K, V>]>,
    hasher: RandomState,
    per_generation: usize,
    half_ttl: Duration,
}

/// An operation of [`GuidTable::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableOp<K, V> {
    /// [`GuidTable::insert_new`]: the answer is `None` if it was inserted, else the
    /// value already there.
    InsertNew(K, V),
    /// [`GuidTable::get`].
    Get(K),
}

fn shard_of(hash: u64) -> usize {
    (hash >> (64 - SHARDS.trailing_zeros())) as usize
}

impl<K: Hash + Eq + Copy, V: Copy> GuidTable<K, V> {
    /// A table of at most `capacity` entries kept at most `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let now = Instant::now();
        GuidTable {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Mutex::new(Generations {
                        cur: HashMap::with_hasher(PreHashed),
                        old: HashMap::with_hasher(PreHashed),
                        since: now,
                    }))
                })
                .collect(),
            per_generation: (capacity / SHARDS / 2).max(1),
            half_ttl: ttl / 2,
            hasher: RandomState::new(),
        }
    }

    fn hashed(&self, key: K) -> Hashed<K> {
        Hashed {
            hash: self.hasher.hash_one(key),
            key,
        }
    }

    fn shard(&self, k: &Hashed<K>) -> &Mutex<Generations<K, V>> {
        &self.shards[shard_of(k.hash)]
    }

    /// Starts a new generation when the current one is full or `ttl / 2` old; an
    /// idle shard whose current generation is itself past `ttl / 2` forgets both.
    fn rotate(&self, g: &mut Generations<K, V>, now: Instant) {
        self.rotate_by_age(g, now);
        self.rotate_if_full(g, now);
    }

    /// The age half of [`GuidTable::rotate`]. Afterwards the current generation is
    /// under `ttl / 2` old, so both generations are valid for lookups.
    fn rotate_by_age(&self, g: &mut Generations<K, V>, now: Instant) {
        let age = now.saturating_duration_since(g.since);
        if age >= self.half_ttl * 2 {
            g.cur.clear();
            g.old.clear();
            g.since = now;
        } else if age >= self.half_ttl {
            std::mem::swap(&mut g.cur, &mut g.old);
            g.cur.clear();
            g.since = now;
        }
    }

    /// The capacity half of [`GuidTable::rotate`].
    fn rotate_if_full(&self, g: &mut Generations<K, V>, now: Instant) {
        if g.cur.len() >= self.per_generation {
            std::mem::swap(&mut g.cur, &mut g.old);
            g.cur.clear();
            g.since = now;
        }
    }

    fn insert_new_in(
        &self,
        g: &mut Generations<K, V>,
        k: Hashed<K>,
        v: V,
        now: Instant,
    ) -> Result<(), V> {
        self.rotate(g, now);
        if let Some(e) = g.cur.get(&k).or_else(|| g.old.get(&k)) {
            return Err(*e);
        }
        g.cur.insert(k, v);
        Ok(())
    }

    fn get_in(&self, g: &Generations<K, V>, k: &Hashed<K>, now: Instant) -> Option<V> {
        let age = now.saturating_duration_since(g.since);
        if age >= self.half_ttl * 2 {
            return None;
        }
        match g.cur.get(k) {
            Some(v) => Some(*v),
            None if age < self.half_ttl => g.old.get(k).copied(),
            None => None,
        }
    }

    /// Inserts `k -> v` unless `k` is present; `Err(existing)` if it was.
    pub fn insert_new(&self, k: K, v: V, now: Instant) -> Result<(), V> {
        let k = self.hashed(k);
        let mut g = self.shard(&k).lock();
        self.insert_new_in(&mut g, k, v, now)
    }

    /// Inserts or replaces `k -> v`.
    pub fn upsert(&self, k: K, v: V, now: Instant) {
        let k = self.hashed(k);
        let mut g = self.shard(&k).lock();
        self.rotate(&mut g, now);
        g.old.remove(&k);
        g.cur.insert(k, v);
    }

    /// The value of `k`, if it is still kept (entries older than the ttl are gone
    /// even if no insert rotated their shard since).
    pub fn get(&self, k: &K, now: Instant) -> Option<V> {
        let k = self.hashed(*k);
        let g = self.shard(&k).lock();
        self.get_in(&g, &k, now)
    }

    /// Applies `ops` as if one by one in their order, writing each one's answer to
    /// `out` (cleared first; `None`: inserted, or not found), taking each shard's
    /// lock once. Operations on one key keep their order (a key has one shard, and
    /// a shard's operations run in the order given); operations on different keys
    /// commute. `start` picks the first shard visited (callers on different threads
    /// start apart, so they seldom wait for each other).
    pub fn apply(
        &self,
        ops: &[TableOp<K, V>],
        out: &mut Vec<Option<V>>,
        start: usize,
        now: Instant,
    ) {
        out.clear();
        out.resize(ops.len(), None);
        if let [op] = ops {
            out[0] = match *op {
                TableOp::InsertNew(k, v) => self.insert_new(k, v, now).err(),
                TableOp::Get(k) => self.get(&k, now),
            };
            return;
        }
        // The operations grouped by shard, in their order within a shard: a
        // counting sort (16 buckets), linear in the batch (a comparison sort of
        // the batch cost ~15 % of a routed message's instructions).
        let first = start % SHARDS;
        let keys: Vec<(u8, Hashed<K>)> = ops
            .iter()
            .map(|op| {
                let k = match op {
                    TableOp::InsertNew(k, _) | TableOp::Get(k) => self.hashed(*k),
                };
                ((shard_of(k.hash) + SHARDS - first) as u8 % SHARDS as u8, k)
            })
            .collect();
        let mut bounds = [0u32; SHARDS + 1];
        for &(s, _) in &keys {
            bounds[usize::from(s) + 1] += 1;
        }
        for s in 0..SHARDS {
            bounds[s + 1] += bounds[s];
        }
        let mut next = bounds;
        let mut order = vec![0u32; keys.len()];
        for (i, &(s, _)) in keys.iter().enumerate() {
            let at = &mut next[usize::from(s)];
            order[*at as usize] = i as u32;
            *at += 1;
        }
        for s in 0..SHARDS {
            let run = &order[bounds[s] as usize..bounds[s + 1] as usize];
            let Some(&i0) = run.first() else { continue };
            let mut g = self.shard(&keys[i0 as usize].1).lock();
            // Age once per shard and batch (`now` is the batch's): afterwards both
            // generations are valid for lookups, as `get_in` would find.
            self.rotate_by_age(&mut g, now);
            for &i in run {
                let (i, k) = (i as usize, keys[i as usize].1);
                out[i] = match ops[i] {
                    TableOp::InsertNew(_, v) => {
                        self.rotate_if_full(&mut g, now);
                        match g.cur.get(&k).or_else(|| g.old.get(&k)) {
                            Some(e) => Some(*e),
                            None => {
                                g.cur.insert(k, v);
                                None
                            }
                        }
                    }
                    TableOp::Get(_) => g.cur.get(&k).or_else(|| g.old.get(&k)).copied(),
                };
            }
        }
    }

    /// Entries held now (both generations).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let g = s.lock();
                g.cur.len() + g.old.len()
            })
            .sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why the router dropped a message. Counted in stats under [`Dropped::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

    #[test]
    fn apply_answers_as_the_operations_one_by_one_through_rotations() {
        // Small generations and a clock crossing ttl / 2 and ttl: both rotations
        // happen inside batches. Same hasher, so the same shards fill.
        let ttl = Duration::from_secs(10);
        let batched: GuidTable<u64, u32> = GuidTable::new(4 * SHARDS, ttl);
        let single: GuidTable<u64, u32> = GuidTable {
            hasher: batched.hasher.clone(),
            ..GuidTable::new(4 * SHARDS, ttl)
        };
        let t0 = Instant::now();
        let mut rng = fastrand::Rng::with_seed(11);
        let mut out = Vec::new();
        for batch in 0..2_000u32 {
            let now = t0 + Duration::from_millis(u64::from(batch) * 37);
            let ops: Vec<TableOp<u64, u32>> = (0..rng.usize(1..80))
                .map(|j| {
                    let k = rng.u64(..300);
                    if rng.bool() {
                        TableOp::InsertNew(k, batch * 100 + j as u32)
                    } else {
                        TableOp::Get(k)
                    }
                })
                .collect();
            let want: Vec<Option<u32>> = ops
                .iter()
                .map(|op| match *op {
                    TableOp::InsertNew(k, v) => single.insert_new(k, v, now).err(),
                    TableOp::Get(k) => single.get(&k, now),
                })
                .collect();
            batched.apply(&ops, &mut out, batch as usize, now);
            assert_eq!(out, want, "batch {batch}");
        }
    }

    #[test]
    fn tables_are_bounded_and_forget_with_time() {
        let t: GuidTable<u64, u8> = GuidTable::new(64 * SHARDS, Duration::from_secs(10));
        let now = Instant::now();
        for i in 0..100_000u64 {
            let _ = t.insert_new(i, 1, now);
        }
        assert!(t.len() <= 64 * SHARDS, "{}", t.len());
        let recent = 99_999u64;
        assert_eq!(t.get(&recent, now), Some(1));
        assert_eq!(t.insert_new(recent, 2, now), Err(1));
        // Past the ttl every entry is gone, rotation or not.
        assert_eq!(t.get(&recent, now + Duration::from_secs(11)), None);
        let later = now + Duration::from_secs(6);
        let _ = t.insert_new(1_000_000, 1, later);
        assert!(t.insert_new(1_000_000, 3, later).is_err());
    }
}
