//! The event of a route's stage. A leaf: it imports no stage of the proxy.

use seda_io::ConnId;

use super::body::BodyPipe;
use crate::server::Job;

/// A request for a route: the client's slot and request, and its body's pipe if it
/// has a body (still arriving).
#[derive(Debug)]
pub(crate) struct ProxyJob {
    pub(crate) job: Job,
    pub(crate) body: Option<BodyPipe>,
}

impl ProxyJob {
    /// The client's connection.
    pub(crate) fn client(&self) -> ConnId {
        self.job.ex.conn_id()
    }
}
