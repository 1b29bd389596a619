//! `seda haproxy-config` (the HAProxy configuration for `seda serve` replicas) and
//! `seda experiment scale-out` (replicas behind HAProxy on loopback).

use std::path::PathBuf;
use std::time::Duration;

use seda_experiments::harness::haproxy::process as proxy;
use seda_experiments::harness::haproxy::{Balance, HaproxyConfig, replicas};
use seda_experiments::scale_out::{self, ScaleOutConfig, Scenario};

use crate::error::CliResult;
use crate::progress::Activity;

/// Arguments of `seda haproxy-config`.
#[derive(Debug, clap::Args)]
pub struct HaproxyConfigArgs {
    /// The replicas' service addresses, HOST:PORT, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub replicas: Vec<String>,
    /// Port of each replica's `--agent-listen`: one for all, or one per replica
    /// (comma-separated, in replica order). Without it: no agent checks.
    #[arg(long, value_delimiter = ',')]
    pub agent_port: Vec<u16>,
    /// Where HAProxy listens for clients.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// leastconn or roundrobin (both weighted by the agents).
    #[arg(long, default_value = "leastconn")]
    pub balance: Balance,
    /// Agent check interval, milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub agent_inter_ms: u64,
    /// Health check interval, milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub check_inter_ms: u64,
    /// Health check: GET this path (2xx/3xx = healthy) instead of a TCP connect.
    #[arg(long)]
    pub health_path: Option<String>,
    /// Retries of a refused or failed request, each on another replica.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// Do not retry requests a replica answered 503 (for services whose handlers may
    /// refuse after acting).
    #[arg(long)]
    pub no_retry_503: bool,
    /// Longest wait for a replica's response, seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_server_s: u64,
    /// Client inactivity timeout, seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_client_s: u64,
    /// Most concurrent connections to one replica [default: no limit].
    #[arg(long)]
    pub server_maxconn: Option<u32>,
    /// Retry-After of HAProxy's own 503 when no replica can take a request, seconds.
    #[arg(long, default_value_t = 1)]
    pub retry_after_secs: u32,
    /// Address of HAProxy's statistics page [default: none].
    #[arg(long)]
    pub stats_listen: Option<String>,
    /// Also check the result with `haproxy -c` (haproxy must be installed).
    #[arg(long)]
    pub check: bool,
}

/// Prints the configuration (and checks it with `--check`).
pub fn config_cmd(a: HaproxyConfigArgs) -> CliResult {
    let mut c = HaproxyConfig::new(&a.listen, replicas(&a.replicas, &a.agent_port)?);
    c.balance = a.balance;
    c.agent_inter = Duration::from_millis(a.agent_inter_ms);
    c.check_inter = Duration::from_millis(a.check_inter_ms);
    c.health_path = a.health_path;
    c.retries = a.retries;
    c.retry_503 = !a.no_retry_503;
    c.timeout_server = Duration::from_secs(a.timeout_server_s);
    c.timeout_client = Duration::from_secs(a.timeout_client_s);
    c.server_maxconn = a.server_maxconn;
    c.retry_after_secs = a.retry_after_secs;
    c.stats = a.stats_listen;
    let text = c.render()?;
    if a.check {
        let bin =
            proxy::find_haproxy().ok_or("--check needs haproxy (apt-get install -y haproxy)")?;
        proxy::check_config(&bin, &text).map_err(|e| {
            format!(
                "haproxy -c refused the configuration: {}",
                e.to_string().trim()
            )
        })?;
        eprintln!("seda haproxy-config: {} accepts it", bin.display());
    }
    print!("{text}");
    Ok(())
}

/// Arguments of `seda experiment scale-out`. The defaults take about 6 minutes.
#[derive(Debug, clap::Args)]
pub struct ScaleOutArgs {
    /// Output directory (runs.json, table.md, *.svg, haproxy/*.cfg).
    #[arg(long, default_value = "results/scale-out")]
    pub out: PathBuf,
    /// Scenarios, comma-separated: throughput, slowed, killed.
    #[arg(
        long,
        default_value = "throughput,slowed,killed",
        value_delimiter = ','
    )]
    pub scenarios: Vec<String>,
    /// Replica counts of the throughput scenario.
    #[arg(long, default_value = "1,2,3", value_delimiter = ',')]
    pub replicas: Vec<usize>,
    /// A short version for smoke tests (100 users, 3 + 6 s and 3 / 8 / 3 s phases).
    #[arg(long)]
    pub quick: bool,
    /// CPU work per request of a replica, ms.
    #[arg(long)]
    pub bottleneck_ms: Option<f64>,
    /// The slowed replica does this many times the work.
    #[arg(long)]
    pub slow_factor: Option<f64>,
    /// p90 target of every replica's controller, ms.
    #[arg(long)]
    pub target_ms: Option<f64>,
    /// Users of the throughput scenario.
    #[arg(long)]
    pub users: Option<u64>,
    /// Users during the spikes.
    #[arg(long)]
    pub spike_users: Option<u64>,
    /// Do not pin replicas to CPUs in the throughput scenario.
    #[arg(long)]
    pub no_pin: bool,
    /// Load-generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the load.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The `seda` binary whose `serve` runs the replicas [default: this one].
    #[arg(long)]
    pub seda: Option<PathBuf>,
}

/// Runs the experiment; installs haproxy first if it is missing.
pub fn scale_out_cmd(a: ScaleOutArgs) -> CliResult {
    let seda = match a.seda {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?,
    };
    let progress = Activity::new("seda experiment scale-out", false);
    let mut log = |line: &str| progress.log(line);
    let haproxy = proxy::ensure_haproxy(&mut log)?;
    let mut cfg = ScaleOutConfig::new(a.out, seda, haproxy);
    if a.quick {
        cfg = cfg.quick();
    }
    cfg.scenarios = a
        .scenarios
        .iter()
        .map(|s| Scenario::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    cfg.scenarios.dedup();
    cfg.replica_counts = a.replicas;
    if let Some(v) = a.bottleneck_ms {
        cfg.bottleneck_ms = v;
    }
    if let Some(v) = a.slow_factor {
        cfg.slow_factor = v;
    }
    if let Some(v) = a.target_ms {
        cfg.target_ms = v;
    }
    if let Some(v) = a.users {
        cfg.users = v;
    }
    if let Some(v) = a.spike_users {
        cfg.spike_users = v;
    }
    cfg.pin = !a.no_pin;
    cfg.threads = a.threads;
    cfg.seed = a.seed;
    let results = scale_out::run(&cfg, &mut log)?;
    progress.finish();
    println!("{}", scale_out::output::table(&results));
    if results.runs.is_empty() {
        return Err("no run could be measured".into());
    }
    Ok(())
}
