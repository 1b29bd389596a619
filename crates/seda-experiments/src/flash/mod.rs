//! Flash (Pai, Druschel, Zwaenepoel, USENIX'99) on this machine, in two parts.
//!
//! **Disk-bound** (Flash section 6.2, Figs. 8-10 in spirit): a SPECweb99-style file
//! set larger than the memory the server may use. Each server runs in a memory
//! cgroup of its own ([`cgroup`]) whose limit holds `share` of the set (plus a fixed
//! headroom for the server's own memory), from the whole set down to a tenth, with
//! the set's pages evicted before every run. Servers: Haboob with its file helper
//! (AMPED), the same Haboob reading misses on its event loop (`--file-io inline`:
//! SPED), and nginx (2 workers, sendfile, `open_file_cache`, `reuseport`) without
//! and with `aio threads`. Haboob's own page cache gets half of the data share (it
//! holds copies, charged to the group as anonymous memory; the OS page cache gets
//! the rest). Before each point the most popular `share` of the set is read
//! inside the group (least popular first), then the clients warm the server up
//! (`--cold` skips the reading: every point then starts from an empty cache).
//!
//! **Caches one by one** (Flash section 5, Fig. 12 in spirit): a small set that fits
//! in memory, Haboob with all caches, then without the pathname-translation cache,
//! without the response-header cache, without the page (body) cache, and with none;
//! Haboob with `--file-io inline` (Flash-SPED on a cached workload: Flash found
//! SPED slightly ahead there, AMPED paying for its residency checks) and nginx as
//! references. Server CPU per request is the steadier figure on a shared
//! machine; both it and throughput are given as ratios to the run with all caches.
//!
//! Load: closed-loop clients without think time, 5 requests per connection, one
//! load thread (the server keeps the other core). Writes `runs.json`, `table.md`,
//! `throughput.svg` and `p90.svg` to the output directory after every point.

mod output;
mod results;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::fileset::{self, Manifest};
use seda_load::report::LoadReport;
use seda_load::schedule::Schedule;

use crate::ExperimentError;
use crate::harness::cgroup::{self, MemoryCgroup};
use crate::harness::server::{ServerKind, ServerProcess, ServerSpec, ensure_installed, probe};
use crate::harness::{date_utc, disk_read_bytes, load_average, machine_summary};

pub use output::{table, write_outputs};
pub use results::{CacheRun, DiskRun, FlashResults};

/// A server of the disk-bound comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DiskServer {
    /// Haboob, misses on CacheMiss and the file helper.
    HaboobAmped,
    /// Haboob, misses translated and read on the event loop.
    HaboobSped,
    /// nginx without `aio`: its workers block on the disk.
    Nginx,
    /// nginx with `aio threads`: reads (and sendfile) on a thread pool.
    NginxAio,
}

impl DiskServer {
    /// All four, in chart order.
    pub const ALL: [DiskServer; 4] = [
        DiskServer::HaboobAmped,
        DiskServer::HaboobSped,
        DiskServer::Nginx,
        DiskServer::NginxAio,
    ];

    /// Name in tables and charts.
    pub fn name(self) -> &'static str {
        match self {
            DiskServer::HaboobAmped => "haboob-amped",
            DiskServer::HaboobSped => "haboob-sped",
            DiskServer::Nginx => "nginx",
            DiskServer::NginxAio => "nginx-aio",
        }
    }

    fn spec(self, seda: &Path, cache_mb: u64) -> ServerSpec {
        let haboob = |io: &str| ServerKind::Haboob {
            seda: seda.to_path_buf(),
            cache_mb,
            extra: ["--file-io", io, "--shutdown-grace", "1"]
                .map(String::from)
                .to_vec(),
        };
        let kind = match self {
            DiskServer::HaboobAmped => haboob("helper"),
            DiskServer::HaboobSped => haboob("inline"),
            DiskServer::Nginx => nginx(false),
            DiskServer::NginxAio => nginx(true),
        };
        ServerSpec {
            name: self.name().to_string(),
            kind,
        }
    }

    fn is_haboob(self) -> bool {
        matches!(self, DiskServer::HaboobAmped | DiskServer::HaboobSped)
    }
}

