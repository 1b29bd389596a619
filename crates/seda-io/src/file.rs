//! The file helper stage (SEDA SOSP'01 4.2; Flash's AMPED helpers, USENIX'99 3.4).
//!
//! Blocking file-system calls (open, stat, read) run as events on a stage of their
//! own, `file-helper` by default, whose per-stage thread pool (per-stage even when
//! the runtime's default is the shared model) the runtime's
//! thread-pool controller sizes (SEDA 3.4: a thread is added while the queue is
//! longer than `queue_threshold`, idle threads retire). Event-driven stages never
//! block on the disk; they submit an operation and get its completion later, as a
//! callback on a helper thread ([`FileHelper::submit`]) or as an event on their own
//! sink ([`FileHelper::submit_to`]).
//!
//! # Ordering
//! Operations on one file run one at a time and in submission order: each carries a
//! color derived from the file, the path for path operations (`Open`, `Stat`,
//! `ReadAll`) and the device and inode for `Read` on an open file. (A path operation
//! and an inode operation on the same file are not ordered with each other: relating
//! them would need a `stat`, the blocking call we are avoiding.) File colors have the
//! top bit set, so they never collide with socket connection colors (small integers).
//!
//! # Residency
//! [`read_resident`] reads a range only if it is already in the page cache
//! (`preadv2(RWF_NOWAIT)`), so a caller can skip the helper hop for hot data, as
//! Flash's mincore test does.
//!
//! # Overload
//! The helper's queue is bounded ([`FileConfig::capacity`]); a refused operation is
//! handed back in [`SubmitError`], never dropped. A completion bound for a caller's
//! sink that stays full (or closes) is handed back too, to the caller's `undelivered`
//! callback ([`FileHelper::submit_to_with`]), so the request behind it can still be
//! answered.

use std::fmt;
use std::fs::{File, Metadata};
use std::hash::{Hash, Hasher};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use seda::control::ThreadPoolConfig;
use seda::{Batch, Color, Context, EnqueueError, Meta, Runtime, RuntimeError, Sink, ThreadModel};
use serde::Serialize;

pub use crate::sys::read_resident;

/// Top bit of every file color.
const FILE_COLOR_BIT: u64 = 1 << 63;
/// How long a helper thread keeps offering a completion to a full caller sink before
/// handing it back.
const COMPLETION_PATIENCE: Duration = Duration::from_secs(1);

/// Configuration of the file helper stage. `#[non_exhaustive]`: start from
/// `Default` and use the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FileConfig {
    /// Stage name. Default `file-helper`.
    pub stage_name: String,
    /// Bound of the helper's queue, operations. Default 4,096. At least 1.
    pub capacity: usize,
    /// Thread-pool controller settings. Default: 1 to 16 threads, a thread added
    /// while more than 10 operations wait (Haboob's threshold), sampled every
    /// 200 ms, idle threads retire after 1 s.
    pub pool: ThreadPoolConfig,
}

crate::setters::setters!(FileConfig {
    with_stage_name: stage_name: String,
    with_capacity: capacity: usize,
    with_pool: pool: ThreadPoolConfig,
});

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            stage_name: "file-helper".to_owned(),
            capacity: 4096,
            pool: ThreadPoolConfig::default()
                .with_min_threads(1)
                .with_max_threads(16)
                .with_queue_threshold(10)
                .with_idle_timeout(Duration::from_secs(1))
                .with_interval(Duration::from_millis(200)),
        }
    }
}

/// A blocking file operation.
#[derive(Debug)]
pub enum FileOp {
    /// Open a file read-only; replies [`FileReply::Opened`].
    Open {
        /// The path.
        path: PathBuf,
    },
    /// `stat` a path (following symlinks); replies [`FileReply::Stat`].
    Stat {
        /// The path.
        path: PathBuf,
    },
    /// Read up to `len` bytes at `offset` (fewer at end of file); replies
    /// [`FileReply::Data`].
    Read {
        /// The open file.
        file: Arc<File>,
        /// Where to read.
        offset: u64,
        /// How many bytes at most.
        len: usize,
    },
    /// Read a whole file of at most `max_len` bytes (larger: `FileTooLarge`);
    /// replies [`FileReply::Data`].
    ReadAll {
        /// The path.
        path: PathBuf,
        /// Largest size accepted, bytes.
        max_len: u64,
    },
}

impl FileOp {
    /// The color that orders operations on the operand's file (see the module docs).
    pub fn color(&self) -> Color {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match self {
            FileOp::Open { path } | FileOp::Stat { path } | FileOp::ReadAll { path, .. } => {
                0u8.hash(&mut h);
                path.hash(&mut h);
            }
            FileOp::Read { file, .. } => match file.metadata() {
                Ok(m) => {
                    1u8.hash(&mut h);
                    (m.dev(), m.ino()).hash(&mut h);
                }
                Err(_) => {
                    2u8.hash(&mut h);
                    std::os::fd::AsRawFd::as_raw_fd(&**file).hash(&mut h);
                }
            },
        }
        Color::new(h.finish() | FILE_COLOR_BIT)
    }

