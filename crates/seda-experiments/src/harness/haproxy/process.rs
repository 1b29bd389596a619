//! HAProxy as a child process: found or installed, started in the foreground with a
//! generated configuration in a private temporary directory, its statistics page read
//! as CSV, and stopped; and pinning a replica to one CPU.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ExperimentError;
use crate::harness::server::{apt_install, process_tree_cpu};
use crate::harness::stats::http_get;

/// The haproxy binary, if installed (`/usr/sbin/haproxy`, or on the `PATH`).
pub fn find_haproxy() -> Option<PathBuf> {
    let fixed = PathBuf::from("/usr/sbin/haproxy");
    if fixed.exists() {
        return Some(fixed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("haproxy"))
            .find(|p| p.exists())
    })
}

/// The haproxy binary, installing Debian's `haproxy` package if it is missing.
pub fn ensure_haproxy(log: &mut dyn FnMut(&str)) -> Result<PathBuf, ExperimentError> {
    if let Some(p) = find_haproxy() {
        return Ok(p);
    }
    apt_install(&["haproxy"], log)?;
    find_haproxy()
        .ok_or_else(|| ExperimentError::run("haproxy is still missing after apt-get install"))
}

/// `haproxy -vv`'s first line, e.g. `HAProxy version 2.6.12-1+deb12u4 ...`.
pub fn haproxy_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// `haproxy -c -f FILE`: whether HAProxy accepts `config`, with its messages.
pub fn check_config(bin: &Path, config: &str) -> Result<String, ExperimentError> {
    let dir =
        tempfile::tempdir().map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
    let file = dir.path().join("haproxy.cfg");
    fs::write(&file, config)
        .map_err(|e| ExperimentError::step(format!("cannot write {}", file.display()), e))?;
    let out = Command::new(bin)
        .arg("-c")
        .arg("-f")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ExperimentError::step(format!("cannot run {}", bin.display()), e))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(ExperimentError::config(text))
    }
}

/// A running HAProxy.
#[derive(Debug)]
pub struct HaproxyProcess {
    child: Child,
    bind: SocketAddr,
    dir: tempfile::TempDir,
}

impl HaproxyProcess {
    /// Start `bin -f CONFIG -db` and wait (up to 10 s) until it accepts on `bind`.
    pub fn start(
        bin: &Path,
        config: &str,
        bind: SocketAddr,
    ) -> Result<HaproxyProcess, ExperimentError> {
        let dir = tempfile::Builder::new()
            .prefix("seda-haproxy-")
            .tempdir()
            .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
        let conf = dir.path().join("haproxy.cfg");
        fs::write(&conf, config)
            .map_err(|e| ExperimentError::step(format!("cannot write {}", conf.display()), e))?;
        let log = fs::File::create(dir.path().join("haproxy.log"))
            .map_err(|e| ExperimentError::step("cannot create the haproxy log", e))?;
        let err = log.try_clone().map_err(ExperimentError::other)?;
        let child = Command::new(bin)
            .arg("-f")
            .arg(&conf)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| ExperimentError::step(format!("cannot start {}", bin.display()), e))?;
        let mut p = HaproxyProcess { child, bind, dir };
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(ExperimentError::run(format!(
                    "haproxy exited at start ({status}): {}",
                    p.log_tail()
                )));
            }
            if TcpStream::connect_timeout(&bind, Duration::from_millis(200)).is_ok() {
                return Ok(p);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let tail = p.log_tail();
                p.kill();
                return Err(ExperimentError::run(format!(
                    "haproxy did not listen on {bind} within 10 s: {tail}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where it accepts clients.
    pub fn addr(&self) -> SocketAddr {
        self.bind
    }

    /// CPU seconds (user + system) of HAProxy so far.
    pub fn cpu_seconds(&self) -> f64 {
        process_tree_cpu(self.child.id())
    }

    /// The end of HAProxy's output (warnings, alerts).
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default();
        let start = text.len().saturating_sub(2000);
        text.get(start..).unwrap_or("").trim().to_owned()
    }

    /// SIGTERM (HAProxy's immediate stop), then SIGKILL after 5 s.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal_group(self.child.id(), rustix::process::Signal::TERM);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }

    fn kill(&mut self) {
        signal_group(self.child.id(), rustix::process::Signal::KILL);
        let _ = self.child.wait();
    }
}

impl Drop for HaproxyProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Sends `sig` to the process group led by `pid`.
pub fn signal_group(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// Pins every thread of `pid` (and the threads it starts later) to `cpu` with
/// `taskset -a -p -c`; the error says why it could not.
pub fn pin_to_cpu(pid: u32, cpu: usize) -> Result<(), ExperimentError> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ExperimentError::step("cannot run taskset", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ExperimentError::run(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

/// One server's row of HAProxy's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRow {
    /// Server name (`r1`, ...), or `BACKEND` for the backend's totals.
    pub name: String,
    /// `UP`, `DOWN`, `DRAIN`, `MAINT`, `no check`, ...
    pub status: String,
    /// Effective weight (the agent's percentage of the configured 100).
    pub weight: u64,
    /// Sessions sent to it so far.
    pub sessions: u64,
    /// Requests retried (`wretr`).
    pub retries: u64,
    /// Requests redispatched to another server (`wredis`).
    pub redispatches: u64,
    /// Responses with a 5xx status.
    pub http_5xx: u64,
}

/// The rows of backend `backend` in HAProxy's CSV statistics (`GET /;csv`).
pub fn parse_stats_csv(text: &str, backend: &str) -> Vec<ServerRow> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(px), Some(sv)) = (col("pxname"), col("svname")) else {
        return Vec::new();
    };
    let [status, weight, stot, wretr, wredis, h5] =
        ["status", "weight", "stot", "wretr", "wredis", "hrsp_5xx"].map(col);
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            if f.get(px) != Some(&backend) {
                return None;
            }
            let num = |i: Option<usize>| {
                i.and_then(|i| f.get(i))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            Some(ServerRow {
                name: f.get(sv)?.to_string(),
                status: status
                    .and_then(|i| f.get(i))
                    .map_or(String::new(), |s| s.to_string()),
                weight: num(weight),
                sessions: num(stot),
                retries: num(wretr),
                redispatches: num(wredis),
                http_5xx: num(h5),
            })
        })
        .collect()
}

/// HAProxy's statistics page now, backend `backend` (HAProxy sends it chunked).
pub fn read_stats(stats: SocketAddr, backend: &str) -> Result<Vec<ServerRow>, ExperimentError> {
    let r = http_get(stats, "/;csv", Duration::from_secs(2))
        .map_err(|e| ExperimentError::step("haproxy stats", e))?;
    if r.status != 200 {
        return Err(ExperimentError::run(format!(
            "haproxy stats answered {}",
            r.status
        )));
    }
    Ok(parse_stats_csv(&String::from_utf8_lossy(&r.body), backend))
}

/// HAProxy's statistics at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HaproxySample {
    /// Seconds since the run's load started.
    pub t: f64,
    /// The backend's servers, then its totals (`BACKEND`).
    pub rows: Vec<ServerRow>,
}

