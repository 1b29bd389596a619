//! `seda serve` end to end: the real binary on an ephemeral loopback port.
//!
//! Every child process is killed when its guard drops, and every wait is bounded, so
//! a hung server fails the test instead of hanging it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SEDA: &str = env!("CARGO_BIN_EXE_seda");
/// Longest wait for anything a test expects to happen (start-up, an answer, an exit).
const BOUND: Duration = Duration::from_secs(20);

/// A running `seda` process; killed (SIGKILL) and reaped on drop.
struct Proc {
    child: Child,
    stderr: Option<mpsc::Receiver<String>>,
    /// The admin listener, from the `admin at http://ADDR/_seda/` line.
    admin: Option<SocketAddr>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `seda args...` with piped stdout and stderr.
    fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(SEDA)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn seda");
        // Drain stderr on a thread so the child never blocks on a full pipe.
        let mut err = child.stderr.take().expect("stderr piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = tx.send(s);
        });
        Proc {
            child,
            stderr: Some(rx),
            admin: None,
        }
    }

    /// Starts `seda serve --listen 127.0.0.1:0 extra...` and waits for its
    /// `listening on http://ADDR` line (and its `admin at` line, unless the admin
    /// listener is off).
    fn serve(extra: &[&str]) -> (Proc, SocketAddr) {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut p = Proc::spawn(&args);
        let out = p.child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Forward every line; keep reading so the child never blocks on stdout.
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(BOUND)
            .expect("no `listening on` line in time");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        if !extra.contains(&"none") {
            let line = rx.recv_timeout(BOUND).expect("no `admin at` line in time");
            let admin = line
                .trim()
                .strip_prefix("admin at http://")
                .and_then(|l| l.strip_suffix("/_seda/"))
                .unwrap_or_else(|| panic!("unexpected second line {line:?}"))
                .parse()
                .expect("an admin address");
            p.admin = Some(admin);
        }
        (p, addr)
    }

    fn sigterm(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    }

    /// Waits for the process to exit, at most `bound`; `None` if it did not.
    fn wait_for(&mut self, bound: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            if t0.elapsed() > bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Everything the process wrote to stderr (after it exited).
    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|rx| rx.recv_timeout(BOUND).ok())
            .unwrap_or_default()
    }
}

/// A parsed response: status, head (lower-cased), body.
struct Resp {
    status: u16,
    head: String,
    body: Vec<u8>,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, BOUND).expect("connect");
    s.set_read_timeout(Some(BOUND)).unwrap();
    s.set_write_timeout(Some(BOUND)).unwrap();
    s
}

/// `GET path` on a fresh connection with `Connection: close`.
fn get(addr: SocketAddr, path: &str) -> Resp {
    let mut s = connect(addr);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    Resp {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    }
}

#[test]
fn serves_the_demo_site_hello_and_stats() {
    let (mut p, addr) = Proc::serve(&[]);
    let index = get(addr, "/");
    assert_eq!(index.status, 200);
    assert!(
        index.head.contains("content-type: text/html"),
        "{}",
        index.head
    );
    assert!(String::from_utf8_lossy(&index.body).contains("Haboob"));

    let hello = get(addr, "/hello?name=Tester");
    assert_eq!(hello.status, 200);
    assert!(
        String::from_utf8_lossy(&hello.body).contains("Hello, Tester!"),
        "{}",
        String::from_utf8_lossy(&hello.body)
    );

    let admin = p.admin.expect("an admin listener by default");
    assert!(admin.ip().is_loopback(), "{admin}");
    assert_ne!(admin.port(), addr.port());
    assert_eq!(
        get(addr, "/_seda/stats").status,
        404,
        "not on the service port"
    );
    let stats = get(admin, "/_seda/stats");
    assert_eq!(stats.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&stats.body).expect("stats are JSON");
    let stages = doc["stages"].as_array().expect("a stages array");
    assert!(!stages.is_empty());
    for s in stages {
        for field in [
            "name",
            "queue_len",
            "threads",
            "processed",
            "rejected",
            "rt_p90_ms",
        ] {
            assert!(s.get(field).is_some(), "stage {s} lacks {field}");
        }
    }
    let names: Vec<&str> = stages.iter().filter_map(|s| s["name"].as_str()).collect();
    for name in ["HttpParse", "PageCache", "CacheMiss", "hello"] {
        assert!(
            names.iter().any(|n| n.contains(name)),
            "no stage {name} in {names:?}"
        );
    }
    let edges = doc["edges"].as_array().expect("an edges array");
    assert!(
        !edges.is_empty(),
        "requests were served, so edges were seen"
    );
    for e in edges {
        let pair = e.as_array().expect("an edge is a pair");
        assert_eq!(pair.len(), 2);
        assert!(pair.iter().all(|n| n.is_string()), "{e}");
    }

    p.sigterm();
    let st = p.wait_for(BOUND).expect("exits after SIGTERM");
    assert!(st.success(), "{st:?}: {}", p.stderr());
}

