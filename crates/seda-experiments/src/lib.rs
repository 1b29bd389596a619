//! # seda-experiments: the papers' figures rerun on this machine
//!
//! Every `seda experiment NAME` lives here, one module per experiment, named after
//! the figure it reruns, with the servers that exist only for an experiment. The
//! applications do not depend on this crate: it depends on them, and on `seda_load`
//! for the load.
//!
//! | module | `seda experiment` | reruns |
//! |---|---|---|
//! | [`fig12`] | `fig12` | SEDA SOSP'01 Fig. 12: Haboob vs nginx vs Apache on a SPECweb99-style file set |
//! | [`overload`] | `overload` | SEDA Fig. 13 and USITS'03 Figs. 10-15: adaptive overload control on a CPU-bound bottleneck |
//! | [`gnutella`] | `gnutella`, `gnutella-throughput` | SEDA Fig. 14 (the router with a 20 ms query cost) and throughput against a plain loop |
//! | [`arashi`] | `arashi` | USITS'03 Figs. 8-11, 14-15: the Arashi mail service under emulated mail readers |
//! | [`flash`] | `flash` | Flash (USENIX'99) sections 5-6: AMPED vs SPED under a memory limit, caches one by one |
//! | [`colors`] | `colors` | libasync-mp thesis 5.2: an SFS-like sealing server, colors vs one color |
//! | [`scale_out`] | `scale-out` | replicas of `seda serve` behind HAProxy (agent checks, retried 503s) |
//! | [`soak`] | `soak` | Haboob under cycles of overload and hostile clients, memory watched |
//! | [`proxy`] | `proxy` | `seda serve --proxy` in front of gunicorn against nginx and HAProxy (issue 26) |
//!
//! [`harness`] holds what they share: server processes, stats polling, HAProxy,
//! cgroups, charts, the machine's description and the output files.
#![forbid(unsafe_code)]

mod error;

pub mod arashi;
pub mod colors;
pub mod fig12;
pub mod flash;
pub mod gnutella;
pub mod harness;
pub mod overload;
pub mod proxy;
pub mod scale_out;
pub mod soak;

pub use error::ExperimentError;
