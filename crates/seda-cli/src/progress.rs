//! Progress on the terminal for the commands that run longer than a few seconds
//! (indicatif): a bar over a known length for the load generators (`seda load
//! http|arashi`), a spinner with the elapsed time under the run's log for the
//! experiments and the mail import.
//!
//! # Invariants
//! - Drawn on stderr, and only when stdout and stderr are both terminals and
//!   `--quiet` is not given: a run piped into a file or a script shows no bar.
//! - Log lines are never lost: above a drawn spinner they are printed through it
//!   (so they do not tear the bar); without one they go to stderr as before,
//!   `[   N s] line`.
//! - The report a command prints on stdout is unchanged.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether a bar may be drawn: both streams are terminals and the user did not ask
/// for quiet.
pub fn visible(quiet: bool) -> bool {
    !quiet && std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// A bar over a run of known length: the elapsed seconds of the total, with a line
/// of live figures.
pub struct RunBar {
    bar: ProgressBar,
}

impl RunBar {
    /// A bar for a run of `total`, drawn if [`visible`]`(quiet)`.
    pub fn new(total: Duration, quiet: bool) -> RunBar {
        let target = if visible(quiet) {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(millis(total)), target);
        bar.set_style(
            ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {percent:>3}% {msg}")
                .expect("a valid template"),
        );
        RunBar { bar }
    }

    /// The run is `elapsed` in; `figures` are the live counters.
    pub fn set(&self, elapsed: Duration, figures: String) {
        self.bar.set_position(millis(elapsed));
        self.bar.set_message(figures);
    }

    /// Whether the bar is drawn.
    pub fn is_drawn(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Removes the bar (before the report is printed).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A spinner for a run of unknown length, with the elapsed time; the run's log
/// scrolls above it.
pub struct Activity {
    bar: Option<ProgressBar>,
    t0: Instant,
}

impl Activity {
    /// A spinner labelled `what`, drawn if [`visible`]`(quiet)`.
    pub fn new(what: &str, quiet: bool) -> Activity {
        let bar = visible(quiet).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} [{elapsed_precise}]")
                    .expect("a valid template"),
            );
            bar.set_prefix(what.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Activity {
            bar,
            t0: Instant::now(),
        }
    }

    /// A line of the run's log, printed above the spinner (or to stderr without
    /// one).
    pub fn log(&self, line: &str) {
        let line = format!("[{:>4} s] {line}", self.t0.elapsed().as_secs());
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Removes the spinner (before the results are printed).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        self.finish();
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_everything_and_a_hidden_bar_still_takes_updates() {
        assert!(!visible(true));
        let bar = RunBar::new(Duration::from_secs(10), true);
        assert!(!bar.is_drawn());
        bar.set(Duration::from_secs(3), "12 ok/s".into());
        assert_eq!(bar.bar.position(), 3_000);
        bar.finish();
        let spinner = Activity::new("test", true);
        assert!(spinner.bar.is_none());
        spinner.log("a line goes to stderr");
    }
}
