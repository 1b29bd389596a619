//! PageCache (SEDA 5.1): every static lookup and every fill.
//!
//! A lookup consults Flash's pathname-translation cache and the page cache in one
//! [`crate::cache::PageCache::lookup`] (one lock, one hashed map: the path entry keeps
//! a checked reference to its page): a hit
//! (or a cached redirect or error, or a file streamed with `sendfile`) is answered,
//! a miss goes to CacheMiss. CacheMiss (or the file helper) comes back with what it
//! found: the page is cached and the request answered. In each batch the answers go
//! out shortest response first, before the misses are forwarded (SEDA 5.1). With
//! [`FileIo::Inline`] (Flash's SPED) a miss is settled here instead, its open and
//! read blocking the thread that runs this stage (the socket loop, with inline handoff).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::answer::Answer;
use super::config::FileIo;
use super::conn::Exchange;
use super::events::{Miss, PageEvent};
use super::lookup::{Lookup, lookup, settle};
use super::state::Responder;

/// The PageCache stage.
#[derive(Debug)]
pub(crate) struct PageCache {
    pub(crate) miss: Sink<Miss>,
    pub(crate) out: Responder,
}

impl EventHandler<PageEvent> for PageCache {
    fn handle_events(&self, mut batch: Batch<'_, PageEvent>, _cx: &Context<'_>) {
        let hb = &self.out.hb;
        let now = hb.coarse_now();
        if batch.len() == 1 {
            // One event (the inline case): nothing to order.
            if let Some((ev, meta)) = batch.next_with_meta() {
                match self.settle_one(ev, now) {
                    Ok((ex, answer)) => self.out.answer(ex, answer, meta),
                    Err(miss) => self.to_miss(miss, meta),
                }
            }
            return;
        }
        let mut ready: Vec<(Exchange, Answer, Meta)> = Vec::with_capacity(batch.len());
        let mut misses = Vec::new();
        while let Some((ev, meta)) = batch.next_with_meta() {
            match self.settle_one(ev, now) {
                Ok((ex, answer)) => ready.push((ex, answer, meta)),
                Err(miss) => misses.push((miss, meta)),
            }
        }
        ready.sort_by_key(|(_, a, _)| a.wire_len());
        for (ex, answer, meta) in ready {
            self.out.answer(ex, answer, meta);
        }
        for (miss, meta) in misses {
            self.to_miss(miss, meta);
        }
    }
}

impl PageCache {
    /// A lookup or a fill: the answer, or the miss to forward.
    fn settle_one(&self, ev: PageEvent, now: Instant) -> Result<(Exchange, Answer), Miss> {
        let hb = &self.out.hb;
        match ev {
            PageEvent::Lookup(job) => match lookup(hb, job, now) {
                Lookup::Hit(ex, answer) => Ok((ex, answer)),
                Lookup::Miss(miss) => Err(miss),
            },
            PageEvent::Resolved { job, found } => Ok(settle(hb, job, found)),
        }
    }

    /// Forwards a miss to CacheMiss (a request whose client is gone is dropped), or
    /// with [`FileIo::Inline`] settles it here, blocking this thread on the disk.
    fn to_miss(&self, miss: Miss, meta: Meta) {
        if miss.job.ex.is_cancelled() {
            return self.out.cancel(miss.job.ex);
        }
        let hb = &self.out.hb;
        hb.counters.misses.fetch_add(1, Relaxed);
        if hb.set.file_io == FileIo::Inline {
            let (job, found) = super::miss::settle_inline(hb, miss);
            let (ex, answer) = settle(hb, job, found);
            return self.out.answer(ex, answer, meta);
        }
        if let Err(e) = self.miss.try_enqueue_with(miss, meta) {
            self.out
                .answer(e.into_inner().job.ex, Answer::Overload, meta);
        }
    }
}
