//! `seda experiment proxy` (issue 26, item 3): the front door in front of a backend
//! that no one here wrote, against the fronts people put there today.
//!
//! The backend is gunicorn with sync workers serving `bench/proxy/app.py` (one
//! CPU-bound endpoint, `GET /work?ms=N&dist=D`; `bench/proxy/install.sh` installs
//! gunicorn from PyPI): a worker serves one request at a time, so the backend's
//! capacity is about workers / cost, and a request beyond it waits in gunicorn's
//! listen queue. Every run starts a fresh backend and a fresh front.
//!
//! 1. **Knee**: closed-loop users without think time straight at the backend, a
//!    staircase of user counts, then a longer step of two users per worker (every
//!    worker busy, one request waiting for each); the capacity is that step's median
//!    second (its first and last left out). The best staircase step's mean, the
//!    capacity of runs before 2026-11-27 07:00 UTC, is kept beside it
//!    (`knee_peak_rps`): a 3 s step overstated what the backend sustains. The
//!    same sustained step runs again on a fresh backend right before each shape of
//!    each repeat (`capacity_checks`): what the backend serves moves with the
//!    machine by more than the 10 % the target allows (177.5 and 194.0 req/s in
//!    two runs of 2026-11-27 half an hour apart; nginx `proxy_pass`, which keeps
//!    the backend busy, served 0.82-0.96x of a start-of-run capacity within one
//!    run), so a run is judged against the capacity measured minutes before it,
//!    not 20 minutes before. Every limit below that needs a number (nginx's rate,
//!    HAProxy's connections) and every load level is sized from the shape's
//!    capacity; `seda serve` is told only its p90 target.
//! 2. **Load shapes** ([`Shape`]), each in three phases (before, overload, after):
//!    - `spike`: closed-loop users (20 ms think, a refused or failed user waits
//!      `retry_wait`), base -> spike -> base, as `seda experiment overload`;
//!    - `open-1.5x`, `open-3x`, `open-10x`: Poisson arrivals (no back-off, no think)
//!      at half the capacity, then the factor times the capacity, then half again;
//!    - `drop`: Poisson arrivals at 0.8x the capacity throughout; the backend loses
//!      half its workers (gunicorn's `TTOU`, once per worker) when the middle phase
//!      starts, so the same load is 1.6x what it can serve, and gets them back
//!      (`TTIN`) when the last phase starts.
//! 3. **Fronts** ([`Front`]), same backend: nginx `proxy_pass` (keep-alive upstream,
//!    no limit); nginx `limit_req` at the measured capacity with a burst of one
//!    target's worth plus `limit_conn` at the requests in flight the target allows
//!    (capacity x target, at least the workers); HAProxy with `maxconn` = the
//!    workers on the server and `timeout queue` = the target (its documented
//!    overload protection: a request that waits longer in its queue gets `503`);
//!    `seda serve --proxy` with only `--rt-target-ms`; and `seda serve --proxy` with
//!    each of the runtime's other admission policies (`--admission response-time`,
//!    `multiclass`, `codel`, `gradient`, `aimd`, `queue-threshold`).
//! 4. **Two classes** (`classes-Fx`): high-class requests (`X-Class: 1`, Poisson at
//!    0.2x the capacity throughout) beside class-0 requests shaped as `open-Fx`, from
//!    two load generators at once. `seda serve` gets `--class-header X-Class`;
//!    HAProxy gives the high class the front of its queue (`set-priority-class`);
//!    nginx has nothing of the kind. The target: the high class loses (503 or error)
//!    at most 10 % of its requests in the overload phase.
//!
//! What runs is a list of [`Group`]s, each a set of shapes through a set of fronts
//! ([`default_groups`]: every shape through the four main fronts, `open-3x` through
//! the other policies, `classes-3x` through nginx-limit, HAProxy, seda and
//! seda-multiclass).
//!
//! Each run's figures ([`ShapeMetrics`]) are by completion time, from the client's
//! per-second series and per-phase totals: the overload phase's served requests/s
//! against the capacity at the time (half of it during `drop`'s middle phase), its
//! p90, the run's p99, 503s and errors per second, and the time to recover (the
//! overload phase's first second from which every second's p90 stays within 1.2x the
//! target, as in `seda experiment overload`). Each (shape, front) is repeated
//! `repeats` times; the table gives the median and [min-max].
//!
//! The load generator also records every run at 100 ms resolution (`ticks` in
//! `runs.json`; the charts use it); recovery times are in whole seconds.

mod backend;
mod config;
mod fronts;
mod output;
mod results;
mod runner;

pub use config::{CLASS_HEADER, Front, Group, HIGH_SHARE, ProxyConfig, Shape, default_groups};
pub use fronts::{haproxy_config, nginx_limits};
pub use output::write_outputs;
pub use results::{HighClass, ProxyResults, ProxyRun, ShapeMetrics};
pub use runner::{high_class, run, shape_metrics};
