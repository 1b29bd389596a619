//! HttpRecv (SEDA 5.1): routes each parsed request. Requests for a dynamic handler
//! do not come here: HttpParse offers them to the handler's stage itself (early
//! refusal, `dynamic.rs`). A GET or HEAD of a file goes to PageCache; any other
//! method gets `405` (a method of RFC 9110) or `501` (a token we do not know). A refused enqueue is answered `503` with
//! `Retry-After`, never dropped.

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::answer::Answer;
use super::events::{Job, PageEvent};
use super::state::Responder;
use crate::proto::{Method, Status};

/// The HttpRecv stage.
#[derive(Debug)]
pub(crate) struct HttpRecv {
    pub(crate) page: Sink<PageEvent>,
    pub(crate) out: Responder,
}

impl EventHandler<Job> for HttpRecv {
    fn handle_events(&self, mut batch: Batch<'_, Job>, _cx: &Context<'_>) {
        while let Some((job, meta)) = batch.next_with_meta() {
            self.route(job, meta);
        }
    }
}

impl HttpRecv {
    fn route(&self, job: Job, meta: Meta) {
        if job.ex.is_cancelled() {
            return self.out.cancel(job.ex);
        }
        if let Some(route) = job.req.route.clone() {
            // HttpParse submits these itself; kept for any other producer.
            return super::dynamic::submit(&self.out, &route, job, meta);
        }
        match job.req.method() {
            Method::Get | Method::Head => {
                if let Err(e) = self.page.try_enqueue_with(PageEvent::Lookup(job), meta) {
                    if let PageEvent::Lookup(job) = e.into_inner() {
                        self.out.answer(job.ex, Answer::Overload, meta);
                    }
                }
            }
            Method::Other => self
                .out
                .answer(job.ex, Answer::Error(Status::NOT_IMPLEMENTED), meta),
            _ => self
                .out
                .answer(job.ex, Answer::Error(Status::METHOD_NOT_ALLOWED), meta),
        }
    }
}
