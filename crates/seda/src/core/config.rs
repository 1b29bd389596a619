//! A stage's configuration, as [`crate::StageBuilder`] collects it.

use std::fmt;
use std::sync::Arc;

use crate::admission::AdmissionPolicy;
use crate::control::{BatchingConfig, ThreadPoolConfig};
use crate::domain::Domain;
use crate::exec::ThreadModel;

/// Configuration of one stage; built with [`crate::Runtime::stage`].
pub struct StageConfig {
    pub(crate) name: String,
    pub(crate) capacity: usize,
    pub(crate) admission: Option<Arc<dyn AdmissionPolicy>>,
    pub(crate) thread_model: Option<ThreadModel>,
    pub(crate) pool: ThreadPoolConfig,
    pub(crate) pool_controller: bool,
    pub(crate) batch: usize,
    pub(crate) batching: Option<BatchingConfig>,
    pub(crate) domain: Option<Domain>,
}

impl fmt::Debug for StageConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageConfig")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("admission", &self.admission.as_ref().map(|a| a.name()))
            .field("thread_model", &self.thread_model)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}
