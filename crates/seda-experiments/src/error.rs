//! [`ExperimentError`]: what every fallible function of the crate returns (issue 25:
//! typed errors in the library crates, one report at the CLI). A leaf: it imports no
//! experiment.
//!
//! The text of an error is what `seda experiment` prints after `seda: `; the cause of
//! a failed step (an `io::Error`, a `seda_load::LoadError`, a JSON error, ...) stays
//! reachable through [`std::error::Error::source`], typed.

use std::error::Error;

/// Why an experiment could not run or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExperimentError {
    /// The experiment's configuration cannot run: an option out of range, an unknown
    /// scenario, server or front, a malformed message.
    #[error("{0}")]
    Config(String),
    /// A step of the run failed with a cause: a file not written, a process or
    /// thread not started, a server that did not answer.
    #[error("{context}: {source}")]
    Step {
        /// What the experiment was doing.
        context: String,
        /// Why it failed.
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
    /// The load generator failed.
    #[error(transparent)]
    Load(#[from] seda_load::LoadError),
    /// An error of another crate, passed on as it is (a runtime that would not start,
    /// a socket option refused, a store that would not open).
    #[error(transparent)]
    Other(Box<dyn Error + Send + Sync>),
    /// A run went wrong without an underlying error: a server that exited or never
    /// became ready, a tool that is missing, results that fail their own checks.
    #[error("{0}")]
    Run(String),
}

impl ExperimentError {
    /// A configuration that cannot run.
    pub fn config(message: impl Into<String>) -> Self {
        ExperimentError::Config(message.into())
    }

    /// A failed run without an underlying error.
    pub fn run(message: impl Into<String>) -> Self {
        ExperimentError::Run(message.into())
    }

    /// Another crate's error (or message), passed on as it is.
    pub fn other(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        ExperimentError::Other(source.into())
    }

    /// A step that failed with `source` (any error, or a message of another crate).
    pub fn step(
        context: impl Into<String>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        ExperimentError::Step {
            context: context.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_keeps_its_text_and_its_typed_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = ExperimentError::step("cannot write runs.json", io);
        assert_eq!(e.to_string(), "cannot write runs.json: denied");
        let cause = e.source().expect("a cause");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        assert_eq!(
            ExperimentError::config("bad --rounds").to_string(),
            "bad --rounds"
        );
        assert!(matches!(ExperimentError::run("x"), ExperimentError::Run(_)));
    }
}
