//! The stage of one dynamic handler (`handler:<name>`): runs the handler on its own
//! pool, under its own admission controller, and hands the response to HttpSend. A
//! panic in the handler is caught and answered `500`; a request whose client is gone
//! is dropped before the handler runs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::Relaxed;

use seda::{Batch, Context, EventHandler, InitError};

use super::answer::Answer;
use super::conn::Exchange;
use super::state::Responder;
use crate::handler::{HandlerContext, HandlerRegistration, Request, Response};
use crate::proto::Status;

/// A request for a dynamic handler.
#[derive(Debug)]
pub(crate) struct DynJob {
    pub(crate) ex: Exchange,
    pub(crate) req: Request,
}

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
            if job.ex.is_cancelled() {
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
            self.out.answer(job.ex, Answer::Dynamic(resp), meta);
        }
    }
}
