//! `seda experiment`: reruns of the papers' figures on this machine.

use std::path::PathBuf;
use std::time::Duration;

use seda_load::experiment::fig12::{self, Fig12Config};
use seda_load::experiment::server::ServerSpec;

/// Experiments.
#[derive(Debug, clap::Subcommand)]
pub enum ExperimentCommand {
    /// SEDA Fig. 12: Haboob vs nginx vs Apache on a SPECweb99-style file set.
    Fig12(Fig12Args),
}

/// Arguments of `seda experiment fig12`.
#[derive(Debug, clap::Args)]
pub struct Fig12Args {
    /// Output directory (runs.json, table.md, throughput.svg, cdf-N.svg).
    #[arg(long, default_value = "results/fig12")]
    pub out: PathBuf,
    /// Client counts, comma-separated.
    #[arg(long, default_value = "1,4,16,64,256,1024", value_delimiter = ',')]
    pub clients: Vec<u64>,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 30)]
    pub duration_s: u64,
    /// Unmeasured warm-up seconds per server.
    #[arg(long, default_value_t = 10)]
    pub warmup_s: u64,
    /// File set size, MiB.
    #[arg(long, default_value_t = 500)]
    pub size_mb: u64,
    /// Haboob's page cache, MiB (smaller than the set, as in the paper).
    #[arg(long, default_value_t = 100)]
    pub cache_mb: u64,
    /// Servers, comma-separated: haboob, nginx, apache-prefork, apache-event.
    #[arg(
        long,
        default_value = "haboob,nginx,apache-prefork,apache-event",
        value_delimiter = ','
    )]
    pub servers: Vec<String>,
    /// Keep the file set here (reused when its size and seed match) instead of a
    /// temporary directory.
    #[arg(long)]
    pub fileset_dir: Option<PathBuf>,
    /// Load-generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the file set and the request stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(cmd: ExperimentCommand) -> Result<(), String> {
    match cmd {
        ExperimentCommand::Fig12(a) => fig12_cmd(a),
    }
}

fn fig12_cmd(a: Fig12Args) -> Result<(), String> {
    if a.clients.is_empty() || a.clients.contains(&0) {
        return Err("--clients must be positive counts".into());
    }
    if a.duration_s == 0 {
        return Err("--duration-s must be at least 1".into());
    }
    if a.size_mb == 0 || a.cache_mb == 0 {
        return Err("--size-mb and --cache-mb must be at least 1".into());
    }
    let mut clients = a.clients.clone();
    clients.sort_unstable();
    clients.dedup();
    // Haboob is `seda serve` from the same build as this binary.
    let seda = std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?;
    let servers = a
        .servers
        .iter()
        .map(|n| ServerSpec::by_name(n.trim(), &seda, a.cache_mb))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = Fig12Config {
        out: a.out,
        clients,
        duration: Duration::from_secs(a.duration_s),
        warmup: Duration::from_secs(a.warmup_s),
        drain: Duration::from_secs(10),
        size_mb: a.size_mb,
        cache_mb: a.cache_mb,
        servers,
        fileset_dir: a.fileset_dir,
        threads: a.threads,
        seed: a.seed,
    };
    let t0 = std::time::Instant::now();
    let mut log = |line: &str| eprintln!("[{:>4} s] {line}", t0.elapsed().as_secs());
    let results = fig12::run(&cfg, &mut log)?;
    println!("{}", fig12::table(&results));
    Ok(())
}
