//! `seda serve`: Haboob, the staged HTTP/1.1 server (issue 3).
//!
//! Every flag can also be set in a TOML file given with `--config` (same names,
//! e.g. `cache-mb = 64`): flags over the file over the defaults, one struct
//! ([`config::ServeConfig`]), validated in one place. `--check` validates the
//! configuration and exits (0: it would start; 1: the error on stderr). Without
//! `--root` the built-in demo site is served, with a dynamic handler at `/hello`.
//! The first line on standard output is `listening on http://ADDR` (tests and scripts
//! parse it; `--listen 127.0.0.1:0` picks a free port), the second `admin at
//! http://ADDR/_seda/` (the admin listener: stats, stage graph, metrics; loopback on a
//! free port unless `--admin-listen ADDR`, absent with `--admin-listen none`).
//! With `--agent-listen ADDR` it also answers HAProxy's agent-check there
//! (`seda_http::AgentServer`) and prints `agent-check at ADDR` after those lines.
//! SIGINT or SIGTERM shuts down gracefully: the agent says `drain`, requests in flight
//! are answered, then the process exits.
//!
//! Values that cannot work are errors (a cache larger than the machine's memory,
//! more connections than open files); settings that would have no effect are
//! warned about on stderr (an admission target with no dynamic handler mounted).
//!
//! # Overload control (issue 5; `shared/contracts/overload.md`)
//! `--bottleneck-ms N` mounts the calibrated bottleneck handler at `/bottleneck` and
//! prints `bottleneck: N ms calibrated to K iterations` after the listening line;
//! `--bottleneck-passes K` gives K instead of calibrating (replicas doing the same work).
//! `--rt-target-ms`, `--admission`, `--class-header`, `--degrade`,
//! `--overload-action` and `--retry-after-secs` configure every dynamic stage (see
//! `seda_http::OverloadControl` for the laws); the file adds per-class and
//! per-handler targets and the controllers' parameters (see [`config`]).

use std::io::Write as _;
use std::path::PathBuf;

use seda_http::{AgentServer, DemoSite, Server, ServerConfig, ServerError};

mod config;
mod file;
mod mount;
mod overload;
mod reload;
mod words;
use crate::error::CliResult;
use config::{ConfigError, ServeConfig, Settings};
use mount::{mount_overload, warnings};
use reload::{Running, reload, reopen_log};

/// Arguments of `seda serve`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML file with any of these settings (same names, e.g. `cache-mb = 64`);
    /// flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Check the configuration (flags and file) and exit: 0 if the server would
    /// start with it, else the error on stderr and exit code 1.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    settings: ServeConfig,
}

/// The flags over the file over the defaults, validated.
fn resolve(args: &ServeArgs) -> Result<Settings, ConfigError> {
    ServeConfig::load(&args.settings, args.config.as_deref())?.validate()
}

/// `--check`: what [`ServeConfig::validate`] cannot see from the settings alone (the
/// root directory, the machine's memory and open-files limit).
fn check(s: &Settings) -> Result<(), String> {
    let mut cfg = s.cfg.clone();
    // The demo site is written under the temporary directory at start.
    cfg.root = s.root.clone().unwrap_or_else(std::env::temp_dir);
    cfg.check().map_err(|e| e.to_string())?;
    // The open-files check of the start: a `max-connections` that was set and does
    // not fit is refused; the default is lowered at start, which `start` says.
    match cfg.check_descriptors() {
        Err(ServerError::Descriptors(b)) if !s.max_connections_set && b.per_listener() > 0 => {
            eprintln!(
                "seda serve: warning: the open-files limit ({}, `ulimit -n`) leaves room for \
                 at most {} connections on each listener, not the default {}",
                b.limit,
                b.per_listener(),
                b.wanted
            );
        }
        r => r.map_err(|e| e.to_string())?,
    }
    // As the server would at start (nginx -t opens its logs too).
    if let Some(log) = &cfg.access_log {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log.path)
            .map_err(|e| format!("access log {}: {e}", log.path.display()))?;
    }
    Ok(())
}

