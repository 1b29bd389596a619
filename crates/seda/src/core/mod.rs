//! The inside of a stage: its queue, admission, handler, threads and controllers.
//!
//! - [`enqueue`]: the paths into the queue (one event, a batch, with backpressure)
//!   and the inline handoff of a domain;
//! - [`batch`]: taking a batch (colors, parking) and running it (timing, stats,
//!   completions, panics);
//! - [`defer`]: the deferred inline handoff (a batch's handoffs to one stage run
//!   as one group after it);
//! - [`scratch`]: what a run carries from its start to its accounting (buffers,
//!   stats stamps, timing), the leaf `batch` and `defer` share;
//! - this file: construction, the stage's face to the runtime, the controllers'
//!   tick and the snapshot.
//!
//! # Invariants
//! - Every admitted event leaves the stage exactly once: processed by a handler, or
//!   counted unfinished at shutdown (see [`crate::queue`]).
//! - A one-thread stage (`fixed_threads(1)` or `threads(_, 1)` on the per-stage
//!   model) never runs two batches at once: its worker and inline callers take the
//!   `serial` token around a batch.

mod batch;
mod config;
mod defer;
mod enqueue;
mod scratch;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::admission::AdmissionPolicy;
use crate::color::ColorTable;
use crate::control::{
    BatchObservation, BatchingController, PoolAdjustment, PoolObservation, ThreadPoolConfig,
    ThreadPoolController,
};
use crate::domain::DomainInner;
use crate::error::InitError;
use crate::exec::per_stage::{self, Pool};
use crate::exec::shared::SharedPool;
use crate::exec::{StageObj, ThreadModel};
use crate::handler::{Context, EventHandler, StageControl};
use crate::lifecycle::Lifecycle;
use crate::queue::event_count::EventCount;
use crate::queue::{MAX_CAPACITY, StageQueue};
use crate::runtime::{Runtime, RuntimeError, RuntimeInner};
use crate::stats::{SnapshotInput, StageSnapshot, StageStats};

pub(crate) use config::StageConfig;
pub(crate) use scratch::Scratch;

/// Interval of the batching controller's steps.
const BATCHING_INTERVAL: Duration = Duration::from_millis(250);
/// Length of the stats window behind the current p90 estimate.
const STATS_WINDOW: Duration = Duration::from_secs(1);

enum Exec {
    PerStage(Pool),
    Shared(Arc<SharedPool>),
}

struct Control {
    pool: Option<ThreadPoolController>,
    batching: Option<BatchingController>,
    last_pool: Instant,
    last_batch: Instant,
    last_window: Instant,
    processed_at_last_batch: u64,
}

/// Sources that enqueued into a stage (the stage graph's incoming edges).
struct Edges {
    bits: [AtomicU64; 4],
    more: Mutex<BTreeSet<usize>>,
}

impl Edges {
    #[inline]
    fn record(&self, from: usize) {
        if from < 256 {
            let (word, bit) = (from / 64, 1u64 << (from % 64));
            if self.bits[word].load(Relaxed) & bit != 0 {
                return;
            }
        }
        self.record_slow(from);
    }

    #[cold]
    fn record_slow(&self, from: usize) {
        if from < 256 {
            self.bits[from / 64].fetch_or(1u64 << (from % 64), Relaxed);
        } else {
            self.more.lock().insert(from);
        }
    }

    fn list(&self) -> Vec<usize> {
        let mut v = Vec::new();
        for (w, word) in self.bits.iter().enumerate() {
            let bits = word.load(Relaxed);
            for b in 0..64 {
                if bits & (1 << b) != 0 {
                    v.push(w * 64 + b);
                }
            }
        }
        v.extend(self.more.lock().iter().copied());
        v
    }
}

