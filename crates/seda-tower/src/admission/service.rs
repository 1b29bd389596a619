//! The middleware service.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower_service::Service;

use super::classify::Classify;
use super::future::ResponseFuture;
use super::gate::Gate;
use super::handle::AdmissionHandle;
use super::reject::Reject;

/// Admission control in front of a service `S`; made by
/// [`AdmissionLayer`](super::AdmissionLayer), whose docs state the contract.
///
/// Clones share the layer's policy and counters.
#[derive(Clone, Debug)]
pub struct Admission<S, K, R> {
    inner: S,
    gate: Arc<Gate>,
    classify: K,
    reject: R,
}

impl<S, K, R> Admission<S, K, R> {
    pub(crate) fn new(inner: S, gate: Arc<Gate>, classify: K, reject: R) -> Self {
        Self {
            inner,
            gate,
            classify,
            reject,
        }
    }

    /// Handle on the shared state (stats, ticks).
    pub fn handle(&self) -> AdmissionHandle {
        AdmissionHandle {
            gate: Arc::clone(&self.gate),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, K, R, Req> Service<Req> for Admission<S, K, R>
where
    S: Service<Req>,
    K: Classify<Req>,
    R: Reject<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    /// The inner service's readiness, unchanged: admission needs the request's class,
    /// so it is decided in `call`.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let class = self.classify.class(&req);
        let born = self.classify.born(&req);
        match self.gate.admit(class, born) {
            Ok(permit) => ResponseFuture::admitted(self.inner.call(req), permit),
            Err(overloaded) => ResponseFuture::refused(self.reject.reject(overloaded)),
        }
    }
}
