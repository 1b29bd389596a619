//! When and where a result was taken: the date, the machine, its load.

use std::fs;
use std::path::Path;

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

/// Sectors read from the machine's disks so far (all whole devices in
/// `/proc/diskstats`), in bytes.
pub fn disk_read_bytes() -> u64 {
    let text = fs::read_to_string("/proc/diskstats").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.get(2)?;
            // Whole devices only (partitions would count their reads twice).
            if !Path::new("/sys/block").join(name).exists() || name.starts_with("loop") {
                return None;
            }
            f.get(5)?.parse::<u64>().ok()
        })
        .sum::<u64>()
        * 512
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> Option<(f64, f64, f64)> {
    let t = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = t.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
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
