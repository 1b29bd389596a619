//! `seda experiment soak`: Haboob under cycles of overload and hostile clients for a
//! long time, watching its memory and descriptors (issue 11).
//!
//! One real `seda serve` (a calibrated `/bottleneck` dynamic stage under the
//! response-time controller, short header and send timeouts) serves a root with a
//! small and a large file. For the whole run a few closed-loop users request
//! `/bottleneck` and a canary fetches the small file on a fresh connection twice a
//! second. Then, cycle after cycle until the time is up:
//! 1. **spike**: many closed-loop users on `/bottleneck` (the controller refuses
//!    some with `503`);
//! 2. **hostile wave**: every [`hostile::Kind`] at once (slowloris, stalled and slow
//!    readers of the large file, pipelining floods, oversized heads and bodies,
//!    half-closes, resets, garbage), each bounded by a deadline;
//! 3. **calm**: only the base users; the server's RSS and descriptors at the end of
//!    it are the cycle's *calm sample*.
//!
//! The server's RSS, descriptors and threads are sampled every second from `/proc`.
//!
//! # Verdict
//! The run fails (non-zero exit in the CLI) when
//! - a well-behaved request goes unanswered: a user's or the canary's request that
//!   got neither a response nor a clean refusal, or a request of a slow, pipelining
//!   or half-closing client lost;
//! - a hostile client holds its connection past every timeout;
//! - RSS grows without bound: the peak passes [`SoakConfig::rss_limit_mib`], or with
//!   four calm samples or more, the last is above `1.25 x` the largest of the first
//!   half plus 32 MiB (memory that a bounded server holds after warming up stops
//!   growing; a leak keeps going);
//! - descriptors leak: the last calm sample has more than the first half's largest
//!   plus 32.

pub mod hostile;
pub mod output;
mod results;
pub mod sampler;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use seda_load::client::{self, LoadConfig, Mode, RequestMix};
use seda_load::schedule::Schedule;

use crate::ExperimentError;
use crate::harness::server::{ServerKind, ServerProcess, ServerSpec};
use crate::harness::{date_utc, load_average, machine_summary};
use hostile::{Outcome, Tally, WaveConfig};
use sampler::{ProcSample, Sampler};

pub use results::{Counts, Cycle, SoakResults, Verdict};

/// Settings of a soak.
#[derive(Debug, Clone, Serialize)]
pub struct SoakConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary whose `serve` is soaked.
    pub seda: PathBuf,
    /// How long to run (the last cycle may end a little later).
    pub duration: Duration,
    /// Spike length per cycle.
    pub spike: Duration,
    /// Calm time per cycle, after the hostile wave.
    pub calm: Duration,
    /// Closed-loop users for the whole run.
    pub base_users: u64,
    /// Closed-loop users during a spike.
    pub spike_users: u64,
    /// CPU per bottleneck request, ms (`--bottleneck-ms`).
    pub bottleneck_ms: f64,
    /// p90 target of the response-time controller, ms (`--rt-target-ms`).
    pub target_ms: f64,
    /// The server's `--header-timeout`.
    pub header_timeout: Duration,
    /// The server's `--send-timeout` and `--idle-timeout`.
    pub send_timeout: Duration,
    /// The server's page cache, MiB.
    pub cache_mb: u64,
    /// Size of the large file, MiB.
    pub large_mib: u64,
    /// Connections per hostile kind per wave.
    pub per_kind: usize,
    /// Pipelined requests per flooding connection.
    pub flood_depth: usize,
    /// RSS the server must stay under, MiB.
    pub rss_limit_mib: u64,
    /// Seed of the load.
    pub seed: u64,
}

impl SoakConfig {
    /// The default soak of `minutes`: 20 s spikes of 300 users, 10 s calm, 20
    /// connections per hostile kind, 5 s header and send timeouts.
    pub fn new(out: PathBuf, seda: PathBuf, minutes: f64) -> SoakConfig {
        SoakConfig {
            out,
            seda,
            duration: Duration::from_secs_f64((minutes * 60.0).max(0.0)),
            spike: Duration::from_secs(20),
            calm: Duration::from_secs(10),
            base_users: 4,
            spike_users: 300,
            bottleneck_ms: 10.0,
            target_ms: 200.0,
            header_timeout: Duration::from_secs(5),
            send_timeout: Duration::from_secs(5),
            cache_mb: 64,
            large_mib: 32,
            per_kind: 20,
            flood_depth: 500,
            rss_limit_mib: 1024,
            seed: 1,
        }
    }

