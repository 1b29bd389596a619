//! `seda experiment`: reruns of the papers' figures on this machine.

use std::path::PathBuf;
use std::time::Duration;

use seda_experiments::colors::{self, ColorsConfig, cost::CostConfig};
use seda_experiments::fig12::{self, Fig12Config};
use seda_experiments::flash::{self, DiskServer, FlashConfig};
use seda_experiments::harness::server::ServerSpec;
use seda_experiments::overload::{self, OverloadConfig, Scenario};
use seda_experiments::soak::{self, SoakConfig};

use crate::error::CliResult;
use crate::progress::Activity;

/// Experiments.
#[derive(Debug, clap::Subcommand)]
pub enum ExperimentCommand {
    /// SEDA Fig. 12: Haboob vs nginx vs Apache on a SPECweb99-style file set.
    Fig12(Fig12Args),
    /// SEDA Fig. 13 and USITS'03 section 4: adaptive overload control on a CPU-bound
    /// bottleneck (load spike, degradation, classes, admission policies side by side).
    Overload(OverloadArgs),
    /// SEDA Fig. 14: the Gnutella router with a 20 ms query cost, one router thread
    /// vs the thread-pool controller (latency per type, queue, threads).
    Gnutella(crate::gnutella::Fig14Args),
    /// Gnutella router throughput (messages routed/s) against a plain forwarding
    /// loop without stages, same generator, same run.
    GnutellaThroughput(crate::gnutella::ThroughputArgs),
    /// USITS'03 Figs. 8-11, 14-15: the Arashi mail service under emulated mail readers
    /// (load, spike, per-stage vs single controller, two classes).
    Arashi(crate::arashi::ExperimentArgs),
    /// libasync-mp thesis 5.2: an SFS-like server that encrypts and MACs every
    /// response, with one color for everything vs per-connection colors, on 1 and 2
    /// workers; and the cost of colored events. Run it alone on a quiet machine
    /// (`bench/colors/run.sh` takes the benchmark lock and waits for one).
    Colors(ColorsArgs),
    /// Haboob under cycles of overload spikes and hostile clients (slowloris, slow
    /// readers, pipelining floods, oversized heads and bodies, half-closes, resets)
    /// for N minutes, sampling its RSS and descriptors; fails if memory grows
    /// without bound or a well-behaved request goes unanswered.
    Soak(SoakArgs),
    /// Replicas of `seda serve` behind HAProxy: throughput against replicas, and the
    /// fleet's p90 under a spike with one replica slowed or killed.
    ScaleOut(crate::haproxy::ScaleOutArgs),
    /// Flash (USENIX'99) sections 5-6: Haboob with its file helper (AMPED) vs
    /// blocking reads on the event loop (SPED) vs nginx with and without `aio
    /// threads`, as the share of a file set that fits in a memory cgroup shrinks; then
    /// Haboob's caches switched off one by one. Needs root (cgroup v1). About 13
    /// minutes; run it alone (`bench/flash/run.sh` takes the benchmark lock).
    Flash(FlashArgs),
    /// `seda serve --proxy` with only a p90 target in front of gunicorn (sync
    /// workers, bench/proxy/app.py), against nginx proxy_pass, nginx limit_req +
    /// limit_conn and HAProxy maxconn + timeout queue: the knee, a closed-loop spike,
    /// open loops at 1.5x/3x/10x the capacity, half the workers lost mid-run; the
    /// runtime's other admission policies; two classes. Run it alone
    /// (`bench/proxy/run.sh` takes the benchmark lock). About 100 minutes; --medium
    /// about 23; --quick about eight.
    Proxy(ProxyArgs),
}

