//! The runtime: a registry of stages, their threads, the controller driver, timers,
//! and graceful shutdown.
//!
//! # Shutdown
//! [`Runtime::shutdown`] moves every stage to `Draining`: enqueues from outside the
//! runtime get `Closed`, while events that handlers (and timers) emit are still
//! accepted, so work already inside the service can finish. When nothing is in flight,
//! or at the deadline, stages stop; the [`ShutdownReport`] counts, per stage, every
//! admitted event that was not processed. No event vanishes uncounted.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use crate::color::ColorTable;
use crate::domain::Domain;
use crate::exec::shared::SharedPool;
use crate::exec::{StageObj, ThreadModel};
use crate::lifecycle::Lifecycle;
use crate::stats::RuntimeSnapshot;
use crate::timer::{TimerId, Timers};

static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(1);

/// Errors of the runtime API. `#[non_exhaustive]`: a match needs a `_` arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A stage with this name is already registered.
    DuplicateStage(String),
    /// A stage's `init` hook failed (or its first worker thread could not be
    /// spawned). [`source`](std::error::Error::source) is the hook's own error.
    Init {
        /// The stage.
        stage: String,
        /// The hook's error.
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// The runtime is shutting down or stopped.
    Stopped,
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::DuplicateStage(s) => write!(f, "a stage named '{s}' already exists"),
            RuntimeError::Init { stage, source } => {
                write!(f, "stage '{stage}' failed to initialise: {source}")
            }
            RuntimeError::InvalidConfig(s) => write!(f, "invalid configuration: {s}"),
            RuntimeError::Stopped => f.write_str("the runtime is shutting down"),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RuntimeError::Init { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// Builder of a [`Runtime`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::{Runtime, ThreadModel};
///
/// let rt = Runtime::builder()
///     .name("mail")
///     .thread_model(ThreadModel::PerStage) // a pool per stage (SEDA 3.4), the default
///     .control_interval(Duration::from_millis(100)) // controllers' tick
///     .build();
/// assert!(rt.stage_names().is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    name: String,
    thread_model: ThreadModel,
    shared_workers: usize,
    control_interval: Duration,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            name: "seda".to_owned(),
            thread_model: ThreadModel::PerStage,
            shared_workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            control_interval: Duration::from_millis(50),
        }
    }
}

impl RuntimeBuilder {
    /// Name used for thread names.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Default thread model of stages (each stage may override it).
    #[must_use]
    pub fn thread_model(mut self, model: ThreadModel) -> Self {
        self.thread_model = model;
        self
    }

    /// Workers of the shared pool (default: one per core).
    #[must_use]
    pub fn shared_workers(mut self, n: usize) -> Self {
        self.shared_workers = n.max(1);
        self
    }

    /// How often the controller thread samples stages (default 50 ms). Each
    /// controller still steps at its own interval, rounded up to this one.
    #[must_use]
    pub fn control_interval(mut self, interval: Duration) -> Self {
        self.control_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Builds the runtime. Stages are added with [`Runtime::stage`], then
    /// [`Runtime::start`] runs them.
    pub fn build(self) -> Runtime {
        let inner = Arc::new(RuntimeInner {
            id: NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed),
            name: self.name,
            created: Instant::now(),
            default_model: self.thread_model,
            colors: Arc::new(ColorTable::new()),
            shared: Arc::new(SharedPool::new(self.shared_workers)),
            stages: RwLock::new(Vec::new()),
            names: RwLock::new(HashSet::new()),
            declared: Mutex::new(Vec::new()),
            domains: Mutex::new(HashMap::new()),
            next_stage: AtomicUsize::new(0),
            state: Mutex::new(Lifecycle::Created),
            control_interval: self.control_interval,
            driver: Mutex::new(None),
            timers: Timers::new(),
        });
        Runtime { inner }
    }
}

