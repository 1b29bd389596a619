//! `seda experiment`. (Owned by issues 4 and 5; not built yet.)

/// Experiments.
#[derive(Debug, clap::Subcommand)]
pub enum ExperimentCommand {
    /// SEDA Fig. 12: Haboob vs nginx vs Apache.
    Fig12,
}

pub fn run(_cmd: ExperimentCommand) -> Result<(), String> {
    Err("`seda experiment` is not built yet (issue 4)".into())
}
