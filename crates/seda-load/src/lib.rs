//! Load generation and experiments for SEDA (issue 4).
//!
//! - [`fileset`]: SPECweb99-style file sets and their manifest; [`dist`]: the
//!   popularity model (Zipf over directories, class mix 35/50/14/1, Zipf in a class).
//! - [`client`]: the event-driven HTTP load generator (closed and open loop, load
//!   schedules), producing a [`LoadReport`].
//! - [`metrics`]: response-time histograms, CDFs, Jain's fairness index.
//! - [`testserver`]: a fixed-delay HTTP server to validate the generator against.
//! - [`experiment`]: starting and stopping real servers (Haboob, nginx, Apache),
//!   running load series, and writing JSON, tables and SVG charts; `fig12` reruns
//!   SEDA SOSP'01 Fig. 12.
//! - [`haproxy`]: the HAProxy configuration for `seda serve` replicas (agent checks,
//!   retries of refused requests on other replicas).

pub mod client;
pub mod dist;
pub mod experiment;
pub mod fileset;
pub mod haproxy;
pub mod http;
pub mod metrics;
pub mod report;
pub mod schedule;
pub mod testserver;

pub use client::{LoadConfig, Mode, Progress, RequestMix, parse_url};
pub use report::{LoadReport, PhaseSummary, TimePoint};
pub use schedule::Schedule;
