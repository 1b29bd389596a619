//! `seda load` and `seda fileset`: thin argument layers over the `seda-load` crate.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::CliResult;
use crate::progress::RunBar;
use seda_load::client::{LoadConfig, Mode, Progress, RequestMix, parse_url};
use seda_load::fileset::{self, Manifest};
use seda_load::schedule::{Schedule, parse_duration};

/// Load generators.
#[derive(Debug, clap::Subcommand)]
pub enum LoadCommand {
    /// HTTP load: closed loop (users with think time, the SEDA/SPECweb99 client) or
    /// open loop (Poisson arrivals at --rate).
    Http(HttpArgs),
    /// Emulated mail readers against `seda arashi` (USITS'03 4.1): a Markov model of
    /// mail-reader behaviour, 20 ms think time, 5 s wait after a rejection.
    Arashi(crate::arashi::LoadArgs),
    /// Gnutella load: simulated peers (each a real 0.6 connection) sending pings and
    /// queries through a router, timing every delivered message.
    Gnutella(crate::gnutella::LoadArgs),
}

/// Arguments of `seda load http`.
#[derive(Debug, clap::Args)]
pub struct HttpArgs {
    /// Target, e.g. http://127.0.0.1:8080 (loopback only).
    #[arg(long)]
    pub url: String,
    /// Closed loop: number of users (ignored with --schedule).
    #[arg(long, default_value_t = 16)]
    pub users: u64,
    /// Open loop: Poisson arrivals per second (switches to the open loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop with --schedule levels read as requests per second.
    #[arg(long)]
    pub open: bool,
    /// Load schedule, e.g. 60s@3,60s@1000,60s@3 (users, or req/s in an open loop).
    #[arg(long)]
    pub schedule: Option<String>,
    /// Run length without --schedule, e.g. 30s.
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Closed loop: think time between a response and the next request, ms.
    #[arg(long, default_value_t = 20)]
    pub think_ms: u64,
    /// Requests per connection before the client closes it.
    #[arg(long, default_value_t = 5)]
    pub reqs_per_conn: u32,
    /// Open loop: most connections at once.
    #[arg(long, default_value_t = 1000)]
    pub max_conns: usize,
    /// Request files of this SPECweb99 file set (written by `seda fileset`) by its
    /// popularity model.
    #[arg(long, conflicts_with = "path")]
    pub fileset: Option<PathBuf>,
    /// Request this path every time (default /).
    #[arg(long)]
    pub path: Option<String>,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// A request running longer than this fails (timeout), seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
    /// After the schedule, wait this long for running requests, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub drain_s: f64,
    /// Event-loop threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the full report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bar (there is none either when stdout or stderr is not a
    /// terminal).
    #[arg(long)]
    pub quiet: bool,
}

/// Arguments of `seda fileset`.
#[derive(Debug, clap::Args)]
pub struct FilesetArgs {
    /// Directory to write (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Total size, MiB (rounded up to whole 4.88 MiB directories).
    #[arg(long)]
    pub size_mb: u64,
    /// Seed of the file contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(cmd: LoadCommand) -> CliResult {
    match cmd {
        LoadCommand::Http(args) => http(args),
        LoadCommand::Arashi(args) => crate::arashi::load(args),
        LoadCommand::Gnutella(args) => crate::gnutella::load(args),
    }
}

pub fn fileset(args: FilesetArgs) -> CliResult {
    let m = fileset::generate(&args.dir, args.size_mb, args.seed)?;
    println!(
        "wrote {} files in {} directories, {:.1} MiB, under {} (manifest: {})",
        m.files,
        m.dirs,
        m.total_bytes as f64 / (1 << 20) as f64,
        args.dir.display(),
        args.dir.join(fileset::MANIFEST).display()
    );
    Ok(())
}