/// nginx at its best for static files: 2 workers, sendfile, a descriptor cache,
/// a listener per worker; `aio threads` if asked.
fn nginx(aio: bool) -> ServerKind {
    let mut http_extra = vec![
        "open_file_cache max=20000 inactive=60s;".to_string(),
        "open_file_cache_valid 60s;".to_string(),
    ];
    if aio {
        http_extra.push("aio threads;".to_string());
    }
    ServerKind::Nginx {
        workers: 2,
        http_extra,
        reuseport: true,
    }
}

/// Settings of the experiment.
#[derive(Debug, Clone)]
pub struct FlashConfig {
    /// Output directory.
    pub out: PathBuf,
    /// The `seda` binary (Haboob).
    pub seda: PathBuf,
    /// Size of the disk-bound file set, MiB.
    pub size_mb: u64,
    /// Shares of the set that fit in the memory limit, descending (1.0 = all).
    pub shares: Vec<f64>,
    /// Memory each server may use beyond the data share, MiB.
    pub headroom_mb: u64,
    /// Servers of the disk-bound part.
    pub servers: Vec<DiskServer>,
    /// Closed-loop clients.
    pub clients: u64,
    /// Unmeasured load before each disk-bound point (fills the caches).
    pub warmup: Duration,
    /// Before each disk-bound point, read the most popular `share` of the set inside
    /// the server's cgroup, least popular first (the steady state of a server that
    /// has been up for a while); false: every point starts from a cold cache.
    pub prewarm: bool,
    /// Measured time per disk-bound point.
    pub duration: Duration,
    /// Size of the cached set of the caches part, MiB (0: skip the part).
    pub cache_set_mb: u64,
    /// Warm-up and measured time per caches point.
    pub cache_warmup: Duration,
    /// Measured time per caches point.
    pub cache_duration: Duration,
    /// Also run nginx in the caches part, as a reference.
    pub cache_nginx: bool,
    /// Keep (or reuse) the file sets here instead of a temporary directory.
    pub fileset_dir: Option<PathBuf>,
    /// Run without memory limits when cgroups are unavailable (else an error).
    pub allow_no_cgroup: bool,
    /// Install nginx with apt-get if missing (else its runs are skipped).
    pub install: bool,
    /// Seed of the file sets and the request streams.
    pub seed: u64,
}

impl FlashConfig {
    /// The full run: a 1 GiB set at 100/50/25/10 % in memory, about 13 minutes.
    pub fn full(out: PathBuf, seda: PathBuf) -> Self {
        FlashConfig {
            out,
            seda,
            size_mb: 1024,
            shares: vec![1.0, 0.5, 0.25, 0.1],
            headroom_mb: 64,
            servers: DiskServer::ALL.to_vec(),
            clients: 64,
            warmup: Duration::from_secs(15),
            prewarm: true,
            duration: Duration::from_secs(20),
            cache_set_mb: 64,
            cache_warmup: Duration::from_secs(5),
            cache_duration: Duration::from_secs(15),
            cache_nginx: true,
            fileset_dir: None,
            allow_no_cgroup: false,
            install: true,
            seed: 1999,
        }
    }

    /// A loopback smoke run of every path, under a minute.
    pub fn quick(out: PathBuf, seda: PathBuf) -> Self {
        FlashConfig {
            size_mb: 24,
            shares: vec![1.0, 0.25],
            headroom_mb: 64,
            clients: 8,
            warmup: Duration::from_millis(500),
            duration: Duration::from_millis(1500),
            cache_set_mb: 5,
            cache_warmup: Duration::from_millis(500),
            cache_duration: Duration::from_millis(1500),
            cache_nginx: false,
            allow_no_cgroup: true,
            install: false,
            ..FlashConfig::full(out, seda)
        }
    }

    /// Expected wall time.
    pub fn eta(&self) -> Duration {
        let disk = (self.warmup + self.duration + PAUSE + Duration::from_secs(2))
            * (self.shares.len() * self.servers.len()) as u32;
        let caches = (self.cache_warmup + self.cache_duration + Duration::from_secs(2))
            * cache_configs(self).len() as u32;
        disk + caches + Duration::from_secs(self.size_mb / 80 + 2)
    }

