//! libasync-mp's colors on seda (Zeldovich's thesis, chapters 4-5): the SFS
//! experiment, and the price of a colored event.
//!
//! [`server`] is a staged file server shaped like SFS (every response encrypted and
//! MACed with the connection's key, per-connection state guarded only by colors, a
//! lease table shared by all connections). [`run`] measures it with one color for
//! everything (libasync's default: the single-threaded baseline) and with
//! per-connection colors, on 1 and 2 shared workers (and on per-stage pools if
//! asked), round after round with the order rotated, using the [`client`] on the
//! same machine. The reported `speedup` is the median over rounds of
//! *per-connection colors on 2 workers / one color on 1 worker* within the round
//! (the thesis: 1.62x for SFS on 2 CPUs, Fig. 5-5). [`cost`] prices colored events
//! on a bare pipeline.
//!
//! Beside it, `cpu_speedup` is the same ratio computed from per-thread CPU time:
//! responses per CPU-second of the *busiest* server thread, parallel over baseline.
//! It is the speedup were each server thread on a core of its own (the thesis's
//! server had its CPUs to itself and its clients on other machines); on our shared
//! two cores the measured `speedup` falls short of it by what the generator, the
//! kernel's loopback work and other processes take.
//!
//! # Honesty on a shared two-core machine
//! The generator runs on the server's cores. It is kept cheap (one thread, bodies
//! discarded in the kernel), and every run reports, beside throughput, the CPU of
//! the server's threads, of the generator's, and of everything else on the machine
//! (other processes), in cores. A run whose "others" column is high was disturbed.

pub mod client;
pub mod cost;
pub mod cpu;
pub mod proto;
pub mod server;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use seda::ThreadModel;
use seda_io::IoBackend;
use serde::{Deserialize, Serialize};

use self::client::{CLIENT_THREAD, ClientConfig, ClientReport, DEFAULT_DWELL, LoadClient};
use self::cost::{CostConfig, CostRow, median};
use self::cpu::{CpuCores, CpuSample};
use self::server::{Coloring, ColorsServer, ServerConfig, ServerStats};
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::{date_utc, machine_summary, write_runs_and_table};

/// The thesis's SFS figures (Fig. 5-5 and section 5.2.2), for the comparison.
pub const THESIS_SFS_SPEEDUP_2CPU: f64 = 1.62;
/// The parallelised SFS on one CPU relative to the original server.
pub const THESIS_SFS_1CPU_RATIO: f64 = 0.95;

/// One server configuration measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setup {
    /// How events are colored.
    pub coloring: Coloring,
    /// Thread model of the application stages.
    #[serde(with = "model_str")]
    pub model: ThreadModel,
    /// Shared workers, or `seal`'s threads on the per-stage model.
    pub workers: usize,
}

mod model_str {
    use seda::ThreadModel;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &ThreadModel, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ThreadModel, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Setup {
    const fn new(coloring: Coloring, model: ThreadModel, workers: usize) -> Self {
        Setup {
            coloring,
            model,
            workers,
        }
    }

    /// "one color, shared, 1 worker", etc.
    pub fn label(&self) -> String {
        let c = match self.coloring {
            Coloring::Single => "one color",
            Coloring::PerConnection => "per-connection colors",
        };
        match self.model {
            ThreadModel::PerStage => format!("{c}, per-stage, seal x{}", self.workers),
            model => format!(
                "{c}, {}, {} worker{}",
                model.as_str(),
                self.workers,
                if self.workers == 1 { "" } else { "s" }
            ),
        }
    }
}

/// The single-threaded baseline.
pub const BASELINE: Setup = Setup::new(Coloring::Single, ThreadModel::Shared, 1);
/// What `speedup` measures against the baseline.
pub const PARALLEL: Setup = Setup::new(Coloring::PerConnection, ThreadModel::Shared, 2);

/// What to run.
#[derive(Clone, Debug)]
pub struct ColorsConfig {
    /// Where runs.json, table.md and throughput.svg go.
    pub out: PathBuf,
    /// Measured time per run.
    pub duration: Duration,
    /// Unmeasured time per run after the generator starts.
    pub warmup: Duration,
    /// Rounds; each runs every setup once.
    pub rounds: usize,
    /// Concurrent client connections.
    pub connections: usize,
    /// Requests outstanding per connection.
    pub depth: usize,
    /// Bytes per read.
    pub block: u32,
    /// Bytes of the served file.
    pub file_len: usize,
    /// Generator threads.
    pub client_threads: usize,
    /// The generator's dwell ([`ClientConfig::dwell`]).
    pub client_dwell: Duration,
    /// Events per handler batch in the server.
    pub batch: usize,
    /// Also measure the per-stage thread model (`seal` with 1 and 2 threads).
    pub per_stage: bool,
    /// The server's socket backend. Default `Auto`.
    pub io: IoBackend,
    /// The cost-of-colors benchmark, if wanted.
    pub cost: Option<CostConfig>,
}

impl ColorsConfig {
    /// The defaults: 3 rounds of 10 s runs, 16 connections x 4 reads of 16 KiB.
    pub fn new(out: PathBuf) -> Self {
        ColorsConfig {
            out,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            rounds: 3,
            connections: 16,
            depth: 4,
            block: 16 * 1024,
            file_len: 64 << 20,
            client_threads: 1,
            client_dwell: DEFAULT_DWELL,
            batch: 4,
            per_stage: false,
            io: IoBackend::Auto,
            cost: Some(CostConfig::default()),
        }
    }

