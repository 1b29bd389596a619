//! Helpers shared by the end-to-end tests of the `seda` binary.
//!
//! Every child runs bounded: [`run_bounded`] kills it past its bound and reports that
//! as a test failure, and [`Guard`] kills and reaps a server child when the test
//! ends, whatever the outcome. Output pipes are drained on their own threads, so a
//! chatty child never blocks on a full pipe while the test waits for it.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child process, killed and reaped on drop.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` to its end with stdin closed and stdout/stderr captured; panics (after
/// killing it) if it is still running after `bound`.
pub fn run_bounded(cmd: &mut Command, bound: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = Guard(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}")),
    );
    let (tx, rx) = mpsc::channel();
    for (i, pipe) in [
        child
            .0
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .0
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .enumerate()
    {
        let tx = tx.clone();
        let mut pipe = pipe.expect("piped");
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send((i, buf));
        });
    }
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("try_wait") {
            break s;
        }
        if t0.elapsed() > bound {
            let _ = child.0.kill();
            panic!("{what} ran longer than {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut texts = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        // The pipes close when the child exits (unless it left a grandchild holding
        // them, which is itself a failure worth reporting).
        let (i, buf) = rx
            .recv_timeout(bound)
            .unwrap_or_else(|_| panic!("{what}: output pipes still open after exit"));
        texts[i] = buf;
    }
    let [stdout, stderr] = texts;
    Output {
        status,
        stdout,
        stderr,
    }
}
