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

/// A running `seda serve`, its addresses, and its output line by line as it comes.
/// Killed and reaped on drop.
pub struct Served {
    pub child: Guard,
    /// The service address (`listening on http://ADDR`).
    pub addr: std::net::SocketAddr,
    /// The admin listener (`admin at http://ADDR/_seda/`).
    pub admin: std::net::SocketAddr,
    /// Later lines of stdout (after the first two).
    pub stdout: mpsc::Receiver<String>,
    /// Lines of stderr.
    pub stderr: mpsc::Receiver<String>,
}

/// Longest wait of the helpers below.
pub const BOUND: Duration = Duration::from_secs(30);

impl Served {
    /// Starts `seda serve --listen 127.0.0.1:0 ARGS...` and waits for its
    /// `listening on` and `admin at` lines.
    pub fn start(args: &[&str]) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_seda"));
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
        Served::spawn(cmd)
    }

    /// As [`Served::start`], under an open-files limit of `nofile` (`ulimit -n`,
    /// soft and hard, set by a shell that then runs the server in its place).
    pub fn start_with_nofile(nofile: u64, args: &[&str]) -> Served {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {nofile} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_seda"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args);
        Served::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Served {
        let mut child = Guard(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn seda serve"),
        );
        let lines = |pipe: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                use std::io::BufRead as _;
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        };
        let stdout = lines(Box::new(child.0.stdout.take().expect("piped")));
        let stderr = lines(Box::new(child.0.stderr.take().expect("piped")));
        let after = |prefix: &str| -> String {
            let line = stdout.recv_timeout(BOUND).unwrap_or_else(|_| {
                let err: Vec<String> = stderr.try_iter().collect();
                panic!("no `{prefix}` line in time; stderr: {err:?}")
            });
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected `{prefix}...`, got {line:?}"))
                .to_owned()
        };
        let addr = after("listening on http://").parse().expect("an address");
        let admin = after("admin at http://")
            .trim_end_matches("/_seda/")
            .parse()
            .expect("an admin address");
        Served {
            child,
            addr,
            admin,
            stdout,
            stderr,
        }
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.0.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Waits for a line of stderr containing `needle` (lines before it are passed
    /// over); panics with what it saw if none comes in time.
    pub fn stderr_line(&self, needle: &str) -> String {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while let Some(left) = BOUND.checked_sub(t0.elapsed()) {
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("no stderr line with {needle:?}; saw {seen:?}")
    }

    /// The admin listener's stats document.
    pub fn stats(&self) -> serde_json::Value {
        let (status, _, body) = http_get(self.admin, "/_seda/stats", "");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).expect("stats JSON")
    }

    /// Waits until `cond(stats)` holds; panics with the last stats if it never does.
    pub fn wait_stats(&self, what: &str, cond: impl Fn(&serde_json::Value) -> bool) {
        let t0 = Instant::now();
        loop {
            let s = self.stats();
            if cond(&s) {
                return;
            }
            if t0.elapsed() > BOUND {
                panic!("{what}: never held; last stats {s}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One request on a fresh connection (`Connection: close`): status, head, body.
pub fn http_get(addr: std::net::SocketAddr, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect_timeout(&addr, BOUND).expect("connect");
    s.set_read_timeout(Some(BOUND)).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head[9..12].parse().expect("a status");
    (status, head, raw[end + 4..].to_vec())
}

/// A program a test needs from the system (a peer such as `haproxy`): its path from
/// `PATH` or `/usr/sbin`, or `None` with a note that the part needing it is skipped.
/// Under `SEDA_REQUIRE_PEERS=1` (set by `.ci/run`, which installs the peers) a
/// missing program fails the test instead: CI never passes by skipping.
pub fn peer(name: &str) -> Option<std::path::PathBuf> {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&dirs)
        .chain([std::path::PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("SEDA_REQUIRE_PEERS").is_none_or(|v| v != "1"),
            "{name} is not installed and SEDA_REQUIRE_PEERS=1 (CI): install it \
             (apt-get install -y {name}; .ci/run does)"
        );
        eprintln!("skipped: {name} is not installed (apt-get install -y {name})");
    }
    found
}