/// Starts the server. A `max-connections` that was set and does not fit the
/// open-files limit is an error (the user asked for it); the default is lowered to
/// what fits, with a warning (nginx's `worker_connections exceed open file resource
/// limit`, but acted upon: connections past the limit would wait in the kernel's
/// queue instead of getting the server's 503).
fn start(cfg: ServerConfig, max_connections_set: bool) -> Result<Server, String> {
    match Server::start(cfg.clone()) {
        Err(ServerError::Descriptors(b)) if !max_connections_set && b.per_listener() > 0 => {
            let each = if b.listeners > 1 {
                format!(" on each of {} listeners", b.listeners)
            } else {
                String::new()
            };
            eprintln!(
                "seda serve: warning: the open-files limit ({}, `ulimit -n`) leaves room for \
                 {} connections beside the {} descriptors the server holds and the {} it keeps \
                 free; serving at most {} connections{each} instead of the default {} (raise \
                 `ulimit -n` to at least {} for those)",
                b.limit,
                b.connections(),
                b.held,
                b.reserve,
                b.per_listener(),
                b.wanted,
                b.limit_needed()
            );
            let cfg =
                cfg.with_max_connections(usize::try_from(b.per_listener()).unwrap_or(usize::MAX));
            Server::start(cfg).map_err(|e| e.to_string())
        }
        r => r.map_err(|e| e.to_string()),
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> CliResult {
    let settings = resolve(&args).map_err(|e| e.to_string())?;
    if args.check {
        check(&settings)?;
        let what = args.config.as_ref().map_or("flags".to_owned(), |p| {
            format!("configuration {}", p.display())
        });
        announce!("seda serve: {what}: ok");
        return Ok(());
    }
    let mut running = Running::new(&settings, PathBuf::new());
    let Settings {
        mut cfg,
        root,
        grace: _,
        overload,
        bottleneck,
        bottleneck_passes,
        agent_listen,
        agent_cfg,
        max_connections_set,
    } = settings;
    let demo = match root {
        Some(root) => {
            cfg.root = root;
            None
        }
        None => {
            let site =
                DemoSite::create().map_err(|e| format!("cannot write the demo site: {e}"))?;
            cfg.root = site.path().to_owned();
            cfg.handlers.push(DemoSite::hello_handler());
            Some(site)
        }
    };
    for w in warnings(&cfg, &overload, bottleneck) {
        eprintln!("seda serve: warning: {w}");
    }
    let calibrated = mount_overload(&mut cfg, &overload, bottleneck, bottleneck_passes)?;
    running.root = cfg.root.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGUSR1,
    ])
    .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let root_shown = if demo.is_some() {
        "built-in demo site".to_owned()
    } else {
        cfg.root.display().to_string()
    };
    let routes: Vec<String> = cfg
        .proxies
        .iter()
        .map(|r| {
            let ups: Vec<String> = r.upstreams.iter().map(ToString::to_string).collect();
            format!("{} -> {}", r.prefix, ups.join(", "))
        })
        .collect();
    let server = start(cfg, max_connections_set)?;
    announce!("listening on http://{}", server.local_addr());
    if let Some(admin) = server.admin_addr() {
        announce!("admin at http://{admin}/_seda/");
    }
    if let Some(tls) = server.tls_addr() {
        announce!("listening on https://{tls}");
    }
    if let (Some(ms), Some(passes)) = (bottleneck, calibrated) {
        let how = if bottleneck_passes.is_some() {
            "set by --bottleneck-passes to"
        } else {
            "calibrated to"
        };
        announce!(
            "bottleneck: {} ms {how} {passes} iterations",
            ms.as_secs_f64() * 1000.0
        );
    }
    let agent = match agent_listen {
        Some(addr) => {
            let pages = server.admin_builder();
            let agent = AgentServer::start(addr, agent_cfg, move || pages.stats())
                .map_err(|e| format!("agent-check: {e}"))?;
            announce!("agent-check at {}", agent.local_addr());
            Some(agent)
        }
        None => None,
    };
    let _ = std::io::stdout().flush();
    let (io, why) = server.io_backend();
    eprintln!("seda serve: socket I/O: {io} ({why})");
    eprintln!("seda serve: serving {root_shown}; Ctrl-C to stop");
    for r in &routes {
        eprintln!("seda serve: proxy {r}");
    }
    // Block until SIGINT or SIGTERM (no polling: shutdown starts as the signal lands).
    for signal in signals.forever() {
        match signal {
            signal_hook::consts::SIGHUP => {
                let source = args
                    .config
                    .as_ref()
                    .map_or("the flags".to_owned(), |p| p.display().to_string());
                reload(&source, resolve(&args), &server, &mut running);
            }
            signal_hook::consts::SIGUSR1 => reopen_log(&server, running.access_log.as_ref()),
            _ => break,
        }
    }
    let grace = running.grace;
    eprintln!(
        "seda serve: shutting down (grace {:.1} s)",
        grace.as_secs_f64()
    );
    // A load balancer stops sending new requests while those in flight finish.
    if let Some(a) = &agent {
        a.set_draining(true);
    }
    let report = server.shutdown(grace);
    drop(agent);
    eprintln!(
        "seda serve: stopped; requests drained: {}, refused at the end of the grace: {}, \
         running when cut: {}, connections cut: {}, events unfinished: {}",
        report.requests_drained,
        report.requests_refused,
        report.requests_running,
        report.connections_cut,
        report.runtime.unfinished()
    );
    drop(demo);
    Ok(())
}

#[cfg(test)]
mod tests;
