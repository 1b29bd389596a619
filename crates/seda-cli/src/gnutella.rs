//! `seda gnutella`: the Gnutella 0.6 packet router (SEDA 5.2).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use crate::error::CliResult;
use crate::progress::Activity;
use seda::Runtime;
use seda_gnutella::{Gnutella, RouterConfig};

/// Arguments of `seda gnutella`.
#[derive(Debug, clap::Args)]
pub struct GnutellaArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6346")]
    pub listen: SocketAddr,
    /// Address to announce in Listen-IP and our pongs [default: the listen address].
    #[arg(long)]
    pub advertise: Option<SocketAddr>,
    /// A host to connect to (repeatable); retried with backoff while we run.
    #[arg(long = "peer")]
    pub peers: Vec<SocketAddr>,
    /// Outgoing connections to keep at least.
    #[arg(long, default_value_t = 4)]
    pub min_outgoing: usize,
    /// Most ultrapeer connections (advertised as X-Degree, at least 16).
    #[arg(long, default_value_t = 32)]
    pub max_peers: usize,
    /// Most leaves (X-Ultrapeer: False) shielded by this ultrapeer; 0 refuses leaves.
    #[arg(long, default_value_t = 32)]
    pub max_leaves: usize,
    /// Broadcast every ping, as SEDA's router did, instead of answering pings from
    /// the pong cache (the 0.6 ping/pong scheme).
    #[arg(long)]
    pub no_pong_cache: bool,
    /// Memory all received query routing tables may hold together, KiB; a table
    /// past it drops the peer that sent it.
    #[arg(long, default_value_t = 32 * 1024)]
    pub qrp_memory_kb: usize,
    /// Incoming handshakes per minute from one address before it is banned (429,
    /// Retry-After); 0: no limit.
    #[arg(long, default_value_t = 2)]
    pub handshakes_per_minute: u32,
    /// Incoming handshakes per minute from one /24 (IPv6: /64); 0: no limit.
    #[arg(long, default_value_t = 8)]
    pub handshakes_per_minute_net: u32,
    /// Apply the handshake rate limit to loopback addresses too (exempt by default:
    /// local tools and the load generator open many connections at once).
    #[arg(long)]
    pub rate_limit_loopback: bool,
    /// Largest TTL + hops of a forwarded broadcast (X-Max-TTL).
    #[arg(long, default_value_t = 4)]
    pub max_ttl: u8,
    /// Do not offer or accept deflate on connections.
    #[arg(long)]
    pub no_deflate: bool,
    /// Largest payload accepted, bytes; a peer sending more gets a Bye.
    #[arg(long, default_value_t = 65_536)]
    pub max_payload: u32,
    /// Our outgoing queue per connection, KiB (value-ordered dropping past it).
    #[arg(long, default_value_t = 1024)]
    pub out_queue_kb: usize,
    /// Close a peer whose outgoing queue stays over its threshold this long, ms.
    #[arg(long, default_value_t = 5000)]
    pub slow_grace_ms: u64,
    /// Seconds between reconnects to a host (doubles per failure, up to 600 s).
    #[arg(long, default_value_t = 30.0)]
    pub backoff_s: f64,
    /// Entries of each routing table.
    #[arg(long, default_value_t = 262_144)]
    pub route_entries: usize,
    /// Seconds a routing entry is kept at most.
    #[arg(long, default_value_t = 600.0)]
    pub route_ttl_s: f64,
    /// Artificial cost per query in the router stage, ms (SEDA Fig. 14 used 20).
    #[arg(long)]
    pub query_delay_ms: Option<f64>,
    /// Router stage threads: N (fixed), or MIN-MAX with --pool-controller. Each
    /// connection's messages are routed in order whatever the count.
    #[arg(long, default_value = "2")]
    pub router_threads: String,
    /// Frame and route each read on the socket-loop thread that read it whenever
    /// the next stage's queue is empty (a thread-pool domain with inline handoff),
    /// instead of a queue between the loops, the server and the router.
    #[arg(long)]
    pub inline: bool,
    /// Let the thread-pool controller size the router stage (SEDA 3.4).
    #[arg(long)]
    pub pool_controller: bool,
    /// Router queue length above which the controller adds a thread.
    #[arg(long, default_value_t = 1000)]
    pub queue_threshold: usize,
    /// Admission on the router queue: refuse (drop, count) reads while it holds
    /// this many events (SEDA 5.2.3's thresholding).
    #[arg(long, conflicts_with = "router_red")]
    pub router_queue_limit: Option<usize>,
    /// Admission on the router queue: RED between MIN and MAX queued events, e.g.
    /// 1000,5000 (drop probability up to 0.5 at MAX).
    #[arg(long)]
    pub router_red: Option<String>,
    /// The router queue's bound in time, ms: the pings and queries of a read that
    /// waited longer for the router are dropped unrouted (`router_late`); 0: no
    /// bound.
    #[arg(long, default_value_t = 5.0)]
    pub router_max_delay_ms: f64,
    /// Back-pressure: a read that finds this many reads queued at the router
    /// pauses its connection until the queue is down to a quarter of it (TCP then
    /// slows the peer instead of the router shedding late reads); 0: never (the
    /// default: shedding measured faster, at lower latency).
    #[arg(long, default_value_t = 0)]
    pub pause_reads_at: usize,
    /// Socket event loops [default: one per core].
    #[arg(long)]
    pub event_loops: Option<usize>,
    /// Socket backend: auto (io_uring where the kernel offers it), epoll or uring.
    #[arg(long, default_value = "auto")]
    pub io: seda_io::IoBackend,
    /// Admin listener (`/_seda/stats` with a `gnutella` section, graph, metrics):
    /// an address, or `none` [default: a free loopback port].
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// Print the router's counters as one JSON line every this many seconds.
    #[arg(long)]
    pub stats_every_s: Option<f64>,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration_s: Option<f64>,
}