pub(crate) struct RuntimeInner {
    pub(crate) id: u64,
    name: String,
    created: Instant,
    pub(crate) default_model: ThreadModel,
    pub(crate) colors: Arc<ColorTable>,
    pub(crate) shared: Arc<SharedPool>,
    stages: RwLock<Vec<Arc<dyn StageObj>>>,
    /// Names of the stages built or declared: a name is taken once.
    names: RwLock<HashSet<String>>,
    /// Stages declared ([`Runtime::declare`]) and not built yet.
    declared: Mutex<Vec<String>>,
    domains: Mutex<HashMap<String, Domain>>,
    next_stage: AtomicUsize,
    state: Mutex<Lifecycle>,
    control_interval: Duration,
    driver: Mutex<Option<JoinHandle<()>>>,
    pub(crate) timers: Arc<Timers>,
}

impl RuntimeInner {
    pub(crate) fn next_stage_id(&self) -> usize {
        self.next_stage.fetch_add(1, Ordering::Relaxed)
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        // Best effort when the last handle goes without a shutdown: stop the threads.
        for s in self.stages.get_mut().iter() {
            s.set_lifecycle(Lifecycle::Stopped);
        }
        self.shared.stop();
        self.timers.stop();
    }
}

/// A SEDA runtime: a set of stages and the threads that run them. Cheap to clone.
///
/// Build stages ([`Runtime::stage`], [`Runtime::declare`]), [`start`](Runtime::start)
/// them, read [`snapshot`](Runtime::snapshot)s while they run, and
/// [`shutdown`](Runtime::shutdown) with a deadline: the report says what was drained
/// and what was not.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::{Batch, Context, Runtime, ThreadModel};
///
/// let rt = Runtime::builder()
///     .name("example")
///     .thread_model(ThreadModel::Shared)
///     .shared_workers(2)
///     .build();
/// let sink = rt
///     .stage("double", |batch: Batch<'_, u64>, _cx: &Context<'_>| {
///         let _sum: u64 = batch.map(|n| n * 2).sum();
///     })
///     .build()
///     .unwrap();
/// rt.start().unwrap();
/// for n in 0..10 {
///     sink.try_enqueue(n).unwrap();
/// }
/// let report = rt.shutdown(Duration::from_secs(5));
/// assert!(report.drained);
/// assert_eq!(report.unfinished(), 0);
/// assert_eq!(report.stages[0].processed, 10);
/// assert_eq!(rt.snapshot().stages[0].name, "double");
/// ```
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("name", &self.inner.name)
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::builder().build()
    }
}

/// Per-stage part of a [`ShutdownReport`].
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageShutdown {
    /// The stage.
    pub name: String,
    /// Events its handler processed over the runtime's life.
    pub processed: u64,
    /// Admitted events not processed: `queued + running`.
    pub unfinished: u64,
    /// Of those, events still queued (including parked colored events).
    pub queued: u64,
    /// Of those, events inside a handler that had not returned at the deadline.
    pub running: u64,
}

/// What a shutdown finished and what it could not.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Whether every admitted event was processed before the deadline.
    pub drained: bool,
    /// Time the shutdown took, milliseconds.
    pub elapsed_ms: u64,
    /// Per stage counts.
    pub stages: Vec<StageShutdown>,
    /// Timers cancelled before they fired (their events never entered a queue).
    pub timers_cancelled: usize,
    /// Worker threads still inside a handler at the deadline (left detached).
    pub threads_detached: usize,
}

impl ShutdownReport {
    /// Admitted events that were not processed, over all stages.
    pub fn unfinished(&self) -> u64 {
        self.stages.iter().map(|s| s.unfinished).sum()
    }
}

