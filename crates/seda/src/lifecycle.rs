//! Stage lifecycle, and what the calling thread is doing (which runtime, stage,
//! event, domain), which every enqueue reads to propagate metadata, to record the
//! graph edge, to decide whether a draining stage accepts it, and whether it may
//! run the next stage inline.

use std::cell::Cell;
use std::time::Instant;

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

thread_local! {
    static CURRENT: Cell<Frame> = const { Cell::new(Current::OUTSIDE.frame()) };
    /// `Current::meta`, kept apart: a batch sets it once per event, and a small cell
    /// is cheaper to write than the whole `Current`.
    static META: Cell<Option<Meta>> = const { Cell::new(None) };
}

/// What the calling thread is doing. `Copy`: saved and restored around every batch
/// and inline call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    /// Runtime id, 0 outside every runtime.
    pub(crate) runtime: u64,
    /// Stage whose handler runs on this thread.
    pub(crate) stage: Option<usize>,
    /// The event being handled; `None` gives each new event fresh metadata.
    pub(crate) meta: Option<Meta>,
    /// Domain this thread belongs to now (a stage's, or one it joined).
    pub(crate) domain: Option<u64>,
    /// Inline calls nested on this thread.
    pub(crate) depth: u8,
    /// The clock read that started the running batch: enqueues from the handler use
    /// it as their enqueue instant (one clock read per batch, not per event).
    pub(crate) clock: Option<Instant>,
}

/// [`Current`] without its event: what every enqueue reads (a smaller copy).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    pub(crate) runtime: u64,
    pub(crate) stage: Option<usize>,
    pub(crate) domain: Option<u64>,
    pub(crate) depth: u8,
    pub(crate) clock: Option<Instant>,
}

impl Current {
    /// Everything but the event.
    pub(crate) const fn frame(&self) -> Frame {
        Frame {
            runtime: self.runtime,
            stage: self.stage,
            domain: self.domain,
            depth: self.depth,
            clock: self.clock,
        }
    }

    pub(crate) const OUTSIDE: Current = Current {
        runtime: 0,
        stage: None,
        meta: None,
        domain: None,
        depth: 0,
        clock: None,
    };

    /// The calling thread's state.
    pub(crate) fn get() -> Current {
        let f = CURRENT.with(Cell::get);
        Current {
            runtime: f.runtime,
            stage: f.stage,
            meta: META.with(Cell::get),
            domain: f.domain,
            depth: f.depth,
            clock: f.clock,
        }
    }

    /// Runs `f` with `cur` as the thread's state, restoring the previous one after
    /// (also if `f` panics).
    pub(crate) fn scope<R>(cur: Current, f: impl FnOnce() -> R) -> R {
        struct Restore(Frame, Option<Meta>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
                META.with(|m| m.set(self.1));
            }
        }
        let _restore = Restore(
            CURRENT.with(|c| c.replace(cur.frame())),
            META.with(|m| m.replace(cur.meta)),
        );
        f()
    }

    /// Makes `meta` the current event's metadata (a batch yielding its next event).
    pub(crate) fn set_meta(meta: Meta) {
        META.with(|m| m.set(Some(meta)));
    }

    /// Runs `f` as the timer thread of `runtime`, with `meta` for the event it fires.
    pub(crate) fn enter_timer<R>(runtime: u64, meta: Meta, f: impl FnOnce() -> R) -> R {
        Current::scope(
            Current {
                runtime,
                meta: Some(meta),
                ..Current::OUTSIDE
            },
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
    pub(crate) fn current() -> (Meta, Origin) {
        let cur = CURRENT.with(Cell::get);
        match META.with(Cell::get) {
            Some(meta) => (meta, Origin { cur, fresh: false }),
            None => (Meta::new(), Origin { cur, fresh: true }),
        }
    }

    /// The caller's origin, for an enqueue with explicit metadata.
    pub(crate) fn here() -> Origin {
        Origin {
            cur: CURRENT.with(Cell::get),
            fresh: false,
        }
    }

    /// The same origin after a wait for space: its enqueue instant is read anew.
    pub(crate) fn waited(self) -> Origin {
        Origin {
            cur: Frame {
                clock: None,
                ..self.cur
            },
            fresh: false,
        }
    }

    /// Whether the enqueue comes from a thread of runtime `id`.
    pub(crate) fn inside(&self, id: u64) -> bool {
        self.cur.runtime == id
    }

    /// The enqueue instant: a handler's batch clock; for metadata `current` made
    /// fresh, its `born` (read a moment ago); else a clock read.
    pub(crate) fn enqueue_instant(&self, meta: &Meta) -> Instant {
        if let Some(t) = self.cur.clock {
            t
        } else if self.fresh {
            meta.born
        } else {
            Instant::now()
        }
    }
}
