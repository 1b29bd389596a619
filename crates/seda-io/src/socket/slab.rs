//! Connection ids that name their slot: an event loop finds a connection's entry by
//! indexing, not hashing (the token of mio, the key of tokio's slab).
//!
//! An id ([`ConnId`]) is a process-wide sequence number above [`SLOT_BITS`] bits of
//! slot: the index of the connection's entry in the table of the loop that owns it
//! ([`Slab`]). Slots are handed out by the loop's [`Slots`] (a writer opening an
//! outbound connection takes one on its own thread, so it is shared) and given back
//! once the loop has dropped the entry.
//!
//! # Invariants
//! - A slot holds at most one live entry; its number is given back only after the
//!   entry is removed, so an id never names another connection's entry: a lookup
//!   compares the whole id with the entry's own ([`Keyed::key`]), and an id whose
//!   connection is gone (a stale command, a late completion) finds nothing, even when
//!   its slot is taken again.
//! - Ids are unique in the process until 2^40 connections have been opened (the
//!   sequence number's width), and never 0.
//! - The lowest free slot is handed out first, so the live entries crowd into the
//!   first pages, and a page that empties is freed ([`PAGE`] entries each): a loop
//!   holds about one page more than its open connections need.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::event::ConnId;

/// Bits of an id that name the slot: 16 M connections per loop.
pub(super) const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Entries per page of a loop's table.
pub(super) const PAGE: usize = 256;

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// The next sequence number of a connection (process-wide).
pub(super) fn next_seq() -> u64 {
    NEXT_SEQ.fetch_add(1, Relaxed)
}

/// The id of connection `seq` in slot `slot`.
pub(super) fn compose(seq: u64, slot: u32) -> ConnId {
    ConnId((seq << SLOT_BITS) | u64::from(slot))
}

/// The slot an id names.
pub(super) fn slot_of(id: u64) -> usize {
    (id & SLOT_MASK) as usize
}

/// One loop's slot numbers: the free ones, lowest first, and the first never used.
#[derive(Debug, Default)]
pub(super) struct Slots {
    free: BinaryHeap<Reverse<u32>>,
    next: u32,
}

impl Slots {
    /// A free slot; `None` when all 2^24 are taken.
    pub(super) fn take(&mut self) -> Option<u32> {
        if let Some(Reverse(s)) = self.free.pop() {
            return Some(s);
        }
        if u64::from(self.next) > SLOT_MASK {
            return None;
        }
        self.next += 1;
        Some(self.next - 1)
    }

    /// Slot `s` is free again (its entry is gone).
    pub(super) fn give_back(&mut self, s: u32) {
        debug_assert!(s < self.next, "slot {s} was never handed out");
        self.free.push(Reverse(s));
        if self.free.len() < self.free.capacity() / 4 {
            self.free.shrink_to(self.free.len() * 2);
        }
    }
}

/// What a table entry knows of its connection: its id.
pub(super) trait Keyed {
    fn key(&self) -> u64;
}

/// A loop's entries by id: pages of [`PAGE`] slots, allocated when a slot in them
/// is first used and freed when their last entry goes.
#[derive(Debug)]
pub(super) struct Slab<L> {
    pages: Vec<Option<Page<L>>>,
}

#[derive(Debug)]
struct Page<L> {
    slots: Box<[Option<L>]>,
    used: usize,
}

impl<L> Default for Slab<L> {
    fn default() -> Self {
        Slab { pages: Vec::new() }
    }
}

impl<L: Keyed> Slab<L> {
    fn at(&self, id: u64) -> Option<&Option<L>> {
        let s = slot_of(id);
        self.pages.get(s / PAGE)?.as_ref()?.slots.get(s % PAGE)
    }

    /// The entry of connection `id`, if it is in this table.
    pub(super) fn get(&self, id: &u64) -> Option<&L> {
        self.at(*id)?.as_ref().filter(|l| l.key() == *id)
    }

    /// The entry of connection `id`, if it is in this table.
    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut L> {
        let s = slot_of(*id);
        let page = self.pages.get_mut(s / PAGE)?.as_mut()?;
        page.slots[s % PAGE].as_mut().filter(|l| l.key() == *id)
    }

    /// The whole id of the entry whose id's bits under `mask` are `low` (an
    /// io_uring completion carries only the low 56 bits of an id).
    pub(super) fn id_of(&self, low: u64, mask: u64) -> Option<u64> {
        let l = self.at(low)?.as_ref()?;
        (l.key() & mask == low).then(|| l.key())
    }

