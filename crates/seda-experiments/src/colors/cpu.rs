//! CPU accounting for a server and its load generator in one process on a shared
//! machine: per-thread CPU time from `/proc/self/task/*/stat`, split by thread name
//! into generator and server, and the whole machine's busy time from `/proc/stat`
//! (both read with `procfs`),
//! so that what other processes took during a run is reported beside it.
//!
//! Per thread it also finds the busiest server thread of an interval. Its CPU time
//! per response bounds the throughput the server would reach were each of its
//! threads on a core of its own, which other processes on a shared machine do not
//! move much (they delay a thread; they do not make its work longer).

use std::collections::HashMap;

use procfs::process::Process;
use procfs::{CpuTime, CurrentSI, KernelStats};

/// CPU seconds at one instant.
#[derive(Clone, Debug, Default)]
pub struct CpuSample {
    /// Threads of this process whose names start with the client prefix.
    pub client: f64,
    /// Every other thread of this process (the server's).
    pub server: f64,
    /// Busy time of the whole machine (all cores, all processes).
    pub machine: f64,
    /// Each server thread's name and CPU seconds, by thread id.
    pub server_threads: HashMap<String, (String, f64)>,
}

impl CpuSample {
    /// Samples now; threads named `client_prefix*` count as the client.
    pub fn now(client_prefix: &str) -> CpuSample {
        let (mut client, mut server) = (0.0, 0.0);
        let mut server_threads = HashMap::new();
        let hz = procfs::ticks_per_second() as f64;
        if let Ok(tasks) = Process::myself().and_then(|p| p.tasks()) {
            for t in tasks.flatten() {
                let Ok(stat) = t.stat() else {
                    continue;
                };
                let secs = (stat.utime + stat.stime) as f64 / hz;
                if stat.comm.starts_with(client_prefix) {
                    client += secs;
                } else {
                    server += secs;
                    server_threads.insert(t.tid.to_string(), (stat.comm, secs));
                }
            }
        }
        let machine = KernelStats::current().map_or(0, |k| busy_ticks(&k.total));
        CpuSample {
            client,
            server,
            machine: machine as f64 / hz,
            server_threads,
        }
    }

    /// The server thread that used the most CPU between `earlier` and `self`: its
    /// name and CPU seconds (a thread started in between counts from 0).
    pub fn busiest_since(&self, earlier: &CpuSample) -> (String, f64) {
        self.server_threads
            .iter()
            .map(|(tid, (name, secs))| {
                let before = earlier.server_threads.get(tid).map_or(0.0, |t| t.1);
                (name.clone(), secs - before)
            })
            .fold((String::new(), 0.0), |a, b| if b.1 > a.1 { b } else { a })
    }

    /// CPU used between `earlier` and `self`, in cores over `secs` of wall time.
    pub fn cores_since(&self, earlier: &CpuSample, secs: f64) -> CpuCores {
        let per = |a: f64, b: f64| if secs > 0.0 { (a - b) / secs } else { 0.0 };
        let client = per(self.client, earlier.client);
        let server = per(self.server, earlier.server);
        let machine = per(self.machine, earlier.machine);
        CpuCores {
            server,
            client,
            machine,
            others: (machine - server - client).max(0.0),
        }
    }
}

/// CPU use over an interval, in cores (1.0 = one core busy all the time).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuCores {
    /// The server's threads.
    pub server: f64,
    /// The load generator's threads.
    pub client: f64,
    /// The whole machine.
    pub machine: f64,
    /// Everything else on the machine: other processes, and kernel work not charged
    /// to a thread of ours (softirqs).
    pub others: f64,
}

/// A thread's name and user + system CPU seconds, from its `stat` line.
/// Ticks the machine was busy: user, nice, system, irq, softirq and steal (guest
/// time is inside user); idle and iowait are not busy.
fn busy_ticks(t: &CpuTime) -> u64 {
    t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0) + t.steal.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_thread_is_the_one_that_used_most_since() {
        let sample = |a: f64, b: f64| CpuSample {
            server_threads: [
                ("1".to_owned(), ("w-0".to_owned(), a)),
                ("2".to_owned(), ("w-1".to_owned(), b)),
            ]
            .into(),
            ..CpuSample::default()
        };
        // w-0 used more in total, w-1 more in the interval.
        let (name, secs) = sample(10.5, 3.0).busiest_since(&sample(10.0, 1.0));
        assert_eq!(name, "w-1");
        assert!((secs - 2.0).abs() < 1e-9);
    }

    #[test]
    fn this_process_and_the_machine_are_sampled() {
        let spin = std::thread::Builder::new()
            .name("colors-client-test".into())
            .spawn(|| {
                let t0 = std::time::Instant::now();
                let mut x = 0u64;
                while t0.elapsed() < std::time::Duration::from_millis(50) {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
                std::hint::black_box(x);
            })
            .unwrap();
        spin.join().unwrap();
        let now = CpuSample::now("colors-client");
        assert!(now.machine > 0.0 && now.server >= 0.0, "{now:?}");
        let k = KernelStats::current().unwrap();
        assert!(busy_ticks(&k.total) <= busy_ticks(&k.total) + k.total.idle);
    }
}
