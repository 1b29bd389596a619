//! A route's stage (`proxy:<name>`): admission at its door, then the forward.
//!
//! # Early refusal (USITS'03 6)
//! [`submit`] is called by HttpParse as soon as a request for the route is parsed
//! (its body, if any, is still arriving): it classifies the request and offers it to
//! the route's stage, whose admission policy (a [`RouteGate`](super::gate) around
//! the configured policy) decides at once. A refused request gets the server's
//! `503` with `Retry-After` (or the route's redirect), its body is skipped as it
//! arrives, and nothing of it reaches the upstream.
//!
//! # The handler
//! For each admitted request: drop it if its client is gone, answer an
//! `Expect: 100-continue` (only now: a refused client never sends its body), build
//! the head the upstream gets (`head.rs`), and dispatch it (`dispatch.rs`). The
//! handler never blocks: the stage may run inline on the socket loop's thread.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::dispatch::dispatch;
use super::events::ProxyJob;
use super::flight::{Flight, Resp};
use super::head::{Forward, RequestBody, request_head};
use super::state::{RouteState, Shared};
use crate::handler::OverloadAction;
use crate::proto::{BodyFraming, Method};
use crate::server::Answer;

/// A route as HttpParse sees it: where it is mounted and its stage's sink.
#[derive(Debug, Clone)]
pub(crate) struct Mount {
    pub(crate) route: Arc<RouteState>,
    pub(crate) sink: Sink<ProxyJob>,
}

/// Classifies a parsed request for the route and offers it to the route's stage; a
/// refusal is answered at once (module docs).
pub(crate) fn submit(shared: &Shared, mount: &Mount, job: ProxyJob, meta: Meta) {
    let route = &mount.route;
    route.counters.requests.fetch_add(1, Relaxed);
    let class = route
        .cfg
        .classifier
        .as_ref()
        .map_or(0, |f| f(&job.job.req.to_handler_request()));
    if let Err(e) = mount.sink.try_enqueue_with(job, meta.with_class(class)) {
        let ProxyJob { job, body } = e.into_inner();
        route.counters.refused.fetch_add(1, Relaxed);
        let mut ex = job.ex;
        if let Some(b) = &body {
            b.abandon();
            if job.req.head().1.expect_continue {
                // The client may or may not send its body now: answer and close.
                ex.close_after();
            }
        }
        let answer = match &route.on_overload {
            OverloadAction::Reject503 { retry_after_secs }
                if *retry_after_secs == shared.out.retry_after_secs() =>
            {
                Answer::Overload
            }
            OverloadAction::Redirect(url) => {
                Answer::Dynamic(Box::new(crate::handler::Response::redirect(url)))
            }
            OverloadAction::Reject503 { retry_after_secs } => Answer::Dynamic(Box::new(
                crate::handler::Response::unavailable(*retry_after_secs),
            )),
            // A route has no cheaper answer of its own than the refusal.
            OverloadAction::Degrade => Answer::Overload,
        };
        shared.out.answer(ex, answer, meta);
    }
}

/// The handler of a route's stage.
#[derive(Debug)]
pub(crate) struct RouteStage {
    pub(crate) shared: Arc<Shared>,
    pub(crate) route: Arc<RouteState>,
}

impl EventHandler<ProxyJob> for RouteStage {
    fn handle_events(&self, mut batch: Batch<'_, ProxyJob>, _cx: &Context<'_>) {
        let now = Instant::now();
        while let Some((pj, meta)) = batch.next_with_meta() {
            self.forward(pj, meta, now);
        }
    }
}

impl RouteStage {
    fn forward(&self, pj: ProxyJob, meta: Meta, now: Instant) {
        let route = &*self.route;
        let client = pj.client();
        let ProxyJob { job, body } = pj;
        // Marked as begun before it goes upstream: the end of the shutdown grace
        // answers 503 only to requests never forwarded (server/conn.rs invariants).
        if !job.ex.begin() {
            route.gate.forget();
            route.counters.client_gone.fetch_add(1, Relaxed);
            if let Some(b) = &body {
                b.abandon();
            }
            return self.shared.out.cancel(job.ex);
        }
        if let Some(failure) = body.as_ref().and_then(|b| b.failure()) {
            // The client's body failed while the request waited in the queue.
            route.gate.forget();
            let Some(status) = failure else {
                route.counters.client_gone.fetch_add(1, Relaxed);
                return self.shared.out.cancel(job.ex);
            };
            let mut ex = job.ex;
            ex.close_after();
            return self.shared.answer(ex, status, meta);
        }
        let (raw, head) = job.req.head();
        if head.expect_continue {
            job.ex.send_continue();
        }
        let upstream_body = match head.body {
            BodyFraming::None => RequestBody::None,
            BodyFraming::Length(n) => RequestBody::Length(n),
            BodyFraming::Chunked => RequestBody::Chunked,
        };
        // Every upstream of a route has the same base path (`ProxyRoute::validate`):
        // one head serves them all, retries included.
        let up = &route.upstreams[0].url;
        let fwd = Forward {
            prefix: &route.cfg.prefix,
            base: up.base(),
            authority: up.authority(),
            peer: job.req.peer(),
            scheme: "http",
            body: upstream_body,
        };
        let forwarded = request_head(raw, head, &fwd);
        let method = head.method;
        let flight = Flight {
            class: meta.class(),
            born: meta.born(),
            started: now,
            deadline: now + route.cfg.timeout,
            head: forwarded,
            body,
            head_request: method == Method::Head,
            idempotent: matches!(
                method,
                Method::Get
                    | Method::Head
                    | Method::Put
                    | Method::Delete
                    | Method::Options
                    | Method::Trace
            ),
            client_version: head.version,
            retried: false,
            settled: false,
            failed_on: Vec::new(),
            resp: Resp::Head,
            ex: Some(job.ex),
        };
        dispatch(&self.shared, route, flight, client, now);
    }
}