    /// Puts `entry` in the slot its id names (the slot was free: [`Slots`]).
    pub(super) fn insert(&mut self, entry: L) {
        let s = slot_of(entry.key());
        let (p, i) = (s / PAGE, s % PAGE);
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| Page {
            slots: (0..PAGE).map(|_| None).collect(),
            used: 0,
        });
        debug_assert!(page.slots[i].is_none(), "slot {s} handed out twice");
        if page.slots[i].replace(entry).is_none() {
            page.used += 1;
        }
    }

    /// Takes connection `id`'s entry out; frees its page if it was the last.
    pub(super) fn remove(&mut self, id: &u64) -> Option<L> {
        let s = slot_of(*id);
        let (p, i) = (s / PAGE, s % PAGE);
        let page = self.pages.get_mut(p)?.as_mut()?;
        if page.slots[i].as_ref().is_none_or(|l| l.key() != *id) {
            return None;
        }
        let entry = page.slots[i].take();
        page.used -= 1;
        if page.used == 0 {
            self.pages[p] = None;
            while matches!(self.pages.last(), Some(None)) {
                self.pages.pop();
            }
        }
        entry
    }

    /// Every entry with its id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &L)> {
        self.values().map(|l| (l.key(), l))
    }

    /// Every entry.
    pub(super) fn values(&self) -> impl Iterator<Item = &L> {
        self.pages
            .iter()
            .flatten()
            .flat_map(|p| p.slots.iter().flatten())
    }

    /// Every entry, taken out.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = L> {
        std::mem::take(&mut self.pages)
            .into_iter()
            .flatten()
            .flat_map(|p| p.slots.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct E(u64);

    impl Keyed for E {
        fn key(&self) -> u64 {
            self.0
        }
    }

    /// A slot taken again names the new connection only: the old id finds nothing.
    #[test]
    fn a_stale_id_never_reaches_the_next_connection_in_its_slot() {
        let mut slots = Slots::default();
        let mut t = Slab::default();
        let s = slots.take().unwrap();
        let old = compose(next_seq(), s).0;
        t.insert(E(old));
        assert_eq!(t.get(&old), Some(&E(old)));
        assert_eq!(t.remove(&old), Some(E(old)));
        slots.give_back(s);
        let s2 = slots.take().unwrap();
        assert_eq!(s2, s, "the lowest free slot comes first");
        let new = compose(next_seq(), s2).0;
        assert_ne!(old, new);
        t.insert(E(new));
        assert!(t.get(&old).is_none() && t.get_mut(&old).is_none());
        assert!(t.remove(&old).is_none(), "a stale remove leaves the entry");
        assert_eq!(t.get(&new), Some(&E(new)));
        assert_eq!(t.values().count(), 1);
    }

    /// Pages come and go with their entries; free slots are reused lowest first.
    #[test]
    fn pages_are_freed_when_their_last_entry_goes() {
        let mut slots = Slots::default();
        let mut t = Slab::default();
        let ids: Vec<u64> = (0..3 * PAGE)
            .map(|_| compose(next_seq(), slots.take().unwrap()).0)
            .collect();
        for &id in &ids {
            t.insert(E(id));
        }
        assert_eq!((t.values().count(), t.pages.len()), (3 * PAGE, 3));
        for &id in &ids[PAGE..] {
            t.remove(&id).unwrap();
            slots.give_back(slot_of(id) as u32);
        }
        assert_eq!((t.values().count(), t.pages.len()), (PAGE, 1));
        assert_eq!(slots.take(), Some(PAGE as u32), "lowest free first");
        let mut seen: Vec<u64> = t.iter().map(|(id, _)| id).collect();
        seen.sort_unstable();
        assert_eq!(seen, ids[..PAGE]);
        assert_eq!(t.drain().count(), PAGE);
        assert_eq!((t.values().count(), t.pages.len()), (0, 0));
    }

    /// Ids are never 0 (Gnutella's router names itself `ConnId(0)`), and unique.
    #[test]
    fn ids_are_unique_and_never_zero() {
        let mut slots = Slots::default();
        let a = compose(next_seq(), slots.take().unwrap());
        let b = compose(next_seq(), slots.take().unwrap());
        assert!(a.0 != 0 && b.0 != 0 && a != b);
        assert_eq!(slot_of(b.0), 1);
    }
}
