//! CPU accounting for a server and its load generator in one process on a shared
//! machine: per-thread CPU time from `/proc/self/task/*/stat`, split by thread name
//! into generator and server, and the whole machine's busy time from `/proc/stat`,
//! so that what other processes took during a run is reported beside it.
//!
//! Per thread it also finds the busiest server thread of an interval. Its CPU time
//! per response bounds the throughput the server would reach were each of its
//! threads on a core of its own, which other processes on a shared machine do not
//! move much (they delay a thread; they do not make its work longer).

use std::collections::HashMap;
use std::fs;

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

/// Clock ticks per second of `/proc` times (USER_HZ, 100 on Linux).
const HZ: f64 = 100.0;

impl CpuSample {
    /// Samples now; threads named `client_prefix*` count as the client.
    pub fn now(client_prefix: &str) -> CpuSample {
        let (mut client, mut server) = (0.0, 0.0);
        let mut server_threads = HashMap::new();
        if let Ok(tasks) = fs::read_dir("/proc/self/task") {
            for t in tasks.flatten() {
                let Ok(stat) = fs::read_to_string(t.path().join("stat")) else {
                    continue;
                };
                let Some((name, secs)) = thread_cpu(&stat) else {
                    continue;
                };
                if name.starts_with(client_prefix) {
                    client += secs;
                } else {
                    server += secs;
                    let tid = t.file_name().to_string_lossy().into_owned();
                    server_threads.insert(tid, (name.to_owned(), secs));
                }
            }
        }
        CpuSample {
            client,
            server,
            machine: machine_busy(&fs::read_to_string("/proc/stat").unwrap_or_default()),
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
fn thread_cpu(stat: &str) -> Option<(&str, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = &stat[open + 1..close];
    // After the name: state(3) ... utime(14) stime(15), numbered from 1.
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((name, (tick(11)? + tick(12)?) as f64 / HZ))
}

/// Busy seconds of all cores from `/proc/stat`'s `cpu` line: everything but idle
/// and iowait (steal included: it was not ours to use).
fn machine_busy(proc_stat: &str) -> f64 {
    let Some(line) = proc_stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: u64 = v
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, x)| x)
        .sum();
    busy as f64 / HZ
}

/// The 1-minute load average.
pub fn load1() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_stat_lines_parse_even_with_odd_names() {
        let line = "1234 (colors-client) 0) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        let (name, secs) = thread_cpu(line).unwrap();
        assert_eq!(name, "colors-client) 0");
        assert!((secs - 3.0).abs() < 1e-9);
    }

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
    fn machine_busy_leaves_out_idle_and_iowait() {
        let s = "cpu  100 10 50 1000 40 5 5 2 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        assert!((machine_busy(s) - 1.72).abs() < 1e-9);
    }
}