    /// A short soak for tests (about 30 s): 3 s spikes of 60 users, 2 s calm, 1 s
    /// timeouts, 4 connections per hostile kind, an 8 MiB large file.
    pub fn quick(out: PathBuf, seda: PathBuf) -> SoakConfig {
        SoakConfig {
            duration: Duration::from_secs(25),
            spike: Duration::from_secs(3),
            calm: Duration::from_secs(2),
            spike_users: 60,
            header_timeout: Duration::from_secs(1),
            send_timeout: Duration::from_secs(1),
            large_mib: 8,
            per_kind: 4,
            flood_depth: 200,
            ..SoakConfig::new(out, seda, 0.5)
        }
    }

    fn check(&self) -> Result<(), ExperimentError> {
        if self.duration.is_zero() {
            return Err(ExperimentError::config(
                "the soak must last more than 0 minutes",
            ));
        }
        if !(self.bottleneck_ms > 0.0 && self.target_ms > 0.0) {
            return Err(ExperimentError::config(
                "bottleneck and target must be positive",
            ));
        }
        if self.spike_users == 0 || self.per_kind == 0 || self.large_mib == 0 {
            return Err(ExperimentError::config(
                "spike users, connections per kind and the large file must be > 0",
            ));
        }
        if self.header_timeout.is_zero() || self.send_timeout.is_zero() {
            return Err(ExperimentError::config("timeouts must be positive"));
        }
        Ok(())
    }

    /// Flags of `seda serve` besides `--listen`, `--admin-listen`, `--root`,
    /// `--cache-mb`.
    pub fn serve_args(&self) -> Vec<String> {
        let s = |d: Duration| format!("{}", d.as_secs_f64());
        [
            "--bottleneck-ms",
            &self.bottleneck_ms.to_string(),
            "--rt-target-ms",
            &self.target_ms.to_string(),
            "--header-timeout",
            &s(self.header_timeout),
            "--send-timeout",
            &s(self.send_timeout),
            "--idle-timeout",
            &s(self.send_timeout),
            "--max-connections",
            "4000",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    }
}

/// The small file every canary and flood requests.
const SMALL: &str = "/small.html";
/// The large file of the readers.
const LARGE: &str = "/large.bin";

/// Writes the root: `small.html` (1 KiB), `index.html` and `large.bin`.
fn make_root(dir: &Path, large_mib: u64) -> Result<(), ExperimentError> {
    let w = |name: &str, data: &[u8]| {
        std::fs::write(dir.join(name), data)
            .map_err(|e| ExperimentError::step(format!("cannot write {name}"), e))
    };
    w("small.html", &[b'x'; 1024])?;
    w("index.html", b"<html><body>soak</body></html>\n")?;
    let block: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut large = Vec::with_capacity((large_mib as usize) << 20);
    for _ in 0..large_mib {
        large.extend_from_slice(&block);
    }
    w("large.bin", &large)
}

fn users(addr: SocketAddr, users: u64, length: Duration, seed: u64) -> LoadConfig {
    LoadConfig::new(addr, Schedule::steady(length, users as f64))
        .with_host("soak".into())
        .with_mode(Mode::Closed {
            think: Duration::from_millis(20),
            reqs_per_conn: 5,
        })
        .with_requests(RequestMix::Path("/bottleneck".into()))
        .with_timeout(Duration::from_secs(30))
        .with_drain(Duration::from_secs(10))
        .with_threads(1)
        .with_seed(seed)
        .with_retry_wait(Some(Duration::from_secs(1)))
}

/// The canary: a fresh connection fetching the small file twice a second.
struct Canary {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(Tally, f64)>,
}

impl Canary {
    fn start(addr: SocketAddr) -> Result<Canary, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("soak-canary".into())
            .spawn(move || {
                let mut tally = Tally::default();
                let mut max_ms: f64 = 0.0;
                while !flag.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let o = hostile::fetch(addr, SMALL, Duration::from_secs(15));
                    if matches!(o, Outcome::Answered(_) | Outcome::Refused(_)) {
                        max_ms = max_ms.max(t.elapsed().as_secs_f64() * 1e3);
                    }
                    tally.add(&o);
                    std::thread::sleep(Duration::from_millis(500).saturating_sub(t.elapsed()));
                }
                (tally, max_ms)
            })
            .map_err(|e| ExperimentError::step("cannot start the canary", e))?;
        Ok(Canary { stop, handle })
    }

    fn finish(self) -> (Tally, f64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .unwrap_or_else(|_| (Tally::default(), 0.0))
    }
}

