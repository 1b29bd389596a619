//! `seda serve` with overload control (issue 5), on the real binary: the bottleneck
//! handler and its stats per `shared/contracts/overload.md`, and one-line errors for
//! bad overload settings.
//!
//! Every child is killed when its guard drops and every wait is bounded by [`BOUND`].

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

use std::sync::mpsc;
use std::time::Duration;
use support::Guard;

const SEDA: &str = env!("CARGO_BIN_EXE_seda");
const BOUND: Duration = Duration::from_secs(20);

fn spawn(args: &[&str]) -> Guard {
    Guard(
        Command::new(SEDA)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn seda"),
    )
}

/// Runs `seda args...` to its end (bounded): exit code, stdout, stderr.
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = support::run_bounded(Command::new(SEDA).args(args), BOUND);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_overload_settings_are_one_line_errors_with_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let bad_cidr = dir.path().join("bad-cidr.toml");
    std::fs::write(
        &bad_cidr,
        "[classes]\nprefixes = [{ prefix = \"10.0.0.0/33\", class = 1 }]\n",
    )
    .unwrap();
    let bad_cidr = bad_cidr.to_str().unwrap();
    for (args, want) in [
        (&["serve", "--admission", "bogus"][..], "bogus"),
        (
            &[
                "serve",
                "--admission",
                "response-time",
                "--bottleneck-ms",
                "5",
            ],
            "needs a response-time target",
        ),
        (
            &["serve", "--admission", "multiclass"],
            "needs a response-time target",
        ),
        (
            &["serve", "--bottleneck-ms", "5", "--degrade"],
            "degrade needs",
        ),
        (&["serve", "--overload-action", "shrug"], "overload-action"),
        (&["serve", "--bottleneck-ms=-3"], "bottleneck-ms"),
        (&["serve", "--config", bad_cidr], "bad address prefix"),
    ] {
        let (code, stdout, stderr) = run(args);
        assert!(
            matches!(code, Some(c) if c != 0),
            "seda {args:?} exited {code:?}"
        );
        assert_eq!(stderr.lines().count(), 1, "seda {args:?}:\n{stderr}");
        assert!(
            stderr.starts_with("seda: ") && stderr.contains(want),
            "seda {args:?}: {stderr}"
        );
        assert!(stdout.is_empty(), "seda {args:?} printed {stdout:?}");
    }
}

/// One response on a fresh connection (`Connection: close`): status, head, body.
fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, BOUND).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head[9..12].parse().unwrap();
    (status, head, raw[end..].to_vec())
}

#[test]
fn bottleneck_answers_with_its_quality_and_stats_follow_the_contract() {
    let mut g = spawn(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--bottleneck-ms",
        "5",
        "--rt-target-ms",
        "500",
        "--admission",
        "response-time",
        "--class-header",
        "X-Class",
    ]);
    let out = g.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = BufReader::new(out);
        for line in r.lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let first = rx.recv_timeout(BOUND).expect("listening line");
    let addr: SocketAddr = first
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{first}"))
        .parse()
        .unwrap();
    let admin_line = rx.recv_timeout(BOUND).expect("admin line");
    let admin: SocketAddr = admin_line
        .strip_prefix("admin at http://")
        .and_then(|l| l.strip_suffix("/_seda/"))
        .unwrap_or_else(|| panic!("{admin_line}"))
        .parse()
        .unwrap();
    let second = rx.recv_timeout(BOUND).expect("calibration line");
    let iters = second
        .strip_prefix("bottleneck: 5 ms calibrated to ")
        .and_then(|r| r.strip_suffix(" iterations"))
        .unwrap_or_else(|| panic!("{second}"));
    assert!(iters.parse::<u64>().unwrap() >= 1);

    // The paper's token bucket holds one token, refilled at 100/s to begin with:
    // requests of one client 30 ms apart are all admitted.
    let pause = || std::thread::sleep(Duration::from_millis(30));
    let (status, head, body) = get(addr, "/bottleneck?q=0.5", "X-Class: 2\r\n");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("X-Seda-Quality: 0.50\r\n"), "{head}");
    assert!(head.contains("Content-Type: text/html"), "{head}");
    assert_eq!(body.len(), 8192);
    pause();
    let (status, head, _) = get(addr, "/bottleneck", "");
    assert_eq!(status, 200);
    assert!(head.contains("X-Seda-Quality: 1.00\r\n"), "{head}");
    pause();
    assert_eq!(get(addr, "/bottleneck?q=1.5", "").0, 400);

    let (status, _, body) = get(admin, "/_seda/stats", "");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let stage = |name: &str| {
        doc["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {doc}"))
    };
    let b = stage("handler:bottleneck");
    for key in ["queue_len", "threads", "processed", "rejected", "rt_p90_ms"] {
        assert!(b.get(key).is_some(), "{key} in {b}");
    }
    let adm = &b["admission"];
    assert_eq!(
        adm["policy"], "multiclass",
        "classes make it multiclass: {b}"
    );
    assert_eq!(adm["enabled"], true);
    assert_eq!(adm["target_ms"], 500.0);
    assert!(
        adm["rate"].is_number() && adm.get("p90_ms").is_some(),
        "{adm}"
    );
    let classes = b["classes"].as_array().unwrap();
    assert!(
        classes
            .iter()
            .any(|c| c["class"] == 2 && c["admitted"] == 1 && c["rejected"] == 0),
        "{b}"
    );
    assert!(b.get("quality").is_some_and(|q| q.is_null()), "{b}");
    let hello = stage("handler:hello");
    assert_eq!(
        hello["admission"]["policy"], "multiclass",
        "every dynamic stage"
    );
}
