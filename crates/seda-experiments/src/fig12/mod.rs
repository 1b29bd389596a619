//! SEDA SOSP'01 Fig. 12 on this machine: Haboob, nginx and Apache serving the same
//! SPECweb99-style file set to the paper's closed-loop clients (20 ms think time, 5
//! requests per connection) at a series of client counts.
//!
//! Writes to the output directory: `runs.json` (every run), `table.md` (the paper's
//! table at 256 and 1,024 clients and a full table), `throughput.svg` (Mbit/s vs
//! clients) and `cdf-N.svg` (response-time CDF at the largest client count).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use seda_load::client::{LoadConfig, Mode, RequestMix};
use seda_load::fileset;
use seda_load::report::LoadReport;
use seda_load::schedule::Schedule;

use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::server::{ServerProcess, ServerSpec, ensure_installed, probe, process_cpu};
use crate::harness::{date_utc, machine_summary, write_runs_and_table};

/// Settings of the experiment.
#[derive(Debug, Clone)]
pub struct Fig12Config {
    /// Output directory.
    pub out: PathBuf,
    /// Client counts, ascending.
    pub clients: Vec<u64>,
    /// Measured time per point.
    pub duration: Duration,
    /// Unmeasured warm-up per server (at the median client count).
    pub warmup: Duration,
    /// Wait at most this long for running requests after each point.
    pub drain: Duration,
    /// File set size, MiB.
    pub size_mb: u64,
    /// Haboob's page cache, MiB.
    pub cache_mb: u64,
    /// Servers to compare.
    pub servers: Vec<ServerSpec>,
    /// Reuse (or create) the file set here instead of a temporary directory.
    pub fileset_dir: Option<PathBuf>,
    /// Load-generator threads.
    pub threads: usize,
    /// Seed for the file set and the request stream.
    pub seed: u64,
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Fig12Run {
    /// Server name.
    pub server: String,
    /// Closed-loop clients.
    pub clients: u64,
    /// Server CPU (user + system, whole process tree) during the point, seconds.
    pub server_cpu_s: f64,
    /// Server CPU per completed request, microseconds.
    pub server_cpu_us_per_req: f64,
    /// CPU of this load generator's own process during the point, seconds (it shares
    /// the cores with the server; the server's processes are not counted here).
    pub client_cpu_s: f64,
    /// The load generator's report.
    pub report: LoadReport,
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Fig12Results {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine, file set and load settings.
    pub setup: serde_json::Value,
    /// Server descriptions.
    pub servers: Vec<(String, String)>,
    /// Servers that could not be measured, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Every point.
    pub runs: Vec<Fig12Run>,
}

/// Pause between points so that sockets in TIME_WAIT and server backlogs settle.
const PAUSE: Duration = Duration::from_secs(2);

impl Fig12Config {
    /// Expected wall time: per server a start, a warm-up and every point.
    pub fn eta(&self) -> Duration {
        let per_point = self.duration + PAUSE + Duration::from_secs(1);
        let per_server =
            Duration::from_secs(3) + self.warmup + per_point * self.clients.len() as u32;
        per_server * self.servers.len() as u32 + Duration::from_secs(self.size_mb / 100 + 2)
    }
}

/// Run the experiment, logging progress through `log`.
pub fn run(cfg: &Fig12Config, log: &mut dyn FnMut(&str)) -> Result<Fig12Results, ExperimentError> {
    if cfg.clients.is_empty() || cfg.servers.is_empty() {
        return Err(ExperimentError::run(
            "need at least one client count and one server",
        ));
    }
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| ExperimentError::step(format!("cannot create {}", cfg.out.display()), e))?;
    let eta = cfg.eta();
    log(&format!(
        "plan: {} servers x {} client counts ({}) x {} s per point, warm-up {} s per server; ETA {} min {} s",
        cfg.servers.len(),
        cfg.clients.len(),
        cfg.clients
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
        cfg.duration.as_secs(),
        cfg.warmup.as_secs(),
        eta.as_secs() / 60,
        eta.as_secs() % 60
    ));
    ensure_installed(&cfg.servers, log)?;

    // The file set.
    let tmp;
    let root: PathBuf = match &cfg.fileset_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("seda-fig12-fileset-")
                .tempdir()
                .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
            tmp.path().to_path_buf()
        }
    };
    let manifest = match fileset::Manifest::load(&root) {
        Ok(m) if m.size_mb == cfg.size_mb && m.seed == cfg.seed => m,
        _ => {
            log(&format!(
                "writing a {} MiB SPECweb99 file set to {}",
                cfg.size_mb,
                root.display()
            ));
            let m =
                fileset::generate(&root, cfg.size_mb, cfg.seed).map_err(ExperimentError::other)?;
            // The temp dir's parent is private by default; servers that drop to
            // www-data need to enter it.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755));
            m
        }
    };
    let set_mib = manifest.total_bytes as f64 / (1 << 20) as f64;
    let machine = machine_summary();
    log(&format!(
        "file set: {} directories, {} files, {set_mib:.0} MiB; Haboob page cache {} MiB ({:.0} % of the set, as the paper's 200 MB cache held 6 % of 3.31 GB); {machine} (the OS page cache holds the whole set, so unlike the paper no run waits on the disk)",
        manifest.dirs,
        manifest.files,
        cfg.cache_mb,
        100.0 * cfg.cache_mb as f64 / set_mib
    ));

    let mut results = Fig12Results {
        experiment: "fig12",
        date: date_utc(),
        setup: serde_json::json!({
            "machine": machine,
            "fileset": { "dirs": manifest.dirs, "files": manifest.files, "total_bytes": manifest.total_bytes, "seed": manifest.seed },
            "haboob_cache_mb": cfg.cache_mb,
            "clients": cfg.clients,
            "duration_s": cfg.duration.as_secs_f64(),
            "warmup_s": cfg.warmup.as_secs_f64(),
            "think_ms": 20,
            "reqs_per_conn": 5,
            "load_threads": cfg.threads,
        }),
        servers: cfg
            .servers
            .iter()
            .map(|s| (s.name.clone(), s.describe()))
            .collect(),
        skipped: Vec::new(),
        runs: Vec::new(),
    };
    let load = |addr, clients: u64, dur: Duration, seed: u64| {
        LoadConfig::new(addr, Schedule::steady(dur, clients as f64))
            .with_host(format!("{addr}"))
            .with_mode(Mode::Closed {
                think: Duration::from_millis(20),
                reqs_per_conn: 5,
            })
            .with_requests(RequestMix::FileSet(manifest.clone()))
            .with_timeout(Duration::from_secs(120))
            .with_drain(cfg.drain)
            .with_threads(cfg.threads)
            .with_seed(seed)
    };

    for spec in &cfg.servers {
        log(&format!("== {}: {}", spec.name, spec.describe()));
        let server = match ServerProcess::start(spec, &root) {
            Ok(s) => s,
            Err(e) => {
                let e = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                log(&format!("   skipped: {e}"));
                results.skipped.push((spec.name.clone(), e));
                continue;
            }
        };
        match probe(server.addr(), "/dir00000/class1_0") {
            Ok(200) => {}
            other => {
                let e = format!("GET /dir00000/class1_0 answered {other:?}, not 200");
                log(&format!("   skipped: {e}"));
                results.skipped.push((spec.name.clone(), e));
                let _ = server.stop();
                continue;
            }
        }
        if !cfg.warmup.is_zero() {
            let mid = cfg.clients[cfg.clients.len() / 2];
            let _ = seda_load::client::run(
                &load(server.addr(), mid, cfg.warmup, cfg.seed ^ 0xfeed),
                |_, _| {},
            );
            std::thread::sleep(PAUSE);
        }
        for &clients in &cfg.clients {
            let cpu0 = server.cpu_seconds();
            let me0 = process_cpu(std::process::id());
            let report = seda_load::client::run(
                &load(server.addr(), clients, cfg.duration, cfg.seed + clients),
                |_, _| {},
            )
            .map_err(ExperimentError::other)?;
            let cpu = server.cpu_seconds() - cpu0;
            let client_cpu_s = process_cpu(std::process::id()) - me0;
            let per_req = if report.completed > 0 {
                cpu * 1e6 / report.completed as f64
            } else {
                0.0
            };
            log(&format!(
                "   {:>5} clients: {:>8.1} req/s {:>7.1} Mbit/s  rt mean {:>8.1} ms  p90 {:>8.1}  max {:>8.1} ms  fairness {:.3}  errors {}  server CPU {:.0} us/req, client CPU {:.0} %",
                clients,
                report.throughput_rps,
                report.throughput_mbps,
                report.rt_mean_ms,
                report.rt_p90_ms,
                report.rt_max_ms,
                report.fairness.unwrap_or(0.0),
                report.errors,
                per_req,
                100.0 * client_cpu_s / report.elapsed_s
            ));
            results.runs.push(Fig12Run {
                server: spec.name.clone(),
                clients,
                server_cpu_s: cpu,
                server_cpu_us_per_req: per_req,
                client_cpu_s,
                report,
            });
            write_outputs(&cfg.out, &results)?;
            std::thread::sleep(PAUSE);
        }
        let logs = server.log_tail();
        if !logs.is_empty() {
            let dir = cfg.out.join("logs");
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join(format!("{}.log", spec.name)), logs);
        }
        if let Err(e) = server.stop() {
            log(&format!("   {e}"));
        }
    }
    write_outputs(&cfg.out, &results)?;
    log(&format!(
        "wrote {}/{{runs.json,table.md,throughput.svg,{}}}",
        cfg.out.display(),
        cdf_name(&results)
    ));
    Ok(results)
}

