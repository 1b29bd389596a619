//! `seda haproxy-config` as a command (issue 29.8: only the library behind it was
//! tested): the configuration it prints for replicas with agent checks, checked by
//! HAProxy itself (`haproxy -c`, required in CI), and one-line errors for bad input.
//!
//! Every child runs bounded ([`support::run_bounded`]).

mod support;

use std::process::Command;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

fn seda(args: &[&str]) -> (Option<i32>, String, String) {
    let out = support::run_bounded(
        Command::new(env!("CARGO_BIN_EXE_seda"))
            .arg("haproxy-config")
            .args(args),
        BOUND,
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ARGS: &[&str] = &[
    "--replicas",
    "127.0.0.1:9001,127.0.0.1:9002",
    "--agent-port",
    "9101,9102",
    "--listen",
    "127.0.0.1:18080",
    "--balance",
    "roundrobin",
    "--retries",
    "3",
    "--health-path",
    "/health",
    "--stats-listen",
    "127.0.0.1:18081",
];

#[test]
fn prints_a_configuration_of_the_replicas_that_haproxy_accepts() {
    let (code, cfg, stderr) = seda(ARGS);
    assert_eq!(code, Some(0), "{stderr}");
    for line in [
        "bind 127.0.0.1:18080",
        "balance roundrobin",
        "retries 3",
        "retry-on conn-failure",
        "http-check send meth GET uri /health",
        "server r1 127.0.0.1:9001 agent-check agent-port 9101 agent-inter 1000ms",
        "server r2 127.0.0.1:9002 agent-check agent-port 9102 agent-inter 1000ms",
        "bind 127.0.0.1:18081",
        "hdr Retry-After 1",
    ] {
        assert!(cfg.contains(line), "no `{line}` in\n{cfg}");
    }
    assert!(
        cfg.lines()
            .any(|l| l.trim().starts_with("retry-on") && l.ends_with(" 503")),
        "{cfg}"
    );
    // `--no-retry-503` and one agent port for every replica.
    let (code, one, stderr) = seda(&[
        "--replicas",
        "127.0.0.1:9001,127.0.0.1:9002",
        "--agent-port",
        "9100",
        "--no-retry-503",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        one.contains("server r1 127.0.0.1:9001 agent-check agent-port 9100"),
        "{one}"
    );
    assert!(
        one.contains("server r2 127.0.0.1:9002 agent-check agent-port 9100"),
        "{one}"
    );
    assert!(
        !one.lines()
            .any(|l| l.trim().starts_with("retry-on") && l.contains("503")),
        "{one}"
    );

    // HAProxy itself reads it: through `--check`, and from the printed file.
    let Some(haproxy) = support::peer("haproxy") else {
        return;
    };
    let mut with_check = ARGS.to_vec();
    with_check.push("--check");
    let (code, checked, stderr) = seda(&with_check);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("accepts it"), "{stderr}");
    assert_eq!(checked, cfg, "--check prints the same configuration");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("haproxy.cfg");
    std::fs::write(&file, &cfg).unwrap();
    let out = support::run_bounded(Command::new(&haproxy).arg("-c").arg("-f").arg(&file), BOUND);
    assert!(
        out.status.success(),
        "haproxy -c: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_replicas_are_one_line_errors() {
    for (args, want) in [
        (&["--replicas", "127.0.0.1:0"][..], "port 0"),
        (&["--replicas", "nohost"], "not HOST:PORT"),
        (
            &["--replicas", "127.0.0.1:9001,127.0.0.1:9001"],
            "listed twice",
        ),
        (
            &[
                "--replicas",
                "127.0.0.1:9001,127.0.0.1:9002",
                "--agent-port",
                "1,2,3",
            ],
            "agent",
        ),
        (
            &["--replicas", "127.0.0.1:9001", "--retries", "99"],
            "retries",
        ),
    ] {
        let (code, stdout, stderr) = seda(args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: printed {stdout}");
        assert!(
            stderr.contains(want) && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
    let (code, _, stderr) = seda(&[]);
    assert_eq!(code, Some(2), "--replicas is required: {stderr}");
}
