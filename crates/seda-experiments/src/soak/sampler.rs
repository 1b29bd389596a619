//! The server process as the kernel sees it, once a second: resident memory
//! (`VmRSS` of `/proc/PID/status`), open file descriptors (entries of
//! `/proc/PID/fd`) and threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ExperimentError;
use serde::{Deserialize, Serialize};

/// One sample of the server process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    /// Seconds since the soak started.
    pub t: f64,
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Threads.
    pub threads: u64,
}

/// Reads one sample of process `pid`, or `None` if it is gone.
pub fn sample(pid: u32, t: f64) -> Option<ProcSample> {
    let p = procfs::process::Process::new(pid as i32).ok()?;
    let status = p.status().ok()?;
    Some(ProcSample {
        t,
        rss_kib: status.vmrss?,
        fds: p.fd_count().ok()? as u64,
        threads: status.threads,
    })
}

/// Samples a process every `period` on a thread of its own until finished.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<ProcSample>>,
}

impl Sampler {
    /// Starts sampling `pid`; times are seconds since `t0`.
    pub fn start(pid: u32, t0: Instant, period: Duration) -> Result<Sampler, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("soak-sampler".into())
            .spawn(move || {
                let mut out = Vec::new();
                let mut next = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    match sample(pid, t0.elapsed().as_secs_f64()) {
                        Some(s) => out.push(s),
                        None => break,
                    }
                    next += period;
                    while !flag.load(Ordering::Relaxed) && Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                out
            })
            .map_err(|e| ExperimentError::step("cannot start the sampler", e))?;
        Ok(Sampler { stop, handle })
    }

    /// Stops sampling and returns the samples.
    pub fn finish(self) -> Vec<ProcSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id(), 1.5).expect("our own /proc entry");
        assert!(s.rss_kib > 0 && s.fds >= 3 && s.threads >= 1, "{s:?}");
        assert_eq!(s.t, 1.5);
        assert_eq!(sample(u32::MAX, 0.0), None);
    }
}