/// The largest planned client count (the CDF chart's).
fn max_clients(r: &Fig12Results) -> u64 {
    r.setup["clients"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|c| c.as_u64()).max())
        .unwrap_or_else(|| r.runs.iter().map(|x| x.clients).max().unwrap_or(0))
}

fn cdf_name(r: &Fig12Results) -> String {
    format!("cdf-{}.svg", max_clients(r))
}

/// Write runs.json, table.md and the two charts from the runs so far.
pub fn write_outputs(out: &Path, r: &Fig12Results) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    let names: Vec<&String> = r
        .servers
        .iter()
        .map(|(n, _)| n)
        .filter(|n| r.runs.iter().any(|x| &x.server == *n))
        .collect();
    let throughput: Vec<Series> = names
        .iter()
        .map(|n| Series {
            name: (*n).clone(),
            points: r
                .runs
                .iter()
                .filter(|x| &x.server == *n)
                .map(|x| (x.clients as f64, x.report.throughput_mbps))
                .collect(),
        })
        .collect();
    line_chart(
        &out.join("throughput.svg"),
        &Chart {
            title: &format!("Throughput vs clients (SEDA Fig. 12a), {}", r.date),
            x_label: "clients (log scale)",
            y_label: "throughput, Mbit/s",
            x_log: true,
            y_log: false,
            y_range: None,
        },
        &throughput,
    )?;
    let max = max_clients(r);
    // Requests that never got an answer count as infinitely slow: each curve is scaled
    // by the fraction of finished requests that completed, so it tops out below 1.
    let cdfs: Vec<Series> = names
        .iter()
        .filter_map(|n| r.runs.iter().find(|x| &x.server == *n && x.clients == max))
        .map(|x| {
            let m = &x.report;
            let f = m.completed as f64 / (m.completed + m.errors).max(1) as f64;
            Series {
                name: x.server.clone(),
                points: m.cdf.iter().map(|c| (c.rt_ms, c.p * f)).collect(),
            }
        })
        .collect();
    line_chart(
        &out.join(cdf_name(r)),
        &Chart {
            title: &format!(
                "Response time CDF at {max} clients (SEDA Fig. 12b), {}",
                r.date
            ),
            x_label: "response time, ms (log scale)",
            y_label: "P[response time <= x] (unanswered = never)",
            x_log: true,
            y_log: false,
            y_range: Some((0.0, 1.0)),
        },
        &cdfs,
    )
}

