//! The backend of the experiment: gunicorn with sync workers serving `app.py`, a
//! fresh one per run (in its own process group, stopped with it), and the app's
//! hashing speed measured once and given to every worker.

use std::fs;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::config::ProxyConfig;
use crate::ExperimentError;
use crate::harness::haproxy::process::signal_group;
use crate::harness::server::free_port;
use crate::harness::stats::http_get;

/// A gunicorn master with sync workers serving `app.py`, in its own process group.
pub(super) struct Backend {
    child: Child,
    pub(super) addr: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Backend {
    pub(super) fn start(cfg: &ProxyConfig) -> Result<Backend, ExperimentError> {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log = tempfile::NamedTempFile::new().map_err(ExperimentError::other)?;
        let out = log.reopen().map_err(ExperimentError::other)?;
        let err = log.reopen().map_err(ExperimentError::other)?;
        let mut cmd = Command::new(&cfg.gunicorn);
        if let Some(v) = cfg.iter_per_ms {
            cmd.env("PROXY_APP_ITER_PER_MS", v.to_string());
        }
        let child = cmd
            .args(["-w", &cfg.workers.to_string(), "-k", "sync"])
            .args(["-b", &addr.to_string(), "--backlog", "4096"])
            .args(["--timeout", "120", "app:app"])
            .current_dir(&cfg.app_dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                ExperimentError::step(format!("cannot start {}", cfg.gunicorn.display()), e)
            })?;
        let mut b = Backend { child, addr, log };
        let t0 = Instant::now();
        let path = format!("/work?ms={}&dist=fixed", cfg.work_ms);
        loop {
            if let Ok(Some(st)) = b.child.try_wait() {
                return Err(ExperimentError::run(format!(
                    "gunicorn exited at start ({st}): {}",
                    b.tail()
                )));
            }
            // Every worker must be up (each calibrates at import): one probe per
            // worker, on new connections.
            if (0..cfg.workers).all(|_| {
                http_get(addr, &path, Duration::from_secs(5)).is_ok_and(|f| f.status == 200)
            }) {
                return Ok(b);
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(ExperimentError::run(format!(
                    "gunicorn did not answer within 30 s: {}",
                    b.tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `sig` to the master `n` times, 100 ms apart (gunicorn adds or removes
    /// one worker per TTIN/TTOU; signals sent at once would merge).
    pub(super) fn signal(&self, sig: Signal, n: u32) {
        for _ in 0..n {
            if let Some(p) = rustix::process::Pid::from_raw(self.child.id() as i32) {
                let _ = rustix::process::kill_process(p, sig);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(super) fn tail(&self) -> String {
        let text = fs::read_to_string(self.log.path()).unwrap_or_default();
        let start = text.len().saturating_sub(1500);
        text.get(start..).unwrap_or("").trim().to_owned()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        signal_group(self.child.id(), Signal::TERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal_group(self.child.id(), Signal::KILL);
        let _ = self.child.wait();
    }
}

/// app.py's hashing speed, measured once here (best of five 0.1 s rounds, by the
/// gunicorn environment's Python) and given to every worker: each worker would
/// otherwise calibrate at import, while the others do, and a busy machine at that
/// moment makes every request of the run cheaper than its nominal cost.
pub(super) fn calibrate(cfg: &ProxyConfig) -> Result<f64, ExperimentError> {
    let python = cfg.gunicorn.with_file_name("python3");
    let code = "import time, app\n\
                best = 0.0\n\
                for _ in range(5):\n\
                \x20   n = 64\n\
                \x20   while True:\n\
                \x20       t0 = time.perf_counter(); app._spin(n); dt = time.perf_counter() - t0\n\
                \x20       if dt > 0.1: break\n\
                \x20       n *= 2\n\
                \x20   best = max(best, n / (dt * 1000.0))\n\
                print(best)\n";
    let out = Command::new(&python)
        .args(["-c", code])
        .current_dir(&cfg.app_dir)
        .env("PROXY_APP_ITER_PER_MS", "1")
        .output()
        .map_err(|e| ExperimentError::step(format!("cannot run {}", python.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| {
            ExperimentError::run(format!(
                "calibrating app.py failed: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })
}

pub(super) fn gunicorn_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
