//! Stages: an event handler behind a bounded, admission-controlled queue, built with
//! [`Runtime::stage`] and registered in a runtime.

use std::fmt;
use std::sync::Arc;

use crate::admission::AdmissionPolicy;
use crate::control::{BatchingConfig, ThreadPoolConfig};
use crate::core::{StageConfig, StageCore};
use crate::domain::Domain;
use crate::exec::ThreadModel;
use crate::handler::EventHandler;
use crate::runtime::{Runtime, RuntimeError};
use crate::sink::Sink;

impl Runtime {
    /// Starts building a stage named `name` with `handler`.
    pub fn stage<E: Send + 'static>(
        &self,
        name: &str,
        handler: impl EventHandler<E>,
    ) -> StageBuilder<'_, E> {
        StageBuilder::new(self, name, Box::new(handler))
    }

    /// Declares a stage named `name` and gives its sink now, before its handler
    /// exists, as `crossbeam_channel::bounded` gives a sender before anyone
    /// receives: stages that feed each other (or a cycle) are wired by passing sinks
    /// to their handlers' constructors. Give the handler with [`Declared::handler`],
    /// which returns the usual [`StageBuilder`]; [`Runtime::start`] refuses to start
    /// while a declared stage has no handler. Until it is built, enqueues to the sink
    /// are refused with `Closed`.
    ///
    /// Errors: `DuplicateStage` if the name is taken, `Stopped` after shutdown began.
    ///
    /// # Examples
    /// ```
    /// use seda::{Batch, Context, Runtime, Sink};
    ///
    /// let rt = Runtime::builder().build();
    /// // Ping and pong feed each other: declare one, build the other with its sink.
    /// let (pong, declared) = rt.declare::<u32>("pong").unwrap();
    /// let ping: Sink<u32> = rt
    ///     .stage("ping", move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
    ///         for n in batch {
    ///             let _ = pong.try_enqueue(n + 1);
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let back = ping.clone();
    /// declared
    ///     .handler(move |batch: Batch<'_, u32>, _cx: &Context<'_>| {
    ///         for n in batch.filter(|n| *n < 10) {
    ///             let _ = back.try_enqueue(n + 1);
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// rt.start().unwrap();
    /// ping.try_enqueue(0).unwrap();
    /// assert!(rt.shutdown(std::time::Duration::from_secs(5)).drained);
    /// ```
    pub fn declare<E: Send + 'static>(
        &self,
        name: &str,
    ) -> Result<(Sink<E>, Declared<'_, E>), RuntimeError> {
        let sink = Sink::declared(name);
        self.reserve(name)?;
        let declared = Declared {
            runtime: self,
            sink: sink.clone(),
        };
        Ok((sink, declared))
    }
}

/// A stage declared with [`Runtime::declare`]: its sink exists, its handler not yet.
#[must_use = "a declared stage must be given a handler and built before the runtime starts"]
pub struct Declared<'r, E: Send + 'static> {
    runtime: &'r Runtime,
    sink: Sink<E>,
}

impl<E: Send + 'static> fmt::Debug for Declared<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declared")
            .field("stage", &self.sink.stage_name())
            .finish()
    }
}

impl<'r, E: Send + 'static> Declared<'r, E> {
    /// The stage's handler; configure the stage on the returned builder and `build`
    /// it (its sink is the one [`Runtime::declare`] gave).
    pub fn handler(self, handler: impl EventHandler<E>) -> StageBuilder<'r, E> {
        let mut b = StageBuilder::new(self.runtime, self.sink.stage_name(), Box::new(handler));
        b.declared = Some(self.sink);
        b
    }
}

/// Builder of a stage, returned by [`crate::Runtime::stage`]; `build` registers it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::admission::QueueThreshold;
/// use seda::{Batch, Context, Runtime};
///
/// let rt = Runtime::builder().build();
/// let sink = rt
///     .stage("resize", |batch: Batch<'_, Vec<u8>>, _cx: &Context<'_>| {
///         for _image in batch {}
///     })
///     .capacity(1000) // hard bound of the queue
///     .admission(QueueThreshold::new(800)) // refuse earlier (SEDA 3.2)
///     .threads(1, 4) // the thread-pool controller's bounds (SEDA 3.4)
///     .batch(16) // at most 16 events per handler call
///     .build()
///     .unwrap();
/// assert_eq!(sink.capacity(), 1000);
/// rt.start().unwrap();
/// assert!(rt.shutdown(Duration::from_secs(5)).drained);
/// ```
pub struct StageBuilder<'r, E: Send + 'static> {
    pub(crate) runtime: &'r Runtime,
    pub(crate) config: StageConfig,
    pub(crate) handler: Box<dyn EventHandler<E>>,
    /// The sink handed out by [`Runtime::declare`], for a declared stage.
    declared: Option<Sink<E>>,
}