impl Runtime {
    /// A builder with defaults: per-stage thread model, one shared worker per core.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub(crate) fn from_inner(inner: Arc<RuntimeInner>) -> Self {
        Runtime { inner }
    }

    /// The thread-pool domain named `name`, made on first use (see
    /// [`crate::Domain`]): stages built with `.domain(&d)` may hand events to each
    /// other inline.
    pub fn domain(&self, name: &str) -> Domain {
        self.inner
            .domains
            .lock()
            .entry(name.to_owned())
            .or_insert_with(|| Domain::new(name))
            .clone()
    }

    /// Reserves `name` for a declared stage.
    pub(crate) fn reserve(&self, name: &str) -> Result<(), RuntimeError> {
        if *self.inner.state.lock() >= Lifecycle::Draining {
            return Err(RuntimeError::Stopped);
        }
        let mut names = self.inner.names.write();
        if names.contains(name) {
            return Err(RuntimeError::DuplicateStage(name.to_owned()));
        }
        names.insert(name.to_owned());
        self.inner.declared.lock().push(name.to_owned());
        Ok(())
    }

    /// Registers a built stage (`declared`: its name was taken by
    /// [`Runtime::reserve`]); starts it if the runtime runs.
    pub(crate) fn register(
        &self,
        name: &str,
        core: Arc<dyn StageObj>,
        declared: bool,
    ) -> Result<(), RuntimeError> {
        let state = *self.inner.state.lock();
        if state >= Lifecycle::Draining {
            return Err(RuntimeError::Stopped);
        }
        if !declared && self.inner.names.read().contains(name) {
            return Err(RuntimeError::DuplicateStage(name.to_owned()));
        }
        if state == Lifecycle::Running {
            if core.model() == ThreadModel::Shared {
                self.start_shared()?;
            }
            core.start().map_err(|e| RuntimeError::Init {
                stage: name.to_owned(),
                source: e.into(),
            })?;
        }
        if declared {
            self.inner.declared.lock().retain(|d| d != name);
        } else {
            let mut names = self.inner.names.write();
            if names.contains(name) {
                return Err(RuntimeError::DuplicateStage(name.to_owned()));
            }
            names.insert(name.to_owned());
        }
        self.inner.stages.write().push(core);
        Ok(())
    }

    fn start_shared(&self) -> Result<(), RuntimeError> {
        self.inner
            .shared
            .start(&self.inner.name)
            .map_err(|e| RuntimeError::InvalidConfig(format!("cannot spawn shared workers: {e}")))
    }

    /// Whether [`Runtime::shutdown`] has begun (the runtime is draining or stopped).
    /// A long-running handler, such as an event loop that never returns on its own,
    /// checks it to stop and let the drain finish before its deadline.
    pub fn is_draining(&self) -> bool {
        *self.inner.state.lock() >= Lifecycle::Draining
    }

    /// Names of the registered stages, in registration order.
    pub fn stage_names(&self) -> Vec<String> {
        self.inner
            .stages
            .read()
            .iter()
            .map(|s| s.name().to_owned())
            .collect()
    }

    /// Runs every stage's `init` hook, then starts the threads and the controller
    /// driver. Calling it twice is harmless.
    pub fn start(&self) -> Result<(), RuntimeError> {
        let mut state = self.inner.state.lock();
        match *state {
            Lifecycle::Created => {}
            Lifecycle::Running => return Ok(()),
            _ => return Err(RuntimeError::Stopped),
        }
        if let Some(name) = self.inner.declared.lock().first() {
            return Err(RuntimeError::InvalidConfig(format!(
                "stage '{name}' was declared but never given a handler"
            )));
        }
        let stages: Vec<_> = self.inner.stages.read().clone();
        if stages.iter().any(|s| s.model() == ThreadModel::Shared) {
            self.start_shared()?;
        }
        for s in &stages {
            s.start().map_err(|e| RuntimeError::Init {
                stage: s.name().to_owned(),
                source: e.into(),
            })?;
        }
        *state = Lifecycle::Running;
        drop(state);
        let weak = Arc::downgrade(&self.inner);
        let interval = self.inner.control_interval;
        let driver = std::thread::Builder::new()
            .name(format!("{}-control", self.inner.name))
            .spawn(move || drive(weak, interval))
            .map_err(|e| {
                RuntimeError::InvalidConfig(format!("cannot spawn the controller thread: {e}"))
            })?;
        *self.inner.driver.lock() = Some(driver);
        Ok(())
    }

    /// Statistics of every stage and the observed stage graph.
    pub fn snapshot(&self) -> RuntimeSnapshot {
        let stages: Vec<_> = self.inner.stages.read().clone();
        let names: HashMap<usize, &str> = stages.iter().map(|s| (s.id(), s.name())).collect();
        let mut edges = Vec::new();
        for s in &stages {
            for from in s.incoming() {
                if let Some(f) = names.get(&from) {
                    edges.push(((*f).to_owned(), s.name().to_owned()));
                }
            }
        }
        edges.sort();
        RuntimeSnapshot {
            uptime_ms: u64::try_from(self.inner.created.elapsed().as_millis()).unwrap_or(u64::MAX),
            thread_model: self.inner.default_model.as_str().to_owned(),
            shared_workers: if stages.iter().any(|s| s.model() == ThreadModel::Shared) {
                self.inner.shared.workers()
            } else {
                0
            },
            timers_pending: self.inner.timers.pending(),
            stages: stages.iter().map(|s| s.snapshot()).collect(),
            edges,
        }
    }

    /// Cancels a timer; true if it had not fired yet.
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.inner.timers.cancel(id)
    }

    /// Graceful shutdown: drain for at most `grace`, then stop every thread. See the
    /// module docs. Calling it again returns an empty report.
    pub fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + grace;
        {
            let mut state = self.inner.state.lock();
            if *state >= Lifecycle::Draining {
                return ShutdownReport {
                    drained: true,
                    ..ShutdownReport::default()
                };
            }
            *state = Lifecycle::Draining;
        }
        let stages: Vec<_> = self.inner.stages.read().clone();
        for s in &stages {
            s.set_lifecycle(Lifecycle::Draining);
        }
        let mut drained = false;
        loop {
            if stages.iter().all(|s| s.in_flight() == 0) {
                drained = true;
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let timers_cancelled = self.inner.timers.stop();
        for s in &stages {
            s.set_lifecycle(Lifecycle::Stopped);
        }
        self.inner.shared.stop();
        if let Some(driver) = self.inner.driver.lock().take() {
            driver.thread().unpark();
            let _ = driver.join();
        }
        let mut handles: Vec<JoinHandle<()>> =
            stages.iter().flat_map(|s| s.take_handles()).collect();
        handles.extend(self.inner.shared.take_handles());
        // Threads finish their current batch; wait for them until the deadline (at
        // least a moment, so an idle pool always gets to exit cleanly).
        let join_deadline = deadline.max(Instant::now() + Duration::from_millis(100));
        while handles.iter().any(|h| !h.is_finished()) && Instant::now() < join_deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut threads_detached = 0;
        for h in handles {
            if h.is_finished() {
                let _ = h.join();
            } else {
                threads_detached += 1;
            }
        }
        let mut report_stages = Vec::new();
        for s in &stages {
            let (queued, running) = s.abandon();
            let snap = s.snapshot();
            report_stages.push(StageShutdown {
                name: s.name().to_owned(),
                processed: snap.processed,
                unfinished: (queued + running) as u64,
                queued: queued as u64,
                running: running as u64,
            });
            if running == 0 {
                s.destroy();
            }
        }
        *self.inner.state.lock() = Lifecycle::Stopped;
        let report = ShutdownReport {
            drained: drained && report_stages.iter().all(|s| s.unfinished == 0),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            stages: report_stages,
            timers_cancelled,
            threads_detached,
        };
        if !report.drained {
            tracing::warn!(
                unfinished = report.unfinished(),
                "shutdown deadline passed with events unfinished"
            );
        }
        report
    }
}

/// The controller driver: samples every stage at the control interval and steps its
/// controllers (admission ticks, stats windows, thread pool, batching). It parks
/// between samples so that shutdown can wake it instead of waiting out the interval.
/// Never inlined: `bench/callgrind/haboob.sh` finds its cost by this name.
#[inline(never)]
fn drive(runtime: Weak<RuntimeInner>, interval: Duration) {
    loop {
        std::thread::park_timeout(interval);
        let Some(inner) = runtime.upgrade() else {
            return;
        };
        if *inner.state.lock() >= Lifecycle::Stopped {
            return;
        }
        let stages: Vec<_> = inner.stages.read().clone();
        let now = Instant::now();
        for s in stages {
            if s.lifecycle() == Lifecycle::Running || s.lifecycle() == Lifecycle::Draining {
                s.control(now);
            }
        }
        if *inner.state.lock() >= Lifecycle::Draining {
            return;
        }
    }
}