pub(crate) struct StageCore<E: Send + 'static> {
    id: usize,
    name: String,
    runtime_id: u64,
    runtime: Weak<RuntimeInner>,
    colors: Arc<ColorTable>,
    queue: StageQueue<E>,
    admission: Option<Arc<dyn AdmissionPolicy>>,
    admission_on: AtomicBool,
    stats: StageStats,
    handler: Box<dyn EventHandler<E>>,
    batch: AtomicUsize,
    exec: Exec,
    model: ThreadModel,
    pool_config: ThreadPoolConfig,
    /// The shared pool's schedule token (see `exec::shared`).
    scheduled: crate::loom::AtomicBool,
    /// One-thread stages: held by whoever runs a batch (worker or inline caller).
    serial: Option<AtomicBool>,
    domain: Option<Arc<DomainInner>>,
    incoming: Edges,
    control: Mutex<Control>,
    /// Reusable batch buffers for shared-pool workers.
    spare: crossbeam_queue::ArrayQueue<Scratch<E>>,
    self_weak: Weak<StageCore<E>>,
}

impl<E: Send + 'static> std::fmt::Debug for StageCore<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageCore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<E: Send + 'static> StageCore<E> {
    pub(crate) fn build(
        runtime: &Runtime,
        config: StageConfig,
        handler: Box<dyn EventHandler<E>>,
    ) -> Result<Arc<Self>, RuntimeError> {
        let invalid = |what: String| {
            Err(RuntimeError::InvalidConfig(format!(
                "stage '{}': {what}",
                config.name
            )))
        };
        if config.capacity == 0 {
            return invalid("capacity must be at least 1".to_owned());
        }
        if config.capacity > MAX_CAPACITY {
            return invalid(format!("capacity must be at most {MAX_CAPACITY}"));
        }
        if config.batch == 0 {
            return invalid("batch must be at least 1".to_owned());
        }
        let model = config.thread_model.unwrap_or(runtime.inner.default_model);
        let pool_config = config.pool.clone();
        if model == ThreadModel::PerStage
            && let Err(e) = pool_config.validate()
        {
            return invalid(e.to_string());
        }
        let batching = match &config.batching {
            Some(b) => match BatchingController::new(b.clone()) {
                Ok(c) => Some(c),
                Err(e) => return invalid(e.to_string()),
            },
            None => None,
        };
        let initial_batch = batching
            .as_ref()
            .map_or(config.batch, BatchingController::batch_size);
        let exec = match model {
            ThreadModel::PerStage => Exec::PerStage(Pool::default()),
            ThreadModel::Shared => Exec::Shared(Arc::clone(&runtime.inner.shared)),
        };
        let serial = (model == ThreadModel::PerStage && pool_config.max_threads <= 1)
            .then(|| AtomicBool::new(false));
        let now = Instant::now();
        let pool_controller = (model == ThreadModel::PerStage && config.pool_controller)
            .then(|| ThreadPoolController::new(pool_config.clone()));
        let id = runtime.inner.next_stage_id();
        Ok(Arc::new_cyclic(|weak| StageCore {
            id,
            name: config.name,
            runtime_id: runtime.inner.id,
            runtime: Arc::downgrade(&runtime.inner),
            colors: Arc::clone(&runtime.inner.colors),
            queue: StageQueue::new(config.capacity),
            admission: config.admission,
            admission_on: AtomicBool::new(true),
            stats: StageStats::new(),
            handler,
            batch: AtomicUsize::new(initial_batch),
            exec,
            model,
            pool_config,
            scheduled: crate::loom::AtomicBool::new(false),
            serial,
            domain: config.domain.map(|d| d.inner),
            incoming: Edges {
                bits: Default::default(),
                more: Mutex::new(BTreeSet::new()),
            },
            control: Mutex::new(Control {
                pool: pool_controller,
                batching,
                last_pool: now,
                last_batch: now,
                last_window: now,
                processed_at_last_batch: 0,
            }),
            spare: crossbeam_queue::ArrayQueue::new(4),
            self_weak: weak.clone(),
        }))
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn queue_len(&self) -> usize {
        self.queue.waiting()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    pub(crate) fn count_dropped(&self, n: u64) {
        self.stats.tally().dropped(n);
    }

    #[inline]
    pub(super) fn handler(&self) -> &dyn EventHandler<E> {
        &*self.handler
    }

    /// The admission policy, while admission control is on.
    #[inline]
    pub(super) fn policy(&self) -> Option<&Arc<dyn AdmissionPolicy>> {
        self.admission
            .as_ref()
            .filter(|_| self.admission_on.load(Relaxed))
    }

    #[inline]
    pub(super) fn policy_on(&self) -> bool {
        self.policy().is_some()
    }

    fn runtime(&self) -> Option<Runtime> {
        self.runtime.upgrade().map(Runtime::from_inner)
    }

    fn own_pool(&self) -> Option<&Pool> {
        match &self.exec {
            Exec::PerStage(p) => Some(p),
            Exec::Shared(_) => None,
        }
    }

    fn spawn_worker(&self) -> std::io::Result<()> {
        match self.self_weak.upgrade() {
            Some(me) if self.own_pool().is_some() => {
                per_stage::spawn(me, format!("seda-{}", self.name))
            }
            _ => Ok(()),
        }
    }

    /// The policy's estimate while admission control is on (it is what the policy
    /// acts on); otherwise, or without one, the p90 of the last stats window. A policy
    /// switched off sees no samples, so its estimate would be stale.
    fn p90(&self) -> Option<Duration> {
        self.admission
            .as_ref()
            .filter(|_| self.admission_on.load(Relaxed))
            .and_then(|a| a.state().p90_ms)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .or_else(|| self.stats.recent_p90())
    }

    fn step_pool(&self, c: &mut Control, now: Instant) {
        let (Some(pool), Some(ctl)) = (self.own_pool(), c.pool.as_mut()) else {
            return;
        };
        if now.duration_since(c.last_pool) < self.pool_config.interval
            || self.lifecycle() != Lifecycle::Running
        {
            return;
        }
        c.last_pool = now;
        let obs = PoolObservation {
            queue_len: self.queue.waiting(),
            threads: pool.threads.load(Relaxed),
            idle_expired: pool.idle_expired.load(Relaxed),
        };
        match ctl.step(obs) {
            PoolAdjustment::Hold => {}
            PoolAdjustment::Grow(n) => {
                for _ in 0..n {
                    if let Err(e) = self.spawn_worker() {
                        tracing::warn!(stage = %self.name, "thread-pool controller cannot grow: {e}");
                        break;
                    }
                }
            }
            PoolAdjustment::Shrink(n) => {
                pool.retire.fetch_add(n, Relaxed);
                self.queue.workers.notify_all();
            }
        }
    }
}

impl<E: Send + 'static> StageControl for StageCore<E> {
    fn control_name(&self) -> &str {
        &self.name
    }

    fn p90(&self) -> Option<Duration> {
        StageCore::p90(self)
    }

    fn target(&self) -> Option<Duration> {
        self.admission
            .as_ref()
            .and_then(|a| a.state().target_ms)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
    }

    fn admission_enabled(&self) -> bool {
        self.admission_on.load(Relaxed)
    }

    fn set_admission_enabled(&self, on: bool) {
        self.admission_on.store(on, Relaxed);
    }

    fn queue_len(&self) -> usize {
        self.queue.waiting()
    }

    fn rejected(&self) -> u64 {
        self.stats.totals().rejected()
    }

    fn runtime(&self) -> Option<Runtime> {
        StageCore::runtime(self)
    }
}

impl<E: Send + 'static> per_stage::Worker for StageCore<E> {
    type Scratch = Scratch<E>;

