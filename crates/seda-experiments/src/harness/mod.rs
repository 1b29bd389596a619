//! What every experiment is built from: server processes, their stats, HAProxy,
//! memory cgroups, the machine's description, output files and charts.
//!
//! - [`server`]: starts and stops a server under test on loopback (Haboob, nginx,
//!   Apache), installs what is missing, probes it, and measures its CPU.
//! - [`stats`]: polls a `seda serve` admin listener (`/_seda/stats`) into a time
//!   series of one stage's admission state.
//! - [`haproxy`]: the HAProxy configuration for `seda serve` replicas and HAProxy as
//!   a child process.
//! - [`cgroup`]: a cgroup v1 memory group and page-cache eviction.
//! - [`plot`]: SVG line charts.
//! - [`date_utc`], [`machine_summary`], [`load_average`], [`disk_read_bytes`]: what a
//!   result's header says about when and where it was taken;
//!   [`write_runs_and_table`]: an experiment's `runs.json` and `table.md`;
//!   [`bottleneck_passes`]: the CPU-bound bottleneck calibrated once for every server.
//!
//! The load itself comes from `seda_load` (closed- or open-loop users on a
//! [`seda_load::Schedule`]), whose report carries the per-second time series and the
//! CDF.

pub mod cgroup;
pub mod haproxy;
pub mod plot;
pub mod server;
pub mod stats;

mod bottleneck;
mod machine;
mod output;

pub use bottleneck::bottleneck_passes;
pub use machine::{date_utc, disk_read_bytes, load_average, load_average_text, machine_summary};
pub use output::write_runs_and_table;