    /// A seconds-long version for smoke tests.
    pub fn quick(mut self) -> Self {
        self.duration = Duration::from_millis(400);
        self.warmup = Duration::from_millis(200);
        self.rounds = 1;
        self.connections = 4;
        self.file_len = 1 << 20;
        self.cost = Some(CostConfig {
            events: 2000,
            rounds: 1,
            stages: vec![1],
            workers: 2,
        });
        self
    }

    fn setups(&self) -> Vec<Setup> {
        let mut v = vec![
            BASELINE,
            Setup::new(Coloring::Single, ThreadModel::Shared, 2),
            Setup::new(Coloring::PerConnection, ThreadModel::Shared, 1),
            PARALLEL,
        ];
        if self.per_stage {
            v.push(Setup::new(Coloring::Single, ThreadModel::PerStage, 2));
            v.push(Setup::new(
                Coloring::PerConnection,
                ThreadModel::PerStage,
                1,
            ));
            v.push(Setup::new(
                Coloring::PerConnection,
                ThreadModel::PerStage,
                2,
            ));
        }
        v
    }
}

/// One measured run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// What ran.
    pub setup: Setup,
    /// Its label.
    pub label: String,
    /// Round number, from 0.
    pub round: usize,
    /// Responses per second in the measured window.
    pub responses_per_s: f64,
    /// Plaintext MiB per second sealed and delivered.
    pub mib_per_s: f64,
    /// CPU over the window, in cores.
    pub cpu: CpuCores,
    /// The server's socket backend (`epoll` or `uring`).
    #[serde(default)]
    pub io: String,
    /// Server CPU per response, microseconds.
    pub server_cpu_us_per_response: f64,
    /// The server thread that used the most CPU in the window.
    pub busiest_thread: String,
    /// Its CPU per response, microseconds: the server cannot answer faster than one
    /// response per this long, whatever the other threads do.
    pub busiest_thread_us_per_response: f64,
    /// 1-minute load average when the run started.
    pub load1: f64,
    /// The generator's counts over the whole run.
    pub client: ClientReport,
    /// The server's counters at the end.
    pub server: ServerStats,
}

/// One setup over all rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetupSummary {
    /// What ran.
    pub setup: Setup,
    /// Its label.
    pub label: String,
    /// Median responses per second.
    pub responses_per_s: f64,
    /// Median MiB per second.
    pub mib_per_s: f64,
    /// Lowest and highest MiB per second.
    pub mib_per_s_range: (f64, f64),
    /// Median over rounds of this setup / the baseline in the same round.
    pub vs_baseline: f64,
    /// Median CPU in cores.
    pub cpu: CpuCores,
    /// Median server CPU per response, microseconds.
    pub server_cpu_us_per_response: f64,
    /// Median CPU per response of the busiest server thread, microseconds.
    pub busiest_thread_us_per_response: f64,
}