    fn run(self) -> io::Result<FileReply> {
        match self {
            FileOp::Open { path } => {
                let file = File::open(path)?;
                let meta = file.metadata()?;
                Ok(FileReply::Opened {
                    file: Arc::new(file),
                    meta,
                })
            }
            FileOp::Stat { path } => Ok(FileReply::Stat(std::fs::metadata(path)?)),
            FileOp::Read { file, offset, len } => {
                let mut buf = vec![0u8; len];
                let mut done = 0;
                while done < len {
                    match file.read_at(&mut buf[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                buf.truncate(done);
                Ok(FileReply::Data(buf))
            }
            FileOp::ReadAll { path, max_len } => {
                let mut file = File::open(&path)?;
                let size = file.metadata()?.len();
                if size > max_len {
                    return Err(io::Error::new(
                        io::ErrorKind::FileTooLarge,
                        format!("{} is {size} bytes, more than {max_len}", path.display()),
                    ));
                }
                let mut buf = Vec::with_capacity(size as usize);
                // Read one byte past max_len at most, in case the file grew.
                (&mut file)
                    .take(max_len.saturating_add(1))
                    .read_to_end(&mut buf)?;
                if buf.len() as u64 > max_len {
                    return Err(io::Error::new(
                        io::ErrorKind::FileTooLarge,
                        format!("{} grew past {max_len} bytes", path.display()),
                    ));
                }
                Ok(FileReply::Data(buf))
            }
        }
    }
}

/// What a completed operation returns.
#[derive(Debug)]
pub enum FileReply {
    /// `Open`: the file and its metadata.
    Opened {
        /// The open file, shareable with `Outgoing::File` and `FileOp::Read`.
        file: Arc<File>,
        /// Its metadata.
        meta: Metadata,
    },
    /// `Stat`: the metadata.
    Stat(Metadata),
    /// `Read` and `ReadAll`: the bytes.
    Data(Vec<u8>),
}

/// Why the helper refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The helper's queue is full.
    Full,
    /// The helper's admission policy refused it.
    Rejected,
    /// The helper stage is shutting down.
    Closed,
}

/// A refused submission: the operation comes back to the caller.
#[derive(Debug)]
#[non_exhaustive]
pub struct SubmitError {
    /// The operation, untouched.
    pub op: FileOp,
    /// Why.
    pub reason: Refusal,
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            Refusal::Full => "queue full",
            Refusal::Rejected => "rejected by admission control",
            Refusal::Closed => "stage closed",
        };
        write!(f, "file helper refused the operation: {why}")
    }
}

impl std::error::Error for SubmitError {}

/// Counters of the file helper.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileStats {
    /// Operations accepted.
    pub submitted: u64,
    /// Operations refused and handed back.
    pub refused: u64,
    /// Operations run (successfully or not).
    pub completed: u64,
    /// Completions a caller's sink would not take (full or rejecting for 1 s, or
    /// closed); each was handed back to the caller's `undelivered` callback.
    pub completions_undelivered: u64,
    /// Completion callbacks that panicked (caught).
    pub callback_panics: u64,
}

#[derive(Debug, Default)]
struct Counters {
    submitted: AtomicU64,
    refused: AtomicU64,
    completed: AtomicU64,
    completions_undelivered: AtomicU64,
    callback_panics: AtomicU64,
}

type Done = Box<dyn FnOnce(io::Result<FileReply>) + Send>;

/// An operation in the helper's queue.
struct FileTask {
    op: FileOp,
    done: Done,
}

/// The file helper stage. Cheap to clone.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// use seda::Runtime;
/// use seda_io::{FileConfig, FileHelper, FileOp, FileReply};
///
/// let rt = Runtime::builder().build();
/// let files = FileHelper::start(&rt, FileConfig::default()).unwrap();
/// rt.start().unwrap();
/// let (tx, rx) = mpsc::channel();
/// let path = std::env::temp_dir();
/// files
///     .submit(FileOp::Stat { path }, move |r| tx.send(r).unwrap())
///     .unwrap();
/// // The reply comes on a helper thread, never on the caller's.
/// match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
///     Ok(FileReply::Stat(meta)) => assert!(meta.is_dir()),
///     other => panic!("{other:?}"),
/// }
/// assert!(rt.shutdown(Duration::from_secs(5)).drained);
/// ```
#[derive(Clone)]
pub struct FileHelper {
    sink: Sink<FileTask>,
    counters: Arc<Counters>,
}

impl fmt::Debug for FileHelper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileHelper")
            .field("stage", &self.sink.stage_name())
            .finish()
    }
}

