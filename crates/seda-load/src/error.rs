//! The crate's error type: what a load run, a file set, a schedule, a request mix or
//! a saved report can fail with.
//!
//! # Invariants
//! - Every fallible public function of the crate returns [`LoadError`] (the response
//!   reader's own [`HttpError`](crate::http::HttpError) aside: it is counted per
//!   request, never returned from a run).
//! - The `Display` text is one line that names the flag, file or peer at fault and
//!   includes the cause; [`source`](std::error::Error::source) gives the cause typed
//!   (the [`io::Error`] or [`serde_json::Error`]), so a caller that walks the chain
//!   should print only the outermost text.

use std::io;

/// Why a load run, a file set, a schedule or a report failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A setting is out of range or inconsistent, or the target is not on loopback
    /// (the text names the flag or field).
    #[error("{0}")]
    Config(String),
    /// An argument does not parse: a URL, a duration, a schedule, a request mix, a
    /// transition table.
    #[error("{0}")]
    Parse(String),
    /// A file, a socket, a poller or a thread could not be opened, read, written or
    /// started (`what` says which).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. `cannot read /tmp/x/manifest.json`.
        what: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A JSON document (a file set's manifest, a saved report) is not what it should
    /// be.
    #[error("{what}: {source}")]
    Json {
        /// Which document, e.g. `bad manifest /tmp/x/manifest.json`.
        what: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A worker thread panicked (`0` names it).
    #[error("{0} panicked")]
    Panicked(&'static str),
}

impl LoadError {
    pub(crate) fn config(text: impl Into<String>) -> LoadError {
        LoadError::Config(text.into())
    }

    pub(crate) fn parse(text: impl Into<String>) -> LoadError {
        LoadError::Parse(text.into())
    }

    /// A `map_err` adapter: the I/O error while doing `what`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> LoadError {
        let what = what.into();
        move |source| LoadError::Io { what, source }
    }

    /// A `map_err` adapter: the JSON error in document `what`.
    pub(crate) fn json(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> LoadError {
        let what = what.into();
        move |source| LoadError::Json { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_one_line_with_the_cause_and_the_cause_is_typed() {
        let e =
            LoadError::io("cannot read /x/manifest.json")(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(
            e.to_string(),
            "cannot read /x/manifest.json: entity not found"
        );
        let source = std::error::Error::source(&e).unwrap();
        assert_eq!(
            source.downcast_ref::<io::Error>().unwrap().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            LoadError::Panicked("a load thread").to_string(),
            "a load thread panicked"
        );
    }
}
