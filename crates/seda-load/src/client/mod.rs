//! The HTTP load generator: one mio event loop per thread, each driving a share of the
//! users (closed loop) or of the arrival rate (open loop).
//!
//! Closed loop (SEDA 5.1.2): a user starts a request, reads the whole response, thinks
//! for `think`, and closes its connection after `reqs_per_conn` requests; the
//! response time runs from the start of the request, connection set-up included.
//!
//! Open loop: Poisson arrivals at the scheduled rate; each arrival takes an idle pooled
//! connection, opens a new one (up to `max_conns`), or waits in a client-side queue.
//! Its response time runs from the *intended* arrival time, so time spent waiting in
//! the client or behind a slow connection counts (no coordinated omission).
//!
//! At the end of the schedule no new request starts; requests still running after the
//! drain period are counted as errors (`unfinished`), so every issued request ends as
//! exactly one of completed, rejected or error.
//!
//! A request on a reused keep-alive connection that the server closed before sending a
//! byte is retried once on a new connection (as browsers do for idempotent requests);
//! its response time still runs from the first attempt.

//!
//! The files: `config` (what to run: [`LoadConfig`], [`Mode`], [`RequestMix`],
//! [`parse_url`]), `worker` (one thread's event loop and its users), `record` (what a
//! thread measures, [`Progress`], and the merge of the threads' measurements into
//! the [`LoadReport`]). Each imports only the files before it in that list.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::LoadError;
use crate::report::LoadReport;

mod config;
mod record;
mod worker;

pub use config::{LoadConfig, Mode, RequestMix, parse_url};
pub use record::Progress;
use record::merge;
use worker::Worker;

/// Run the load and return its report. `on_second` is called about once a second
/// with the elapsed time and the live counters (for a progress line).
pub fn run(
    cfg: &LoadConfig,
    mut on_second: impl FnMut(Duration, &Progress),
) -> Result<LoadReport, LoadError> {
    cfg.validate()?;
    let progress = Arc::new(Progress::default());
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for k in 0..cfg.threads {
        let mut worker = Worker::new(cfg, k, t0, Arc::clone(&progress))?;
        let h = std::thread::Builder::new()
            .name(format!("seda-load-{k}"))
            .spawn(move || worker.run_loop().map(|()| worker.rec))
            .map_err(LoadError::io("cannot start a load thread"))?;
        handles.push(h);
    }
    let mut next = Duration::from_secs(1);
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let el = t0.elapsed();
        if el >= next {
            on_second(el, &progress);
            next += Duration::from_secs(1);
        }
    }
    let mut recs = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => recs.push(r),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(LoadError::Panicked("a load thread")),
        }
    }
    Ok(merge(cfg, recs))
}