impl<E: Send + 'static> fmt::Debug for StageBuilder<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

/// Default queue capacity of a stage.
pub const DEFAULT_CAPACITY: usize = 4096;

impl<'r, E: Send + 'static> StageBuilder<'r, E> {
    pub(crate) fn new(runtime: &'r Runtime, name: &str, handler: Box<dyn EventHandler<E>>) -> Self {
        StageBuilder {
            runtime,
            config: StageConfig {
                name: name.to_owned(),
                capacity: DEFAULT_CAPACITY,
                admission: None,
                thread_model: None,
                pool: ThreadPoolConfig::default(),
                pool_controller: true,
                batch: 32,
                batching: None,
                domain: None,
            },
            handler,
            declared: None,
        }
    }

    /// Hard bound of the input queue (default [`DEFAULT_CAPACITY`]); at least 1.
    #[must_use]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.config.capacity = capacity;
        self
    }

    /// Admission policy guarding the queue (default: none, i.e. only the capacity).
    #[must_use]
    pub fn admission(mut self, policy: impl AdmissionPolicy) -> Self {
        self.config.admission = Some(Arc::new(policy));
        self
    }

    /// Admission policy shared with the caller (to read its state or tune it).
    #[must_use]
    pub fn admission_shared(mut self, policy: Arc<dyn AdmissionPolicy>) -> Self {
        self.config.admission = Some(policy);
        self
    }

    /// Thread model of this stage, overriding the runtime's default.
    #[must_use]
    pub fn thread_model(mut self, model: ThreadModel) -> Self {
        self.config.thread_model = Some(model);
        self
    }

    /// Own-pool size bounds: starts at `min`, the thread-pool controller grows it up
    /// to `max`. Only for the per-stage thread model.
    #[must_use]
    pub fn threads(mut self, min: usize, max: usize) -> Self {
        self.config.pool.min_threads = min;
        self.config.pool.max_threads = max;
        self
    }

    /// Full thread-pool controller configuration (per-stage thread model).
    #[must_use]
    pub fn thread_pool(mut self, config: ThreadPoolConfig) -> Self {
        self.config.pool = config;
        self
    }

    /// Turn the thread-pool controller off: the pool stays at its minimum size.
    #[must_use]
    pub fn fixed_threads(mut self, n: usize) -> Self {
        self.config.pool.min_threads = n;
        self.config.pool.max_threads = n;
        self.config.pool_controller = false;
        self
    }

    /// Fixed batching factor: at most `n` events per handler call (default 32).
    #[must_use]
    pub fn batch(mut self, n: usize) -> Self {
        self.config.batch = n;
        self.config.batching = None;
        self
    }

    /// Let the batching controller choose the batching factor.
    #[must_use]
    pub fn batching(mut self, config: BatchingConfig) -> Self {
        self.config.batching = Some(config);
        self
    }

    /// Puts the stage in a thread-pool domain: handoffs from the domain's other
    /// stages (and threads that [`Domain::enter`] it) may run its handler inline.
    #[must_use]
    pub fn domain(mut self, domain: &Domain) -> Self {
        self.config.domain = Some(domain.clone());
        self
    }

    /// Registers the stage and returns its sink. A stage added to a running runtime
    /// starts at once.
    pub fn build(self) -> Result<Sink<E>, RuntimeError> {
        let core = StageCore::build(self.runtime, self.config, self.handler)?;
        let name = core.name().to_owned();
        match self.declared {
            None => {
                let sink = Sink::declared(&name);
                let _ = sink.slot.core.set(Arc::clone(&core));
                self.runtime.register(&name, core, false)?;
                Ok(sink)
            }
            Some(sink) => {
                let _ = sink.slot.core.set(Arc::clone(&core));
                self.runtime.register(&name, core, true)?;
                Ok(sink)
            }
        }
    }
}
