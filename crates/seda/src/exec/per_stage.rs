//! The per-stage thread pool (Sandstorm's thread-per-stage model, SEDA 3.4).
//!
//! Each worker loops: claim a batch and run it; when nothing is queued, sleep on the
//! stage queue's event count (so an enqueue wakes a worker only if one sleeps);
//! exit when the stage stops or the thread-pool controller retires a thread. A
//! worker idle longer than the idle timeout counts in `idle_expired`, the
//! controller's signal to shrink the pool.
//!
//! No spinning before the sleep: measured on the Fig. 11 socket bench (16 clients,
//! 4 alternating runs), 64 polls + 4 yields after each batch cut seda-io's
//! throughput from a median of 1,163 to 912 MB/s on 2 cores: the spinning worker
//! takes the core the producer needs. Tried again on the pipeline bench with the
//! lock-free queue (crossbeam's backoff: 63 pauses, then 4 yields): 5-stage
//! per-stage event by event 0.24x vs 0.20x of the raw channel, hop latency 0.90x vs
//! 0.74x, within the noise of a box at load 7-8; not adopted. Once more on
//! 2026-11-24 08:27 UTC (load 7.9, two alternating runs each, 3 rounds): polling
//! `has_work` up to 2,000 times (64 pauses, then yields) before sleeping raised the
//! median hop latency from 5.2 to 7.7 us on one stage and from 1.2 to 2.9-3.2 us on
//! the 5-stage inline pipeline, with throughput inside a 3x run-to-run spread; not
//! adopted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use crate::queue::event_count::EventCount;

/// An own pool's threads.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    pub(crate) threads: AtomicUsize,
    pub(crate) busy: AtomicUsize,
    /// Threads idle past the idle timeout now.
    pub(crate) idle_expired: AtomicUsize,
    /// Threads the controller asked to exit.
    pub(crate) retire: AtomicUsize,
    pub(crate) handles: Mutex<Vec<JoinHandle<()>>>,
}

/// What a pool's worker loop needs of its stage.
pub(crate) trait Worker: Send + Sync + 'static {
    /// Per-thread reusable buffers.
    type Scratch: Default;
    fn pool(&self) -> &Pool;
    fn idle_timeout(&self) -> Duration;
    /// The event count workers sleep on.
    fn waiters(&self) -> &EventCount;
    /// Whether the stage stopped (workers exit).
    fn stopped(&self) -> bool;
    /// Whether events wait to be claimed (read after the event count's fence).
    fn has_work(&self) -> bool;
    /// Claims and runs one batch; false if there was nothing to claim.
    fn work(&self, scratch: &mut Self::Scratch) -> bool;
}

/// Starts one more worker thread named `name`.
pub(crate) fn spawn<W: Worker>(w: Arc<W>, name: String) -> std::io::Result<()> {
    let pool = w.pool();
    pool.threads.fetch_add(1, Relaxed);
    let me = Arc::clone(&w);
    match std::thread::Builder::new()
        .name(name)
        .spawn(move || worker_main(&*me))
    {
        Ok(h) => {
            let mut handles = w.pool().handles.lock();
            handles.retain(|h| !h.is_finished());
            handles.push(h);
            Ok(())
        }
        Err(e) => {
            w.pool().threads.fetch_sub(1, Relaxed);
            Err(e)
        }
    }
}

fn worker_main<W: Worker>(w: &W) {
    let pool = w.pool();
    let mut scratch = W::Scratch::default();
    let mut expired = false;
    loop {
        if w.stopped() {
            break;
        }
        if w.work(&mut scratch) {
            if expired {
                expired = false;
                pool.idle_expired.fetch_sub(1, Relaxed);
            }
            continue;
        }
        if pool.retire.load(Relaxed) > 0
            && pool
                .retire
                .fetch_update(Relaxed, Relaxed, |r| r.checked_sub(1))
                .is_ok()
        {
            break;
        }
        let key = w.waiters().prepare();
        if w.has_work() || w.stopped() || pool.retire.load(Relaxed) > 0 {
            w.waiters().cancel();
            continue;
        }
        crate::clock::clock_stale();
        if w.waiters().wait(key, w.idle_timeout()) && !expired {
            expired = true;
            pool.idle_expired.fetch_add(1, Relaxed);
        }
    }
    if expired {
        pool.idle_expired.fetch_sub(1, Relaxed);
    }
    pool.threads.fetch_sub(1, Relaxed);
}