/// Arguments of `seda experiment proxy`.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// Output directory (runs.json, table.md, SHAPE-p90.svg, SHAPE-served.svg).
    #[arg(long, default_value = "results/proxy")]
    pub out: PathBuf,
    /// The gunicorn binary (bench/proxy/install.sh installs it and prints its path).
    #[arg(long)]
    pub gunicorn: PathBuf,
    /// The directory of the WSGI app (app.py).
    #[arg(long, default_value = "bench/proxy")]
    pub app_dir: PathBuf,
    /// Eight minutes instead of 100: 2 workers, 10 ms requests, 100 ms target, 2/6/3 s
    /// phases, one repeat, 200 spike users.
    #[arg(long, conflicts_with = "medium")]
    pub quick: bool,
    /// One benchmark window (about 23 minutes): the quick run's backend and target,
    /// 2/8/3 s phases, 3 repeats, 1,000 spike users.
    #[arg(long)]
    pub medium: bool,
    /// Fronts, comma-separated: nginx-proxy, nginx-limit, haproxy, seda,
    /// seda-response-time, seda-multiclass, seda-codel, seda-gradient, seda-aimd,
    /// seda-queue-threshold. With --fronts or --shapes, every shape runs through
    /// every front [default: every shape through nginx-proxy, nginx-limit, haproxy,
    /// seda; open-3x through the other seda policies; classes-3x through
    /// nginx-limit, haproxy, seda, seda-multiclass].
    #[arg(long, value_delimiter = ',')]
    pub fronts: Option<Vec<String>>,
    /// Load shapes, comma-separated: spike, open-Fx (F times the capacity), drop,
    /// classes-Fx (a high class at 0.2x the capacity beside open-Fx) [default: see
    /// --fronts].
    #[arg(long, value_delimiter = ',')]
    pub shapes: Option<Vec<String>>,
    /// Runs of each (shape, front) [default: 3; quick: 1].
    #[arg(long)]
    pub repeats: Option<usize>,
    /// gunicorn sync workers, even [default: 4; quick: 2].
    #[arg(long)]
    pub workers: Option<u32>,
    /// CPU cost of a request, ms [default: 20; quick: 10].
    #[arg(long)]
    pub work_ms: Option<f64>,
    /// Its distribution: fixed, exp, bimodal (95 % cost N, 5 % 40 N).
    #[arg(long, default_value = "fixed")]
    pub dist: String,
    /// p90 target, ms [default: 200; quick: 100].
    #[arg(long)]
    pub target_ms: Option<f64>,
    /// Seed of the load.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The `seda` binary whose `serve --proxy` is measured [default: this one].
    #[arg(long)]
    pub seda: Option<PathBuf>,
}

/// Arguments of `seda experiment flash`.
#[derive(Debug, clap::Args)]
pub struct FlashArgs {
    /// Output directory (runs.json, table.md, throughput.svg, p90.svg).
    #[arg(long, default_value = "results/flash")]
    pub out: PathBuf,
    /// A smoke run of every path in under a minute (small sets, short points, no
    /// nginx install; runs without memory limits where cgroups are unavailable).
    #[arg(long)]
    pub quick: bool,
    /// Disk-bound file set size, MiB [default: 1024; --quick: 24].
    #[arg(long)]
    pub size_mb: Option<u64>,
    /// Percentages of the set that fit in the memory limit, comma-separated
    /// [default: 100,50,25,10; --quick: 100,25].
    #[arg(long, value_delimiter = ',')]
    pub shares: Option<Vec<f64>>,
    /// Servers of the disk-bound part: haboob-amped, haboob-sped, nginx, nginx-aio
    /// [default: all].
    #[arg(long, value_delimiter = ',')]
    pub servers: Option<Vec<String>>,
    /// Closed-loop clients [default: 64; --quick: 8].
    #[arg(long)]
    pub clients: Option<u64>,
    /// Unmeasured warm-up seconds per disk-bound point [default: 15; --quick: 1].
    #[arg(long)]
    pub warmup_s: Option<u64>,
    /// Start every disk-bound point from an empty cache (no pre-warming read of the
    /// popular part of the set).
    #[arg(long)]
    pub cold: bool,
    /// Measured seconds per disk-bound point [default: 20; --quick: 2].
    #[arg(long)]
    pub duration_s: Option<u64>,
    /// Size of the cached set of the caches part, MiB; 0 skips the part [default:
    /// 64; --quick: 5].
    #[arg(long)]
    pub cache_set_mb: Option<u64>,
    /// Keep the file sets here (reused when size and seed match) instead of a
    /// temporary directory.
    #[arg(long)]
    pub fileset_dir: Option<PathBuf>,
    /// The `seda` binary whose `serve` is measured [default: this one].
    #[arg(long)]
    pub seda: Option<PathBuf>,
}