impl FileHelper {
    /// Registers the helper stage in `rt`.
    pub fn start(rt: &Runtime, cfg: FileConfig) -> Result<FileHelper, RuntimeError> {
        cfg.pool
            .validate()
            .map_err(|e| RuntimeError::InvalidConfig(format!("file helper: {e}")))?;
        let counters = Arc::new(Counters::default());
        let c = Arc::clone(&counters);
        let sink = rt
            .stage(
                &cfg.stage_name,
                move |batch: Batch<'_, FileTask>, _cx: &Context<'_>| {
                    for task in batch {
                        let result = task.op.run();
                        c.completed.fetch_add(1, Relaxed);
                        // A panicking callback must not lose the rest of the batch.
                        let done = task.done;
                        if catch_unwind(AssertUnwindSafe(move || done(result))).is_err() {
                            c.callback_panics.fetch_add(1, Relaxed);
                            tracing::error!("a file completion callback panicked");
                        }
                    }
                },
            )
            .capacity(cfg.capacity)
            // Blocking calls need a pool of their own, whatever the runtime's default.
            .thread_model(ThreadModel::PerStage)
            .thread_pool(cfg.pool)
            .build()?;
        Ok(FileHelper { sink, counters })
    }

    /// Name of the helper stage.
    pub fn stage_name(&self) -> &str {
        self.sink.stage_name()
    }

    /// Operations waiting in the helper's queue.
    pub fn queue_len(&self) -> usize {
        self.sink.queue_len()
    }

    /// Counters since start.
    pub fn stats(&self) -> FileStats {
        let c = &self.counters;
        FileStats {
            submitted: c.submitted.load(Relaxed),
            refused: c.refused.load(Relaxed),
            completed: c.completed.load(Relaxed),
            completions_undelivered: c.completions_undelivered.load(Relaxed),
            callback_panics: c.callback_panics.load(Relaxed),
        }
    }

    /// Submits `op`; `done` runs on a helper thread with its result.
    pub fn submit(
        &self,
        op: FileOp,
        done: impl FnOnce(io::Result<FileReply>) + Send + 'static,
    ) -> Result<(), SubmitError> {
        self.submit_with(op, Meta::new(), done)
    }

    /// As [`FileHelper::submit`], with the request's metadata (`born`, class; the
    /// color is replaced by the file's).
    pub fn submit_with(
        &self,
        op: FileOp,
        meta: Meta,
        done: impl FnOnce(io::Result<FileReply>) + Send + 'static,
    ) -> Result<(), SubmitError> {
        let meta = meta.with_color(op.color());
        match self.sink.try_enqueue_with(
            FileTask {
                op,
                done: Box::new(done),
            },
            meta,
        ) {
            Ok(()) => {
                self.counters.submitted.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(e) => {
                self.counters.refused.fetch_add(1, Relaxed);
                let reason = match &e {
                    EnqueueError::Full(_) => Refusal::Full,
                    EnqueueError::Rejected(_) => Refusal::Rejected,
                    _ => Refusal::Closed,
                };
                Err(SubmitError {
                    op: e.into_inner().op,
                    reason,
                })
            }
        }
    }

    /// Submits `op`; its completion, wrapped by `wrap`, is enqueued to `sink` (born
    /// now, uncolored). Use [`FileHelper::submit_to_with`] to keep a request's
    /// metadata, e.g. its connection's color; `undelivered` is as there.
    pub fn submit_to<T: Send + 'static>(
        &self,
        op: FileOp,
        sink: &Sink<T>,
        wrap: impl FnOnce(io::Result<FileReply>) -> T + Send + 'static,
        undelivered: impl FnOnce(EnqueueError<T>) + Send + 'static,
    ) -> Result<(), SubmitError> {
        self.submit_to_with(op, Meta::new(), sink, wrap, undelivered)
    }

    /// Submits `op`; its completion, wrapped by `wrap`, is enqueued to `sink` with
    /// metadata `meta` (pass `cx.meta()` from a handler to keep `born`, class and
    /// color).
    ///
    /// # Undelivered completions
    /// While `sink` answers `Full` or `Rejected` the helper thread offers the
    /// completion again, for at most 1 s (backpressure on the helper); if it is still
    /// refused then, or at once if `sink` is `Closed`, `undelivered` runs on the helper
    /// thread with the refusal, which hands the event back. The caller answers the
    /// request behind it there (e.g. does the sink's work itself, or replies 503):
    /// a completion is never dropped. Each such hand-back is counted in
    /// [`FileStats::completions_undelivered`].
    pub fn submit_to_with<T: Send + 'static>(
        &self,
        op: FileOp,
        meta: Meta,
        sink: &Sink<T>,
        wrap: impl FnOnce(io::Result<FileReply>) -> T + Send + 'static,
        undelivered: impl FnOnce(EnqueueError<T>) + Send + 'static,
    ) -> Result<(), SubmitError> {
        let sink = sink.clone();
        let counters = Arc::clone(&self.counters);
        self.submit_with(op, meta, move |result| {
            let mut event = wrap(result);
            let deadline = Instant::now() + COMPLETION_PATIENCE;
            let refusal = loop {
                match sink.try_enqueue_with(event, meta) {
                    Ok(()) => return,
                    Err(e @ EnqueueError::Closed(_)) => break e,
                    Err(e) if Instant::now() >= deadline => break e,
                    Err(e) => {
                        event = e.into_inner();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            };
            counters.completions_undelivered.fetch_add(1, Relaxed);
            tracing::warn!(
                stage = sink.stage_name(),
                "a file completion was refused ({refusal}); handed back to the caller"
            );
            undelivered(refusal);
        })
    }
}
