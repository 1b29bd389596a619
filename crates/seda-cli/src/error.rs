//! What a command fails with: any error, typed where the library gives one (a
//! `seda_load::LoadError`, a `seda_http::ServerError`, ...), or a message of the
//! command's own. `main` reports it once, as one line, `seda: TEXT`, with exit
//! status 1 (clap's usage errors are reported by clap with status 2).

/// A command's error.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

/// A command's result.
pub type CliResult<T = ()> = Result<T, CliError>;
