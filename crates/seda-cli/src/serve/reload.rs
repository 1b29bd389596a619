//! SIGHUP: the same flags over the configuration file as it is now, validated, then
//! applied to the running server ([`seda_http::Server::reload`]) without dropping a
//! connection or a request in flight. A configuration that fails validation is
//! refused with one line on stderr and the running one is kept. SIGUSR1: the access
//! log reopens its file.

use std::path::PathBuf;
use std::time::Duration;

use seda_http::{AccessLogConfig, Server};

use super::config::{ConfigError, Settings};

/// What the signal loop keeps of the configuration in force.
#[derive(Debug)]
pub(super) struct Running {
    /// The directory served (the demo site's, without a root).
    pub(super) root: PathBuf,
    /// Whether a root was configured (else the demo site is served).
    pub(super) demo: bool,
    pub(super) grace: Duration,
    pub(super) access_log: Option<AccessLogConfig>,
    /// The overload control in force, as its `Debug` text: a reload that leaves it
    /// as it is keeps the running policies and their adapted state (a new policy
    /// starts from its initial rate or limit).
    overload: String,
    /// Settings only a restart changes, as the server started with them.
    fixed: Fixed,
}

/// The settings of `seda serve` (not of the server library) fixed at start.
#[derive(Debug, PartialEq)]
struct Fixed {
    bottleneck: Option<Duration>,
    bottleneck_passes: Option<u64>,
    degrade: bool,
    agent_listen: Option<std::net::SocketAddr>,
    agent_drain_refused: Option<f64>,
}

impl Fixed {
    fn of(s: &Settings) -> Fixed {
        Fixed {
            bottleneck: s.bottleneck,
            bottleneck_passes: s.bottleneck_passes,
            degrade: s.overload.degrade,
            agent_listen: s.agent_listen,
            agent_drain_refused: s.agent_cfg.drain_refused,
        }
    }

    /// The names of the settings that differ.
    fn changed(&self, new: &Fixed) -> Vec<&'static str> {
        [
            ("bottleneck-ms", self.bottleneck != new.bottleneck),
            (
                "bottleneck-passes",
                self.bottleneck_passes != new.bottleneck_passes,
            ),
            ("degrade", self.degrade != new.degrade),
            ("agent-listen", self.agent_listen != new.agent_listen),
            (
                "agent-drain-refused",
                self.agent_drain_refused != new.agent_drain_refused,
            ),
        ]
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
    }
}

impl Running {
    pub(super) fn new(s: &Settings, root: PathBuf) -> Running {
        Running {
            demo: s.root.is_none(),
            root,
            grace: s.grace,
            access_log: s.cfg.access_log.clone(),
            overload: format!("{:?}", s.overload),
            fixed: Fixed::of(s),
        }
    }
}

/// SIGHUP. `settings` are the flags over the file as it is now (named `source` in
/// the line printed), resolved by the caller. Prints one line: what was applied (and
/// what needs a restart), or why the new configuration was refused.
pub(super) fn reload(
    source: &str,
    settings: Result<Settings, ConfigError>,
    server: &Server,
    running: &mut Running,
) {
    let refused = |e: &dyn std::fmt::Display| {
        eprintln!("seda serve: reload refused, still running the previous configuration: {e}");
    };
    let settings = match settings {
        Ok(s) => s,
        Err(e) => return refused(&e),
    };
    let mut restart = running.fixed.changed(&Fixed::of(&settings));
    if settings.root.is_none() != running.demo {
        restart.push("root");
    }
    let mut cfg = settings.cfg.clone();
    cfg.root = match (&settings.root, running.demo) {
        (Some(root), false) => root.clone(),
        _ => running.root.clone(),
    };
    let overload = format!("{:?}", settings.overload);
    let changed = (overload != running.overload).then_some(&settings.overload);
    let done = match server.reload(&cfg, changed) {
        Ok(done) => done,
        Err(e) => return refused(&e),
    };
    running.grace = settings.grace;
    running.overload = overload;
    if !done.restart_needed.contains(&"access-log") {
        running.access_log = cfg.access_log.clone();
    }
    restart.extend(done.restart_needed);
    let applied = if done.applied.is_empty() {
        "nothing changed".to_owned()
    } else {
        format!("applied {}", done.applied.join(", "))
    };
    let kept = if restart.is_empty() {
        String::new()
    } else {
        format!(
            "; kept until a restart: {} (changed in the new configuration)",
            restart.join(", ")
        )
    };
    eprintln!("seda serve: reloaded {source}: {applied}{kept}");
}

/// SIGUSR1: the access log reopens its file (after logrotate renamed it).
pub(super) fn reopen_log(server: &Server, cfg: Option<&AccessLogConfig>) {
    match (server.access_log(), cfg) {
        (Some(log), Some(cfg)) => match log.reopen(&cfg.path, cfg.format) {
            Ok(()) => eprintln!(
                "seda serve: reopening the access log {}",
                cfg.path.display()
            ),
            Err(e) => eprintln!("seda serve: {e}"),
        },
        _ => eprintln!("seda serve: SIGUSR1 ignored: no access log"),
    }
}