#[test]
fn sigterm_finishes_a_response_in_flight_then_exits_zero() {
    // A body far larger than the socket buffers, read slowly, is still being sent when
    // SIGTERM arrives; graceful shutdown must finish it before the process exits.
    const LEN: u64 = 48 << 20;
    let root = tempfile::tempdir().unwrap();
    let big = std::fs::File::create(root.path().join("big.bin")).unwrap();
    big.set_len(LEN).unwrap();
    drop(big);
    let (mut p, addr) = Proc::serve(&["--root", root.path().to_str().unwrap()]);

    let mut s = connect(addr);
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut raw = Vec::new();
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head");
        raw.extend_from_slice(&buf[..n]);
    }
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {LEN}")), "{head}");
    let mut got = (raw.len() - head_end) as u64;

    let t0 = Instant::now();
    p.sigterm();
    // Let the server notice while the response is still queued.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "exited with a response in flight"
    );
    while got < LEN {
        let n = s.read(&mut buf).expect("the rest of the body");
        assert!(n > 0, "connection closed after {got} of {LEN} bytes");
        got += n as u64;
    }
    assert_eq!(got, LEN);
    let st = p.wait_for(BOUND).expect("exits once the response is sent");
    assert!(st.success(), "{st:?}: {}", p.stderr());
    assert!(t0.elapsed() < BOUND);
}

/// Runs `seda args...` to completion (bounded); returns status, stdout, stderr.
fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let mut p = Proc::spawn(args);
    let mut out = p.child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let st = p
        .wait_for(BOUND)
        .unwrap_or_else(|| panic!("seda {args:?} did not exit"));
    let stdout = rx.recv_timeout(BOUND).unwrap_or_default();
    (st, stdout, p.stderr())
}

#[test]
fn bad_command_lines_are_one_line_errors_with_nonzero_exit() {
    for args in [
        &["serve", "--root", "/nonexistent"][..],
        &["serve", "--bogus-flag"],
        &["serve", "--cache-mb", "notanumber"],
    ] {
        let (st, stdout, stderr) = run(args);
        assert!(!st.success(), "seda {args:?} exited {st:?}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "seda {args:?} wrote more than one line:\n{stderr}"
        );
        assert!(stderr.starts_with("seda: "), "{stderr}");
        assert!(stdout.is_empty(), "seda {args:?} printed {stdout:?}");
    }
}

