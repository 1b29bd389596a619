//! HttpRecv (SEDA 5.1): routes each parsed request. A request for a dynamic handler
//! goes to that handler's stage with its class (the stage's admission controller may
//! refuse it: the registration's overload action answers at once); a GET or HEAD of
//! a file goes to PageCache; any other method gets `405` (a method of RFC 9110) or
//! `501` (a token we do not know). A refused enqueue is answered `503` with
//! `Retry-After`, never dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::answer::Answer;
use super::dynamic::DynJob;
use super::page_cache::PageEvent;
use super::parse::Job;
use super::state::{Responder, Route};
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
            return self.dynamic(&route, job, meta);
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

    fn dynamic(&self, route: &Arc<Route>, job: Job, meta: Meta) {
        self.out.hb.counters.dynamic.fetch_add(1, Relaxed);
        let req = job.req.to_handler_request();
        let class = route.reg.classifier.as_ref().map_or(0, |f| f(&req));
        let ev = DynJob { ex: job.ex, req };
        if let Err(e) = route.sink.try_enqueue_with(ev, meta.with_class(class)) {
            let ev = e.into_inner();
            let resp = route.reg.overload_response(&ev.req);
            self.out.hb.counters.overload.fetch_add(1, Relaxed);
            self.out.answer(ev.ex, Answer::Dynamic(resp), meta);
        }
    }
}
