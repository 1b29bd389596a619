//! What `seda experiment flash` measured: the disk-bound points and the cache
//! switches. A leaf: the runner writes it, the outputs read it.

use seda_load::report::LoadReport;
use serde::Serialize;

use crate::harness::cgroup::MemoryUse;

/// One disk-bound point.
#[derive(Debug, Clone, Serialize)]
pub struct DiskRun {
    /// Server name.
    pub server: String,
    /// Share of the set that fits in the limit (the x axis).
    pub share: f64,
    /// The group's memory limit, bytes (0: no limit, no cgroup).
    pub limit_bytes: u64,
    /// Haboob's page cache, MiB (nginx: none).
    pub haboob_cache_mb: Option<u64>,
    /// The group's memory at the end of the point.
    pub memory: MemoryUse,
    /// Bytes read from the disks during the measured time, MB/s (the whole
    /// machine's disks: other work on the box adds to it).
    pub disk_read_mbps: f64,
    /// Server CPU (whole process tree) per completed request, microseconds.
    pub server_cpu_us_per_req: f64,
    /// 1-minute load average at the end of the point.
    pub load1: f64,
    /// The load generator's report of the measured time.
    pub report: LoadReport,
}

/// One point of the caches part.
#[derive(Debug, Clone, Serialize)]
pub struct CacheRun {
    /// Configuration name (`all`, `no-path-cache`, ...).
    pub config: String,
    /// What differs from the default server.
    pub switches: String,
    /// Server CPU per completed request, microseconds.
    pub server_cpu_us_per_req: f64,
    /// Bytes Haboob's path cache (translations, headers, descriptors) held at the end.
    pub path_cache_bytes: Option<u64>,
    /// Bytes Haboob's page cache held at the end.
    pub page_cache_bytes: Option<u64>,
    /// 1-minute load average at the end of the point.
    pub load1: f64,
    /// The load generator's report of the measured time.
    pub report: LoadReport,
}

/// Everything `runs.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct FlashResults {
    /// Experiment name.
    pub experiment: &'static str,
    /// UTC date of the run.
    pub date: String,
    /// Machine, sets, load and memory settings.
    pub setup: serde_json::Value,
    /// Server descriptions.
    pub servers: Vec<(String, String)>,
    /// Runs that could not be made, with the reason.
    pub skipped: Vec<(String, String)>,
    /// The disk-bound points.
    pub disk: Vec<DiskRun>,
    /// The caches points.
    pub caches: Vec<CacheRun>,
}