    fn pool(&self) -> &Pool {
        match &self.exec {
            Exec::PerStage(p) => p,
            Exec::Shared(_) => unreachable!("only per-stage stages have worker threads"),
        }
    }

    fn idle_timeout(&self) -> Duration {
        self.pool_config.idle_timeout
    }

    fn waiters(&self) -> &EventCount {
        &self.queue.workers
    }

    fn stopped(&self) -> bool {
        self.queue.lifecycle() == Lifecycle::Stopped
    }

    fn has_work(&self) -> bool {
        self.queue.has_work()
    }

    fn work(&self, scratch: &mut Scratch<E>) -> bool {
        let _serial = self.serial_wait();
        if self.take(scratch) == 0 {
            return false;
        }
        let pool = per_stage::Worker::pool(self);
        pool.busy.fetch_add(1, Relaxed);
        self.run_batch(scratch);
        pool.busy.fetch_sub(1, Relaxed);
        true
    }
}

impl<E: Send + 'static> StageObj for StageCore<E> {
    fn id(&self) -> usize {
        self.id
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> ThreadModel {
        self.model
    }

    fn run_once(&self) {
        self.run_shared();
    }

    fn start(&self) -> Result<(), InitError> {
        let cx = Context {
            stage: self,
            in_batch: false,
        };
        self.handler.init(&cx)?;
        self.queue.set_lifecycle(Lifecycle::Running);
        if let Some(pool) = self.own_pool() {
            let min = self.pool_config.min_threads.max(1);
            while pool.threads.load(Relaxed) < min {
                self.spawn_worker()
                    .map_err(|e| format!("cannot spawn a worker thread: {e}"))?;
            }
        } else {
            self.wake();
        }
        Ok(())
    }

    fn set_lifecycle(&self, state: Lifecycle) {
        self.queue.set_lifecycle(state);
    }

    fn lifecycle(&self) -> Lifecycle {
        self.queue.lifecycle()
    }

    fn in_flight(&self) -> usize {
        self.queue.in_flight()
    }

    fn control(&self, now: Instant) {
        let mut c = self.control.lock();
        if now.duration_since(c.last_window) >= STATS_WINDOW {
            self.stats.rotate_window();
            c.last_window = now;
        } else {
            self.stats.drain();
        }
        // Like completions, ticks drive the policy only while admission control is on.
        if let Some(policy) = &self.admission
            && self.admission_on.load(Relaxed)
        {
            policy.on_tick(now);
        }
        let c = &mut *c;
        self.step_pool(c, now);
        if c.batching.is_some() && now.duration_since(c.last_batch) >= BATCHING_INTERVAL {
            let processed = self.stats.totals().processed;
            let obs = BatchObservation {
                processed: processed - c.processed_at_last_batch,
                elapsed: now.duration_since(c.last_batch),
            };
            c.processed_at_last_batch = processed;
            c.last_batch = now;
            if let Some(b) = c.batching.as_mut() {
                self.batch.store(b.step(obs).max(1), Relaxed);
            }
        }
    }

    fn snapshot(&self) -> StageSnapshot {
        let threads = match &self.exec {
            Exec::PerStage(p) => {
                let t = p.threads.load(Relaxed);
                let b = p.busy.load(Relaxed);
                (t, b, t.saturating_sub(b))
            }
            Exec::Shared(_) => (0, self.queue.held(), 0),
        };
        self.stats.snapshot(SnapshotInput {
            name: &self.name,
            state: self.queue.lifecycle().as_str(),
            thread_model: self.model.as_str(),
            domain: self.domain.as_ref().map(|d| d.name()),
            queue_len: self.queue.waiting(),
            capacity: self.queue.capacity(),
            threads,
            batch_size: self.batch.load(Relaxed),
            admission: self.admission.as_ref().map(|a| a.state()),
            admission_enabled: self.admission.is_some() && self.admission_on.load(Relaxed),
            p90: self.p90(),
        })
    }

    fn incoming(&self) -> Vec<usize> {
        self.incoming.list()
    }

    fn take_handles(&self) -> Vec<JoinHandle<()>> {
        self.own_pool()
            .map(|p| std::mem::take(&mut *p.handles.lock()))
            .unwrap_or_default()
    }

    fn abandon(&self) -> (usize, usize) {
        self.queue.abandon()
    }

    fn destroy(&self) {
        if catch_unwind(AssertUnwindSafe(|| self.handler.destroy())).is_err() {
            tracing::error!(stage = %self.name, "destroy hook panicked");
        }
    }
}
