//! `seda load` and `seda fileset`. (Owned by issue 4; not built yet.)

/// Load generators.
#[derive(Debug, clap::Subcommand)]
pub enum LoadCommand {
    /// HTTP load (closed or open loop).
    Http,
}

/// Arguments of `seda fileset`.
#[derive(Debug, clap::Args)]
pub struct FilesetArgs {}

pub fn run(_cmd: LoadCommand) -> Result<(), String> {
    Err("`seda load` is not built yet (issue 4)".into())
}

pub fn fileset(_args: FilesetArgs) -> Result<(), String> {
    Err("`seda fileset` is not built yet (issue 4)".into())
}
