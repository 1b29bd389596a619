//! PageCache's work as functions of Haboob's state: the hit path (translation
//! and page, one lookup) and the fill of what the miss path found. PageCache runs
//! them; CacheMiss and the file helper run [`settle`] themselves when PageCache
//! refuses a result (answering costs less than a 503 once the page is read).

use std::time::Instant;

use bytes::Bytes;

use super::answer::{Answer, Redirect};
use super::conn::Exchange;
use super::events::{Found, Job, Miss};
use super::state::Haboob;
use crate::cache::{self, Target};

/// What a lookup found.
pub(crate) enum Lookup {
    Hit(Exchange, Answer),
    Miss(Miss),
}

/// The hit path: the translation and, for a cached file, its page, in one lookup
/// under the cache's one lock.
pub(crate) fn lookup(hb: &Haboob, job: Job, now: Instant) -> Lookup {
    match hb.pages.lookup(job.req.path(), now) {
        cache::Lookup::Miss => Lookup::Miss(Miss { job, file: None }),
        cache::Lookup::PageMiss(info) => Lookup::Miss(Miss {
            job,
            file: Some(info),
        }),
        cache::Lookup::Hit(target, page) => {
            let (ex, answer) = answer_for(job, target, page);
            Lookup::Hit(ex, answer)
        }
    }
}

/// The answer to `job` for a translation (and the page, for a cached file).
fn answer_for(job: Job, target: Target, page: Option<Bytes>) -> (Exchange, Answer) {
    let answer = match target {
        Target::File(info) => Answer::File {
            info,
            page,
            cond: job.req.conditions(),
        },
        Target::Redirect(location) => Answer::Redirect(Box::new(Redirect {
            location,
            query: job.req.query(),
        })),
        Target::Error(status) => Answer::Error(status),
    };
    (job.ex, answer)
}

/// Caches what the miss path read and makes the answer. PageCache's work, also done
/// by CacheMiss or the file helper when PageCache refuses the result.
pub(crate) fn settle(hb: &Haboob, job: Job, found: Found) -> (Exchange, Answer) {
    match found {
        Found::Page { info, body } => {
            hb.pages.insert(info.key, body.clone());
            answer_for(job, Target::File(info), Some(body))
        }
        Found::Target(target) => answer_for(job, target, None),
        Found::Failed(status) => (job.ex, Answer::Error(status)),
        Found::OutOfDescriptors => (job.ex, Answer::Overload),
    }
}
