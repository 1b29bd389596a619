//! Experiments: servers under test, load series, tables and charts.
//!
//! The pieces are reusable by any experiment: [`server`] starts and stops a server
//! process on loopback (Haboob, nginx, Apache) and measures its CPU; the load itself
//! is [`crate::client::run`] with a [`crate::Schedule`], whose report carries the
//! per-second time series and the CDF; [`plot`] writes SVG line charts. [`fig12`] is
//! SEDA SOSP'01 Fig. 12 built from them; [`overload`] is the overload-control
//! experiment (SEDA Fig. 13, USITS'03 section 4); [`colors`] is libasync-mp's colors
//! on an SFS-like sealing server (thesis 5.2); [`soak`] holds Haboob under cycles
//! of overload and hostile clients and watches its memory (issue 11); [`scale_out`]
//! runs replicas behind HAProxy; [`flash`] is Flash's AMPED vs SPED under a memory
//! limit and its caches one by one (USENIX'99 sections 5-6).

pub mod colors;
pub mod fig12;
pub mod flash;
pub mod overload;
pub mod plot;
pub mod scale_out;
pub mod server;
pub mod soak;

/// Writes an experiment's `runs.json` (every run, pretty JSON) and `table.md` to `out`.
pub fn write_runs_and_table<T: serde::Serialize>(
    out: &std::path::Path,
    runs: &T,
    table: String,
) -> Result<(), String> {
    let w = |name: &str, text: String| {
        std::fs::write(out.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))
    };
    w(
        "runs.json",
        serde_json::to_string_pretty(runs).map_err(|e| e.to_string())?,
    )?;
    w("table.md", table)
}

/// Checksum passes of the bottleneck for `ms` of CPU per request: `given`, or the
/// largest of five calibrations here (the one least disturbed by other load on the
/// machine), said through `log`. Experiments pass the result to every
/// `seda serve --bottleneck-passes`, so that every server of every run does the same
/// work per request.
pub fn bottleneck_passes(
    given: Option<u64>,
    ms: f64,
    log: &mut dyn FnMut(&str),
) -> Result<u64, String> {
    if let Some(k) = given {
        return Ok(k);
    }
    let d = std::time::Duration::from_secs_f64(ms / 1e3);
    let mut best = 0;
    for _ in 0..5 {
        let b = seda_http::Bottleneck::calibrate(d)
            .map_err(|e| format!("cannot calibrate the bottleneck: {e}"))?;
        best = best.max(b.passes());
    }
    log(&format!(
        "bottleneck: {ms} ms calibrated here to {best} passes (largest of 5), used by every server"
    ));
    Ok(best)
}

/// Today's date in UTC as YYYY-MM-DD.
pub fn date_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// "N cores, M GiB RAM, Linux X" for result headers.
pub fn machine_summary() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / (1024.0 * 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores, {mem_gib:.0} GiB RAM, Linux {}",
        kernel.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-11-22 is day 20,779.
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
    }
}
