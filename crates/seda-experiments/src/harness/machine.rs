//! When and where a result was taken: the date, the machine, its load.

use std::path::Path;

use procfs::Current;

/// Today's date in UTC as YYYY-MM-DD.
pub fn date_utc() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%d").to_string()
}

/// "N cores, M GiB RAM, Linux X" for result headers.
pub fn machine_summary() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = procfs::Meminfo::current().map_or(0.0, |m| m.mem_total as f64 / GIB);
    let uname = rustix::system::uname();
    let kernel = uname.release().to_string_lossy();
    format!("{cores} cores, {mem_gib:.0} GiB RAM, Linux {kernel}")
}

const GIB: f64 = (1u64 << 30) as f64;

/// Sectors read from the machine's disks so far (all whole devices in
/// `/proc/diskstats`), in bytes.
pub fn disk_read_bytes() -> u64 {
    let Ok(disks) = procfs::diskstats() else {
        return 0;
    };
    disks
        .iter()
        // Whole devices only (partitions would count their reads twice).
        .filter(|d| Path::new("/sys/block").join(&d.name).exists() && !d.name.starts_with("loop"))
        .map(|d| d.sectors_read)
        .sum::<u64>()
        * 512
}

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`, two decimals).
pub fn load_average() -> Option<(f64, f64, f64)> {
    let l = procfs::LoadAverage::current().ok()?;
    let two = |x: f32| (f64::from(x) * 100.0).round() / 100.0;
    Some((two(l.one), two(l.five), two(l.fifteen)))
}

/// The load averages as `/proc/loadavg` writes them ("0.52 0.61 0.70"), empty if
/// unknown: the form result headers quote.
pub fn load_average_text() -> String {
    load_average().map_or_else(String::new, |(a, b, c)| format!("{a:.2} {b:.2} {c:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_describes_itself() {
        let d = date_utc();
        assert!(
            d.len() == 10 && d.starts_with("20") && d.as_bytes()[4] == b'-',
            "{d}"
        );
        let (one, five, fifteen) = load_average().expect("/proc/loadavg");
        assert!(one >= 0.0 && five >= 0.0 && fifteen >= 0.0);
        assert_eq!(load_average_text().split(' ').count(), 3);
        let s = machine_summary();
        assert!(
            s.contains(" cores, ") && s.contains(" GiB RAM, Linux "),
            "{s}"
        );
        assert!(
            !s.contains(
                "Linux 
"
            ) && !s.ends_with("Linux "),
            "{s}"
        );
    }
}
