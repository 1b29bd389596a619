//! The event of a route's stage, and the door back to Haboob's HttpSend. A leaf: it
//! imports no stage of the proxy and no file of Haboob's that imports the proxy.

use seda::Meta;
use seda_io::ConnId;

use super::body::BodyPipe;
use crate::server::{Answer, Exchange, Job};

/// How the proxy answers a client itself (`503`, `502`, `504`, a redirect) and asks
/// about the server: Haboob's responder implements it (`server/state.rs`), so the
/// proxy never names Haboob's shared state.
pub(crate) trait Respond: Send + Sync + std::fmt::Debug {
    /// Answers `ex` through HttpSend (or in place if HttpSend refuses it).
    fn answer(&self, ex: Exchange, answer: Answer, meta: Meta);
    /// Drops `ex` because its connection is gone.
    fn cancel(&self, ex: Exchange);
    /// Whether the server is draining (a response then closes its connection).
    fn draining(&self) -> bool;
    /// The `Retry-After` of the server's own `503`s, in seconds.
    fn retry_after_secs(&self) -> u32;
}

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
