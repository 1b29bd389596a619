//! `seda serve`: Haboob. (Owned by issue 3; not built yet.)

/// Arguments of `seda serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> Result<(), String> {
    Err("`seda serve` is not built yet (issue 3)".into())
}