/// Runs the soak, logging progress through `log`, and writes its outputs.
pub fn run(cfg: &SoakConfig, log: &mut dyn FnMut(&str)) -> Result<SoakResults, ExperimentError> {
    cfg.check()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let root = tempfile::Builder::new()
        .prefix("seda-soak-root-")
        .tempdir()
        .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
    make_root(root.path(), cfg.large_mib)?;
    let load_before = load_average();
    let spec = ServerSpec {
        name: "haboob".into(),
        kind: ServerKind::Haboob {
            seda: cfg.seda.clone(),
            cache_mb: cfg.cache_mb,
            extra: cfg.serve_args(),
        },
    };
    let server = ServerProcess::start(&spec, root.path())?;
    let addr = server.addr();
    log(&format!(
        "seda serve {} on {addr} (pid {}); soak of {:.1} min",
        cfg.serve_args().join(" "),
        server.pid(),
        cfg.duration.as_secs_f64() / 60.0
    ));
    let t0 = Instant::now();
    let sampler = Sampler::start(server.pid(), t0, Duration::from_secs(1))?;
    let canary = Canary::start(addr)?;
    let base_cfg = users(addr, cfg.base_users, cfg.duration, cfg.seed);
    let base = std::thread::Builder::new()
        .name("soak-base".into())
        .spawn(move || client::run(&base_cfg, |_, _| {}))
        .map_err(|e| ExperimentError::step("cannot start the base users", e))?;
    let wave_cfg = WaveConfig {
        per_kind: cfg.per_kind,
        flood_depth: cfg.flood_depth,
        small_path: SMALL.into(),
        large_path: LARGE.into(),
        large_len: cfg.large_mib << 20,
        header_timeout: cfg.header_timeout,
        send_timeout: cfg.send_timeout,
        slow_read_for: cfg.send_timeout * 2,
    };
    let mut cycles: Vec<Cycle> = Vec::new();
    let mut longest = Duration::ZERO;
    while cycles.is_empty() || t0.elapsed() + longest <= cfg.duration {
        let start = Instant::now();
        let i = cycles.len() as u64;
        let spike_cfg = users(addr, cfg.spike_users, cfg.spike, cfg.seed + 1 + i);
        let spike = match client::run(&spike_cfg, |_, _| {}) {
            Ok(r) => Counts::of(&r),
            Err(e) => {
                log(&format!("   spike failed to run: {e}"));
                Counts::default()
            }
        };
        let spike_s = start.elapsed().as_secs_f64();
        let w0 = Instant::now();
        let wave = hostile::wave(addr, &wave_cfg);
        let wave_s = w0.elapsed().as_secs_f64();
        std::thread::sleep(cfg.calm);
        let calm = sampler::sample(server.pid(), t0.elapsed().as_secs_f64());
        let c = Cycle {
            start_s: (start - t0).as_secs_f64(),
            spike_s,
            wave_s,
            calm,
            spike,
            wave,
        };
        log(&progress_line(cycles.len() + 1, &c));
        cycles.push(c);
        longest = longest.max(start.elapsed());
    }
    let (canary, canary_max_ms) = canary.finish();
    let base = match base.join() {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            log(&format!("base users failed to run: {e}"));
            None
        }
        Err(_) => None,
    };
    let samples = sampler.finish();
    let wall_s = t0.elapsed().as_secs_f64();
    let stopped = server.stop();
    let mut results = SoakResults {
        experiment: "soak",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine_summary(),
            "load_average_before": load_before.map(|(a, b, c)| [a, b, c]),
            "load_average_after": load_average().map(|(a, b, c)| [a, b, c]),
            "config": cfg,
        }),
        serve_args: cfg.serve_args(),
        wall_s,
        samples,
        spikes: cycles.iter().fold(Counts::default(), |mut a, c| {
            a.merge(&c.spike);
            a
        }),
        hostile: cycles.iter().fold(BTreeMap::new(), |mut a, c| {
            for (k, t) in &c.wave {
                a.entry(*k).or_insert_with(Tally::default).merge(t);
            }
            a
        }),
        cycles,
        base,
        canary,
        canary_max_ms,
        verdict: Verdict::default(),
    };
    results.verdict = judge(cfg, &results);
    if let Err(e) = stopped {
        results
            .verdict
            .failures
            .push(format!("the server did not stop cleanly: {e}"));
    }
    output::write_outputs(&cfg.out, &results)?;
    Ok(results)
}