    fn validate(&self) -> Result<(), ExperimentError> {
        if self.shares.iter().any(|s| !(*s > 0.0 && *s <= 1.0)) {
            return Err(ExperimentError::config("shares must be in (0, 1]"));
        }
        if self.size_mb == 0 || self.clients == 0 || self.duration.is_zero() {
            return Err(ExperimentError::config(
                "the set size, clients and duration must be positive",
            ));
        }
        Ok(())
    }
}

/// Pause between points (sockets in TIME_WAIT, reclaim settling).
const PAUSE: Duration = Duration::from_secs(1);

/// Run the experiment, logging progress through `log`.
pub fn run(cfg: &FlashConfig, log: &mut dyn FnMut(&str)) -> Result<FlashResults, ExperimentError> {
    cfg.validate()?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let limited = MemoryCgroup::available();
    if !limited && !cfg.allow_no_cgroup {
        return Err(ExperimentError::run(format!(
            "the disk-bound runs need root and the cgroup v1 memory controller at {}",
            cgroup::MEMORY_ROOT
        )));
    }
    let eta = cfg.eta();
    log(&format!(
        "plan: {} servers x {} memory shares x ({} s warm-up + {} s), then {} cache configurations; ETA {} min {} s",
        cfg.servers.len(),
        cfg.shares.len(),
        cfg.warmup.as_secs(),
        cfg.duration.as_secs(),
        cache_configs(cfg).len(),
        eta.as_secs() / 60,
        eta.as_secs() % 60
    ));
    let mut servers = cfg.servers.clone();
    let nginx_wanted = servers.iter().any(|s| !s.is_haboob()) || cfg.cache_nginx;
    let mut skipped = Vec::new();
    if nginx_wanted {
        let specs = [DiskServer::Nginx.spec(&cfg.seda, 0)];
        let ok = if cfg.install {
            ensure_installed(&specs, log).map_err(|e| log(&format!("nginx: {e}")))
        } else if Path::new("/usr/sbin/nginx").exists() {
            Ok(())
        } else {
            Err(())
        };
        if ok.is_err() {
            servers.retain(|s| s.is_haboob());
            skipped.push(("nginx".into(), "not installed".into()));
        }
    }

    let tmp;
    let base: PathBuf = match &cfg.fileset_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("seda-flash-")
                .tempdir()
                .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
            tmp.path().to_path_buf()
        }
    };
    let disk_root = base.join("disk");
    let disk_set = file_set(&disk_root, cfg.size_mb, cfg.seed, log)?;
    let cache_root = base.join("cached");
    let cache_set = if cfg.cache_set_mb > 0 {
        Some(file_set(&cache_root, cfg.cache_set_mb, cfg.seed + 1, log)?)
    } else {
        None
    };
    rustix::fs::sync();
    let set_bytes = disk_set.total_bytes;
    let machine = machine_summary();
    log(&format!(
        "disk set: {} files, {:.0} MiB; {machine}; memory limits {}",
        disk_set.files,
        set_bytes as f64 / (1 << 20) as f64,
        if limited {
            "by cgroup v1"
        } else {
            "NOT applied (no cgroup): every share runs from memory"
        }
    ));
    let mut all_servers: Vec<(String, String)> = servers
        .iter()
        .map(|s| {
            let spec = s.spec(&cfg.seda, 0);
            (spec.name.clone(), spec.describe())
        })
        .collect();
    all_servers.push((
        "haboob (caches part)".into(),
        "Haboob (seda serve), default settings but the switch named in the row".into(),
    ));
    let mut results = FlashResults {
        experiment: "flash",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine,
            "started_utc_s": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "load1_at_start": load_average().map_or(0.0, |l| l.0),
            "cgroup_limits": limited,
            "disk_set": { "files": disk_set.files, "total_bytes": set_bytes, "seed": disk_set.seed },
            "cache_set": cache_set.as_ref().map(|m| serde_json::json!({ "files": m.files, "total_bytes": m.total_bytes })),
            "shares": cfg.shares,
            "headroom_mb": cfg.headroom_mb,
            "prewarm": cfg.prewarm && limited,
            "haboob_cache": "half of the data share",
            "clients": cfg.clients,
            "think_ms": 0,
            "reqs_per_conn": 5,
            "load_threads": 1,
            "warmup_s": cfg.warmup.as_secs_f64(),
            "duration_s": cfg.duration.as_secs_f64(),
            "cache_warmup_s": cfg.cache_warmup.as_secs_f64(),
            "cache_duration_s": cfg.cache_duration.as_secs_f64(),
        }),
        servers: all_servers,
        skipped,
        disk: Vec::new(),
        caches: Vec::new(),
    };

    for (k, &share) in cfg.shares.iter().enumerate() {
        let data = (share * set_bytes as f64) as u64;
        let limit = if limited {
            data + (cfg.headroom_mb << 20)
        } else {
            0
        };
        let cache_mb = ((data / 2) >> 20).max(1);
        log(&format!(
            "== {:.0} % of the set fits: limit {} MiB, Haboob page cache {cache_mb} MiB",
            share * 100.0,
            limit >> 20
        ));
        for (j, &server) in servers.iter().enumerate() {
            let spec = server.spec(&cfg.seda, cache_mb);
            let point = Point {
                cfg,
                spec: &spec,
                root: &disk_root,
                manifest: &disk_set,
                seed: cfg.seed + (k * 16 + j) as u64,
            };
            match disk_point(&point, share, limit) {
                Ok(mut run) => {
                    run.haboob_cache_mb = server.is_haboob().then_some(cache_mb);
                    log(&format!(
                        "   {:<13} {:>8.1} req/s  p90 {:>8.1} ms  disk {:>6.1} MB/s  memory peak {:>5} MiB (cache {} MiB, anon {} MiB)  errors {}  load {:.1}",
                        run.server,
                        run.report.throughput_rps,
                        run.report.rt_p90_ms,
                        run.disk_read_mbps,
                        run.memory.max_usage >> 20,
                        run.memory.cache >> 20,
                        run.memory.rss >> 20,
                        run.report.errors,
                        run.load1
                    ));
                    results.disk.push(run);
                }
                Err(e) => {
                    log(&format!("   {}: skipped: {e}", spec.name));
                    results
                        .skipped
                        .push((format!("{} at {share}", spec.name), e.to_string()));
                }
            }
            write_outputs(&cfg.out, &results)?;
            std::thread::sleep(PAUSE);
        }
    }

    if let Some(set) = &cache_set {
        log("== the caches, one by one (everything fits in memory)");
        for (j, (name, switches, spec)) in cache_configs(cfg).into_iter().enumerate() {
            let point = Point {
                cfg,
                spec: &spec,
                root: &cache_root,
                manifest: set,
                seed: cfg.seed + 1000 + j as u64,
            };
            match cache_point(&point, &name, &switches) {
                Ok(run) => {
                    log(&format!(
                        "   {:<16} {:>8.1} req/s  p90 {:>7.2} ms  server CPU {:>6.1} us/req  load {:.1}",
                        run.config,
                        run.report.throughput_rps,
                        run.report.rt_p90_ms,
                        run.server_cpu_us_per_req,
                        run.load1
                    ));
                    results.caches.push(run);
                }
                Err(e) => {
                    log(&format!("   {name}: skipped: {e}"));
                    results.skipped.push((name, e.to_string()));
                }
            }
            write_outputs(&cfg.out, &results)?;
        }
    }
    write_outputs(&cfg.out, &results)?;
    log(&format!(
        "wrote {}/{{runs.json,table.md,throughput.svg,p90.svg}}",
        cfg.out.display()
    ));
    Ok(results)
}

