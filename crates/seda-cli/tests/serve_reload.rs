//! SIGHUP reloads `seda serve`'s configuration: a new admission target applies
//! under load with no request failing, a bad file is refused with one line and the
//! old configuration keeps running, and `--check` agrees with the reload. The real
//! binary and the real load generator on loopback; every wait is bounded.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;
use support::{Guard, Served, run_bounded};

/// The `admission` view of `handler:hello` in `stats`.
fn hello(stats: &serde_json::Value) -> serde_json::Value {
    stats["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "handler:hello")
        .expect("the hello handler's stage")
        .clone()
}

#[test]
fn sighup_under_load_changes_the_target_and_no_request_fails() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("serve.toml");
    std::fs::write(&conf, "rt-target-ms = 1000\nmax-pipelined = 16\n").unwrap();
    let s = Served::start(&["--config", conf.to_str().unwrap()]);
    assert_eq!(hello(&s.stats())["admission"]["target_ms"], 1000.0);
    let report = dir.path().join("load.json");
    let url = format!("http://{}", s.addr);
    let mut load = Guard(
        Command::new(env!("CARGO_BIN_EXE_seda"))
            .args([
                "load", "http", "--url", &url, "--path", "/hello", "--users", "16",
            ])
            .args([
                "--think-ms",
                "2",
                "--reqs-per-conn",
                "3",
                "--duration",
                "4s",
            ])
            .args(["--quiet", "--json", report.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Under way: the handler has answered requests.
    s.wait_stats("load under way", |st| {
        hello(st)["processed"].as_u64().unwrap_or(0) > 100
    });
    std::fs::write(&conf, "rt-target-ms = 250\nmax-pipelined = 4\n").unwrap();
    s.signal(Signal::HUP);
    let line = s.stderr_line("seda serve: reload");
    assert!(
        line.contains("reloaded") && line.contains("overload control"),
        "{line}"
    );
    assert!(line.contains("max-pipelined"), "{line}");
    let st = s.stats();
    assert_eq!(
        hello(&st)["admission"]["target_ms"],
        250.0,
        "{}",
        hello(&st)
    );
    let processed = hello(&st)["processed"].as_u64().unwrap();
    // A bad file, still under load: refused in one line, the running target stays.
    std::fs::write(&conf, "rt-target-ms = -5\n").unwrap();
    s.signal(Signal::HUP);
    let line = s.stderr_line("seda serve: reload");
    assert!(
        line.contains("reload refused") && line.contains("rt-target-ms"),
        "{line}"
    );
    assert_eq!(hello(&s.stats())["admission"]["target_ms"], 250.0);
    // The load ran on across both reloads.
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = load.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < support::BOUND,
            "the load generator did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["errors"], 0, "{}", r["errors_by_kind"]);
    assert!(r["completed"].as_u64().unwrap() > processed, "{r}");
    // Every request issued was answered (200, or a 503 of the new target).
    let answered = r["completed"].as_u64().unwrap() + r["rejected"].as_u64().unwrap();
    assert_eq!(r["issued"].as_u64(), Some(answered), "{r}");
}

#[test]
fn a_reload_that_changes_fixed_settings_says_they_wait_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("serve.toml");
    std::fs::write(&conf, "cache-mb = 16\n").unwrap();
    let s = Served::start(&["--config", conf.to_str().unwrap()]);
    std::fs::write(&conf, "cache-mb = 32\nidle-timeout = 5\n").unwrap();
    // --check agrees with what the reload will do.
    let out = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_seda")).args([
            "serve",
            "--config",
            conf.to_str().unwrap(),
            "--check",
        ]),
        support::BOUND,
    );
    assert!(out.status.success());
    s.signal(Signal::HUP);
    let line = s.stderr_line("seda serve: reload");
    assert!(line.contains("applied timeouts"), "{line}");
    assert!(line.contains("kept until a restart: cache-mb"), "{line}");
    assert_eq!(
        s.stats()["haboob"]["page_cache"]["capacity_bytes"],
        16u64 << 20,
        "the cache keeps its size"
    );
}
