//! HAProxy in front of `seda serve` replicas: [`config`] writes the configuration
//! (agent checks, refused requests retried on another replica) that `seda
//! haproxy-config` prints, and [`process`] runs HAProxy as a child process and reads
//! its statistics.

pub mod config;
pub mod process;

pub use config::{Balance, HaproxyConfig, Replica, replicas};
pub use process::{HaproxyProcess, check_config, ensure_haproxy, find_haproxy};
