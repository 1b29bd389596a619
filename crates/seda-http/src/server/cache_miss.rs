//! CacheMiss (SEDA 5.1; Flash's helpers, AMPED): the blocking half of the static
//! path, on a pool of its own sized by the thread-pool controller.
//!
//! It translates the path (decode, `canonicalize`, `stat`, `open`: Flash 5.2) and
//! caches the translation, then gets the file's bytes: at once if they are already in
//! the OS page cache (Flash's residency check), else by a read on the file helper
//! stage, whose completion goes to PageCache. Everything it finds goes back to
//! PageCache, which caches the page and answers; files too large for the page cache
//! are answered from their open descriptor with `sendfile`.
//!
//! With [`FileIo::Inline`](super::config::FileIo::Inline) (Flash's SPED, for comparison)
//! this stage gets no events: PageCache runs the same path, read included, on its
//! own thread through `miss::settle_inline`.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use parking_lot::Mutex;
use seda::{Batch, Context, EventHandler, Meta, Sink};
use seda_io::{FileHelper, FileOp, FileReply};

use super::answer::Answer;
use super::events::{Found, Job, Miss, PageEvent};
use super::lookup::settle;
use super::miss::{Read, Step, find};
use super::state::Responder;
use crate::cache::FileInfo;
use crate::proto::Status;

/// The CacheMiss stage.
#[derive(Debug)]
pub(crate) struct CacheMiss {
    pub(crate) files: FileHelper,
    pub(crate) out: Responder,
    /// PageCache's sink (declared before either stage is built: they feed each
    /// other).
    pub(crate) page: Sink<PageEvent>,
}

impl EventHandler<Miss> for CacheMiss {
    fn handle_events(&self, mut batch: Batch<'_, Miss>, _cx: &Context<'_>) {
        while let Some((miss, meta)) = batch.next_with_meta() {
            if miss.job.ex.is_cancelled() {
                self.out.cancel(miss.job.ex);
                continue;
            }
            self.on_miss(miss, meta);
        }
    }
}

impl CacheMiss {
    fn on_miss(&self, miss: Miss, meta: Meta) {
        let hb = &self.out.hb;
        match find(hb, miss) {
            Step::Found(job, found) => self.resolved(job, found, meta),
            Step::Read(read) => {
                let Read {
                    job,
                    info,
                    file,
                    len,
                } = read;
                // Flash's residency check: bytes already in the OS page cache skip the
                // helper.
                if hb.set.residency_check
                    && let Some(data) =
                        seda_io::read_resident(&file, 0, len).filter(|d| d.len() == len)
                {
                    hb.counters.resident_reads.fetch_add(1, Relaxed);
                    let body = Bytes::from(data);
                    return self.resolved(job, Found::Page { info, body }, meta);
                }
                self.read_on_helper(job, info, file, len, meta);
            }
        }
    }

    /// Reads the file on the file helper stage; its completion goes to PageCache.
    fn read_on_helper(
        &self,
        job: Job,
        info: Arc<FileInfo>,
        file: Arc<File>,
        len: usize,
        meta: Meta,
    ) {
        // The job rides in a cell so that it comes back if the helper refuses the
        // operation (the completion closure is dropped then, unrun).
        let cell = Arc::new(Mutex::new(Some(job)));
        let in_wrap = Arc::clone(&cell);
        let wrap = move |res: std::io::Result<FileReply>| {
            let job = in_wrap
                .lock()
                .take()
                .expect("only a refused submission empties the cell, and then this never runs");
            let found = match res {
                Ok(FileReply::Data(d)) if d.len() == len => Found::Page {
                    info,
                    body: Bytes::from(d),
                },
                // Shorter or longer than stat'ed: the file changed under us.
                _ => Found::Failed(Status::INTERNAL_SERVER_ERROR),
            };
            PageEvent::Resolved { job, found }
        };
        let out = self.out.clone();
        let undelivered = move |e: seda::EnqueueError<PageEvent>| {
            if let PageEvent::Resolved { job, found } = e.into_inner() {
                let (ex, answer) = settle(&out.hb, job, found);
                out.answer(ex, answer, meta);
            }
        };
        let op = FileOp::Read {
            file,
            offset: 0,
            len,
        };
        if let Err(e) = self
            .files
            .submit_to_with(op, meta, &self.page, wrap, undelivered)
        {
            tracing::debug!("{e}");
            if let Some(job) = cell.lock().take() {
                self.out.answer(job.ex, Answer::Overload, meta);
            }
        }
    }

    /// Hands what the miss found to PageCache, or settles it here if PageCache
    /// refuses it (the page was read already: answering costs less than a 503).
    fn resolved(&self, job: Job, found: Found, meta: Meta) {
        if let Err(e) = self
            .page
            .try_enqueue_with(PageEvent::Resolved { job, found }, meta)
            && let PageEvent::Resolved { job, found } = e.into_inner()
        {
            let (ex, answer) = settle(&self.out.hb, job, found);
            self.out.answer(ex, answer, meta);
        }
    }
}
