#![allow(missing_docs, dead_code)]
use std::time::Duration;
#[derive(Clone, Debug)]
pub struct ThreadPoolConfig { pub min_threads: usize, pub max_threads: usize, pub queue_threshold: usize, pub idle_timeout: Duration, pub interval: Duration }
impl Default for ThreadPoolConfig { fn default() -> Self { Self { min_threads: 1, max_threads: 20, queue_threshold: 1000, idle_timeout: Duration::from_secs(1), interval: Duration::from_secs(2) } } }
impl ThreadPoolConfig { pub fn validate(&self) -> Result<(), String> { Ok(()) } }
pub struct PoolObservation { pub queue_len: usize, pub threads: usize, pub idle_expired: usize }
pub enum PoolAdjustment { Hold, Grow(usize), Shrink(usize) }
pub struct ThreadPoolController { cfg: ThreadPoolConfig }
impl ThreadPoolController { pub fn new(cfg: ThreadPoolConfig) -> Self { Self { cfg } } pub fn step(&mut self, o: PoolObservation) -> PoolAdjustment { if o.queue_len > self.cfg.queue_threshold && o.threads < self.cfg.max_threads { PoolAdjustment::Grow(1) } else if o.idle_expired > 0 && o.threads > self.cfg.min_threads { PoolAdjustment::Shrink(o.idle_expired.min(o.threads - self.cfg.min_threads)) } else { PoolAdjustment::Hold } } }
#[derive(Clone, Debug)]
pub struct BatchingConfig { pub min_batch: usize, pub max_batch: usize }
pub struct BatchObservation { pub processed: u64, pub elapsed: Duration }
pub struct BatchingController { b: usize }
impl BatchingController { pub fn new(c: BatchingConfig) -> Result<Self, String> { Ok(Self { b: c.max_batch }) } pub fn step(&mut self, _o: BatchObservation) -> usize { self.b } pub fn batch_size(&self) -> usize { self.b } }
