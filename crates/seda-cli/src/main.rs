//! The `seda` command: `serve | load | fileset | experiment`.
//!
//! Each subcommand lives in its own module; `main` only parses and dispatches, prints
//! a one-line error on failure and exits non-zero.

mod experiment;
mod load;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// SEDA: staged event-driven servers with adaptive overload control.
#[derive(Debug, Parser)]
#[command(name = "seda", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Haboob, the staged HTTP/1.1 server.
    Serve(serve::ServeArgs),
    /// Generate load against a server.
    #[command(subcommand)]
    Load(load::LoadCommand),
    /// Write a SPECweb99-style file set.
    Fileset(load::FilesetArgs),
    /// Rerun a figure of the papers on this machine.
    #[command(subcommand)]
    Experiment(experiment::ExperimentCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Load(cmd) => load::run(cmd),
        Command::Fileset(args) => load::fileset(args),
        Command::Experiment(cmd) => experiment::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seda: {e}");
            ExitCode::FAILURE
        }
    }
}
