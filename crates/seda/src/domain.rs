//! Domains and inline handoff (Welsh's retrospective on SEDA; Click's direct calls).
//!
//! A *domain* is a group of stages within which an event may be handed to the next
//! stage by a direct call instead of a queue. Put a queue boundary (a stage outside
//! the domain) where load must be conditioned or a call may block; inside a domain,
//! [`crate::Sink::try_enqueue`] (and the other enqueue methods) run the next stage's
//! handler on the calling thread when all of these hold:
//! - the caller belongs to the same domain: it is a handler of a stage in it, or a
//!   thread inside [`Domain::enter`] (an event-loop thread that reads sockets);
//! - the domain's handoff is inline ([`Domain::set_inline`], on by default);
//! - fewer than [`MAX_INLINE_DEPTH`] inline calls are nested on this thread;
//! - the callee runs (not `Created` or `Stopped`; `Draining` only for callers inside
//!   the runtime), and its queue is empty, so an inline event never overtakes a
//!   queued one;
//! - the callee's admission policy admits the event (a refusal is the usual
//!   `EnqueueError::Rejected`, and the event is handed back);
//! - the event is uncolored, or its color is idle with no ticket outstanding (it
//!   then holds the color while it runs, so same-colored events still never run
//!   together and keep their order); a busy color goes through the queue;
//! - the callee is not a one-thread stage whose thread is running a batch (a
//!   one-thread stage never runs two batches at once, inline or not).
//!
//! An uncolored event a handler hands over while running a batch does not run
//! at once: it is entered and admitted at once (the caller gets the verdict), and
//! runs with the other events that batch handed the same stage, as one inline batch
//! right after the caller's batch (see `core::defer`); so a handler forwarding
//! event by event pays one inline run per batch, not per event.
//!
//! Otherwise the event is queued exactly as without a domain. An inline event is
//! counted by the callee as a queued one would be: offered, admitted (per class),
//! processed, its service time, its response time since `born`, a queueing delay of
//! zero, and the edge of the stage graph; it counts as running while its handler
//! runs (shutdown waits for it), a panic in it is caught and counted by the callee,
//! and the events it emits inherit its `born`, class and color. The callee's stats
//! also count it in `inlined`.
//!
//! ```
//! use seda::{Batch, Context, Runtime};
//!
//! let rt = Runtime::builder().build();
//! let http = rt.domain("http");
//! let send = rt
//!     .stage("send", |batch: Batch<'_, String>, _cx: &Context<'_>| {
//!         for _reply in batch {}
//!     })
//!     .domain(&http)
//!     .build()
//!     .unwrap();
//! let parse = rt
//!     .stage("parse", move |batch: Batch<'_, String>, _cx: &Context<'_>| {
//!         for req in batch {
//!             // Runs `send`'s handler right here when its queue is empty.
//!             let _ = send.try_enqueue(format!("reply to {req}"));
//!         }
//!     })
//!     .domain(&http)
//!     .build()
//!     .unwrap();
//! rt.start().unwrap();
//! // An event-loop thread that is not a stage joins the domain to hand its
//! // packets to `parse` inline.
//! http.enter(|| parse.try_enqueue("GET /".to_owned())).unwrap();
//! rt.shutdown(std::time::Duration::from_secs(1));
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::lifecycle::Frame;

/// Most inline calls nested on one thread; deeper handoffs are queued. Bounds the
/// stack a chain of inline stages can use.
pub const MAX_INLINE_DEPTH: u8 = 8;

static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
pub(crate) struct DomainInner {
    pub(crate) id: u64,
    name: String,
    inline: AtomicBool,
}

impl DomainInner {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn inline(&self) -> bool {
        self.inline.load(Relaxed)
    }
}

/// A thread-pool domain: stages among which events may be handed over inline. See
/// the module docs. Cheap to clone; made with [`crate::Runtime::domain`].
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain")
            .field("name", &self.inner.name)
            .field("inline", &self.inner.inline())
            .finish()
    }
}

impl Domain {
    pub(crate) fn new(name: &str) -> Self {
        Domain {
            inner: Arc::new(DomainInner {
                id: NEXT_DOMAIN.fetch_add(1, Relaxed),
                name: name.to_owned(),
                inline: AtomicBool::new(true),
            }),
        }
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether handoffs within the domain may run inline (the default).
    pub fn is_inline(&self) -> bool {
        self.inner.inline()
    }

    /// Turns inline handoff on or off; off, every handoff goes through the queue.
    /// Takes effect for the next enqueue.
    pub fn set_inline(&self, on: bool) {
        self.inner.inline.store(on, Relaxed);
    }

    /// Runs `f` with the calling thread a member of this domain: enqueues `f` makes
    /// to the domain's stages may run their handlers inline, on this thread. For
    /// threads that are not a stage's (an event loop reading sockets); a handler of a
    /// stage outside the domain may use it too. The thread keeps its runtime, stage
    /// and current event, so edges, metadata and draining rules are unchanged.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let cur = Frame::get();
        Frame::scope(
            Frame {
                domain: self.inner.id,
                ..cur
            },
            Frame::meta(),
            f,
        )
    }
}
