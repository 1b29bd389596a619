//! The shared per-core worker pool (TPP).
//!
//! The run queue is lock-free (`crossbeam_queue::SegQueue`); idle workers sleep on
//! an event count, so scheduling a stage costs a push and, only if a worker sleeps,
//! a wake-up.
//!
//! # Invariants
//! - A stage is in the run queue at most once: a stage's `scheduled` flag is its
//!   schedule token, and only the caller that flipped it pushes the stage.
//! - The flag means "queued or being taken from", not "running": a worker that has
//!   taken a batch hands the flag on before running it, back to the run queue if
//!   more work waits, else it clears the flag, fences and re-checks, so an event
//!   enqueued in between is never stranded (the enqueuer writes the event, fences,
//!   then looks at the flag: Dekker's pattern; model-checked in
//!   `queue::loom_tests`).
//!
//! So several workers run one busy stage in parallel, and an event that arrives
//! while its stage runs a batch goes to an idle worker instead of waiting for the
//! batch to end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;

use super::StageObj;
use crate::queue::event_count::EventCount;

pub(crate) struct SharedPool {
    queue: SegQueue<Arc<dyn StageObj>>,
    sleepers: EventCount,
    stop: AtomicBool,
    workers: usize,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for SharedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPool")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl SharedPool {
    pub(crate) fn new(workers: usize) -> Self {
        SharedPool {
            queue: SegQueue::new(),
            sleepers: EventCount::new(),
            stop: AtomicBool::new(false),
            workers: workers.max(1),
            handles: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    pub(crate) fn start(self: &Arc<Self>, name: &str) -> std::io::Result<()> {
        let mut handles = self.handles.lock();
        if !handles.is_empty() {
            return Ok(());
        }
        for i in 0..self.workers {
            let pool = Arc::clone(self);
            let h = std::thread::Builder::new()
                .name(format!("{name}-shared-{i}"))
                .spawn(move || pool.worker())?;
            handles.push(h);
        }
        Ok(())
    }

    /// Puts a stage that has work on the run queue (the caller holds its token).
    pub(crate) fn push(&self, stage: Arc<dyn StageObj>) {
        self.queue.push(stage);
        self.sleepers.notify_one();
    }

    fn worker(self: Arc<Self>) {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if let Some(stage) = self.queue.pop() {
                stage.run_once();
                continue;
            }
            let key = self.sleepers.prepare();
            if !self.queue.is_empty() || self.stop.load(Ordering::Acquire) {
                self.sleepers.cancel();
                continue;
            }
            crate::clock::clock_stale();
            self.sleepers.wait(key, Duration::from_secs(1));
        }
    }

    /// Stops the workers after their current batch.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.sleepers.notify_all();
    }

    pub(crate) fn take_handles(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.handles.lock())
    }
}
