//! The inside of a stage: its queue, its workers' loop, its controllers.
//!
//! # Invariants
//! - `QueueState::waiting` counts admitted events not yet handed to the handler:
//!   those in `fifo`, in `ready` and parked in the color table. It never exceeds
//!   `capacity`; admission, capacity and color tickets are decided under the queue
//!   lock, so FIFO order, ticket order and the bound agree.
//! - `running` counts events handed to the handler whose batch has not returned.
//! - Every admitted event leaves `waiting + running` exactly once: processed by a
//!   handler, or counted unfinished at shutdown.
//! - `ready` holds colored events that already own their color (handed over by the
//!   color table); they run before anything in `fifo`, by priority hint.

use std::any::Any;
use std::cell::Cell;
use std::collections::{BTreeSet, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::admission::{AdmissionPolicy, Completion, Offer};
use crate::color::{ColorTable, Unpark};
use crate::control::{
    BatchObservation, BatchingController, PoolAdjustment, PoolObservation, ThreadPoolConfig,
    ThreadPoolController,
};
use crate::envelope::{Color, Envelope, Meta};
use crate::exec::ThreadModel;
use crate::exec::shared::SharedPool;
use crate::runtime::{Runtime, RuntimeError, RuntimeInner};
use crate::sink::EnqueueError;
use crate::stage::{Batch, Context, EventHandler, InitError, StageConfig, StageControl};
use crate::stats::{
    ClassCounts, LatencySummary, Sample, StageSnapshot, StageStats, TRACKED_CLASSES,
};

/// Interval of the batching controller's steps.
const BATCHING_INTERVAL: Duration = Duration::from_millis(250);
/// Length of the stats window behind the current p90 estimate.
const STATS_WINDOW: Duration = Duration::from_secs(1);

thread_local! {
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// What a worker thread is doing: which runtime and stage, which event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    pub(crate) runtime: u64,
    pub(crate) stage: Option<usize>,
    pub(crate) meta: Meta,
}

/// Where an enqueue comes from: a thread of a runtime (a handler, the timer) or
/// outside. Draining stages take events only from inside their runtime.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    runtime: u64,
    stage: Option<usize>,
}

impl Origin {
    /// The calling thread's origin and the metadata a new event inherits from it.
    pub(crate) fn current() -> (Meta, Origin) {
        match CURRENT.with(Cell::get) {
            Some(c) => (
                c.meta,
                Origin {
                    runtime: c.runtime,
                    stage: c.stage,
                },
            ),
            None => (
                Meta::new(),
                Origin {
                    runtime: 0,
                    stage: None,
                },
            ),
        }
    }

    /// The enqueue instant of an event whose metadata `current` just returned: outside
    /// any runtime that metadata is fresh and its `born` was read a moment ago, so it
    /// doubles as the enqueue time (one clock read per event from a source thread
    /// instead of two). Only for metadata from `current`, never caller-supplied.
    pub(crate) fn enqueue_instant(&self, meta: &Meta) -> Instant {
        if self.runtime == 0 && self.stage.is_none() {
            meta.born
        } else {
            Instant::now()
        }
    }

    /// Runs `f` with the calling thread marked as inside `runtime` (timer thread).
    pub(crate) fn enter<R>(runtime: u64, meta: Meta, f: impl FnOnce() -> R) -> R {
        CURRENT.with(|c| {
            let prev = c.replace(Some(Current {
                runtime,
                stage: None,
                meta,
            }));
            let r = f();
            c.set(prev);
            r
        })
    }
}

/// Lifecycle of a stage: Created -> Running -> Draining -> Stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Lifecycle {
    /// Registered, not started: events queue up but do not run.
    Created = 0,
    /// Running.
    Running = 1,
    /// Shutting down: only events from inside the runtime are accepted.
    Draining = 2,
    /// Stopped: no events accepted or run.
    Stopped = 3,
}

impl Lifecycle {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Lifecycle::Created,
            1 => Lifecycle::Running,
            2 => Lifecycle::Draining,
            _ => Lifecycle::Stopped,
        }
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Created => "created",
            Lifecycle::Running => "running",
            Lifecycle::Draining => "draining",
            Lifecycle::Stopped => "stopped",
        }
    }
}

