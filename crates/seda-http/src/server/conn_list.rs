//! The open connections, sharded ([`ConnList`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;
use seda_io::ConnId;

use super::conn::Conn;

pub(super) const SHARDS: usize = 32;

/// One shard, on cache lines of its own (the lock words of two shards that two
/// cores take must not share a line).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Vec<Arc<Conn>>>);

/// The open connections, for the timeout sweep, the shutdown and the stats: lists,
/// not a map. No event looks a connection up: the socket layer hands each event's
/// connection over with it ([`seda_io::SocketEvent::state`], made by
/// `Haboob::attach`), so a connection is touched here twice, when it is admitted
/// and when it closes.
///
/// # Invariants
/// A connection is in the list of its shard from its admission until its `Closed`
/// is handled, at index `Conn::at`, which changes only under that shard's lock.
#[derive(Debug)]
pub(crate) struct ConnList {
    shards: Vec<Shard>,
}

impl ConnList {
    pub(crate) fn new() -> Self {
        ConnList {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }

    fn shard(&self, id: ConnId) -> &Mutex<Vec<Arc<Conn>>> {
        &self.shards[(id.0 % SHARDS as u64) as usize].0
    }

    pub(crate) fn insert(&self, conn: &Arc<Conn>) {
        let mut list = self.shard(conn.id).lock();
        conn.at
            .store(u32::try_from(list.len()).unwrap_or(u32::MAX), Relaxed);
        list.push(Arc::clone(conn));
    }

    /// Takes `conn` off its list (false if it was not on it).
    pub(crate) fn remove(&self, conn: &Conn) -> bool {
        let mut list = self.shard(conn.id).lock();
        let at = conn.at.load(Relaxed) as usize;
        if !list.get(at).is_some_and(|c| std::ptr::eq(&**c, conn)) {
            return false;
        }
        list.swap_remove(at);
        if let Some(moved) = list.get(at) {
            moved.at.store(at as u32, Relaxed);
        }
        let len = list.len();
        if len < list.capacity() / 4 {
            list.shrink_to(len * 2);
        }
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    /// A copy of every open connection (for the timeout sweep and shutdown).
    pub(crate) fn all(&self) -> Vec<Arc<Conn>> {
        self.shards
            .iter()
            .flat_map(|s| s.0.lock().clone())
            .collect()
    }
}
