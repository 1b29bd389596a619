//! Stage lifecycle, and what the calling thread is doing (which runtime, stage,
//! event, domain), which every enqueue reads to propagate metadata, to record the
//! graph edge, to decide whether a draining stage accepts it, and whether it may
//! run the next stage inline.

use std::cell::Cell;

use crate::clock;
use crate::envelope::Meta;

/// Lifecycle of a stage: Created -> Running -> Draining -> Stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Lifecycle {
    /// Registered, not started: events queue up but do not run.
    Created = 0,
    /// Running.
    Running = 1,
    /// Shutting down: only events from inside the runtime are accepted.
    Draining = 2,
    /// Stopped: no events accepted or run.
    Stopped = 3,
}

impl Lifecycle {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v & 3 {
            0 => Lifecycle::Created,
            1 => Lifecycle::Running,
            2 => Lifecycle::Draining,
            _ => Lifecycle::Stopped,
        }
    }

    /// Whether an enqueue from inside (`inside`) or outside the runtime is accepted
    /// in this lifecycle.
    #[inline]
    pub(crate) fn accepts(self, inside: bool) -> bool {
        match self {
            Lifecycle::Created | Lifecycle::Running => true,
            Lifecycle::Draining => inside,
            Lifecycle::Stopped => false,
        }
    }

    /// Whether workers may claim events now.
    #[inline]
    pub(crate) fn runs(self) -> bool {
        matches!(self, Lifecycle::Running | Lifecycle::Draining)
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Created => "created",
            Lifecycle::Running => "running",
            Lifecycle::Draining => "draining",
            Lifecycle::Stopped => "stopped",
        }
    }
}

/// The calling thread's frame and the event it handles now, in one `const` cell:
/// every thread-local access is a call of ~24 instructions (callgrind; `LocalKey`
/// reaches its slot through a function pointer), and an inline hop reads both and
/// saves and restores both, so one cell costs half the accesses of two (measured
/// 2026-11-27: about 70 instructions per hop).
#[derive(Clone, Copy)]
struct State {
    frame: Frame,
    meta: Option<Meta>,
}

thread_local! {
    static CURRENT: Cell<State> = const {
        Cell::new(State { frame: Frame::OUTSIDE, meta: None })
    };
}

/// No stage.
pub(crate) const NO_STAGE: u32 = u32::MAX;

/// What the calling thread is doing (everything but its current event). `Copy`:
/// saved and restored around every batch and inline call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    /// Runtime id, 0 outside every runtime.
    pub(crate) runtime: u64,
    /// Stage whose handler runs on this thread ([`NO_STAGE`]: none).
    pub(crate) stage: u32,
    /// Domain this thread belongs to now (a stage's, or one it joined); 0: none.
    pub(crate) domain: u64,
    /// Inline calls nested on this thread.
    pub(crate) depth: u8,
    /// A batch of runtime `runtime` runs on this thread: the events it handles are
    /// counted held by their stage until it returns, which covers whatever the
    /// handler runs inline.
    pub(crate) in_batch: bool,
    /// The clock reading that started the running batch (see [`crate::clock`]):
    /// enqueues from the handler use it as their enqueue instant.
    pub(crate) clock: u64,
}

impl Frame {
    pub(crate) const OUTSIDE: Frame = Frame {
        runtime: 0,
        stage: NO_STAGE,
        domain: 0,
        depth: 0,
        in_batch: false,
        clock: 0,
    };

    /// The calling thread's frame.
    #[inline]
    pub(crate) fn get() -> Frame {
        CURRENT.with(Cell::get).frame
    }

    /// The stage of the frame, if any.
    pub(crate) fn stage(&self) -> Option<usize> {
        (self.stage != NO_STAGE).then_some(self.stage as usize)
    }

    /// Runs `f` with `frame` (and `meta` as the current event) as the thread's
    /// state, restoring the previous one after (also if `f` panics).
    #[inline]
    pub(crate) fn scope<R>(frame: Frame, meta: Option<Meta>, f: impl FnOnce() -> R) -> R {
        struct Restore(State);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(State { frame, meta })));
        f()
    }

    /// Makes `meta` the current event's metadata (a batch yielding its next event).
    #[inline]
    pub(crate) fn set_meta(meta: Meta) {
        CURRENT.with(|c| {
            c.set(State {
                meta: Some(meta),
                ..c.get()
            });
        });
    }

    /// The current event's metadata, if a batch yielded one.
    pub(crate) fn meta() -> Option<Meta> {
        CURRENT.with(Cell::get).meta
    }

    /// Runs `f` as the timer thread of `runtime`, with `meta` for the event it fires.
    pub(crate) fn enter_timer<R>(runtime: u64, meta: Meta, f: impl FnOnce() -> R) -> R {
        Frame::scope(
            Frame {
                runtime,
                ..Frame::OUTSIDE
            },
            Some(meta),
            f,
        )
    }
}

/// Where an enqueue comes from. Draining stages take events only from inside their
/// runtime; graph edges are recorded from the origin stage.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    pub(crate) cur: Frame,
    /// Whether the metadata was made fresh for this enqueue.
    fresh: bool,
}

impl Origin {
    /// The calling thread's origin and the metadata a new event inherits from it.
    #[inline]
    pub(crate) fn current() -> (Meta, Origin) {
        let State { frame: cur, meta } = CURRENT.with(Cell::get);
        match meta {
            Some(meta) => (meta, Origin { cur, fresh: false }),
            None => {
                // A fresh request: born at the batch clock inside a batch, else now.
                let born = if cur.in_batch {
                    cur.clock
                } else {
                    clock::now()
                };
                (Meta::born_ns(born), Origin { cur, fresh: true })
            }
        }
    }

    /// The caller's origin, for an enqueue with explicit metadata.
    #[inline]
    pub(crate) fn here() -> Origin {
        Origin {
            cur: Frame::get(),
            fresh: false,
        }
    }

    /// The same origin after a wait for space: its enqueue instant is read anew.
    pub(crate) fn waited(self) -> Origin {
        Origin {
            cur: Frame {
                in_batch: false,
                ..self.cur
            },
            fresh: false,
        }
    }

    /// Whether the enqueue comes from a thread of runtime `id`.
    #[inline]
    pub(crate) fn inside(&self, id: u64) -> bool {
        self.cur.runtime == id
    }

    /// Whether a running batch of runtime `id` covers the calling thread (see
    /// [`Frame::in_batch`]).
    #[inline]
    pub(crate) fn covered(&self, id: u64) -> bool {
        self.cur.in_batch && self.cur.runtime == id
    }

    /// The calling batch's notion of now without a clock read: its clock, or the
    /// event's `born` if that is later (a long-running handler, such as an event
    /// loop, started its batch long ago but stamps each event it makes with its
    /// turn's clock; `born` is never in the future). 0 outside a batch: read the
    /// clock.
    #[inline]
    pub(crate) fn clock_hint(&self, meta: &Meta) -> u64 {
        if self.cur.in_batch {
            self.cur.clock.max(meta.born_nanos())
        } else {
            0
        }
    }

    /// The enqueue instant: the batch's clock hint; for metadata `current` made
    /// fresh, its `born` (read a moment ago); else a clock read.
    #[inline]
    pub(crate) fn enqueue_instant(&self, meta: &Meta) -> u64 {
        if self.cur.in_batch {
            self.clock_hint(meta)
        } else if self.fresh {
            meta.born_nanos()
        } else {
            clock::now()
        }
    }
}
