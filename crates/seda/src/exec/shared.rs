//! The shared per-core worker pool (TPP).
//!
//! # Invariants
//! - A stage is in the run queue at most once: `try_schedule_inner` flips the
//!   stage's `scheduled` flag and only the caller that flipped it pushes the stage.
//! - The flag means "queued or being taken from", not "running": a worker that has
//!   taken a batch hands the flag on before running it, back to the run queue if
//!   more work waits, else it clears the flag and re-checks, so an event enqueued in
//!   between is never stranded.
//!
//! So several workers run one busy stage in parallel, and an event that arrives
//! while its stage runs a batch goes to an idle worker instead of waiting for the
//! batch to end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::core::StageObj;

struct RunQueue {
    stages: VecDeque<Arc<dyn StageObj>>,
    sleepers: usize,
}

pub(crate) struct SharedPool {
    queue: Mutex<RunQueue>,
    ready: Condvar,
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
            queue: Mutex::new(RunQueue {
                stages: VecDeque::new(),
                sleepers: 0,
            }),
            ready: Condvar::new(),
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

    /// Puts a stage that has work on the run queue (caller won `try_schedule`).
    pub(crate) fn push(&self, stage: Arc<dyn StageObj>) {
        let mut q = self.queue.lock();
        q.stages.push_back(stage);
        if q.sleepers > 0 {
            self.ready.notify_one();
        }
    }

    fn pop(&self) -> Option<Arc<dyn StageObj>> {
        let mut q = self.queue.lock();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if let Some(s) = q.stages.pop_front() {
                return Some(s);
            }
            q.sleepers += 1;
            self.ready.wait(&mut q);
            q.sleepers -= 1;
        }
    }

    fn worker(self: Arc<Self>) {
        while let Some(stage) = self.pop() {
            stage.run_once();
        }
    }

    /// Stops the workers after their current batch.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let q = self.queue.lock();
        drop(q);
        self.ready.notify_all();
    }

    pub(crate) fn take_handles(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.handles.lock())
    }
}