fn progress_line(n: usize, c: &Cycle) -> String {
    let mut all = Tally::default();
    for t in c.wave.values() {
        all.merge(t);
    }
    format!(
        "cycle {n} at {:.0} s: spike {} ok / {} 503 / {} errors; wave {} exchanges ({} answered, {} refused, {} closed, {} unanswered) in {:.1} s; calm RSS {} MiB, {} fds",
        c.start_s,
        c.spike.completed,
        c.spike.rejected,
        c.spike.errors,
        all.exchanges,
        all.answered,
        all.refused,
        all.closed,
        all.unanswered,
        c.wave_s,
        c.calm.map_or(0, |s| s.rss_kib / 1024),
        c.calm.map_or(0, |s| s.fds),
    )
}

/// The verdict of [`SoakResults`] (see the module docs).
pub fn judge(cfg: &SoakConfig, r: &SoakResults) -> Verdict {
    let mut v = Verdict::default();
    if let (Some(first), Some(last)) = (r.samples.first(), r.samples.last()) {
        v.rss_start_kib = first.rss_kib;
        v.rss_end_kib = last.rss_kib;
        v.fds_start = first.fds;
    }
    v.rss_peak_kib = r.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    v.fds_peak = r.samples.iter().map(|s| s.fds).max().unwrap_or(0);
    let calm: Vec<ProcSample> = r.cycles.iter().filter_map(|c| c.calm).collect();
    v.fds_end_calm = calm.last().map_or(0, |s| s.fds);

    let users = |c: &Counts, t: &mut Tally| {
        for _ in 0..c.completed {
            t.add(&Outcome::Answered(200));
        }
        for _ in 0..c.rejected {
            t.add(&Outcome::Refused(503));
        }
        for (kind, n) in &c.errors_by_kind {
            t.exchanges += n;
            t.unanswered += n;
            *t.problems.entry(format!("user: {kind}")).or_default() += n;
        }
    };
    if let Some(b) = &r.base {
        users(&Counts::of(b), &mut v.well_behaved);
    }
    users(&r.spikes, &mut v.well_behaved);
    v.well_behaved.merge(&r.canary);
    for (kind, t) in &r.hostile {
        if kind.well_behaved() {
            v.well_behaved.merge(t);
        } else {
            v.hostile.merge(t);
        }
    }

    if r.samples.is_empty() {
        v.failures
            .push("no sample of the server's memory was taken".into());
    }
    if r.base.is_none() {
        v.failures.push("the base users did not run".into());
    }
    if v.well_behaved.unanswered > 0 {
        v.failures.push(format!(
            "{} well-behaved requests went unanswered: {:?}",
            v.well_behaved.unanswered, v.well_behaved.problems
        ));
    }
    if v.hostile.unanswered > 0 {
        v.failures.push(format!(
            "{} hostile exchanges were neither answered nor cut: {:?}",
            v.hostile.unanswered, v.hostile.problems
        ));
    }
    let mib = 1024;
    if v.rss_peak_kib > cfg.rss_limit_mib * mib {
        v.failures.push(format!(
            "RSS peaked at {} MiB, over the {} MiB limit",
            v.rss_peak_kib / mib,
            cfg.rss_limit_mib
        ));
    }
    if calm.len() >= 4 {
        let half = &calm[..calm.len() / 2];
        let early_rss = half.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let early_fds = half.iter().map(|s| s.fds).max().unwrap_or(0);
        let last = calm[calm.len() - 1];
        if last.rss_kib as f64 > early_rss as f64 * 1.25 + 32.0 * mib as f64 {
            v.failures.push(format!(
                "RSS keeps growing: {} MiB at the last calm point, {} MiB at most in the first half",
                last.rss_kib / mib,
                early_rss / mib
            ));
        }
        if last.fds > early_fds + 32 {
            v.failures.push(format!(
                "descriptors leak: {} at the last calm point, {} at most in the first half",
                last.fds, early_fds
            ));
        }
    }
    v
}
