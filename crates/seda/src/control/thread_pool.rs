//! Thread-pool controller (SEDA 3.4, Fig. 8).
//!
//! Control law, evaluated every `interval` for a stage with its own pool:
//! - if the pool is below `min_threads`, grow it to `min_threads`;
//! - else if the input queue holds more than `queue_threshold` events and the pool is
//!   below `max_threads`, add one thread;
//! - else if some workers have been idle longer than `idle_timeout`, retire them, never
//!   going below `min_threads`.
//!
//! Invariant: the controller never asks for more than `max_threads` nor fewer than
//! `min_threads` threads. Defaults follow the Sandstorm code: 2 s sampling, queue
//! threshold 1000 (Haboob used 10), at most 20 threads, 1 s idle timeout (paper: 5 s).

use std::time::Duration;

use super::{ConfigError, check};

/// Parameters of the thread-pool controller.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ThreadPoolConfig {
    /// Threads the pool never goes below (and starts with).
    pub min_threads: usize,
    /// Threads the pool never exceeds.
    pub max_threads: usize,
    /// Queue length above which a thread is added.
    pub queue_threshold: usize,
    /// A worker idle this long retires.
    pub idle_timeout: Duration,
    /// How often the controller samples the stage.
    pub interval: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(ThreadPoolConfig {
    with_min_threads: min_threads: usize,
    with_max_threads: max_threads: usize,
    with_queue_threshold: queue_threshold: usize,
    with_idle_timeout: idle_timeout: Duration,
    with_interval: interval: Duration,
});

impl Default for ThreadPoolConfig {
    fn default() -> Self {
        Self {
            min_threads: 1,
            max_threads: 20,
            queue_threshold: 1000,
            idle_timeout: Duration::from_secs(1),
            interval: Duration::from_secs(2),
        }
    }
}

impl ThreadPoolConfig {
    /// Defaults with the given bounds.
    pub fn bounded(min_threads: usize, max_threads: usize) -> Self {
        Self {
            min_threads,
            max_threads,
            ..Self::default()
        }
    }

    /// Checks the bounds and durations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(self.min_threads >= 1, || {
            "thread pool: min_threads must be at least 1".into()
        })?;
        check(self.max_threads >= self.min_threads, || {
            format!(
                "thread pool: max_threads ({}) below min_threads ({})",
                self.max_threads, self.min_threads
            )
        })?;
        check(self.queue_threshold >= 1, || {
            "thread pool: queue_threshold must be at least 1".into()
        })?;
        check(!self.interval.is_zero(), || {
            "thread pool: interval must be positive".into()
        })?;
        check(!self.idle_timeout.is_zero(), || {
            "thread pool: idle_timeout must be positive".into()
        })
    }
}

/// What the controller sees of a stage at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolObservation {
    /// Events waiting in the stage's queue.
    pub queue_len: usize,
    /// Threads in the pool now.
    pub threads: usize,
    /// Workers that have been idle longer than the idle timeout.
    pub idle_expired: usize,
}

/// What the controller asks the runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAdjustment {
    /// Leave the pool as it is.
    Hold,
    /// Start this many threads.
    Grow(usize),
    /// Retire this many idle threads.
    Shrink(usize),
}

/// The SEDA thread-pool controller. See the module docs for the law.
#[derive(Clone, Debug)]
pub struct ThreadPoolController {
    cfg: ThreadPoolConfig,
}

impl ThreadPoolController {
    /// A controller with these parameters (validate them first).
    pub fn new(cfg: ThreadPoolConfig) -> Self {
        Self { cfg }
    }

    /// One controller step.
    pub fn step(&mut self, o: PoolObservation) -> PoolAdjustment {
        let c = &self.cfg;
        if o.threads < c.min_threads {
            PoolAdjustment::Grow(c.min_threads - o.threads)
        } else if o.queue_len > c.queue_threshold && o.threads < c.max_threads {
            PoolAdjustment::Grow(1)
        } else if o.idle_expired > 0
            && o.threads > c.min_threads
            && o.queue_len <= c.queue_threshold
        {
            PoolAdjustment::Shrink(o.idle_expired.min(o.threads - c.min_threads))
        } else {
            PoolAdjustment::Hold
        }
    }
}