/// Arguments of `seda experiment colors`. The defaults take about 3 minutes.
#[derive(Debug, clap::Args)]
pub struct ColorsArgs {
    /// Output directory (runs.json, table.md, throughput.svg).
    #[arg(long, default_value = "results/colors")]
    pub out: PathBuf,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Unmeasured seconds per run before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Rounds (each runs every setup once, in rotated order).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Reads outstanding per connection.
    #[arg(long, default_value_t = 4)]
    pub depth: usize,
    /// KiB per read (each response seals this much).
    #[arg(long, default_value_t = 16)]
    pub block_kib: u32,
    /// MiB of the served file.
    #[arg(long, default_value_t = 64)]
    pub file_mib: usize,
    /// Load-generator threads.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// Microseconds the generator sleeps when a poll finds nothing, batching its
    /// wake-ups (0: woken by every response). 0..=1,000,000.
    #[arg(long, default_value_t = 100)]
    pub client_dwell_us: u64,
    /// Events per handler batch in the server.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Also measure the per-stage thread model (seal on 1 and 2 threads of its own).
    #[arg(long)]
    pub per_stage: bool,
    /// The server's socket backend: auto (io_uring where the kernel offers it),
    /// epoll or uring.
    #[arg(long, default_value = "auto")]
    pub io: seda_io::IoBackend,
    /// Skip the cost-of-colors pipeline benchmark.
    #[arg(long)]
    pub no_cost: bool,
    /// Rounds of the cost-of-colors benchmark.
    #[arg(long, default_value_t = 5)]
    pub cost_rounds: usize,
    /// A seconds-long smoke version (short runs, one round, small file).
    #[arg(long)]
    pub quick: bool,
}

/// Arguments of `seda experiment overload`. The defaults take about 22 minutes.
#[derive(Debug, clap::Args)]
pub struct OverloadArgs {
    /// Output directory (runs.json, table.md, *.svg).
    #[arg(long, default_value = "results/overload")]
    pub out: PathBuf,
    /// Scenarios, comma-separated: knee, refusal, fig13, spike, degrade, classes,
    /// policies.
    #[arg(
        long,
        default_value = "knee,refusal,policies,classes",
        value_delimiter = ','
    )]
    pub scenarios: Vec<String>,
    /// Runs of each configuration (tables give the median and the spread)
    /// [default: 3; quick: 1].
    #[arg(long)]
    pub repeats: Option<usize>,
    /// High-class users in scenario classes [default: 32; quick: 8].
    #[arg(long)]
    pub high_users: Option<u64>,
    /// Only these runs of the scenarios, comma-separated ids (e.g.
    /// knee/none,spike/default).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// A small, fast version (10 ms bottleneck, 200 ms target, 3/6/3 s phases, a
    /// fifth of the users) for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Multiply every phase length by this factor.
    #[arg(long)]
    pub scale: Option<f64>,
    /// CPU work per bottleneck request, ms [default: 40; quick: 10].
    #[arg(long)]
    pub bottleneck_ms: Option<f64>,
    /// Checksum passes of that work for every server [default: calibrated once here,
    /// before the first run].
    #[arg(long)]
    pub bottleneck_passes: Option<u64>,
    /// p90 response-time target of the controllers, ms [default: 1000; quick: 200].
    #[arg(long)]
    pub target_ms: Option<f64>,
    /// Users during the spike [default: 1000; quick: 200].
    #[arg(long)]
    pub spike_users: Option<u64>,
    /// Users before and after the spike.
    #[arg(long, default_value_t = 3)]
    pub base_users: u64,
    /// Users of scenario fig13 [default: 1024; quick: 200].
    #[arg(long)]
    pub fig13_users: Option<u64>,
    /// Low-class users in scenario classes [default: 128; quick: 32].
    #[arg(long)]
    pub class_users: Option<u64>,
    /// Wait after a 503 or a failed request, ms [default: 5000; quick: 1000].
    #[arg(long)]
    pub retry_wait_ms: Option<u64>,
    /// --max-connections of the connection-limit baseline.
    #[arg(long, default_value_t = 128)]
    pub max_connections: usize,
    /// --queue-threshold of the queue-threshold policy.
    #[arg(long, default_value_t = 100)]
    pub queue_threshold: usize,
    /// Load-generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the load.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The `seda` binary whose `serve` is measured [default: this one].
    #[arg(long)]
    pub seda: Option<PathBuf>,
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

