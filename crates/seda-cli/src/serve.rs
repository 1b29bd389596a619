//! `seda serve`: Haboob, the staged HTTP/1.1 server (issue 3).
//!
//! Every flag can also be set in a TOML file given with `--config` (same names,
//! e.g. `cache-mb = 64`); flags on the command line override the file. Without
//! `--root` the built-in demo site is served, with a dynamic handler at `/hello`.
//! The first line on standard output is `listening on http://ADDR` (tests and scripts
//! parse it; `--listen 127.0.0.1:0` picks a free port). SIGINT or SIGTERM shuts down
//! gracefully: requests in flight are answered, then the process exits.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use seda::ThreadModel;
use seda_http::{DemoSite, Server, ServerConfig};
use serde::Deserialize;

/// Arguments of `seda serve`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080; port 0 picks a free port].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Directory to serve [default: the built-in demo site].
    #[arg(long)]
    root: Option<PathBuf>,
    /// Page-cache capacity in MiB [default: 200].
    #[arg(long)]
    cache_mb: Option<u64>,
    /// Thread model of the stages: per-stage or shared [default: per-stage].
    #[arg(long)]
    thread_model: Option<ThreadModel>,
    /// TOML file with any of these settings; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Files larger than this many KiB stream with sendfile instead of entering the
    /// page cache [default: 1024].
    #[arg(long)]
    max_cached_file_kb: Option<u64>,
    /// Seconds a client has to send a request once it started [default: 10].
    #[arg(long)]
    header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept [default: 30].
    #[arg(long)]
    idle_timeout: Option<f64>,
    /// Most open connections [default: 10000].
    #[arg(long)]
    max_connections: Option<usize>,
    /// Socket event loops [default: one per core].
    #[arg(long)]
    event_loops: Option<usize>,
    /// Most threads of the HttpParse stage [default: 2].
    #[arg(long)]
    parse_threads: Option<usize>,
    /// Put a queue between every pair of stages (the paper's layout) instead of direct
    /// calls on the cache-hit path.
    #[arg(long)]
    staged: bool,
    /// Seconds to let requests in flight finish on SIGINT/SIGTERM [default: 10].
    #[arg(long)]
    shutdown_grace: Option<f64>,
}

/// The same settings in a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<SocketAddr>,
    root: Option<PathBuf>,
    cache_mb: Option<u64>,
    thread_model: Option<String>,
    max_cached_file_kb: Option<u64>,
    header_timeout: Option<f64>,
    idle_timeout: Option<f64>,
    max_connections: Option<usize>,
    event_loops: Option<usize>,
    parse_threads: Option<usize>,
    staged: Option<bool>,
    shutdown_grace: Option<f64>,
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{name} must be a positive number of seconds, got {v}"
        ))
    }
}

/// Merges the file's settings under the flags into a server configuration and the
/// shutdown grace period.
fn resolve(args: ServeArgs) -> Result<(ServerConfig, Option<PathBuf>, Duration), String> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
            toml::from_str::<FileSettings>(&text).map_err(|e| {
                format!(
                    "config {}: {}",
                    path.display(),
                    e.message().replace('\n', " ")
                )
            })?
        }
        None => FileSettings::default(),
    };
    let mut cfg = ServerConfig::default();
    if let Some(v) = args.listen.or(file.listen) {
        cfg.listen = v;
    }
    if let Some(mb) = args.cache_mb.or(file.cache_mb) {
        cfg.cache_bytes = mb
            .checked_mul(1 << 20)
            .ok_or_else(|| format!("--cache-mb {mb} is too large"))?;
    }
    let model = match (args.thread_model, file.thread_model) {
        (Some(m), _) => Some(m),
        (None, Some(s)) => Some(s.parse::<ThreadModel>()?),
        (None, None) => None,
    };
    if let Some(m) = model {
        cfg.thread_model = m;
    }
    if let Some(kb) = args.max_cached_file_kb.or(file.max_cached_file_kb) {
        cfg.max_cached_file = kb.saturating_mul(1024);
    }
    if let Some(s) = args.header_timeout.or(file.header_timeout) {
        cfg.header_timeout = secs("header-timeout", s)?;
    }
    if let Some(s) = args.idle_timeout.or(file.idle_timeout) {
        cfg.idle_timeout = secs("idle-timeout", s)?;
    }
    if let Some(n) = args.max_connections.or(file.max_connections) {
        cfg.max_connections = n;
    }
    if let Some(n) = args.event_loops.or(file.event_loops) {
        cfg.event_loops = n;
    }
    if let Some(n) = args.parse_threads.or(file.parse_threads) {
        cfg.parse_threads = n;
    }
    cfg.direct = !(args.staged || file.staged.unwrap_or(false));
    let grace = secs(
        "shutdown-grace",
        args.shutdown_grace.or(file.shutdown_grace).unwrap_or(10.0),
    )?;
    Ok((cfg, args.root.or(file.root), grace))
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> Result<(), String> {
    let (mut cfg, root, grace) = resolve(args)?;
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
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let root_shown = if demo.is_some() {
        "built-in demo site".to_owned()
    } else {
        cfg.root.display().to_string()
    };
    let server = Server::start(cfg).map_err(|e| e.to_string())?;
    println!("listening on http://{}", server.local_addr());
    let _ = std::io::stdout().flush();
    eprintln!(
        "seda serve: serving {root_shown}; admin at http://{}/_seda/stats; Ctrl-C to stop",
        server.local_addr()
    );
    // Block until SIGINT or SIGTERM (no polling: shutdown starts as the signal lands).
    let _ = signals.forever().next();
    eprintln!(
        "seda serve: shutting down (grace {:.1} s)",
        grace.as_secs_f64()
    );
    let report = server.shutdown(grace);
    eprintln!(
        "seda serve: stopped; requests drained: {}, connections cut: {}, events unfinished: {}",
        report.requests_drained,
        report.connections_cut,
        report.runtime.unfinished()
    );
    drop(demo);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_config_file() {
        let dir = std::env::temp_dir().join(format!("seda-serve-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("serve.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:9999\"\ncache-mb = 7\nthread-model = \"shared\"\nidle-timeout = 2.5\nstaged = true\n").unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            cache_mb: Some(3),
            ..ServeArgs::default()
        };
        let (cfg, root, _) = resolve(args).unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(cfg.cache_bytes, 3 << 20, "the flag wins");
        assert_eq!(cfg.thread_model, ThreadModel::Shared);
        assert_eq!(cfg.idle_timeout, Duration::from_millis(2500));
        assert!(!cfg.direct);
        assert!(root.is_none());
        std::fs::write(&file, "cache-mbb = 7\n").unwrap();
        let err = resolve(ServeArgs {
            config: Some(file.clone()),
            ..ServeArgs::default()
        })
        .unwrap_err();
        assert!(err.contains("cache-mbb") && !err.contains('\n'), "{err}");
        let err = resolve(ServeArgs {
            header_timeout: Some(-1.0),
            ..ServeArgs::default()
        })
        .unwrap_err();
        assert!(err.contains("header-timeout"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