struct QueueState<E> {
    fifo: VecDeque<Envelope<E>>,
    ready: VecDeque<Envelope<E>>,
    waiting: usize,
    parked: usize,
    /// Own-pool workers waiting for work.
    sleepers: usize,
    /// Blocked `enqueue_until` callers.
    space_waiters: usize,
}

/// An own pool's threads (per-stage thread model).
struct Pool {
    threads: AtomicUsize,
    busy: AtomicUsize,
    idle_expired: AtomicUsize,
    retire: AtomicUsize,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

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

/// A batch taken from the queue: events, and the colors it holds with the last
/// ticket of each.
struct Taken<E> {
    envs: Vec<Envelope<E>>,
    held: Vec<(Color, u64)>,
}

/// Sources that enqueued into a stage (the stage graph's incoming edges).
struct Edges {
    bits: [AtomicU64; 4],
    more: Mutex<BTreeSet<usize>>,
}

impl Edges {
    fn record(&self, from: usize) {
        if from < 256 {
            let (word, bit) = (from / 64, 1u64 << (from % 64));
            if self.bits[word].load(Relaxed) & bit == 0 {
                self.bits[word].fetch_or(bit, Relaxed);
            }
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
    queue: Mutex<QueueState<E>>,
    not_empty: Condvar,
    space: Condvar,
    capacity: usize,
    /// Mirror of `waiting`, for lock-free reads.
    len: AtomicUsize,
    /// Events in `fifo` or `ready` (runnable now), for lock-free reads.
    runnable: AtomicUsize,
    running: AtomicUsize,
    admission: Option<Arc<dyn AdmissionPolicy>>,
    admission_on: AtomicBool,
    state: AtomicU8,
    stats: StageStats,
    handler: Box<dyn EventHandler<E>>,
    batch: AtomicUsize,
    exec: Exec,
    model: ThreadModel,
    pool_config: ThreadPoolConfig,
    scheduled: AtomicBool,
    incoming: Edges,
    control: Mutex<Control>,
    self_weak: Weak<StageCore<E>>,
}

impl<E: Send + 'static> std::fmt::Debug for StageCore<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageCore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The type-erased face of a stage, for the runtime, the driver and the shared pool.
pub(crate) trait StageObj: Send + Sync + 'static {
    fn id(&self) -> usize;
    fn name(&self) -> &str;
    fn model(&self) -> ThreadModel;
    /// Shared pool: takes and runs one batch. Returns true if the stage had more
    /// work and was put back on the run queue (the schedule token passed on).
    /// Takes one batch, hands the schedule token on, runs the batch.
    fn run_once(&self);
    fn has_work(&self) -> bool;
    fn unschedule(&self);
    fn start(&self, rt: &Runtime) -> Result<(), InitError>;
    fn set_lifecycle(&self, state: Lifecycle);
    fn lifecycle(&self) -> Lifecycle;
    fn in_flight(&self) -> usize;
    fn control(&self, now: Instant);
    fn snapshot(&self) -> StageSnapshot;
    fn incoming(&self) -> Vec<usize>;
    fn take_handles(&self) -> Vec<JoinHandle<()>>;
    /// Drops what is still queued; returns (waiting, running, parked) counts.
    fn abandon(&self) -> (usize, usize, usize);
    fn destroy(&self);
}

impl<E: Send + 'static> StageCore<E> {
    pub(crate) fn build(
        runtime: &Runtime,
        config: StageConfig,
        handler: Box<dyn EventHandler<E>>,
    ) -> Result<Arc<Self>, RuntimeError> {
        if config.capacity == 0 {
            return Err(RuntimeError::InvalidConfig(format!(
                "stage '{}': capacity must be at least 1",
                config.name
            )));
        }
        if config.batch == 0 {
            return Err(RuntimeError::InvalidConfig(format!(
                "stage '{}': batch must be at least 1",
                config.name
            )));
        }
        let model = config.thread_model.unwrap_or(runtime.inner.default_model);
        let pool_config = config.pool.clone();
        if model == ThreadModel::PerStage {
            pool_config.validate().map_err(|e| {
                RuntimeError::InvalidConfig(format!("stage '{}': {e}", config.name))
            })?;
        }
        let batching = match &config.batching {
            Some(b) => Some(BatchingController::new(b.clone()).map_err(|e| {
                RuntimeError::InvalidConfig(format!("stage '{}': {e}", config.name))
            })?),
            None => None,
        };
        let initial_batch = batching
            .as_ref()
            .map_or(config.batch, BatchingController::batch_size);
        let exec = match model {
            ThreadModel::PerStage => Exec::PerStage(Pool {
                threads: AtomicUsize::new(0),
                busy: AtomicUsize::new(0),
                idle_expired: AtomicUsize::new(0),
                retire: AtomicUsize::new(0),
                handles: Mutex::new(Vec::new()),
            }),
            ThreadModel::Shared => Exec::Shared(Arc::clone(&runtime.inner.shared)),
        };
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
            queue: Mutex::new(QueueState {
                fifo: VecDeque::new(),
                ready: VecDeque::new(),
                waiting: 0,
                parked: 0,
                sleepers: 0,
                space_waiters: 0,
            }),
            not_empty: Condvar::new(),
            space: Condvar::new(),
            capacity: config.capacity,
            len: AtomicUsize::new(0),
            runnable: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            admission: config.admission,
            admission_on: AtomicBool::new(true),
            state: AtomicU8::new(Lifecycle::Created as u8),
            stats: StageStats::new(),
            handler,
            batch: AtomicUsize::new(initial_batch),
            exec,
            model,
            pool_config,
            scheduled: AtomicBool::new(false),
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
            self_weak: weak.clone(),
        }))
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn queue_len(&self) -> usize {
        self.len.load(Relaxed)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn count_dropped(&self, n: u64) {
        self.stats.dropped.fetch_add(n, Relaxed);
    }

    fn accepts(&self, origin: Origin) -> bool {
        match Lifecycle::from_u8(self.state.load(Acquire)) {
            Lifecycle::Created | Lifecycle::Running => true,
            Lifecycle::Draining => origin.runtime == self.runtime_id,
            Lifecycle::Stopped => false,
        }
    }

    fn admit(&self, q: &QueueState<E>, class: u8) -> bool {
        let Some(policy) = &self.admission else {
            return true;
        };
        if !self.admission_on.load(Relaxed) {
            return true;
        }
        let offer = Offer {
            class,
            queue_len: q.waiting,
            in_flight: q.waiting + self.running.load(Relaxed),
            capacity: self.capacity,
            now: Instant::now(),
        };
        let ok = policy.admit(&offer);
        if !ok {
            self.stats.rejected.fetch_add(1, Relaxed);
            self.stats.class_rejected[StageStats::class_slot(class)].fetch_add(1, Relaxed);
        }
        ok
    }

    fn push(&self, q: &mut QueueState<E>, event: E, meta: Meta, now: Instant) {
        let ticket = meta.color.map_or(0, |c| self.colors.ticket(c));
        q.fifo.push_back(Envelope {
            event,
            meta,
            enqueued: now,
            ticket,
        });
        q.waiting += 1;
        self.stats.admitted.fetch_add(1, Relaxed);
        self.stats.class_admitted[StageStats::class_slot(meta.class)].fetch_add(1, Relaxed);
    }

    fn publish(&self, q: &QueueState<E>) {
        self.len.store(q.waiting, Relaxed);
        // SeqCst pairs with `unschedule`/`has_work` (see `try_schedule_inner`).
        self.runnable.store(q.fifo.len() + q.ready.len(), SeqCst);
    }

    /// Wakes whoever runs this stage; called with the queue lock released for the
    /// shared pool, held for an own pool (`sleepers` is read under it).
    fn wake_own(&self, q: &QueueState<E>) {
        if q.sleepers > 0 {
            self.not_empty.notify_one();
        }
    }

    fn wake_shared(&self) {
        if let Exec::Shared(pool) = &self.exec
            && self.try_schedule_inner()
            && let Some(me) = self.self_weak.upgrade()
        {
            pool.push(me);
        }
    }

    /// Takes the schedule token. With `unschedule` + `has_work` on the worker side this
    /// is a store-load handshake (Dekker): the enqueuer stores `runnable` then swaps
    /// `scheduled`; the worker stores `scheduled = false` then loads `runnable`. Both
    /// sides use SeqCst so that at least one of them sees the other's store; with
    /// Release/Acquire the worker's load may pass its own store and strand an event
    /// (seen as a hang of the shared-pool round-trip benchmark).
    fn try_schedule_inner(&self) -> bool {
        !self.scheduled.swap(true, SeqCst)
    }

    fn record_edge(&self, origin: Origin) {
        if origin.runtime == self.runtime_id
            && let Some(from) = origin.stage
        {
            self.incoming.record(from);
        }
    }

    pub(crate) fn offer(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
    ) -> Result<(), EnqueueError<E>> {
        self.offer_at(event, meta, origin, Instant::now())
    }

    /// `offer` with the enqueue instant read by the caller (before the lock, so the
    /// critical section stays short).
    pub(crate) fn offer_at(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
        now: Instant,
    ) -> Result<(), EnqueueError<E>> {
        self.stats.offered.fetch_add(1, Relaxed);
        let mut q = self.queue.lock();
        if !self.accepts(origin) {
            self.stats.closed.fetch_add(1, Relaxed);
            return Err(EnqueueError::Closed(event));
        }
        if q.waiting >= self.capacity {
            self.stats.full.fetch_add(1, Relaxed);
            return Err(EnqueueError::Full(event));
        }
        if !self.admit(&q, meta.class) {
            return Err(EnqueueError::Rejected(event));
        }
        self.push(&mut q, event, meta, now);
        self.publish(&q);
        self.wake_own(&q);
        drop(q);
        self.wake_shared();
        self.record_edge(origin);
        Ok(())
    }

    pub(crate) fn offer_batch(
        &self,
        events: Vec<E>,
        meta: Meta,
        origin: Origin,
    ) -> Result<(), EnqueueError<Vec<E>>> {
        let n = events.len() as u64;
        self.stats.offered.fetch_add(n, Relaxed);
        if events.is_empty() {
            return Ok(());
        }
        let now = origin.enqueue_instant(&meta);
        let mut q = self.queue.lock();
        if !self.accepts(origin) {
            self.stats.closed.fetch_add(n, Relaxed);
            return Err(EnqueueError::Closed(events));
        }
        if q.waiting + events.len() > self.capacity {
            self.stats.full.fetch_add(n, Relaxed);
            return Err(EnqueueError::Full(events));
        }
        // All or none: one admission decision per event; any refusal refuses all.
        // Tokens taken by the admitted part of a refused batch are not refunded.
        for _ in 0..events.len() {
            if !self.admit(&q, meta.class) {
                return Err(EnqueueError::Rejected(events));
            }
        }
        for event in events {
            self.push(&mut q, event, meta, now);
        }
        self.publish(&q);
        if q.sleepers > 0 {
            self.not_empty.notify_all();
        }
        drop(q);
        self.wake_shared();
        self.record_edge(origin);
        Ok(())
    }

    pub(crate) fn offer_until(
        &self,
        event: E,
        meta: Meta,
        origin: Origin,
        deadline: Instant,
    ) -> Result<(), EnqueueError<E>> {
        let mut event = event;
        let mut now = origin.enqueue_instant(&meta);
        loop {
            match self.offer_at(event, meta, origin, now) {
                Err(EnqueueError::Full(e)) => {
                    event = e;
                    let mut q = self.queue.lock();
                    if q.waiting < self.capacity {
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Err(EnqueueError::Full(event));
                    }
                    q.space_waiters += 1;
                    self.space.wait_until(&mut q, deadline);
                    q.space_waiters -= 1;
                    now = Instant::now();
                }
                other => return other,
            }
        }
    }

    fn take_batch(&self, q: &mut QueueState<E>) -> Taken<E> {
        let max = self.batch.load(Relaxed).max(1);
        let mut envs = Vec::with_capacity(max.min(q.fifo.len() + q.ready.len()));
        let mut held: Vec<(Color, u64)> = Vec::new();
        while envs.len() < max {
            let Some(env) = q.ready.pop_front() else {
                break;
            };
            if let Some(c) = env.meta.color {
                held.push((c, env.ticket));
            }
            envs.push(env);
        }
        while envs.len() < max {
            let Some(env) = q.fifo.pop_front() else { break };
            let Some(color) = env.meta.color else {
                envs.push(env);
                continue;
            };
            // The next ticket of a color this batch already holds runs in the same
            // batch, after it: same order, still never concurrent.
            if let Some(h) = held
                .iter_mut()
                .find(|h| h.0 == color && h.1 + 1 == env.ticket)
            {
                h.1 = env.ticket;
                envs.push(env);
                continue;
            }
            let ticket = env.ticket;
            let weak = self.self_weak.clone();
            let parked = self
                .colors
                .acquire(color, ticket, env, move |env| -> Unpark {
                    Box::new(move || {
                        if let Some(core) = weak.upgrade() {
                            core.unpark(env);
                        }
                    })
                });
            match parked {
                Ok(env) => {
                    held.push((color, ticket));
                    envs.push(env);
                }
                Err(()) => q.parked += 1,
            }
        }
        q.waiting -= envs.len();
        self.running.fetch_add(envs.len(), Relaxed);
        self.publish(q);
        if q.space_waiters > 0 && !envs.is_empty() {
            self.space.notify_all();
        }
        Taken { envs, held }
    }

    /// A parked event now owns its color: it joins the ready list.
    fn unpark(&self, env: Envelope<E>) {
        let mut q = self.queue.lock();
        q.parked -= 1;
        let pos = q
            .ready
            .iter()
            .position(|e| e.meta.priority < env.meta.priority)
            .unwrap_or(q.ready.len());
        q.ready.insert(pos, env);
        self.publish(&q);
        self.wake_own(&q);
        drop(q);
        self.wake_shared();
    }

    fn run_batch(&self, mut taken: Taken<E>, rt: &Runtime) -> usize {
        let n = taken.envs.len();
        if n == 0 {
            return 0;
        }
        let stamps: Vec<(Meta, Instant)> =
            taken.envs.iter().map(|e| (e.meta, e.enqueued)).collect();
        let start = Instant::now();
        let outcome = CURRENT.with(|cell| {
            let prev = cell.replace(Some(Current {
                runtime: self.runtime_id,
                stage: Some(self.id),
                meta: stamps[0].0,
            }));
            let cx = Context {
                stage: self,
                runtime: rt,
                current: Some(cell),
            };
            let batch = Batch {
                items: taken.envs.drain(..),
                current: cell,
            };
            let r = catch_unwind(AssertUnwindSafe(|| self.handler.handle_events(batch, &cx)));
            cell.set(prev);
            r
        });
        if let Err(panic) = outcome {
            let msg = panic_message(&*panic);
            self.stats.panics.fetch_add(1, Relaxed);
            tracing::error!(stage = %self.name, "event handler panicked: {msg}");
            *self.stats.last_panic.lock() = Some(msg);
        }
        let end = Instant::now();
        let service = (end - start) / n as u32;
        let samples: Vec<Sample> = stamps
            .iter()
            .map(|(meta, enq)| Sample {
                queue_delay: start.saturating_duration_since(*enq),
                service_time: service,
                response_time: end.saturating_duration_since(meta.born),
            })
            .collect();
        self.stats.record(&samples);
        // Completions feed the policy only while admission control is on: events that
        // entered while it was off (service degradation, USITS'03 3.4) never passed
        // the policy, and their response times would drive its state (a token rate cut
        // to the floor, say) for a regime that no longer holds when it is switched on.
        if let Some(policy) = self
            .admission
            .as_ref()
            .filter(|_| self.admission_on.load(Relaxed))
        {
            for ((meta, _), s) in stamps.iter().zip(&samples) {
                policy.on_complete(&Completion {
                    class: meta.class,
                    response_time: s.response_time,
                    queue_delay: s.queue_delay,
                    service_time: s.service_time,
                    in_flight: self.in_flight(),
                    now: end,
                });
            }
        }
        for (color, last) in taken.held.drain(..) {
            self.colors.release(color, last);
        }
        self.stats.processed.fetch_add(n as u64, Relaxed);
        self.running.fetch_sub(n, Release);
        n
    }

    fn own_pool(&self) -> Option<&Pool> {
        match &self.exec {
            Exec::PerStage(p) => Some(p),
            Exec::Shared(_) => None,
        }
    }

    fn spawn_worker(&self) -> std::io::Result<()> {
        let (Some(pool), Some(me)) = (self.own_pool(), self.self_weak.upgrade()) else {
            return Ok(());
        };
        pool.threads.fetch_add(1, Relaxed);
        let spawned = std::thread::Builder::new()
            .name(format!("seda-{}", self.name))
            .spawn(move || me.worker_main());
        match spawned {
            Ok(h) => {
                let mut handles = pool.handles.lock();
                handles.retain(|h| !h.is_finished());
                handles.push(h);
                Ok(())
            }
            Err(e) => {
                pool.threads.fetch_sub(1, Relaxed);
                Err(e)
            }
        }
    }

    /// Main loop of an own-pool worker: wait for work, run a batch, repeat; exit when
    /// stopped or retired by the thread-pool controller.
    fn worker_main(self: Arc<Self>) {
        let Some(pool) = self.own_pool() else { return };
        let idle_timeout = self.pool_config.idle_timeout;
        loop {
            let mut expired = false;
            let mut q = self.queue.lock();
            let taken = loop {
                if self.lifecycle() == Lifecycle::Stopped {
                    break None;
                }
                if !q.fifo.is_empty() || !q.ready.is_empty() {
                    let t = self.take_batch(&mut q);
                    if !t.envs.is_empty() {
                        break Some(t);
                    }
                    continue;
                }
                if pool.retire.load(Relaxed) > 0
                    && pool
                        .retire
                        .fetch_update(Relaxed, Relaxed, |r| r.checked_sub(1))
                        .is_ok()
                {
                    break None;
                }
                // No spinning before the sleep: measured on the Fig. 11 socket bench
                // (16 clients, 4 alternating runs), 64 polls + 4 yields after each
                // batch cut seda-io's throughput from a median of 1,163 to 912 MB/s
                // on 2 cores: the spinning worker takes the core the producer needs.
                q.sleepers += 1;
                let timed_out = self.not_empty.wait_for(&mut q, idle_timeout).timed_out();
                q.sleepers -= 1;
                if timed_out && !expired {
                    expired = true;
                    pool.idle_expired.fetch_add(1, Relaxed);
                }
            };
            drop(q);
            if expired {
                pool.idle_expired.fetch_sub(1, Relaxed);
            }
            let Some(taken) = taken else {
                pool.threads.fetch_sub(1, Relaxed);
                return;
            };
            let Some(rt) = self.runtime.upgrade().map(Runtime::from_inner) else {
                // The runtime is gone; nobody will count these events.
                pool.threads.fetch_sub(1, Relaxed);
                return;
            };
            pool.busy.fetch_add(1, Relaxed);
            self.run_batch(taken, &rt);
            pool.busy.fetch_sub(1, Relaxed);
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
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
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
        self.len.load(Relaxed)
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
        if self.lifecycle() != Lifecycle::Running && self.lifecycle() != Lifecycle::Draining {
            // Not runnable now; `start` reschedules a stage that has work.
            self.unschedule();
            return;
        }
        let (taken, more) = {
            let mut q = self.queue.lock();
            let t = self.take_batch(&mut q);
            (t, !q.fifo.is_empty() || !q.ready.is_empty())
        };
        // Hand the schedule token on before running, so that work arriving during
        // this batch runs on another worker meanwhile (a stage's batches may run in
        // parallel; colors still serialise same-colored events):
        // - more than one batch waiting: the token goes back to the run queue;
        // - the batch emptied the queue: give the token up, then re-check, so an
        //   event enqueued in between is not stranded (see `try_schedule_inner`).
        if let (Exec::Shared(pool), Some(me)) = (&self.exec, self.self_weak.upgrade()) {
            if more {
                pool.push(me);
            } else {
                self.unschedule();
                if self.has_work() && self.try_schedule_inner() {
                    pool.push(me);
                }
            }
        }
        if let Some(rt) = self.runtime.upgrade().map(Runtime::from_inner) {
            self.run_batch(taken, &rt);
        }
    }

    fn has_work(&self) -> bool {
        self.runnable.load(SeqCst) > 0
    }

    fn unschedule(&self) {
        self.scheduled.store(false, SeqCst);
    }

    fn start(&self, rt: &Runtime) -> Result<(), InitError> {
        let cx = Context {
            stage: self,
            runtime: rt,
            current: None,
        };
        self.handler.init(&cx)?;
        self.state.store(Lifecycle::Running as u8, Release);
        if let Some(pool) = self.own_pool() {
            let min = self.pool_config.min_threads.max(1);
            while pool.threads.load(Relaxed) < min {
                self.spawn_worker()
                    .map_err(|e| InitError(format!("cannot spawn a worker thread: {e}")))?;
            }
        } else if self.has_work() {
            self.wake_shared();
        }
        Ok(())
    }

    fn set_lifecycle(&self, state: Lifecycle) {
        // Taken under the queue lock so that no enqueue straddles the change.
        let q = self.queue.lock();
        self.state.store(state as u8, Release);
        if state == Lifecycle::Stopped {
            self.not_empty.notify_all();
            self.space.notify_all();
        }
        drop(q);
    }

    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::from_u8(self.state.load(Acquire))
    }

    fn in_flight(&self) -> usize {
        self.len.load(Acquire) + self.running.load(Acquire)
    }

    fn control(&self, now: Instant) {
        let mut c = self.control.lock();
        if now.duration_since(c.last_window) >= STATS_WINDOW {
            self.stats.rotate_window();
            c.last_window = now;
        }
        // Like completions, ticks drive the policy only while admission control is on.
        if let Some(policy) = &self.admission
            && self.admission_on.load(Relaxed)
        {
            policy.on_tick(now);
        }
        let interval = self.pool_config.interval;
        let c = &mut *c;
        if let (Some(pool), Some(ctl)) = (self.own_pool(), c.pool.as_mut())
            && now.duration_since(c.last_pool) >= interval
            && self.lifecycle() == Lifecycle::Running
        {
            c.last_pool = now;
            let obs = PoolObservation {
                queue_len: self.len.load(Relaxed),
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
                    let q = self.queue.lock();
                    drop(q);
                    self.not_empty.notify_all();
                }
            }
        }
        if c.batching.is_some() && now.duration_since(c.last_batch) >= BATCHING_INTERVAL {
            let processed = self.stats.processed.load(Relaxed);
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
        let admission = self.admission.as_ref().map(|a| a.state());
        let (threads, busy, idle) = match &self.exec {
            Exec::PerStage(p) => {
                let t = p.threads.load(Relaxed);
                let b = p.busy.load(Relaxed);
                (t, b, t.saturating_sub(b))
            }
            Exec::Shared(_) => (0, self.running.load(Relaxed), 0),
        };
        let s = &self.stats;
        let classes = (0..TRACKED_CLASSES)
            .map(|c| ClassCounts {
                class: c as u8,
                admitted: s.class_admitted[c].load(Relaxed),
                rejected: s.class_rejected[c].load(Relaxed),
            })
            .filter(|c| c.admitted + c.rejected > 0)
            .collect();
        let (queue_delay, service_time, response_time) = {
            let h = s.hist.lock();
            (
                LatencySummary::of(&h.queue_delay),
                LatencySummary::of(&h.service_time),
                LatencySummary::of(&h.response_time),
            )
        };
        StageSnapshot {
            name: self.name.clone(),
            state: self.lifecycle().as_str().to_owned(),
            thread_model: self.model.as_str().to_owned(),
            queue_len: self.len.load(Relaxed),
            capacity: self.capacity,
            threads,
            threads_busy: busy,
            threads_idle: idle,
            enqueued: s.offered.load(Relaxed),
            admitted: s.admitted.load(Relaxed),
            rejected: s.rejected.load(Relaxed),
            full: s.full.load(Relaxed),
            closed: s.closed.load(Relaxed),
            dropped: s.dropped.load(Relaxed),
            processed: s.processed.load(Relaxed),
            panics: s.panics.load(Relaxed),
            last_panic: s.last_panic.lock().clone(),
            batch_size: self.batch.load(Relaxed),
            admission_enabled: self.admission.is_some() && self.admission_on.load(Relaxed),
            admission_rate: admission.as_ref().and_then(|a| a.rate),
            rt_p90_ms: self.p90().map(|d| d.as_secs_f64() * 1000.0),
            rt_target_ms: admission.as_ref().and_then(|a| a.target_ms),
            admission,
            classes,
            queue_delay,
            service_time,
            response_time,
        }
    }

    fn incoming(&self) -> Vec<usize> {
        self.incoming.list()
    }

    fn take_handles(&self) -> Vec<JoinHandle<()>> {
        self.own_pool()
            .map(|p| std::mem::take(&mut *p.handles.lock()))
            .unwrap_or_default()
    }

    fn abandon(&self) -> (usize, usize, usize) {
        let mut q = self.queue.lock();
        let waiting = q.waiting;
        let parked = q.parked;
        q.fifo.clear();
        q.ready.clear();
        q.waiting = parked; // parked events are dropped with the color table
        self.publish(&q);
        (waiting, self.running.load(Acquire), parked)
    }

    fn destroy(&self) {
        if catch_unwind(AssertUnwindSafe(|| self.handler.destroy())).is_err() {
            tracing::error!(stage = %self.name, "destroy hook panicked");
        }
    }
}