/// A thread reading HAProxy's statistics once a second until stopped.
#[derive(Debug)]
pub struct HaproxyPoller {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<HaproxySample>>,
}

impl HaproxyPoller {
    /// Start reading backend `backend` from the statistics page at `stats`; times
    /// count from `t0`. Failed reads are skipped.
    pub fn start(
        stats: SocketAddr,
        backend: &str,
        t0: Instant,
    ) -> Result<HaproxyPoller, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let backend = backend.to_owned();
        let handle = std::thread::Builder::new()
            .name("seda-haproxy-poll".into())
            .spawn(move || {
                let mut out = Vec::new();
                let mut next = Duration::ZERO;
                while !flag.load(Relaxed) {
                    if t0.elapsed() >= next {
                        if let Ok(rows) = read_stats(stats, &backend) {
                            out.push(HaproxySample {
                                t: t0.elapsed().as_secs_f64(),
                                rows,
                            });
                        }
                        while next <= t0.elapsed() {
                            next += Duration::from_secs(1);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                out
            })
            .map_err(|e| ExperimentError::step("cannot start the haproxy poller", e))?;
        Ok(HaproxyPoller { stop, handle })
    }

    /// Stop and return the samples.
    pub fn finish(self) -> Vec<HaproxySample> {
        self.stop.store(true, Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_csv_rows_by_header_name() {
        let csv = "# pxname,svname,qcur,scur,stot,wretr,wredis,status,weight,hrsp_5xx,\n\
                   seda,FRONTEND,,3,100,,,OPEN,,0,\n\
                   seda_replicas,r1,0,1,60,2,1,UP,73,4,\n\
                   seda_replicas,r2,0,0,40,0,0,DRAIN,0,0,\n\
                   seda_replicas,BACKEND,0,1,100,2,1,UP,73,4,\n";
        let rows = parse_stats_csv(csv, "seda_replicas");
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            ServerRow {
                name: "r1".into(),
                status: "UP".into(),
                weight: 73,
                sessions: 60,
                retries: 2,
                redispatches: 1,
                http_5xx: 4,
            }
        );
        assert_eq!(rows[1].status, "DRAIN");
        assert_eq!(rows[2].name, "BACKEND");
        assert!(parse_stats_csv("", "x").is_empty());
        assert!(parse_stats_csv("garbage\n1,2", "x").is_empty());
    }
}