/// Parses `N` or `MIN-MAX`.
pub fn parse_threads(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--router-threads: expected N or MIN-MAX, got {s:?}");
    match s.split_once('-') {
        Some((a, b)) => Ok((
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        )),
        None => {
            let n = s.trim().parse().map_err(|_| bad())?;
            Ok((n, n))
        }
    }
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|_| format!("{name}: not a duration: {v}"))
}

/// The router configuration the arguments describe.
pub fn config(a: &GnutellaArgs) -> Result<RouterConfig, String> {
    let mut cfg = RouterConfig::default()
        .with_listen(a.listen)
        .with_advertise(a.advertise)
        .with_seeds(a.peers.clone())
        .with_min_outgoing(a.min_outgoing)
        .with_max_peers(a.max_peers)
        .with_max_leaves(a.max_leaves)
        .with_deflate(!a.no_deflate)
        .with_max_payload(a.max_payload)
        .with_out_queue_bytes(a.out_queue_kb.saturating_mul(1024))
        .with_slow_grace(Duration::from_millis(a.slow_grace_ms))
        .with_backoff(secs("--backoff-s", a.backoff_s)?)
        .with_query_delay(
            a.query_delay_ms
                .map(|ms| secs("--query-delay-ms", ms / 1000.0))
                .transpose()?,
        )
        .with_router_threads(parse_threads(&a.router_threads)?)
        .with_inline(a.inline)
        .with_router_pool_controller(a.pool_controller)
        .with_router_queue_threshold(a.queue_threshold)
        .with_max_queue_delay(if a.router_max_delay_ms == 0.0 {
            None
        } else {
            Some(secs(
                "--router-max-delay-ms",
                a.router_max_delay_ms / 1000.0,
            )?)
        })
        .with_event_loops(a.event_loops)
        .with_io(a.io)
        .with_pause_reads_at(a.pause_reads_at);
    cfg.max_backoff = cfg.max_backoff.max(cfg.backoff);
    if a.no_pong_cache {
        cfg.pong_cache = None;
    }
    cfg.qrp.memory = a.qrp_memory_kb.saturating_mul(1024);
    cfg.handshake_limit.per_addr = a.handshakes_per_minute;
    cfg.handshake_limit.per_net = a.handshakes_per_minute_net;
    cfg.handshake_limit.exempt_loopback = !a.rate_limit_loopback;
    if let Some(n) = a.router_queue_limit {
        cfg.router_admission = seda_gnutella::RouterAdmission::QueueThreshold(n);
    }
    if let Some(red) = &a.router_red {
        let bad = || format!("--router-red: expected MIN,MAX, got {red:?}");
        let (min, max) = red.split_once(',').ok_or_else(bad)?;
        cfg.router_admission = seda_gnutella::RouterAdmission::Red {
            min: min.trim().parse().map_err(|_| bad())?,
            max: max.trim().parse().map_err(|_| bad())?,
            max_p: 0.5,
        };
    }
    cfg.routing.max_ttl = a.max_ttl;
    cfg.routing.table_entries = a.route_entries;
    cfg.routing.table_ttl = secs("--route-ttl-s", a.route_ttl_s)?;
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Runs the router until SIGINT, SIGTERM or `--duration-s`.
pub fn run(a: GnutellaArgs) -> CliResult {
    let cfg = config(&a)?;
    // Connection events on stderr (RUST_LOG=debug adds every handshake block).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let stats_every = a
        .stats_every_s
        .map(|s| secs("--stats-every-s", s))
        .transpose()?;
    let duration = a.duration_s.map(|s| secs("--duration-s", s)).transpose()?;
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let handle = signals.handle();
    let admin_addr = match a.admin_listen.as_deref() {
        None => Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        Some("none") => None,
        Some(s) => Some(s.parse::<SocketAddr>().map_err(|_| {
            format!("--admin-listen must be an address (e.g. 127.0.0.1:9090) or `none`, got `{s}`")
        })?),
    };
    let rt = Runtime::builder().name("gnutella").build();
    let router = Gnutella::start(&rt, cfg).map_err(|e| e.to_string())?;
    let admin = match admin_addr {
        Some(addr) => {
            let (s1, s2) = (router.stats_handle(), router.stats_handle());
            let server = seda_http::AdminServer::builder(&rt)
                .section("gnutella", move || s1.stats())
                .metrics(move |out| s2.stats().write_prometheus(out))
                .start(addr)
                .map_err(|e| format!("admin listener: {e}"))?;
            Some(server)
        }
        None => None,
    };
    rt.start().map_err(|e| e.to_string())?;
    announce!("gnutella router on {}", router.local_addr());
    if let Some(a) = &admin {
        announce!("admin on http://{}/_seda/stats", a.local_addr());
        announce!("dashboard at http://{}/_seda/", a.local_addr());
    }
    let _ = std::io::stdout().flush();
    eprintln!("seda gnutella: routing; Ctrl-C to stop");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let stop = stop.clone();
        let mut signals = signals;
        std::thread::spawn(move || {
            if signals.forever().next().is_some() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let start = std::time::Instant::now();
    let mut next_stats = stats_every.map(|d| start + d);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if let (Some(at), Some(every)) = (next_stats, stats_every)
            && std::time::Instant::now() >= at
        {
            let s = serde_json::to_string(&router.stats()).map_err(|e| e.to_string())?;
            println!("{s}");
            let _ = std::io::stdout().flush();
            next_stats = Some(at + every);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.close();
    let _ = waiter.join();
    eprintln!("seda gnutella: shutting down");
    drop(admin);
    router.stop();
    let report = rt.shutdown(Duration::from_secs(2));
    let s = router.stats();
    eprintln!(
        "seda gnutella: stopped; routed {} messages, dropped {}, events unfinished: {}",
        seda_gnutella::GnutellaStats::total(&s.routed),
        seda_gnutella::GnutellaStats::total(&s.dropped),
        report.unfinished()
    );
    Ok(())
}

/// Arguments of `seda load gnutella`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The router, e.g. 127.0.0.1:6346 (loopback only).
    #[arg(long)]
    pub router: SocketAddr,
    /// Simulated peers (the router's --max-peers must allow them).
    #[arg(long, default_value_t = 8)]
    pub peers: usize,
    /// Total messages per second over all peers; 0: as fast as possible.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Run length, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Message mix, e.g. ping=85,query=15 (SEDA 5.2.3's 15 % queries).
    #[arg(long, default_value = "ping=85,query=15")]
    pub mix: String,
    /// TTL of generated pings and queries.
    #[arg(long, default_value_t = 2)]
    pub ttl: u8,
    /// Query payload bytes.
    #[arg(long, default_value_t = 32)]
    pub query_bytes: usize,
    /// Share of received queries answered with a query hit.
    #[arg(long, default_value_t = 0.1)]
    pub hit_fraction: f64,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the mix.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Of the peers, leaves (X-Ultrapeer: False): each sends a query routing table
    /// of --leaf-words words and gets only the queries it matches.
    #[arg(long, default_value_t = 0)]
    pub leaves: usize,
    /// Words queries are drawn from when there are leaves.
    #[arg(long, default_value_t = 1000)]
    pub vocabulary: usize,
    /// Words each leaf shares.
    #[arg(long, default_value_t = 100)]
    pub leaf_words: usize,
    /// Words per query when there are leaves.
    #[arg(long, default_value_t = 1)]
    pub query_words: usize,
    /// Write the report as JSON here (else a summary on stdout).
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// Runs `seda load gnutella`.
pub fn load(a: LoadArgs) -> CliResult {
    let cfg = seda_load::gnutella::LoadConfig::default()
        .with_router(a.router)
        .with_peers(a.peers)
        .with_threads(a.threads)
        .with_rate((a.rate > 0.0).then_some(a.rate))
        .with_duration(secs("--duration-s", a.duration_s)?)
        .with_mix(seda_load::gnutella::Mix::parse(&a.mix)?)
        .with_ttl(a.ttl)
        .with_query_bytes(a.query_bytes)
        .with_hit_fraction(a.hit_fraction)
        .with_seed(a.seed)
        .with_leaves(a.leaves)
        .with_vocabulary(a.vocabulary)
        .with_leaf_words(a.leaf_words)
        .with_query_words(a.query_words);
    let report = seda_load::gnutella::run(&cfg)?;
    print!("{}", report.text());
    if let Some(path) = a.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Arguments of `seda experiment gnutella` (SEDA Fig. 14). Defaults: 8 runs of
/// 40 s, about 6 minutes.
#[derive(Debug, clap::Args)]
pub struct Fig14Args {
    /// Output directory (runs.json, table.md, *.svg).
    #[arg(long, default_value = "results/gnutella")]
    pub out: std::path::PathBuf,
    /// Offered loads, packets/s, comma-separated.
    #[arg(long, default_value = "100,200,400,1000", value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Seconds per run.
    #[arg(long, default_value_t = 40.0)]
    pub duration_s: f64,
    /// Seconds at the start of each run left out of the latency means.
    #[arg(long, default_value_t = 10.0)]
    pub warmup_s: f64,
    /// Cost per query in the router stage, ms.
    #[arg(long, default_value_t = 20.0)]
    pub query_delay_ms: f64,
    /// Simulated peers.
    #[arg(long, default_value_t = 4)]
    pub peers: usize,
    /// Router queue length above which the controller adds a thread.
    #[arg(long, default_value_t = 100)]
    pub queue_threshold: usize,
    /// Of the peers, leaves with query routing tables: the router runs as a full
    /// ultrapeer (pong cache, QRP) and the table reports what they saved.
    #[arg(long, default_value_t = 0)]
    pub leaves: usize,
}

/// Runs `seda experiment gnutella`.
pub fn fig14(a: Fig14Args) -> CliResult {
    use seda_experiments::gnutella::fig14 as experiment;
    let cfg = experiment::Fig14Config {
        rates: a.rates,
        duration: secs("--duration-s", a.duration_s)?,
        warmup: secs("--warmup-s", a.warmup_s)?,
        query_delay: secs("--query-delay-ms", a.query_delay_ms / 1000.0)?,
        peers: a.peers,
        queue_threshold: a.queue_threshold,
        leaves: a.leaves,
        ..experiment::Fig14Config::default()
    };
    if cfg.leaves >= cfg.peers {
        return Err("--leaves must leave at least one ultrapeer among --peers".into());
    }
    if cfg.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return Err("--rates: every rate must be positive".into());
    }
    let progress = Activity::new("seda experiment gnutella", false);
    let r = experiment::run(&cfg, &mut |l| progress.log(l))?;
    progress.finish();
    experiment::write_outputs(&a.out, &r)?;
    print!("{}", experiment::table(&r));
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// Arguments of `seda experiment gnutella-throughput`.
#[derive(Debug, clap::Args)]
pub struct ThroughputArgs {
    /// Output directory (throughput.json, throughput.md).
    #[arg(long, default_value = "results/gnutella")]
    pub out: std::path::PathBuf,
    /// Simulated peers.
    #[arg(long, default_value_t = 4)]
    pub peers: usize,
    /// Seconds per round.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Rounds of each router, alternating.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Message mix.
    #[arg(long, default_value = "ping=85,query=15")]
    pub mix: String,
    /// Of the peers, leaves with query routing tables: the router runs as an
    /// ultrapeer (pong cache, QRP) and alone, reporting what QRP filtered and what
    /// the pong cache saved (the plain loop speaks neither).
    #[arg(long, default_value_t = 0)]
    pub leaves: usize,
    /// Words per query when there are leaves.
    #[arg(long, default_value_t = 1)]
    pub query_words: usize,
    /// Also run, each round, the staged router with inline handoff between the
    /// socket loops, the server and the router (`seda gnutella --inline`).
    #[arg(long)]
    pub inline_too: bool,
    /// Router stage threads of the staged router.
    #[arg(long, default_value_t = 2)]
    pub router_threads: usize,
    /// The staged router's queue bound in time, ms (0: none); see `seda gnutella
    /// --router-max-delay-ms`.
    #[arg(long, default_value_t = 5.0)]
    pub router_max_delay_ms: f64,
    /// Router queue length (reads) at which the staged router pauses reading a
    /// connection until its queue is down to a quarter of it (0: never); see
    /// `seda gnutella --pause-reads-at`.
    #[arg(long, default_value_t = 0)]
    pub pause_reads_at: usize,
    /// Socket event loops of the staged router [default: one per core].
    #[arg(long)]
    pub event_loops: Option<usize>,
}

/// Runs `seda experiment gnutella-throughput`.
pub fn throughput(a: ThroughputArgs) -> CliResult {
    use seda_experiments::gnutella::throughput as bench;
    let cfg = bench::ThroughputConfig {
        peers: a.peers,
        duration: secs("--duration-s", a.duration_s)?,
        rounds: a.rounds.max(1),
        threads: a.threads,
        mix: seda_load::gnutella::Mix::parse(&a.mix)?,
        leaves: a.leaves,
        query_words: a.query_words,
        inline_too: a.inline_too,
        router_threads: a.router_threads.max(1),
        max_queue_delay: if a.router_max_delay_ms == 0.0 {
            None
        } else {
            Some(secs(
                "--router-max-delay-ms",
                a.router_max_delay_ms / 1000.0,
            )?)
        },
        pause_reads_at: a.pause_reads_at,
        event_loops: a.event_loops,
    };
    if cfg.leaves >= cfg.peers {
        return Err("--leaves must leave at least one ultrapeer among --peers".into());
    }
    let load = seda_experiments::harness::load_average_text();
    let progress = Activity::new("seda experiment gnutella-throughput", false);
    let r = bench::throughput(&cfg, &mut |l| progress.log(l))?;
    progress.finish();
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let text = bench::table(&r, &cfg, load.trim());
    std::fs::write(a.out.join("throughput.md"), &text).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("throughput.json"), json).map_err(|e| e.to_string())?;
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_threads_parse() {
        assert_eq!(parse_threads("3"), Ok((3, 3)));
        assert_eq!(parse_threads("1-8"), Ok((1, 8)));
        assert!(parse_threads("x").is_err());
        assert!(parse_threads("1-").is_err());
    }
}
