//! The `seda` command: `serve | arashi | gnutella | load | fileset | experiment |
//! haproxy-config` (the first line of `seda --help` is built from the subcommands).
//!
//! Each subcommand lives in its own module; [`main`] only parses and dispatches, prints
//! a one-line error on failure and exits non-zero: 2 for a command line clap refuses
//! (`seda: <clap's first line>`), 1 for a command that fails.
//!
//! The binary (`src/main.rs`) only calls [`main`]. The command line lives in this
//! library so that a test can parse a command with the very definition the binary uses
//! ([`check_command_line`]; `tests/doc_commands.rs` holds every command the docs give
//! to it). Nothing else here is public.

/// Prints a line on stdout for whoever started a server (its address, say) and
/// flushes it. A closed stdout (the reader went away) is ignored: a running server
/// must not die of it, as it would of `println!`, which panics on `EPIPE`.
macro_rules! announce {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, $($arg)*);
        let _ = out.flush();
    }};
}

mod arashi;
mod error;
mod experiment;
mod gnutella;
mod haproxy;
mod load;
mod progress;
mod serve;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// SEDA: staged event-driven servers with adaptive overload control.
#[derive(Debug, Parser)]
#[command(name = "seda", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Haboob, the staged HTTP/1.1 server.
    Serve(Box<serve::ServeArgs>),
    /// Run Arashi, the web mail service of USITS'03 (or import its corpus).
    Arashi(arashi::ArashiArgs),
    /// Run the Gnutella 0.6 packet router (SEDA 5.2).
    Gnutella(gnutella::GnutellaArgs),
    /// Generate load against a server.
    #[command(subcommand)]
    Load(load::LoadCommand),
    /// Write a SPECweb99-style file set.
    Fileset(load::FilesetArgs),
    /// Rerun a figure of the papers on this machine.
    #[command(subcommand)]
    Experiment(experiment::ExperimentCommand),
    /// Print an HAProxy configuration for `seda serve` replicas (agent checks, 503s
    /// retried on another replica).
    HaproxyConfig(haproxy::HaproxyConfigArgs),
}

/// Exit status of a command line clap refuses (its own convention).
const USAGE_ERROR: u8 = 2;

/// The first line of clap's message without its `error: ` prefix; the usage and tip
/// lines that follow are dropped so that a bad flag is one line on stderr.
fn one_line(rendered: &str) -> &str {
    let first = rendered
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid command line");
    first.strip_prefix("error:").map_or(first, str::trim_start)
}

/// The command line, whose first help line names every command: built from the
/// subcommands themselves, so that it cannot fall behind them.
fn command() -> clap::Command {
    let cmd = Cli::command();
    let names: Vec<&str> = cmd.get_subcommands().map(clap::Command::get_name).collect();
    let about = format!(
        "SEDA, staged event-driven servers with adaptive overload control: {}",
        names.join(" | ")
    );
    cmd.about(about)
}

fn parse() -> Result<Cli, clap::Error> {
    Cli::from_arg_matches(&command().try_get_matches()?)
}

/// Parses `argv` (program name first) with the `seda` command's own definition and
/// validation, as the binary would, without running anything. `Err` is clap's error
/// (a help or version request is an `Err` of kind `DisplayHelp`/`DisplayVersion`).
pub fn check_command_line<I, T>(argv: I) -> Result<(), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::from_arg_matches(&command().try_get_matches_from(argv)?).map(drop)
}

/// The `seda` binary: parses the process's arguments, runs the command, and reports
/// an error once.
pub fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                // Help, version, and help shown for a missing subcommand: clap's text
                // as it is, with clap's exit status (0, or 2 for a missing command).
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(USAGE_ERROR))
                }
                _ => {
                    eprintln!("seda: {}", one_line(&e.render().to_string()));
                    ExitCode::from(USAGE_ERROR)
                }
            };
        }
    };
    // The one place an error is reported.
    let result: error::CliResult = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Arashi(args) => arashi::run(args),
        Command::Gnutella(args) => gnutella::run(args),
        Command::Load(cmd) => load::run(cmd),
        Command::Fileset(args) => load::fileset(args),
        Command::Experiment(cmd) => experiment::run(cmd),
        Command::HaproxyConfig(args) => haproxy::config_cmd(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seda: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        for argv in [
            &["seda", "serve", "--bogus-flag"][..],
            &["seda", "serve", "--cache-mb", "notanumber"],
            &["seda", "serve", "--thread-model", "nope"],
            &["seda", "frobnicate"],
        ] {
            let e = Cli::try_parse_from(argv).unwrap_err();
            let line = one_line(&e.render().to_string()).to_owned();
            assert!(!line.is_empty() && !line.contains('\n'), "{argv:?}: {line}");
            assert!(!line.starts_with("error"), "{argv:?}: {line}");
            assert!(!line.contains("Usage"), "{argv:?}: {line}");
        }
        let e = Cli::try_parse_from(["seda", "serve", "--cache-mb", "x"]).unwrap_err();
        assert!(one_line(&e.render().to_string()).contains("--cache-mb"));
    }

    /// Issue 29.7: the first line of `seda --help` named five of seven commands.
    #[test]
    fn the_first_help_line_names_every_command() {
        let help = command().render_help().to_string();
        let first = help.lines().next().unwrap();
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        assert!(names.len() >= 7, "{names:?}");
        for n in &names {
            assert!(
                first.split([' ', '|', ':']).any(|w| w == n),
                "`{n}` missing from {first:?}"
            );
        }
    }
}