/// RT max of completed requests or, when a request waited longer without any
/// answer, "> that wait" (the run ended before the request did).
fn fmt_max(m: &LoadReport) -> String {
    if m.unanswered_wait_max_ms > m.rt_max_ms {
        format!("> {:.0} ms", m.unanswered_wait_max_ms)
    } else {
        format!("{:.0} ms", m.rt_max_ms)
    }
}

fn fmt_errors(m: &LoadReport) -> String {
    if m.errors == 0 {
        return "0".into();
    }
    let kinds: Vec<String> = m
        .errors_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    format!("{} ({})", m.errors, kinds.join(", "))
}

fn fmt_fair(f: Option<f64>) -> String {
    f.map_or("-".into(), |f| format!("{f:.3}"))
}

/// The markdown table: the paper's layout at 256 and 1,024 clients, then every point.
pub fn table(r: &Fig12Results) -> String {
    let mut s = format!("# SEDA Fig. 12 on this machine, {}\n\n", r.date);
    s.push_str(&format!(
        "{}. File set: {} files, {:.0} MiB; closed loop, 20 ms think time, 5 requests per connection; {} s per point.\n\n",
        r.setup["machine"].as_str().unwrap_or(""),
        r.setup["fileset"]["files"],
        r.setup["fileset"]["total_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        r.setup["duration_s"]
    ));
    for (name, desc) in &r.servers {
        s.push_str(&format!("- **{name}**: {desc}\n"));
    }
    for (name, why) in &r.skipped {
        s.push_str(&format!("- **{name}**: not measured: {why}\n"));
    }
    let cols: Vec<u64> = [256u64, 1024]
        .into_iter()
        .filter(|c| r.runs.iter().any(|x| x.clients == *c))
        .collect();
    if !cols.is_empty() {
        s.push_str("\n| Server |");
        for c in &cols {
            s.push_str(&format!(
                " {c} clients: Throughput | RT mean | RT max | Fairness |"
            ));
        }
        s.push_str("\n|---|");
        for _ in &cols {
            s.push_str("---:|---:|---:|---:|");
        }
        s.push('\n');
        for (name, _) in &r.servers {
            if !r.runs.iter().any(|x| &x.server == name) {
                continue;
            }
            s.push_str(&format!("| {name} |"));
            for c in &cols {
                match r.runs.iter().find(|x| &x.server == name && x.clients == *c) {
                    Some(x) => s.push_str(&format!(
                        " {:.1} Mbps | {:.1} ms | {} | {} |",
                        x.report.throughput_mbps,
                        x.report.rt_mean_ms,
                        fmt_max(&x.report),
                        fmt_fair(x.report.fairness)
                    )),
                    None => s.push_str(" - | - | - | - |"),
                }
            }
            s.push('\n');
        }
    }
    s.push_str("\n## Every point\n\n| Server | Clients | req/s | Mbit/s | RT mean ms | RT p50 | RT p90 | RT p99 | RT max | Fairness | Starved users | Errors | Server CPU us/req | Client CPU % |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for x in &r.runs {
        let m = &x.report;
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.0} | {:.0} |\n",
            x.server,
            x.clients,
            m.throughput_rps,
            m.throughput_mbps,
            m.rt_mean_ms,
            m.rt_p50_ms,
            m.rt_p90_ms,
            m.rt_p99_ms,
            fmt_max(m),
            fmt_fair(m.fairness),
            m.users_starved,
            fmt_errors(m),
            x.server_cpu_us_per_req,
            100.0 * x.client_cpu_s / m.elapsed_s.max(1e-9)
        ));
    }
    s
}