pub fn run(cmd: ExperimentCommand) -> CliResult {
    match cmd {
        ExperimentCommand::Fig12(a) => Ok(fig12_cmd(a)?),
        ExperimentCommand::Overload(a) => Ok(overload_cmd(a)?),
        ExperimentCommand::Gnutella(a) => Ok(crate::gnutella::fig14(a)?),
        ExperimentCommand::GnutellaThroughput(a) => crate::gnutella::throughput(a),
        ExperimentCommand::Arashi(a) => Ok(crate::arashi::experiment(a)?),
        ExperimentCommand::Colors(a) => Ok(colors_cmd(a)?),
        ExperimentCommand::Soak(a) => Ok(soak_cmd(a)?),
        ExperimentCommand::ScaleOut(a) => Ok(crate::haproxy::scale_out_cmd(a)?),
        ExperimentCommand::Flash(a) => Ok(flash_cmd(a)?),
        ExperimentCommand::Proxy(a) => Ok(proxy_cmd(a)?),
    }
}

fn proxy_cmd(a: ProxyArgs) -> CliResult {
    use seda_experiments::proxy::{self, Front, Group, ProxyConfig, Shape};
    let seda = match a.seda {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?,
    };
    let mut cfg = if a.quick {
        ProxyConfig::quick(a.out, seda, a.gunicorn, a.app_dir)
    } else if a.medium {
        ProxyConfig::medium(a.out, seda, a.gunicorn, a.app_dir)
    } else {
        ProxyConfig::full(a.out, seda, a.gunicorn, a.app_dir)
    };
    if a.fronts.is_some() || a.shapes.is_some() {
        let fronts = match a.fronts {
            Some(f) => f
                .iter()
                .map(|n| Front::by_name(n.trim()))
                .collect::<Result<_, _>>()?,
            None => Front::MAIN.to_vec(),
        };
        let shapes = match a.shapes {
            Some(s) => s
                .iter()
                .map(|n| Shape::by_name(n.trim()))
                .collect::<Result<_, _>>()?,
            None => Shape::ALL.to_vec(),
        };
        cfg.groups = vec![Group { shapes, fronts }];
    }
    if let Some(v) = a.repeats {
        cfg.repeats = v;
    }
    if let Some(v) = a.workers {
        cfg.workers = v;
    }
    if let Some(v) = a.work_ms {
        cfg.work_ms = v;
    }
    if let Some(v) = a.target_ms {
        cfg.target_ms = v;
    }
    cfg.dist = a.dist;
    cfg.seed = a.seed;
    let progress = Activity::new("seda experiment proxy", false);
    proxy::run(&cfg, &mut |l| progress.log(l))?;
    Ok(())
}