fn parse_header(h: &str) -> Result<(String, String), String> {
    let (k, v) = h
        .split_once(':')
        .ok_or_else(|| format!("--header {h:?} is not 'Name: value'"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    if !v.is_finite() || !(0.0..=1e6).contains(&v) {
        return Err(format!("--{name} must be between 0 and 1e6 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn http(a: HttpArgs) -> CliResult {
    let (addr, host) = parse_url(&a.url)?;
    let open = a.open || a.rate.is_some();
    let schedule = match (&a.schedule, a.rate) {
        (Some(s), _) => Schedule::parse(s)?,
        (None, Some(rate)) => {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err("--rate must be > 0".into());
            }
            Schedule::steady(parse_duration(&a.duration)?, rate)
        }
        (None, None) => {
            if open {
                return Err("--open needs --schedule or --rate".into());
            }
            if a.users == 0 {
                return Err("--users must be at least 1".into());
            }
            Schedule::steady(parse_duration(&a.duration)?, a.users as f64)
        }
    };
    if schedule.total().is_zero() {
        return Err("the run has no duration".into());
    }
    let mode = if open {
        Mode::Open {
            reqs_per_conn: a.reqs_per_conn,
            max_conns: a.max_conns,
        }
    } else {
        Mode::Closed {
            think: Duration::from_millis(a.think_ms),
            reqs_per_conn: a.reqs_per_conn,
        }
    };
    let requests = match (&a.fileset, &a.path) {
        (Some(dir), _) => RequestMix::FileSet(Manifest::load(dir)?),
        (None, Some(p)) => RequestMix::Path(p.clone()),
        (None, None) => RequestMix::Path("/".into()),
    };
    let headers = a
        .headers
        .iter()
        .map(|h| parse_header(h))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = LoadConfig::new(addr, schedule.clone())
        .with_host(host)
        .with_mode(mode)
        .with_requests(requests)
        .with_headers(headers)
        .with_timeout(seconds("timeout-s", a.timeout_s)?)
        .with_drain(seconds("drain-s", a.drain_s)?)
        .with_threads(a.threads)
        .with_seed(a.seed);
    let bar = RunBar::new(schedule.total(), a.quiet);
    let unit = if open { "req/s" } else { "users" };
    let total = schedule.total().as_secs_f64();
    eprintln!(
        "seda load: {} loop against {addr}, {:.0} s, up to {} {unit}",
        if open { "open" } else { "closed" },
        total,
        schedule.max_level()
    );
    let mut last = (0u64, 0u64, 0u64);
    let report = seda_load::client::run(&cfg, |el: Duration, p: &Progress| {
        if !bar.is_drawn() {
            return;
        }
        let now = (
            p.completed.load(std::sync::atomic::Ordering::Relaxed),
            p.rejected.load(std::sync::atomic::Ordering::Relaxed),
            p.errors.load(std::sync::atomic::Ordering::Relaxed),
        );
        let level = schedule.level_at(el);
        bar.set(
            el,
            format!(
                "{level} {unit}  {} ok/s  {} 503/s  {} err/s  total {} ok",
                now.0 - last.0,
                now.1 - last.1,
                now.2 - last.2,
                now.0
            ),
        );
        last = now;
    });
    bar.finish();
    let report = report?;
    println!("{}", report.summary());
    if let Some(path) = &a.json {
        std::fs::write(path, report.to_json())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("report: {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use seda_load::LoadReport;
    use seda_load::testserver::{TestServer, TestServerConfig};

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: LoadCommand,
    }

    fn parse(args: &[&str]) -> Result<LoadCommand, String> {
        Cli::try_parse_from(std::iter::once("load").chain(args.iter().copied()))
            .map(|c| c.cmd)
            .map_err(|e| e.to_string())
    }

    /// `seda load http` end to end: a closed loop on a SPECweb99 file set served by the
    /// test server (every 5th answer a 503), with a header and a JSON report whose
    /// counts add up.
    #[test]
    fn load_http_writes_a_consistent_json_report() {
        let server = TestServer::start(
            TestServerConfig::default()
                .with_delay(std::time::Duration::from_millis(2))
                .with_reject_every(Some(5)),
        )
        .unwrap();
        let dir = tempfile_dir();
        let fs_dir = dir.join("fs");
        fileset(FilesetArgs {
            dir: fs_dir.clone(),
            size_mb: 1,
            seed: 9,
        })
        .unwrap();
        let json = dir.join("r.json");
        let cmd = parse(&[
            "http",
            "--url",
            &server.url(),
            "--schedule",
            "1s@4,1s@12",
            "--fileset",
            fs_dir.to_str().unwrap(),
            "--header",
            "X-Class: 2",
            "--json",
            json.to_str().unwrap(),
            "--quiet",
        ])
        .unwrap();
        run(cmd).unwrap();
        let r = LoadReport::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(r.completed > 100, "completed {}", r.completed);
        assert_eq!(r.completed + r.rejected + r.errors, r.issued);
        assert_eq!(
            r.timeseries.iter().map(|p| p.completed).sum::<u64>(),
            r.completed
        );
        assert_eq!(
            r.timeseries.iter().map(|p| p.rejected).sum::<u64>(),
            r.rejected
        );
        assert!(r.rejected > 0);
        assert_eq!(r.users, 12);
        let by_class: u64 = r
            .by_class
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.completed)
            .sum();
        assert_eq!(by_class, r.completed);
        assert_eq!(r.config["headers"][0], "X-Class: 2");
        assert_eq!(r.config["requests"]["fileset"]["dirs"], 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let e = run(parse(&["http", "--url", "http://10.1.2.3:80", "--duration", "1s"]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("non-loopback"), "{e}");
        let e = run(parse(&["http", "--url", "http://127.0.0.1:9", "--schedule", "5x@3"]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("duration"), "{e}");
        let e =
            run(parse(&["http", "--url", "http://127.0.0.1:9", "--header", "NoColon"]).unwrap())
                .unwrap_err()
                .to_string();
        assert!(e.contains("Name: value"), "{e}");
        let e = run(parse(&["http", "--url", "http://127.0.0.1:9", "--rate=0"]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("rate"), "{e}");
        assert!(
            fileset(FilesetArgs {
                dir: tempfile_dir(),
                size_mb: 0,
                seed: 1
            })
            .is_err()
        );
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "seda-cli-load-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