/// Everything the experiment measured (runs.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColorsResult {
    /// "colors".
    pub experiment: String,
    /// UTC date.
    pub date: String,
    /// Cores, memory, kernel.
    pub machine: String,
    /// 1-minute load average at start and at end.
    pub load1: (f64, f64),
    /// The workload.
    pub connections: usize,
    /// Requests outstanding per connection.
    pub depth: usize,
    /// Bytes per read.
    pub block: u32,
    /// The generator's dwell in microseconds (0: woken by every arrival; runs
    /// before 2026-11-27 13:00 UTC had none).
    #[serde(default)]
    pub client_dwell_us: f64,
    /// The server's socket backend (as run: `epoll` or `uring`).
    #[serde(default)]
    pub io: String,
    /// Measured seconds per run.
    pub duration_s: f64,
    /// Rounds.
    pub rounds: usize,
    /// Per-connection colors on 2 shared workers / one color on 1 worker: median
    /// over rounds of the within-round ratio.
    pub speedup: f64,
    /// The same ratio in each round.
    pub speedup_by_round: Vec<f64>,
    /// The speedup from per-thread CPU time: the baseline's busiest-thread CPU per
    /// response over the parallel setup's, median over rounds. What `speedup` would
    /// be with a core per server thread.
    pub cpu_speedup: f64,
    /// The same ratio in each round.
    pub cpu_speedup_by_round: Vec<f64>,
    /// The thesis's figure for SFS on 2 CPUs.
    pub thesis_speedup: f64,
    /// Per-connection colors on 1 worker / one color on 1 worker (the thesis: 0.95).
    pub per_connection_1_worker_ratio: f64,
    /// CPU time to seal one response (one thread, no I/O), microseconds.
    pub seal_us_per_response: f64,
    /// Sealing's share of the baseline server's CPU per response (the thesis: SFS
    /// spent 75% in encryption, 65% once parallelised).
    pub encryption_share: f64,
    /// Amdahl's bound on 2 workers if only sealing runs in parallel:
    /// 1 / ((1 - share) + share / 2).
    pub amdahl_2_workers: f64,
    /// Per setup.
    pub setups: Vec<SetupSummary>,
    /// The cost of colors on a bare pipeline.
    pub cost: Vec<CostRow>,
    /// Every run.
    pub runs: Vec<Run>,
}

/// Runs the experiment and writes runs.json, table.md and throughput.svg to
/// `cfg.out`.
pub fn run(cfg: &ColorsConfig, log: &mut dyn FnMut(&str)) -> Result<ColorsResult, ExperimentError> {
    if cfg.rounds == 0 {
        return Err(ExperimentError::run("rounds must be at least 1"));
    }
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let load_start = load1_now();
    let seal_us = seal_cost(cfg.block);
    log(&format!(
        "sealing {} bytes takes {seal_us:.1} us",
        cfg.block
    ));
    let setups = cfg.setups();
    let mut runs = Vec::new();
    for round in 0..cfg.rounds {
        for k in 0..setups.len() {
            let setup = setups[(k + round) % setups.len()];
            let r = run_one(cfg, setup, round)?;
            log(&format!(
                "round {round}: {}: {:.0} responses/s, {:.1} MiB/s, CPU server {:.2} client \
                 {:.2} others {:.2} cores, load {:.1}",
                r.label,
                r.responses_per_s,
                r.mib_per_s,
                r.cpu.server,
                r.cpu.client,
                r.cpu.others,
                r.load1
            ));
            runs.push(r);
        }
    }
    let cost = match &cfg.cost {
        Some(c) => cost::run(c, log)?,
        None => Vec::new(),
    };
    let result = summarise(cfg, runs, cost, seal_us, (load_start, load1_now()));
    write_runs_and_table(&cfg.out, &result, table(&result))?;
    chart(cfg, &result)?;
    Ok(result)
}