/// Writes (or reuses) a SPECweb99 set of `size_mb` under `root`.
fn file_set(
    root: &Path,
    size_mb: u64,
    seed: u64,
    log: &mut dyn FnMut(&str),
) -> Result<Manifest, ExperimentError> {
    match Manifest::load(root) {
        Ok(m) if m.size_mb == size_mb && m.seed == seed => Ok(m),
        _ => {
            log(&format!(
                "writing a {size_mb} MiB SPECweb99 file set to {}",
                root.display()
            ));
            let m = fileset::generate(root, size_mb, seed).map_err(ExperimentError::other)?;
            // Servers that drop to www-data must enter the set's parents.
            use std::os::unix::fs::PermissionsExt;
            for dir in root.ancestors().take(2) {
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
            }
            Ok(m)
        }
    }
}

/// The Haboob configurations of the caches part (and nginx, if asked).
fn cache_configs(cfg: &FlashConfig) -> Vec<(String, String, ServerSpec)> {
    let haboob = |cache_mb: u64, extra: &[&str]| ServerKind::Haboob {
        seda: cfg.seda.clone(),
        cache_mb,
        extra: extra
            .iter()
            .chain(&["--shutdown-grace", "1"])
            .map(|s| s.to_string())
            .collect(),
    };
    let big = (cfg.cache_set_mb * 2).max(16);
    let mut v = vec![
        ("all", "none", haboob(big, &[])),
        (
            "sped",
            "--file-io inline (all caches)",
            haboob(big, &["--file-io", "inline"]),
        ),
        (
            "no-path-cache",
            "--path-cache-mb 0",
            haboob(big, &["--path-cache-mb", "0"]),
        ),
        (
            "no-header-cache",
            "--no-header-cache",
            haboob(big, &["--no-header-cache"]),
        ),
        ("no-page-cache", "--cache-mb 0", haboob(0, &[])),
        (
            "no-caches",
            "--cache-mb 0 --path-cache-mb 0 --no-header-cache",
            haboob(0, &["--path-cache-mb", "0", "--no-header-cache"]),
        ),
    ];
    if cfg.cache_nginx {
        v.push((
            "nginx",
            "reference: nginx as in the disk part",
            nginx(false),
        ));
    }
    v.into_iter()
        .map(|(n, s, kind)| {
            let spec = ServerSpec {
                name: format!("haboob-{n}"),
                kind,
            };
            (n.to_string(), s.to_string(), spec)
        })
        .collect()
}

