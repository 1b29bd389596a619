//! The miss path's work (blocking: translation, `stat`, `open`, and for
//! [`FileIo::Inline`](super::config::FileIo::Inline) the read too), as functions of
//! Haboob's state: CacheMiss runs them on its own pool; PageCache runs
//! [`settle_inline`] itself under Flash's SPED model.

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use bytes::Bytes;

use super::events::{Found, Job, Miss};
use super::state::Haboob;
use crate::cache::{FileInfo, FileKey, Target};
use crate::proto::{self, Status, Translation, Validators};

/// A file whose bytes must be read.
pub(crate) struct Read {
    pub(crate) job: Job,
    pub(crate) info: Arc<FileInfo>,
    pub(crate) file: Arc<File>,
    pub(crate) len: usize,
}

/// What a miss needs next.
pub(crate) enum Step {
    /// Settled without reading: a cached page, a streamed file, a redirect, an error.
    Found(Job, Found),
    /// The page must be read from the file.
    Read(Read),
}

/// The miss path up to the read (blocking: translation, `open`). A fresh translation
/// whose page is cached (the path cache is off, or its entry had expired) takes the
/// cached page instead of reading the file again.
pub(crate) fn find(hb: &Haboob, miss: Miss) -> Step {
    let Miss { job, file } = miss;
    let (info, opened) = match file {
        Some(info) => (info, None),
        None => {
            let now = Instant::now();
            let (target, opened) = match translate(hb, job.req.path()) {
                Ok(t) => t,
                Err(OutOfDescriptors) => return Step::Found(job, Found::OutOfDescriptors),
            };
            hb.pages
                .insert_translation(job.req.path(), target.clone(), now);
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
            Err(e) if seda_io::is_out_of_descriptors(&e) => {
                return Step::Found(job, Found::OutOfDescriptors);
            }
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
/// [`FileIo::Inline`]: super::config::FileIo::Inline
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

/// The process had no descriptor to open a file with: nothing to cache.
struct OutOfDescriptors;

/// Translates a URL path to a target (blocking). For a file that the page cache
/// takes, also returns the open file, whose metadata the target describes.
fn translate(hb: &Haboob, raw_path: &[u8]) -> Result<(Target, Option<File>), OutOfDescriptors> {
    let set = &hb.set;
    Ok(
        match proto::translate(&set.root, raw_path, &set.index, set.dotfiles) {
            Ok(Translation::File(path, _)) => {
                let opened = File::open(&path).and_then(|f| f.metadata().map(|m| (f, m)));
                let (file, meta) = match opened {
                    Ok(fm) => fm,
                    Err(e) if seda_io::is_out_of_descriptors(&e) => return Err(OutOfDescriptors),
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        return Ok((Target::Error(Status::FORBIDDEN), None));
                    }
                    Err(_) => return Ok((Target::Error(Status::NOT_FOUND), None)),
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
        },
    )
}