fn flash_cmd(a: FlashArgs) -> CliResult {
    let seda = match a.seda {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?,
    };
    let mut cfg = if a.quick {
        FlashConfig::quick(a.out, seda)
    } else {
        FlashConfig::full(a.out, seda)
    };
    let positive = |v: u64, name: &str| {
        if v == 0 {
            Err(format!("{name} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    if let Some(v) = a.size_mb {
        cfg.size_mb = positive(v, "--size-mb")?;
    }
    if let Some(v) = a.shares {
        if v.is_empty() || v.iter().any(|p| !(*p > 0.0 && *p <= 100.0)) {
            return Err("--shares must be percentages in (0, 100]".into());
        }
        let mut shares: Vec<f64> = v.iter().map(|p| p / 100.0).collect();
        shares.sort_by(|a, b| b.total_cmp(a));
        shares.dedup();
        cfg.shares = shares;
    }
    if let Some(names) = a.servers {
        cfg.servers = names
            .iter()
            .map(|n| {
                DiskServer::ALL
                    .into_iter()
                    .find(|s| s.name() == n.trim())
                    .ok_or_else(|| {
                        format!(
                            "unknown server {n:?} (known: haboob-amped, haboob-sped, nginx, nginx-aio)"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(v) = a.clients {
        cfg.clients = positive(v, "--clients")?;
    }
    if let Some(v) = a.warmup_s {
        cfg.warmup = Duration::from_secs(v);
    }
    if let Some(v) = a.duration_s {
        cfg.duration = Duration::from_secs(positive(v, "--duration-s")?);
    }
    if let Some(v) = a.cache_set_mb {
        cfg.cache_set_mb = v;
    }
    cfg.fileset_dir = a.fileset_dir;
    cfg.prewarm = !a.cold;
    let progress = Activity::new("seda experiment flash", false);
    let mut log = |line: &str| progress.log(line);
    let results = flash::run(&cfg, &mut log)?;
    progress.finish();
    println!("{}", flash::table(&results));
    if results.disk.is_empty() {
        return Err("no disk-bound run could be measured".into());
    }
    Ok(())
}

fn colors_cmd(a: ColorsArgs) -> CliResult {
    // The server logs shed connections and overlaps as warnings and errors.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let secs = |v: f64, name: &str| {
        if v.is_finite() && (0.05..=3600.0).contains(&v) {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(format!("{name} must be in 0.05..=3600 seconds, got {v}"))
        }
    };
    let mut cfg = ColorsConfig::new(a.out);
    cfg.duration = secs(a.duration_s, "--duration-s")?;
    cfg.warmup = secs(a.warmup_s, "--warmup-s")?;
    if a.rounds == 0 || a.connections == 0 || a.depth == 0 || a.client_threads == 0 {
        return Err(
            "--rounds, --connections, --depth and --client-threads must be at least 1".into(),
        );
    }
    if a.client_threads > a.connections {
        return Err("--client-threads must not exceed --connections".into());
    }
    if !(1..=16 * 1024).contains(&a.block_kib) {
        return Err(format!("--block-kib must be in 1..=16384, got {}", a.block_kib).into());
    }
    if !(1..=1024).contains(&a.file_mib) || (a.file_mib as u64) * 1024 < u64::from(a.block_kib) {
        return Err("--file-mib must be in 1..=1024 and hold at least one block".into());
    }
    cfg.rounds = a.rounds;
    cfg.connections = a.connections;
    cfg.depth = a.depth;
    cfg.block = a.block_kib * 1024;
    cfg.file_len = a.file_mib << 20;
    cfg.client_threads = a.client_threads;
    if a.client_dwell_us > 1_000_000 {
        return Err(format!(
            "--client-dwell-us must be in 0..=1000000, got {}",
            a.client_dwell_us
        )
        .into());
    }
    cfg.client_dwell = Duration::from_micros(a.client_dwell_us);
    cfg.batch = a.batch;
    cfg.per_stage = a.per_stage;
    cfg.io = a.io;
    cfg.cost = (!a.no_cost).then(|| CostConfig {
        rounds: a.cost_rounds.max(1),
        ..CostConfig::default()
    });
    if a.quick {
        cfg = cfg.quick();
    }
    let progress = Activity::new("seda experiment colors", false);
    let mut log = |line: &str| progress.log(line);
    let result = colors::run(&cfg, &mut log)?;
    progress.finish();
    eprintln!("wrote {}", cfg.out.display());
    println!(
        "speedup {:.2}x (per-connection colors on 2 workers / one color on 1 worker; thesis SFS 1.62x)",
        result.speedup
    );
    Ok(())
}

fn overload_cmd(a: OverloadArgs) -> CliResult {
    // The server is `seda serve` from the same build as this binary unless told.
    let seda = match a.seda {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?,
    };
    let mut cfg = OverloadConfig::new(a.out, seda);
    if a.quick {
        cfg = cfg.quick();
    }
    if let Some(f) = a.scale {
        if !(f.is_finite() && f > 0.0 && f <= 100.0) {
            return Err(format!("--scale must be in (0, 100], got {f}").into());
        }
        cfg = cfg.scaled(f);
    }
    cfg.scenarios = a
        .scenarios
        .iter()
        .map(|s| Scenario::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    cfg.scenarios.dedup();
    if let Some(v) = a.bottleneck_ms {
        cfg.bottleneck_ms = v;
    }
    cfg.bottleneck_passes = a.bottleneck_passes;
    if let Some(v) = a.target_ms {
        cfg.target_ms = v;
    }
    if let Some(v) = a.spike_users {
        cfg.spike_users = v;
    }
    if let Some(v) = a.fig13_users {
        cfg.fig13_users = v;
    }
    if let Some(v) = a.class_users {
        cfg.class_users = v;
    }
    if let Some(v) = a.high_users {
        cfg.high_users = v;
    }
    if let Some(v) = a.repeats {
        cfg.repeats = v;
    }
    cfg.only = a.only;
    if let Some(v) = a.retry_wait_ms {
        cfg.retry_wait = Duration::from_millis(v);
    }
    cfg.base_users = a.base_users;
    cfg.max_connections = a.max_connections;
    cfg.queue_threshold = a.queue_threshold;
    cfg.threads = a.threads;
    cfg.seed = a.seed;
    let progress = Activity::new("seda experiment overload", false);
    let mut log = |line: &str| progress.log(line);
    let results = overload::run(&cfg, &mut log)?;
    progress.finish();
    println!("{}", overload::output::table(&results));
    if results.runs.is_empty() {
        return Err("no run could be measured".into());
    }
    Ok(())
}

fn fig12_cmd(a: Fig12Args) -> CliResult {
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
    let progress = Activity::new("seda experiment fig12", false);
    let mut log = |line: &str| progress.log(line);
    let results = fig12::run(&cfg, &mut log)?;
    progress.finish();
    println!("{}", fig12::table(&results));
    Ok(())
}

/// Arguments of `seda experiment soak`. The default runs 30 minutes.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Output directory (soak.json, summary.md, rss.svg, fds.svg).
    #[arg(long, default_value = "results/soak")]
    pub out: PathBuf,
    /// Minutes to run; fractions allowed [default: 30; quick: 25 s].
    #[arg(long)]
    pub minutes: Option<f64>,
    /// A short soak for smoke tests: 3 s spikes of 60 users, 1 s timeouts, 4
    /// connections per hostile kind, about 30 s.
    #[arg(long)]
    pub quick: bool,
    /// Closed-loop users during a spike [default: 300; quick: 60].
    #[arg(long)]
    pub spike_users: Option<u64>,
    /// Connections per hostile kind per wave [default: 20; quick: 4].
    #[arg(long)]
    pub per_kind: Option<usize>,
    /// RSS the server must stay under, MiB.
    #[arg(long, default_value_t = 1024)]
    pub rss_limit_mib: u64,
    /// The `seda` binary whose `serve` is soaked [default: this one].
    #[arg(long)]
    pub seda: Option<PathBuf>,
}

fn soak_cmd(a: SoakArgs) -> CliResult {
    let seda = match a.seda {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| format!("cannot find the seda binary: {e}"))?,
    };
    let mut cfg = if a.quick {
        SoakConfig::quick(a.out, seda)
    } else {
        SoakConfig::new(a.out, seda, 30.0)
    };
    if let Some(m) = a.minutes {
        if !(m.is_finite() && m > 0.0 && m <= 7.0 * 24.0 * 60.0) {
            return Err(format!("--minutes must be in (0, 10080], got {m}").into());
        }
        cfg.duration = Duration::from_secs_f64(m * 60.0);
    }
    if let Some(u) = a.spike_users {
        cfg.spike_users = u;
    }
    if let Some(n) = a.per_kind {
        cfg.per_kind = n;
    }
    cfg.rss_limit_mib = a.rss_limit_mib;
    let progress = Activity::new("seda experiment soak", false);
    let mut log = |line: &str| progress.log(line);
    let r = soak::run(&cfg, &mut log)?;
    progress.finish();
    let v = &r.verdict;
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "RSS start {:.1} MiB, peak {:.1} MiB, end {:.1} MiB; descriptors start {}, peak {}, last calm {}",
        mib(v.rss_start_kib),
        mib(v.rss_peak_kib),
        mib(v.rss_end_kib),
        v.fds_start,
        v.fds_peak,
        v.fds_end_calm
    );
    let w = &v.well_behaved;
    let h = &v.hostile;
    println!(
        "well-behaved: {} answered, {} refused cleanly, {} unanswered; hostile: {} answered, {} refused, {} closed, {} abandoned, {} unanswered",
        w.answered,
        w.refused,
        w.unanswered,
        h.answered,
        h.refused,
        h.closed,
        h.abandoned,
        h.unanswered
    );
    eprintln!(
        "wrote {}/{{soak.json,summary.md,rss.svg,fds.svg}}",
        cfg.out.display()
    );
    if r.passed() {
        println!("soak passed ({} cycles)", r.cycles.len());
        Ok(())
    } else {
        Err(format!("soak failed: {}", v.failures.join("; ")).into())
    }
}