/// What one point needs.
struct Point<'a> {
    cfg: &'a FlashConfig,
    spec: &'a ServerSpec,
    root: &'a Path,
    manifest: &'a Manifest,
    seed: u64,
}

impl Point<'_> {
    fn load(&self, addr: std::net::SocketAddr, dur: Duration, seed: u64) -> LoadConfig {
        LoadConfig::new(addr, Schedule::steady(dur, self.cfg.clients as f64))
            .with_mode(Mode::Closed {
                think: Duration::ZERO,
                reqs_per_conn: 5,
            })
            .with_requests(RequestMix::FileSet(self.manifest.clone()))
            .with_timeout(Duration::from_secs(60))
            .with_drain(Duration::from_secs(5))
            .with_threads(1)
            .with_seed(seed)
    }

    /// Starts the server (in `group`), checks it serves, warms it up, measures.
    fn measure(
        &self,
        group: Option<&MemoryCgroup>,
        warmup: Duration,
        duration: Duration,
    ) -> Result<Measured, ExperimentError> {
        let server = ServerProcess::start_in(self.spec, self.root, group.map(|g| g.path()))?;
        match probe(server.addr(), "/dir00000/class1_0") {
            Ok(200) => {}
            other => {
                return Err(ExperimentError::run(format!(
                    "GET /dir00000/class1_0 answered {other:?}, not 200: {}",
                    server.log_tail()
                )));
            }
        }
        if !warmup.is_zero() {
            seda_load::client::run(
                &self.load(server.addr(), warmup, self.seed ^ 0xfeed),
                |_, _| {},
            )
            .map_err(ExperimentError::other)?;
        }
        let cpu0 = server.cpu_seconds();
        let disk0 = disk_read_bytes();
        let t0 = Instant::now();
        let report =
            seda_load::client::run(&self.load(server.addr(), duration, self.seed), |_, _| {})
                .map_err(ExperimentError::other)?;
        let disk_read_mbps = (disk_read_bytes() - disk0) as f64 / t0.elapsed().as_secs_f64() / 1e6;
        let cpu = server.cpu_seconds() - cpu0;
        let cpu_us_per_req = if report.completed > 0 {
            cpu * 1e6 / report.completed as f64
        } else {
            0.0
        };
        Ok(Measured {
            report,
            cpu_us_per_req,
            disk_read_mbps,
            server,
        })
    }
}

