//! The stage of one dynamic handler (`handler:<name>`): runs the handler on its own
//! pool, under its own admission controller, and hands the response to HttpSend. A
//! panic in the handler is caught and answered `500`; a request whose client is gone
//! (or that the end of the shutdown grace answered `503`) is dropped before the
//! handler runs.
//!
//! # Early refusal (USITS'03 6)
//! [`submit`] is called by HttpParse as soon as a request for a handler is parsed:
//! it classifies the request and offers it to the handler's stage, whose admission
//! policy decides there and then. A refused request goes straight to HttpSend with
//! the server's pre-built `503` (or the registration's redirect or degraded answer):
//! it never enters HttpRecv's or the handler's queue, so a flash crowd's refusals
//! cost a parse, a classification and a write, not a trip through the pipeline.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::Relaxed;

use seda::{Batch, Context, EventHandler, InitError, Meta};

use super::answer::Answer;
use super::events::{DynJob, Job, Route};
use super::state::Responder;
use crate::handler::{HandlerContext, HandlerRegistration, OverloadAction, Response};
use crate::proto::Status;

/// The event handler of a dynamic handler's stage.
#[derive(Debug)]
pub(crate) struct DynamicStage {
    pub(crate) reg: HandlerRegistration,
    pub(crate) out: Responder,
}

impl EventHandler<DynJob> for DynamicStage {
    fn init(&self, cx: &Context<'_>) -> Result<(), InitError> {
        self.reg.handler.init(&HandlerContext { cx });
        Ok(())
    }

    fn handle_events(&self, mut batch: Batch<'_, DynJob>, cx: &Context<'_>) {
        while let Some((job, meta)) = batch.next_with_meta() {
            // Marked as begun first: the end of the shutdown grace answers `503`
            // only to requests that never start (conn.rs invariants).
            if !job.ex.begin() {
                self.out.cancel(job.ex);
                continue;
            }
            let hcx = HandlerContext { cx };
            let handler = &self.reg.handler;
            let resp = match catch_unwind(AssertUnwindSafe(|| handler.handle(&job.req, &hcx))) {
                Ok(r) => r,
                Err(_) => {
                    self.out.hb.counters.handler_panics.fetch_add(1, Relaxed);
                    Response::text(Status::INTERNAL_SERVER_ERROR, "500 Internal Server Error\n")
                }
            };
            self.out
                .answer(job.ex, Answer::Dynamic(Box::new(resp)), meta);
        }
    }
}

/// Classifies a parsed request for `route`'s handler and offers it to the handler's
/// stage; a refusal is answered at once (module docs, "Early refusal").
pub(crate) fn submit(out: &Responder, route: &Route, job: Job, meta: Meta) {
    out.hb.counters.dynamic.fetch_add(1, Relaxed);
    let req = job.req.to_handler_request();
    let class = route.reg.classifier.as_ref().map_or(0, |f| f(&req));
    let ev = DynJob { ex: job.ex, req };
    if let Err(e) = route.sink.try_enqueue_with(ev, meta.with_class(class)) {
        let ev = e.into_inner();
        let answer = match route.reg.on_overload {
            OverloadAction::Reject503 { retry_after_secs }
                if retry_after_secs == out.hb.framer.retry_after_secs =>
            {
                // Counted by `Responder::answer`.
                Answer::Overload
            }
            _ => {
                out.hb.counters.overload.fetch_add(1, Relaxed);
                Answer::Dynamic(Box::new(route.reg.overload_response(&ev.req)))
            }
        };
        out.answer(ev.ex, answer, meta);
    }
}
