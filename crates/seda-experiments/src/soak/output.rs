//! The soak's outputs: `soak.json` (everything), `summary.md` (the tables),
//! `rss.svg` and `fds.svg` (the server over time, calm points marked).

use std::fmt::Write as _;
use std::path::Path;

use super::hostile::Tally;
use super::results::SoakResults;
use crate::ExperimentError;
use crate::harness::plot::{Chart, Series, line_chart};

/// Writes `soak.json`, `summary.md`, `rss.svg` and `fds.svg` to `out`.
pub fn write_outputs(out: &Path, r: &SoakResults) -> Result<(), ExperimentError> {
    let w = |name: &str, text: String| {
        std::fs::write(out.join(name), text)
            .map_err(|e| ExperimentError::step(format!("cannot write {name}"), e))
    };
    w(
        "soak.json",
        serde_json::to_string_pretty(r).map_err(ExperimentError::other)?,
    )?;
    w("summary.md", summary(r))?;
    let calm = |f: fn(&super::sampler::ProcSample) -> f64| Series {
        name: "calm point of a cycle".into(),
        points: r
            .cycles
            .iter()
            .filter_map(|c| c.calm.as_ref().map(|s| (s.t, f(s))))
            .collect(),
    };
    let rss = |s: &super::sampler::ProcSample| s.rss_kib as f64 / 1024.0;
    line_chart(
        &out.join("rss.svg"),
        &Chart {
            title: "seda serve under the soak: resident memory",
            x_label: "seconds",
            y_label: "RSS (MiB)",
            x_log: false,
            y_log: false,
            y_range: None,
        },
        &[
            Series {
                name: "RSS, every second".into(),
                points: r.samples.iter().map(|s| (s.t, rss(s))).collect(),
            },
            calm(rss),
        ],
    )?;
    let fds = |s: &super::sampler::ProcSample| s.fds as f64;
    line_chart(
        &out.join("fds.svg"),
        &Chart {
            title: "seda serve under the soak: open descriptors",
            x_label: "seconds",
            y_label: "descriptors",
            x_log: false,
            y_log: false,
            y_range: None,
        },
        &[
            Series {
                name: "descriptors, every second".into(),
                points: r.samples.iter().map(|s| (s.t, fds(s))).collect(),
            },
            calm(fds),
        ],
    )
}

fn row(t: &mut String, name: &str, x: &Tally) {
    let statuses: Vec<String> = x
        .statuses
        .iter()
        .map(|(s, n)| format!("{s}: {n}"))
        .collect();
    let _ = writeln!(
        t,
        "| {name} | {} | {} | {} | {} | {} | {} | {} |",
        x.exchanges,
        x.answered,
        x.refused,
        x.closed,
        x.abandoned,
        x.unanswered,
        statuses.join(", ")
    );
}

/// The tables of `summary.md`.
pub fn summary(r: &SoakResults) -> String {
    let v = &r.verdict;
    let mib = |k: u64| k as f64 / 1024.0;
    let mut t = String::new();
    let _ = writeln!(t, "# seda experiment soak, {}\n", r.date);
    let _ = writeln!(
        t,
        "{} cycles in {:.0} s; `seda serve {}`; {}.\n",
        r.cycles.len(),
        r.wall_s,
        r.serve_args.join(" "),
        r.setup["machine"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        t,
        "Load average before: {}; after: {}.\n",
        r.setup["load_average_before"], r.setup["load_average_after"]
    );
    let _ = writeln!(
        t,
        "**{}**{}\n",
        if r.passed() { "PASSED" } else { "FAILED" },
        if v.failures.is_empty() {
            String::new()
        } else {
            format!(": {}", v.failures.join("; "))
        }
    );
    let _ = writeln!(t, "## The server\n");
    let _ = writeln!(t, "| | start | peak | end |\n|---|---:|---:|---:|");
    let _ = writeln!(
        t,
        "| RSS (MiB) | {:.1} | {:.1} | {:.1} |",
        mib(v.rss_start_kib),
        mib(v.rss_peak_kib),
        mib(v.rss_end_kib)
    );
    let _ = writeln!(
        t,
        "| descriptors | {} | {} | {} (last calm point) |\n",
        v.fds_start, v.fds_peak, v.fds_end_calm
    );
    let calm: Vec<String> = r
        .cycles
        .iter()
        .filter_map(|c| c.calm.map(|s| format!("{:.1}", mib(s.rss_kib))))
        .collect();
    let _ = writeln!(
        t,
        "RSS at each cycle's calm point (MiB): {}.\n",
        calm.join(", ")
    );
    let _ = writeln!(t, "## Requests and connections\n");
    let _ = writeln!(
        t,
        "Answered = 2xx/3xx; refused = a clean 503, 408 or other 4xx; closed = cut by the server where no response was owed; abandoned = the client left first; unanswered = owed a response that never came, or held past every timeout.\n"
    );
    let _ = writeln!(
        t,
        "| client | exchanges | answered | refused | closed | abandoned | unanswered | statuses |\n|---|---:|---:|---:|---:|---:|---:|---|"
    );
    row(&mut t, "**all well-behaved**", &v.well_behaved);
    row(&mut t, "canary (fresh GET, 2/s)", &r.canary);
    for (kind, x) in &r.hostile {
        let name = format!(
            "{}{}",
            serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            if kind.well_behaved() {
                " (well-behaved)"
            } else {
                ""
            }
        );
        row(&mut t, &name, x);
    }
    row(&mut t, "**all hostile**", &v.hostile);
    let _ = writeln!(t);
    let base = r.base.as_ref();
    let _ = writeln!(
        t,
        "Closed-loop users on `/bottleneck`: base {} issued, {} answered, {} refused (503), {} errors {:?}; spikes {} issued, {} answered, {} refused, {} errors {:?}. Canary's slowest answer: {:.0} ms.",
        base.map_or(0, |b| b.issued),
        base.map_or(0, |b| b.completed),
        base.map_or(0, |b| b.rejected),
        base.map_or(0, |b| b.errors),
        base.map(|b| b.errors_by_kind.clone()).unwrap_or_default(),
        r.spikes.issued,
        r.spikes.completed,
        r.spikes.rejected,
        r.spikes.errors,
        r.spikes.errors_by_kind,
        r.canary_max_ms
    );
    t
}