/// Issue 11 item 7: values that cannot work are refused with a reason, settings that
/// do nothing are warned about, a busy port is named.
#[test]
fn absurd_settings_are_refused_or_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for (args, want) in [
        (
            &["serve", "--root", root, "--cache-mb", "99999999"][..],
            "memory",
        ),
        (
            &["serve", "--root", root, "--max-connections", "99999999999"],
            "open files",
        ),
        (
            &[
                "load",
                "http",
                "--url",
                "http://127.0.0.1:9/",
                "--users",
                "0",
            ],
            "--users must be at least 1",
        ),
        (&["serve", "--admin-listen", "nowhere"], "--admin-listen"),
    ] {
        let (st, _, stderr) = run(args);
        assert!(!st.success(), "seda {args:?} exited {st:?}");
        assert!(
            stderr.contains(want) && stderr.lines().count() == 1,
            "seda {args:?}: {stderr}"
        );
    }
    // A port in use is named.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let (st, _, stderr) = run(&["serve", "--root", root, "--listen", &addr]);
    assert!(!st.success());
    assert!(
        stderr.contains(&addr) && stderr.to_lowercase().contains("in use"),
        "{stderr}"
    );
    // An admission target with nothing to control is a warning, not silence.
    let (mut p, _) = Proc::serve(&["--root", root, "--rt-target-ms", "100"]);
    p.sigterm();
    assert!(p.wait_for(BOUND).is_some_and(|s| s.success()));
    let stderr = p.stderr();
    assert!(
        stderr.contains("warning: --rt-target-ms has no effect"),
        "{stderr}"
    );
}

/// `seda serve --check` (nginx's `-t`): validates flags and file, starts nothing.
#[test]
fn check_validates_the_configuration_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, format!("root = \"{root}\"\ncache-mb = 8\n")).unwrap();
    let f = file.to_str().unwrap();
    // A port in use does not matter: --check binds nothing.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let (st, stdout, stderr) = run(&["serve", "--config", f, "--listen", &addr, "--check"]);
    assert!(st.success(), "{st:?} {stderr}");
    assert!(stdout.contains(f) && stdout.contains("ok"), "{stdout}");
    for (toml, want) in [
        ("cache-mbb = 8\n", "cache-mbb"),
        ("root = \"/nonexistent/www\"\n", "/nonexistent/www"),
        ("idle-timeout = 0\n", "idle-timeout"),
        ("[[handler]]\nname = \"nosuch\"\n", "nosuch"),
    ] {
        std::fs::write(&file, toml).unwrap();
        let (st, stdout, stderr) = run(&["serve", "--config", f, "--check"]);
        assert_eq!(st.code(), Some(1), "{toml}: {stderr}");
        assert!(
            stderr.contains(want) && stderr.lines().count() == 1,
            "{toml}: {stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }
}

#[test]
fn version_exits_zero() {
    let (st, stdout, _) = run(&["--version"]);
    assert!(st.success(), "{st:?}");
    assert!(stdout.starts_with("seda "), "{stdout}");
}

/// Regression: an idle server took up to half a second (once ~1.8 s) to exit on
/// SIGTERM, because shutdown joined threads that only looked at their stop flag
/// between long sleeps. Not a fixed threshold (a loaded machine slows every exit):
/// the fastest of three exits is compared with the fastest of three runs of
/// `seda --version` in the same test, the cost of starting and ending a process
/// here and now, and may exceed it by less than one of those poll periods.
#[test]
fn idle_server_exits_promptly_on_sigterm() {
    let mut baseline = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let (st, _, _) = run(&["--version"]);
        assert!(st.success());
        baseline = baseline.min(t0.elapsed());
    }
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let (mut p, addr) = Proc::serve(&[]);
        // Every thread at its idle wait: the server has answered a request.
        assert_eq!(get(addr, "/").status, 200);
        let t0 = Instant::now();
        p.sigterm();
        let st = p.wait_for(BOUND).expect("exits after SIGTERM");
        fastest = fastest.min(t0.elapsed());
        assert!(st.success(), "{st:?}: {}", p.stderr());
    }
    eprintln!("fastest idle exit after SIGTERM: {fastest:?}; a process here: {baseline:?}");
    assert!(
        fastest < 3 * baseline + Duration::from_millis(250),
        "an idle server took {fastest:?} to exit (a process start and exit: {baseline:?})"
    );
}