/// What [`Point::measure`] found, and the server, still running.
struct Measured {
    report: LoadReport,
    cpu_us_per_req: f64,
    disk_read_mbps: f64,
    server: ServerProcess,
}

/// One disk-bound point: evict the set, start the server in a fresh group, load it.
fn disk_point(p: &Point<'_>, share: f64, limit: u64) -> Result<DiskRun, ExperimentError> {
    cgroup::evict(p.root)?;
    let group = if limit > 0 {
        let name = format!("seda-flash-{}-{}", std::process::id(), p.spec.name);
        Some(MemoryCgroup::create(&name, limit)?)
    } else {
        None
    };
    if let Some(g) = &group
        && p.cfg.prewarm
    {
        prewarm(g, p.root, p.manifest, share)?;
    }
    let m = p.measure(group.as_ref(), p.cfg.warmup, p.cfg.duration)?;
    let memory = group.as_ref().map(|g| g.usage()).unwrap_or_default();
    if let Err(e) = m.server.stop() {
        tracing::warn!("{e}");
    }
    drop(group);
    Ok(DiskRun {
        server: p.spec.name.clone(),
        share,
        limit_bytes: limit,
        haboob_cache_mb: None,
        memory,
        disk_read_mbps: m.disk_read_mbps,
        server_cpu_us_per_req: m.cpu_us_per_req,
        load1: load_average().map_or(0.0, |l| l.0),
        report: m.report,
    })
}

/// Reads the files of the most popular `share` of the directories (SPECweb99's
/// Zipf ranks them in order) with `cat` inside `group`, least popular first, so
/// that the hottest pages are the last the group's LRU would evict.
fn prewarm(
    group: &MemoryCgroup,
    root: &Path,
    set: &Manifest,
    share: f64,
) -> Result<(), ExperimentError> {
    let dirs = ((set.dirs as f64 * share).ceil() as usize).clamp(1, set.dirs);
    let files: Vec<PathBuf> = (0..dirs)
        .rev()
        .flat_map(|d| {
            (0..4).flat_map(move |c| {
                (0..seda_load::dist::FILES_PER_CLASS).map(move |i| {
                    root.join(
                        fileset::file_path(seda_load::dist::FilePick {
                            dir: d,
                            class: c,
                            file: i,
                        })
                        .trim_start_matches('/'),
                    )
                })
            })
        })
        .collect();
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec cat \"$@\" > /dev/null")
        .arg(group.path())
        .args(&files)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| ExperimentError::step("cannot run cat to pre-warm", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ExperimentError::run(format!(
            "pre-warming failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// One point of the caches part: no memory limit, the set served from memory.
fn cache_point(p: &Point<'_>, name: &str, switches: &str) -> Result<CacheRun, ExperimentError> {
    let m = p.measure(None, p.cfg.cache_warmup, p.cfg.cache_duration)?;
    let hb = m.server.admin_addr().and_then(|a| {
        let r = crate::harness::stats::http_get(a, "/_seda/stats", Duration::from_secs(2)).ok()?;
        let doc: seda_http::StatsDoc = serde_json::from_slice(&r.body).ok()?;
        doc.section::<seda_http::HaboobStats>("haboob")
    });
    if let Err(e) = m.server.stop() {
        tracing::warn!("{e}");
    }
    Ok(CacheRun {
        config: name.to_string(),
        switches: switches.to_string(),
        server_cpu_us_per_req: m.cpu_us_per_req,
        path_cache_bytes: hb.as_ref().map(|h| h.path_cache.bytes),
        page_cache_bytes: hb.as_ref().map(|h| h.page_cache.bytes),
        load1: load_average().map_or(0.0, |l| l.0),
        report: m.report,
    })
}
