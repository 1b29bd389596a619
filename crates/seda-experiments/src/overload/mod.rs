//! `seda experiment overload`: Haboob's adaptive overload control against a CPU-bound
//! bottleneck stage (SEDA SOSP'01 5.1.4, USITS'03 section 4), on this machine.
//!
//! Every run starts `seda serve --bottleneck-ms N --bottleneck-passes K ...` on
//! loopback (K calibrated once before the first run, so that every server does the
//! same work per request whatever else loads the machine at its start-up), drives closed-loop
//! users at `/bottleneck` (20 ms think time; a user answered 503 or failed waits
//! `retry_wait`, 5 s as in USITS'03 4.1, before trying again), records the client's
//! per-second series and polls `/_seda/stats` once a second for the bottleneck stage's
//! admission rate, controller p90, quality and per-class counts.
//!
//! Scenarios ([`Scenario`]), each a few runs ([`RunSpec`]) that differ only in the
//! server's flags, each run repeated `repeats` times (tables give the median and the
//! spread):
//! - `knee`: no control, a staircase of users; the bottleneck's capacity is the
//!   peak 2xx rate, and its CPU per served request is measured there.
//! - `refusal`: a stage whose token bucket is pinned at 0.05/s refuses nearly every
//!   request: the server's CPU per refusal, against the CPU per served request.
//! - `fig13` (SEDA Fig. 13): many users, no control vs the response-time controller.
//! - `spike` (USITS Fig. 10): base -> spike -> base users, no control, the paper's
//!   response-time controller, the default (`--rt-target-ms` alone), a plain
//!   connection limit.
//! - `degrade` (USITS Figs. 12-13): degradation with admission control.
//! - `classes` (USITS Figs. 14-15): a low class all along, a high class arriving for
//!   the middle phase; the default policy vs the paper's multiclass controller.
//! - `policies`: the spike runs of `spike` (none, paper, default) beside CoDel, the
//!   gradient limit, and nginx's `limit_req` in front of an uncontrolled server.
//!
//! The figures each run is judged by are in [`metrics`]; [`summary`] aggregates the
//! repeats; [`output`] writes `runs.json`, `table.md` and the SVG charts.

mod config;
pub mod metrics;
pub mod output;
mod plan;
mod results;
mod runner;
pub mod summary;

pub use config::{CLASS_HEADER, Front, OverloadConfig, RunSpec, Scenario, UserGroup};
pub use plan::{REFUSE_ALL_TOML, eta, plan};
pub use results::{GroupResult, OverloadResults, RunResult};
pub use runner::run;
