//! The Flash experiment's table and charts.

use std::fmt::Write as _;
use std::path::Path;

use super::results::{CacheRun, DiskRun, FlashResults};
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};
use crate::harness::write_runs_and_table;

/// Write runs.json, table.md, throughput.svg and p90.svg from the runs so far.
pub fn write_outputs(out: &Path, r: &FlashResults) -> Result<(), ExperimentError> {
    write_runs_and_table(out, r, table(r))?;
    if r.disk.is_empty() {
        return Ok(());
    }
    let series = |y: fn(&DiskRun) -> f64| -> Vec<Series> {
        servers(&r.disk)
            .into_iter()
            .map(|name| Series {
                points: r
                    .disk
                    .iter()
                    .filter(|x| x.server == name)
                    .map(|x| (x.share * 100.0, y(x)))
                    .collect(),
                name,
            })
            .collect()
    };
    line_chart(
        &out.join("throughput.svg"),
        &Chart {
            title: &format!(
                "Throughput vs share of the file set in memory (Flash Figs. 8-10), {}",
                r.date
            ),
            x_label: "% of the file set that fits in the memory limit (log scale)",
            y_label: "requests/s",
            x_log: true,
            y_log: false,
            y_range: None,
        },
        &series(|x| x.report.throughput_rps),
    )?;
    line_chart(
        &out.join("p90.svg"),
        &Chart {
            title: &format!(
                "90th-percentile response time vs share in memory, {}",
                r.date
            ),
            x_label: "% of the file set that fits in the memory limit (log scale)",
            y_label: "p90 response time, ms (log scale)",
            x_log: true,
            y_log: true,
            y_range: None,
        },
        &series(|x| x.report.rt_p90_ms),
    )
}

/// Server names in the order they first ran.
fn servers(runs: &[DiskRun]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for x in runs {
        if !names.contains(&x.server) {
            names.push(x.server.clone());
        }
    }
    names
}

fn find<'a>(runs: &'a [DiskRun], server: &str, share: f64) -> Option<&'a DiskRun> {
    runs.iter()
        .find(|x| x.server == server && (x.share - share).abs() < 1e-9)
}

/// `a / b` as "1.23x", or "-".
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

/// The markdown tables.
pub fn table(r: &FlashResults) -> String {
    let mut t = String::new();
    let setup = &r.setup;
    let _ = writeln!(
        t,
        "# Flash experiment, {}\n\nMachine: {}. Load average at start {}. Disk set {:.0} MiB ({} files), {} closed-loop clients without think time, 5 requests per connection; {} s warm-up + {} s measured per point. Memory limits: {}. Cache at the start of a point: {}.\n",
        r.date,
        setup["machine"].as_str().unwrap_or("?"),
        setup["load1_at_start"],
        setup["disk_set"]["total_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 20) as f64,
        setup["disk_set"]["files"],
        setup["clients"],
        setup["warmup_s"],
        setup["duration_s"],
        if setup["cgroup_limits"].as_bool() == Some(true) {
            "cgroup v1 memory.limit_in_bytes = share x set + headroom"
        } else {
            "none (no cgroup: every share ran from memory)"
        },
        if setup["prewarm"].as_bool() == Some(true) {
            "the popular share of the set read in the server's cgroup"
        } else {
            "cold (the set evicted)"
        }
    );
    disk_tables(&mut t, &r.disk);
    cache_table(&mut t, &r.caches);
    if !r.skipped.is_empty() {
        let _ = writeln!(t, "\nSkipped:\n");
        for (what, why) in &r.skipped {
            let _ = writeln!(t, "- {what}: {why}");
        }
    }
    t
}

fn disk_tables(t: &mut String, runs: &[DiskRun]) {
    if runs.is_empty() {
        return;
    }
    let names = servers(runs);
    let mut shares: Vec<f64> = Vec::new();
    for x in runs {
        if !shares.iter().any(|s| (s - x.share).abs() < 1e-9) {
            shares.push(x.share);
        }
    }
    let _ = writeln!(
        t,
        "## Disk-bound: throughput (req/s) and p90 (ms) vs share of the set in memory\n"
    );
    let _ = write!(t, "| in memory | limit MiB |");
    for n in &names {
        let _ = write!(t, " {n} req/s | p90 ms |");
    }
    let _ = writeln!(t, " AMPED / SPED | nginx aio / no aio |");
    let _ = write!(t, "|---|---|");
    for _ in &names {
        let _ = write!(t, "---|---|");
    }
    let _ = writeln!(t, "---|---|");
    let rps = |n: &str, s: f64| find(runs, n, s).map(|x| x.report.throughput_rps);
    for &s in &shares {
        let limit = runs
            .iter()
            .find(|x| (x.share - s).abs() < 1e-9)
            .map_or(0, |x| x.limit_bytes >> 20);
        let _ = write!(t, "| {:.0} % | {limit} |", s * 100.0);
        for n in &names {
            match find(runs, n, s) {
                Some(x) => {
                    let _ = write!(
                        t,
                        " {:.0} | {:.1} |",
                        x.report.throughput_rps, x.report.rt_p90_ms
                    );
                }
                None => {
                    let _ = write!(t, " - | - |");
                }
            }
        }
        let _ = writeln!(
            t,
            " {} | {} |",
            ratio(rps("haboob-amped", s), rps("haboob-sped", s)),
            ratio(rps("nginx-aio", s), rps("nginx", s))
        );
    }
    let _ = writeln!(
        t,
        "\n### Details per point\n\n| server | in memory | req/s | Mbit/s | p50 ms | p90 ms | p99 ms | errors | disk read MB/s | memory peak MiB | page cache MiB | anon MiB | server CPU us/req | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for x in runs {
        let r = &x.report;
        let _ = writeln!(
            t,
            "| {} | {:.0} % | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {} | {} | {} | {:.0} | {:.1} |",
            x.server,
            x.share * 100.0,
            r.throughput_rps,
            r.throughput_mbps,
            r.rt_p50_ms,
            r.rt_p90_ms,
            r.rt_p99_ms,
            r.errors,
            x.disk_read_mbps,
            x.memory.max_usage >> 20,
            x.memory.cache >> 20,
            x.memory.rss >> 20,
            x.server_cpu_us_per_req,
            x.load1
        );
    }
}

fn cache_table(t: &mut String, runs: &[CacheRun]) {
    if runs.is_empty() {
        return;
    }
    let base = runs.iter().find(|x| x.config == "all");
    let _ = writeln!(
        t,
        "\n## The caches one by one (cached workload; ratios against `all` of this run)\n\n| configuration | switches | req/s | vs all | p90 ms | server CPU us/req | vs all | path cache KiB | page cache MiB | load |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for x in runs {
        let kib = |b: Option<u64>| b.map_or("-".into(), |b| format!("{:.0}", b as f64 / 1024.0));
        let mib = |b: Option<u64>| {
            b.map_or("-".into(), |b| {
                format!("{:.1}", b as f64 / (1 << 20) as f64)
            })
        };
        let _ = writeln!(
            t,
            "| {} | {} | {:.0} | {} | {:.2} | {:.1} | {} | {} | {} | {:.1} |",
            x.config,
            x.switches,
            x.report.throughput_rps,
            ratio(
                Some(x.report.throughput_rps),
                base.map(|b| b.report.throughput_rps)
            ),
            x.report.rt_p90_ms,
            x.server_cpu_us_per_req,
            ratio(
                Some(x.server_cpu_us_per_req),
                base.map(|b| b.server_cpu_us_per_req)
            ),
            kib(x.path_cache_bytes),
            mib(x.page_cache_bytes),
            x.load1
        );
    }
}