/// Time to seal one `block`-byte response on this thread, us: the fastest of 21
/// batches of about 1 MiB each, so a batch that another process preempted (the
/// machine is shared) does not count.
fn seal_cost(block: u32) -> f64 {
    use chacha20poly1305::ChaCha20Poly1305;
    use chacha20poly1305::aead::KeyInit;
    let cipher = ChaCha20Poly1305::new(&[9u8; 32].into());
    let text = proto::file_content(block as usize, 3);
    let per_batch = (1 << 20) / (block as usize).max(1) + 1;
    (0..21u64)
        .map(|b| {
            let t = Instant::now();
            for i in 0..per_batch as u64 {
                std::hint::black_box(proto::seal(&cipher, b * 1_000_000 + i, 0, &text));
            }
            t.elapsed().as_secs_f64() * 1e6 / per_batch as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn run_one(cfg: &ColorsConfig, setup: Setup, round: usize) -> Result<Run, ExperimentError> {
    let server = ColorsServer::start(ServerConfig {
        coloring: setup.coloring,
        thread_model: setup.model,
        workers: setup.workers,
        file_len: cfg.file_len,
        max_block: cfg.block.max(1),
        batch: cfg.batch,
        io: cfg.io,
        ..ServerConfig::default()
    })
    .map_err(|e| ExperimentError::step("cannot start the server", e))?;
    let io = server.backend().as_str().to_owned();
    let load = load1_now();
    let client = LoadClient::start(&ClientConfig {
        addr: server.local_addr(),
        connections: cfg.connections,
        depth: cfg.depth,
        block: cfg.block,
        file_len: cfg.file_len as u64,
        threads: cfg.client_threads,
        responses_per_connection: None,
        verify: None,
        seed: round as u64 + 1,
        dwell: cfg.client_dwell,
    })?;
    std::thread::sleep(cfg.warmup);
    let (c0, cpu0, t0) = (
        client.report(),
        CpuSample::now(CLIENT_THREAD),
        Instant::now(),
    );
    std::thread::sleep(cfg.duration);
    let (c1, cpu1, secs) = (
        client.report(),
        CpuSample::now(CLIENT_THREAD),
        t0.elapsed().as_secs_f64(),
    );
    let report = client.stop();
    let stats = server.stop();
    if let Some(e) = &report.first_error {
        return Err(ExperimentError::run(format!(
            "{}: the load generator failed: {e} (server: {stats:?})",
            setup.label()
        )));
    }
    if stats.overlaps > 0 {
        return Err(ExperimentError::run(format!(
            "{}: {} handlers entered color-guarded state at once",
            setup.label(),
            stats.overlaps
        )));
    }
    let responses = (c1.responses - c0.responses) as f64;
    let cpu = cpu1.cores_since(&cpu0, secs);
    let (busiest_thread, busiest_secs) = cpu1.busiest_since(&cpu0);
    let per_response = |cpu_secs: f64| {
        if responses > 0.0 {
            cpu_secs / responses * 1e6
        } else {
            0.0
        }
    };
    Ok(Run {
        setup,
        label: setup.label(),
        round,
        responses_per_s: responses / secs,
        mib_per_s: (c1.bytes - c0.bytes) as f64 / secs / (1024.0 * 1024.0),
        server_cpu_us_per_response: per_response(cpu.server * secs),
        busiest_thread,
        busiest_thread_us_per_response: per_response(busiest_secs),
        cpu,
        io,
        load1: load,
        client: report,
        server: stats,
    })
}

/// `a`'s throughput / `b`'s in the same round, for each round.
fn ratio_by_round(runs: &[Run], a: Setup, b: Setup) -> Vec<f64> {
    value_ratio_by_round(runs, a, b, |r| Some(r.responses_per_s))
}

/// `f(num) / f(den)` in the same round, for each round where both are known.
fn value_ratio_by_round(
    runs: &[Run],
    num: Setup,
    den: Setup,
    f: impl Fn(&Run) -> Option<f64>,
) -> Vec<f64> {
    let rounds = runs.iter().map(|r| r.round).max().map_or(0, |m| m + 1);
    (0..rounds)
        .filter_map(|round| {
            let of = |s: Setup| f(runs.iter().find(|r| r.round == round && r.setup == s)?);
            let d = of(den).filter(|d| *d > 0.0)?;
            Some(of(num)? / d)
        })
        .collect()
}

fn summarise(
    cfg: &ColorsConfig,
    runs: Vec<Run>,
    cost: Vec<CostRow>,
    seal_us: f64,
    load: (f64, f64),
) -> ColorsResult {
    let setups = cfg
        .setups()
        .into_iter()
        .map(|s| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.setup == s).collect();
            let med = |f: &dyn Fn(&Run) -> f64| median(mine.iter().map(|r| f(r)).collect());
            let mib: Vec<f64> = mine.iter().map(|r| r.mib_per_s).collect();
            SetupSummary {
                setup: s,
                label: s.label(),
                responses_per_s: med(&|r| r.responses_per_s),
                mib_per_s: med(&|r| r.mib_per_s),
                mib_per_s_range: (
                    mib.iter().copied().fold(f64::INFINITY, f64::min),
                    mib.iter().copied().fold(0.0, f64::max),
                ),
                vs_baseline: median(ratio_by_round(&runs, s, BASELINE)),
                cpu: CpuCores {
                    server: med(&|r| r.cpu.server),
                    client: med(&|r| r.cpu.client),
                    machine: med(&|r| r.cpu.machine),
                    others: med(&|r| r.cpu.others),
                },
                server_cpu_us_per_response: med(&|r| r.server_cpu_us_per_response),
                busiest_thread_us_per_response: med(&|r| r.busiest_thread_us_per_response),
            }
        })
        .collect();
    let speedup_by_round = ratio_by_round(&runs, PARALLEL, BASELINE);
    let cpu_speedup_by_round = value_ratio_by_round(&runs, BASELINE, PARALLEL, |r| {
        Some(r.busiest_thread_us_per_response)
    });
    let share = median(
        runs.iter()
            .filter(|r| r.setup == BASELINE && r.server_cpu_us_per_response > 0.0)
            .map(|r| (seal_us / r.server_cpu_us_per_response).min(1.0))
            .collect(),
    );
    ColorsResult {
        experiment: "colors".to_owned(),
        date: date_utc(),
        machine: machine_summary(),
        load1: load,
        connections: cfg.connections,
        depth: cfg.depth,
        block: cfg.block,
        client_dwell_us: cfg.client_dwell.as_secs_f64() * 1e6,
        io: runs.first().map_or_else(String::new, |r| r.io.clone()),
        duration_s: cfg.duration.as_secs_f64(),
        rounds: cfg.rounds,
        speedup: median(speedup_by_round.clone()),
        speedup_by_round,
        cpu_speedup: median(cpu_speedup_by_round.clone()),
        cpu_speedup_by_round,
        thesis_speedup: THESIS_SFS_SPEEDUP_2CPU,
        per_connection_1_worker_ratio: median(ratio_by_round(
            &runs,
            Setup::new(Coloring::PerConnection, ThreadModel::Shared, 1),
            BASELINE,
        )),
        seal_us_per_response: seal_us,
        encryption_share: share,
        amdahl_2_workers: 1.0 / ((1.0 - share) + share / 2.0),
        setups,
        cost,
        runs,
    }
}

fn table(r: &ColorsResult) -> String {
    let mut t = format!(
        "# Colors (libasync-mp thesis 5.2): an SFS-like sealing server on seda\n\n\
         {date}, {machine}; load average {l0:.1} at start, {l1:.1} at end. \
         {c} connections x {d} outstanding reads of {b} KiB; socket backend {io}; \
         generator dwell {dwell:.0} us; \
         {rounds} round(s) of {dur:.0} s per setup, setups in rotated order; medians \
         over rounds.\n\n\
         | setup | responses/s | MiB/s (min-max) | vs baseline | server CPU | client CPU | others CPU | server us/response | busiest thread us/response |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        date = r.date,
        machine = r.machine,
        l0 = r.load1.0,
        l1 = r.load1.1,
        c = r.connections,
        d = r.depth,
        b = r.block / 1024,
        io = r.io,
        dwell = r.client_dwell_us,
        rounds = r.rounds,
        dur = r.duration_s,
    );
    for s in &r.setups {
        t += &format!(
            "| {} | {:.0} | {:.1} ({:.1}-{:.1}) | {:.2}x | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |\n",
            s.label,
            s.responses_per_s,
            s.mib_per_s,
            s.mib_per_s_range.0,
            s.mib_per_s_range.1,
            s.vs_baseline,
            s.cpu.server,
            s.cpu.client,
            s.cpu.others,
            s.server_cpu_us_per_response,
            s.busiest_thread_us_per_response
        );
    }
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    t += &format!(
        "\n**speedup** (per-connection colors on 2 workers / one color on 1 worker, \
         within each round): **{:.2}x** (rounds: {}); thesis, SFS on 2 CPUs: {:.2}x. \
         From per-thread CPU time (busiest server thread's us/response, baseline / \
         parallel: the speedup with a core per server thread): **{:.2}x** (rounds: {}). \
         Per-connection colors on 1 worker / one color: {:.2}x (thesis: {:.2}x).\n\n\
         Sealing one response takes {:.1} us of CPU, {:.0}% of the baseline server's CPU \
         per response (thesis: SFS spent 75% in encryption); if only sealing ran in \
         parallel, Amdahl's bound on 2 workers would be {:.2}x.\n\n\
         CPU columns are cores (1.0 = one core all the time) over the measured window: \
         the server's threads, the load generator's, and everything else on the machine.\n",
        r.speedup,
        list(&r.speedup_by_round),
        r.thesis_speedup,
        r.cpu_speedup,
        list(&r.cpu_speedup_by_round),
        r.per_connection_1_worker_ratio,
        THESIS_SFS_1CPU_RATIO,
        r.seal_us_per_response,
        r.encryption_share * 100.0,
        r.amdahl_2_workers,
    );
    if !r.cost.is_empty() {
        t += "\n## The cost of colors (bare pipeline, events/s, medians)\n\n\
              | stages | model | uncolored | 64 colors | ratio | extra ns/hop | one color | ratio |\n\
              |---:|---|---:|---:|---:|---:|---:|---:|\n";
        for c in &r.cost {
            t += &format!(
                "| {} | {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} | {:.2}x |\n",
                c.stages,
                c.model,
                c.uncolored_per_s,
                c.colored_per_s,
                c.colored_ratio,
                c.colored_extra_ns_per_hop,
                c.one_color_per_s,
                c.one_color_ratio
            );
        }
    }
    t
}

/// throughput.svg: MiB/s against workers, one line per coloring and model, and the
/// linear scaling of the baseline for reference.
fn chart(cfg: &ColorsConfig, r: &ColorsResult) -> Result<(), ExperimentError> {
    let mut series: Vec<Series> = Vec::new();
    for (coloring, model, name) in [
        (Coloring::Single, ThreadModel::Shared, "one color (shared)"),
        (
            Coloring::PerConnection,
            ThreadModel::Shared,
            "per-connection colors (shared)",
        ),
        (
            Coloring::PerConnection,
            ThreadModel::PerStage,
            "per-connection colors (per-stage)",
        ),
    ] {
        let points: Vec<(f64, f64)> = r
            .setups
            .iter()
            .filter(|s| s.setup.coloring == coloring && s.setup.model == model)
            .map(|s| (s.setup.workers as f64, s.mib_per_s))
            .collect();
        if !points.is_empty() {
            series.push(Series {
                name: name.to_owned(),
                points,
            });
        }
    }
    if let Some(base) = r.setups.iter().find(|s| s.setup == BASELINE) {
        series.push(Series {
            name: "linear from the baseline".to_owned(),
            points: vec![(1.0, base.mib_per_s), (2.0, 2.0 * base.mib_per_s)],
        });
    }
    let title = format!(
        "Sealing server: speedup {:.2}x on 2 workers (thesis SFS: {:.2}x)",
        r.speedup, r.thesis_speedup
    );
    line_chart(
        &cfg.out.join("throughput.svg"),
        &Chart {
            title: &title,
            x_label: "workers (shared pool) / seal threads (per-stage)",
            y_label: "MiB/s sealed and delivered",
            x_log: false,
            y_log: false,
            y_range: None,
        },
        &series,
    )
}

/// The 1-minute load average, 0 if unknown.
fn load1_now() -> f64 {
    crate::harness::load_average().map_or(0.0, |l| l.0)
}
