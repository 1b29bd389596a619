//! An event count: lets a thread sleep until a condition it checks without a lock
//! may have changed, and lets the thread that changes it skip every system call
//! (and the lock) unless someone sleeps.
//!
//! Protocol (Dekker's store-load pattern, made explicit with SeqCst fences, which
//! loom models exactly; SeqCst *accesses* it does not):
//! - sleeper: [`EventCount::prepare`] (`sleepers += 1`, fence, read the epoch), then
//!   re-check its condition; if it holds, [`EventCount::cancel`], else
//!   [`EventCount::wait`], which returns when the epoch moved (or on timeout).
//! - notifier: change the condition (an atomic write), then
//!   [`EventCount::notify_one`]/[`EventCount::notify_all`]: fence, and only if
//!   `sleepers > 0` take the lock, bump the epoch and signal.
//!
//! # Invariants
//! - No lost wake-up: the two fences order "sleeper counted itself" against
//!   "notifier wrote the condition", so either the sleeper's re-check sees the new
//!   condition or the notifier sees the sleeper and bumps the epoch it waits on.
//!   (Model-checked in `queue::loom_tests`.)
//! - A notifier that finds no sleeper does one fence and one load, nothing else.

use std::time::Duration;

use crate::loom::{AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, fence};

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct EventCount {
    /// Threads between `prepare` and the end of `wait`/`cancel`.
    sleepers: AtomicUsize,
    /// Bumped (under `lock`) by every notification that found a sleeper; read
    /// without the lock by `prepare`.
    epoch: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
}

/// The epoch a sleeper saw when it prepared to sleep.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key(u64);

impl EventCount {
    pub(crate) fn new() -> Self {
        EventCount {
            sleepers: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    /// Announces the caller as a sleeper. The caller must re-check its condition
    /// next, then call exactly one of `cancel` or `wait`.
    pub(crate) fn prepare(&self) -> Key {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        Key(self.epoch.load(Ordering::Acquire))
    }

    /// The condition held after all: no sleep.
    pub(crate) fn cancel(&self) {
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Sleeps until a notification after `key` (or `timeout`). Returns true if it
    /// timed out without one. May return early (spuriously): re-check the condition.
    pub(crate) fn wait(&self, key: Key, timeout: Duration) -> bool {
        let mut guard = self.lock.lock();
        let mut timed_out = false;
        // The epoch only moves under the lock: a bump after this check finds us
        // waiting on the condition variable.
        if self.epoch.load(Ordering::Relaxed) == key.0 {
            timed_out = self.cond.wait_for(&mut guard, timeout)
                && self.epoch.load(Ordering::Relaxed) == key.0;
        }
        drop(guard);
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        timed_out
    }

    /// Whether anyone may be sleeping; call after the fence of a notify.
    fn has_sleepers(&self) -> bool {
        fence(Ordering::SeqCst);
        self.sleepers.load(Ordering::Relaxed) > 0
    }

    /// Wakes one sleeper, if any; call after changing the condition.
    pub(crate) fn notify_one(&self) {
        if self.has_sleepers() {
            let _guard = self.lock.lock();
            self.epoch.fetch_add(1, Ordering::Release);
            self.cond.notify_one();
        }
    }

    /// Wakes every sleeper, if any.
    pub(crate) fn notify_all(&self) {
        if self.has_sleepers() {
            let _guard = self.lock.lock();
            self.epoch.fetch_add(1, Ordering::Release);
            self.cond.notify_all();
        }
    }
}
