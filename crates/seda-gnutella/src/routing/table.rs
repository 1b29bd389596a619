//! The bounded routing tables ([`GuidTable`]): a GUID key's entry kept between
//! `ttl / 2` and `ttl`, two generations per shard (see the invariants in
//! [`crate::routing`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

const SHARDS: usize = 16;

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

#[cfg(test)]
mod tests {
    use super::*;

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
