//! `seda gnutella` as a process: it routes, serves its admin listener, refuses bad
//! settings with a clear message, and stops on SIGTERM. Every wait is bounded; the
//! child is killed when its guard drops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SEDA: &str = env!("CARGO_BIN_EXE_seda");

struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the router and returns it with its Gnutella and admin addresses.
fn start(extra: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let mut child = Command::new(SEDA)
        .args(["gnutella", "--listen", "127.0.0.1:0", "--min-outgoing", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn seda");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut addr = |prefix: &str| -> SocketAddr {
        let line = lines.next().expect("a line").expect("utf-8");
        let rest = line
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line}"));
        rest.trim_end_matches("/_seda/stats")
            .parse()
            .expect("an address")
    };
    let router = addr("gnutella router on ");
    let admin = addr("admin on http://");
    // Keep reading what else the router prints: it must never write into a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Proc { child }, router, admin)
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("admin connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

#[test]
fn the_router_process_handshakes_and_reports_on_its_admin_listener() {
    let (mut p, router, admin) = start(&[]);
    let mut s = TcpStream::connect(router).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GNUTELLA CONNECT/0.6\r\nUser-Agent: t/1\r\nX-Ultrapeer: True\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "router closed in the handshake");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"GNUTELLA/0.6 200 OK\r\n"));
    s.write_all(b"GNUTELLA/0.6 200 OK\r\n\r\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = get(admin, "/_seda/stats");
        if stats.contains("\"handshake_ok\":1") {
            assert!(stats.contains("GnutellaRouter"), "{stats}");
            break;
        }
        assert!(Instant::now() < deadline, "{stats}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = get(admin, "/_seda/metrics");
    assert!(metrics.contains("seda_gnutella_peers 1"), "{metrics}");
    let pid = rustix::process::Pid::from_raw(p.child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The peer was told: a Bye (type 0x02, code 200) before the close, as the
    // router's `Bye-Packet: 0.1` promises.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let mut off = 0;
    let mut bye = None;
    while rest.len() >= off + 23 {
        let len = u32::from_le_bytes(rest[off + 19..off + 23].try_into().unwrap()) as usize;
        if rest[off + 16] == 0x02 && rest.len() >= off + 25 {
            bye = Some(u16::from_le_bytes([rest[off + 23], rest[off + 24]]));
        }
        off += 23 + len;
    }
    assert_eq!(bye, Some(200), "no Bye before the close");
}

#[test]
fn bad_settings_are_one_line_errors() {
    for (args, want) in [
        (&["--router-threads", "two"][..], "--router-threads"),
        (&["--admin-listen", "nowhere"], "--admin-listen"),
        (&["--max-peers", "0"], "max peers"),
        (&["--qrp-memory-kb", "10"], "QRP memory"),
    ] {
        let out = Command::new(SEDA)
            .args(["gnutella", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("run seda");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("seda: ") && err.contains(want),
            "{args:?}: {err}"
        );
    }
}

/// A clean stop on either backend logs no warning (issue 24: on io_uring the
/// router's own cancel of the multishot accept at stop was logged as
/// `WARN accept failed: Operation canceled`).
#[test]
fn a_clean_stop_logs_no_warning_on_either_backend() {
    for io in ["uring", "epoll"] {
        let mut p = Proc {
            child: Command::new(SEDA)
                .args(["gnutella", "--listen", "127.0.0.1:0", "--min-outgoing", "0"])
                .args(["--io", io, "--admin-listen", "none"])
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn seda"),
        };
        let mut out = BufReader::new(p.child.stdout.take().expect("stdout")).lines();
        let first = out.next().expect("a line").expect("utf-8");
        assert!(first.starts_with("gnutella router on "), "{first}");
        std::thread::spawn(move || out.for_each(drop));
        let mut err = p.child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let pid = rustix::process::Pid::from_raw(p.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = p.child.try_wait().unwrap() {
                assert!(status.success(), "{io}: {status}");
                break;
            }
            assert!(Instant::now() < deadline, "{io}: no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = log.join().expect("stderr reader");
        assert!(
            log.contains(&format!("use {io}")),
            "{io}: the log does not name the backend: {log}"
        );
        assert!(log.contains("seda gnutella: stopped"), "{io}: {log}");
        assert!(
            !log.contains("WARN") && !log.contains("ERROR"),
            "{io}: a clean stop logged a warning: {log}"
        );
    }
}
