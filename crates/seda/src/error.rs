//! The error of every enqueue: it hands the event back (as crossbeam's
//! `TrySendError` does), so the caller decides what overload means for it; and the
//! error a handler's `init` hook stops the start with.

use std::fmt;

/// Error an `init` hook returns to stop the runtime from starting: the handler's own
/// error (`?` converts any `std::error::Error + Send + Sync`), or a message
/// (`"...".into()`, `format!(..).into()`). The runtime's
/// [`RuntimeError::Init`](crate::RuntimeError::Init) names the stage and keeps this
/// error as its [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
///
/// use seda::{Batch, Context, EventHandler, InitError, Runtime};
///
/// struct Store;
///
/// impl EventHandler<u32> for Store {
///     fn init(&self, _cx: &Context<'_>) -> Result<(), InitError> {
///         std::fs::File::open("/nonexistent/mail.db")?; // an io::Error, kept as it is
///         Ok(())
///     }
///     fn handle_events(&self, _batch: Batch<'_, u32>, _cx: &Context<'_>) {}
/// }
///
/// let rt = Runtime::builder().build();
/// rt.stage("store", Store).build().unwrap();
/// let err = rt.start().unwrap_err();
/// assert!(err.to_string().starts_with("stage 'store' failed to initialise: "));
/// let io = err.source().unwrap().downcast_ref::<std::io::Error>().unwrap();
/// assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
/// ```
pub type InitError = Box<dyn std::error::Error + Send + Sync>;

/// Why an enqueue failed. Each variant hands the event back. `#[non_exhaustive]`: a
/// match needs a `_` arm (or use [`is_overload`](Self::is_overload) and friends).
#[derive(PartialEq, Eq)]
#[non_exhaustive]
pub enum EnqueueError<E> {
    /// The queue is at its capacity.
    Full(E),
    /// The stage's admission policy refused the event (an overload signal).
    Rejected(E),
    /// The stage is draining or stopped and takes no new events.
    Closed(E),
}

impl<E> EnqueueError<E> {
    /// The event that was not enqueued.
    pub fn into_inner(self) -> E {
        match self {
            EnqueueError::Full(e) | EnqueueError::Rejected(e) | EnqueueError::Closed(e) => e,
        }
    }

    /// Whether the queue was full.
    pub fn is_full(&self) -> bool {
        matches!(self, EnqueueError::Full(_))
    }

    /// Whether admission control refused the event.
    pub fn is_rejected(&self) -> bool {
        matches!(self, EnqueueError::Rejected(_))
    }

    /// Whether the stage is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self, EnqueueError::Closed(_))
    }

    /// Whether this is an overload signal (full or rejected), as opposed to a closed
    /// stage.
    pub fn is_overload(&self) -> bool {
        !self.is_closed()
    }

    fn kind(&self) -> &'static str {
        match self {
            EnqueueError::Full(_) => "queue full",
            EnqueueError::Rejected(_) => "rejected by admission control",
            EnqueueError::Closed(_) => "stage closed",
        }
    }
}

impl<E> fmt::Debug for EnqueueError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnqueueError::Full(_) => f.write_str("Full(..)"),
            EnqueueError::Rejected(_) => f.write_str("Rejected(..)"),
            EnqueueError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<E> fmt::Display for EnqueueError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

impl<E> std::error::Error for EnqueueError<E> {}
