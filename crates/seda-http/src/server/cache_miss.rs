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
//! With [`FileIo::Inline`](super::FileIo::Inline) (Flash's SPED, for comparison)
//! this stage gets no events: PageCache runs the same path, read included, on its
//! own thread through [`settle_inline`].

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;
use seda::{Batch, Context, EventHandler, InitError, Meta, Sink};
use seda_io::{FileHelper, FileOp, FileReply};

use super::answer::Answer;
use super::page_cache::{Found, Miss, PageEvent, settle};
use super::parse::Job;
use super::state::{Haboob, Responder};
use crate::cache::{FileInfo, FileKey, Target};
use crate::proto::{self, Status, Translation, Validators};
use crate::server::stages;

/// The CacheMiss stage.
#[derive(Debug)]
pub(crate) struct CacheMiss {
    pub(crate) files: FileHelper,
    pub(crate) out: Responder,
    /// PageCache's sink, looked up at start (PageCache sends misses here, so it is
    /// built after this stage).
    pub(crate) page: OnceLock<Sink<PageEvent>>,
}

impl EventHandler<Miss> for CacheMiss {
    fn init(&self, cx: &Context<'_>) -> Result<(), InitError> {
        let sink = cx
            .runtime()
            .sink::<PageEvent>(stages::PAGE_CACHE)
            .map_err(|e| InitError(format!("CacheMiss needs PageCache: {e}")))?;
        let _ = self.page.set(sink);
        Ok(())
    }

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
    fn page(&self) -> &Sink<PageEvent> {
        self.page
            .get()
            .expect("init looks PageCache up before the first event")
    }

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
            .submit_to_with(op, meta, self.page(), wrap, undelivered)
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
            .page()
            .try_enqueue_with(PageEvent::Resolved { job, found }, meta)
            && let PageEvent::Resolved { job, found } = e.into_inner()
        {
            let (ex, answer) = settle(&self.out.hb, job, found);
            self.out.answer(ex, answer, meta);
        }
    }
}

/// A file whose bytes must be read.
struct Read {
    job: Job,
    info: Arc<FileInfo>,
    file: Arc<File>,
    len: usize,
}

/// What a miss needs next.
enum Step {
    /// Settled without reading: a cached page, a streamed file, a redirect, an error.
    Found(Job, Found),
    /// The page must be read from the file.
    Read(Read),
}

/// The miss path up to the read (blocking: translation, `open`). A fresh translation
/// whose page is cached (the path cache is off, or its entry had expired) takes the
/// cached page instead of reading the file again.
fn find(hb: &Haboob, miss: Miss) -> Step {
    let Miss { job, file } = miss;
    let (info, opened) = match file {
        Some(info) => (info, None),
        None => {
            let now = Instant::now();
            let (target, opened) = translate(hb, job.req.path());
            hb.paths.insert(job.req.path(), target.clone(), now);
            match target {
                Target::File(info) if info.stream.is_none() => {
                    if let Some(body) = hb.pages.get(&info.key) {
                        return Step::Found(job, Found::Page { info, body });
                    }
                    (info, opened)
                }
                other => return Step::Found(job, Found::Target(other)),
            }
        }
    };
    let file = match opened {
        Some(f) => Arc::new(f),
        None => match File::open(&info.path) {
            Ok(f) => Arc::new(f),
            Err(_) => return Step::Found(job, Found::Failed(Status::NOT_FOUND)),
        },
    };
    let Ok(len) = usize::try_from(info.key.len) else {
        return Step::Found(job, Found::Failed(Status::INTERNAL_SERVER_ERROR));
    };
    Step::Read(Read {
        job,
        info,
        file,
        len,
    })
}

/// The whole miss path on the calling thread, reads included ([`FileIo::Inline`],
/// Flash's SPED): the caller's event loop waits for the disk.
///
/// [`FileIo::Inline`]: super::FileIo::Inline
pub(crate) fn settle_inline(hb: &Haboob, miss: Miss) -> (Job, Found) {
    use std::os::unix::fs::FileExt as _;
    match find(hb, miss) {
        Step::Found(job, found) => (job, found),
        Step::Read(Read {
            job,
            info,
            file,
            len,
        }) => {
            let mut data = vec![0u8; len];
            let found = match file.read_exact_at(&mut data, 0) {
                Ok(()) => Found::Page {
                    info,
                    body: Bytes::from(data),
                },
                // Shorter than stat'ed: the file changed under us.
                Err(_) => Found::Failed(Status::INTERNAL_SERVER_ERROR),
            };
            (job, found)
        }
    }
}

/// Translates a URL path to a target (blocking). For a file that the page cache
/// takes, also returns the open file, whose metadata the target describes.
fn translate(hb: &Haboob, raw_path: &[u8]) -> (Target, Option<File>) {
    let set = &hb.set;
    match proto::translate(&set.root, raw_path, &set.index, set.dotfiles) {
        Ok(Translation::File(path, _)) => {
            let opened = File::open(&path).and_then(|f| f.metadata().map(|m| (f, m)));
            let (file, meta) = match opened {
                Ok(fm) => fm,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return (Target::Error(Status::FORBIDDEN), None);
                }
                Err(_) => return (Target::Error(Status::NOT_FOUND), None),
            };
            let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
            let mtime_ns = mtime
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i128);
            let key = FileKey {
                dev: meta.dev(),
                ino: meta.ino(),
                mtime_ns,
                len: meta.len(),
            };
            let validators = Validators::of(meta.len(), mtime, meta.ino());
            let ctype = proto::content_type(&path);
            if meta.len() > set.max_cached_file || !hb.pages.admits(meta.len()) {
                let info = FileInfo::new(path, key, validators, ctype, Some(Arc::new(file)));
                (Target::File(Arc::new(info)), None)
            } else {
                let info = FileInfo::new(path, key, validators, ctype, None);
                (Target::File(Arc::new(info)), Some(file))
            }
        }
        Ok(Translation::AddSlash(loc)) => (Target::Redirect(Bytes::from(loc)), None),
        Err(e) => (Target::Error(e.status()), None),
    }
}
