//! `seda experiment proxy`: what it refuses before starting anything (a gunicorn
//! that is not there, an odd worker count, an unknown front or shape), each with a
//! message and exit code 1. The experiment itself needs gunicorn from PyPI and a
//! quiet machine: `bench/proxy/run.sh --quick`.

use std::process::Command;

const SEDA: &str = env!("CARGO_BIN_EXE_seda");

fn refused(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SEDA)
        .args(["experiment", "proxy", "--quick", "--out"])
        .arg(dir.path().join("proxy"))
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_settings_are_refused_with_a_message_before_anything_starts() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/proxy");
    let err = refused(&["--gunicorn", "/nonexistent/gunicorn", "--app-dir", app]);
    assert!(
        err.contains("no gunicorn at /nonexistent/gunicorn"),
        "{err}"
    );
    assert!(err.contains("bench/proxy/install.sh"), "{err}");
    let err = refused(&["--gunicorn", SEDA, "--app-dir", app, "--workers", "3"]);
    assert!(err.contains("--workers must be even"), "{err}");
    let err = refused(&["--gunicorn", SEDA, "--app-dir", app, "--fronts", "envoy"]);
    assert!(err.contains("unknown front \"envoy\""), "{err}");
    let err = refused(&["--gunicorn", SEDA, "--app-dir", app, "--shapes", "open-0x"]);
    assert!(err.contains("unknown shape"), "{err}");
    let err = refused(&["--gunicorn", SEDA, "--app-dir", "/nonexistent"]);
    assert!(err.contains("no app.py in /nonexistent"), "{err}");
}
