//! `seda experiment soak --quick` end to end against the real `seda serve` on
//! loopback: every hostile kind runs, the server is sampled, and the verdict passes.
//!
//! Bounded: the experiment process is killed if it runs past [`BOUND`].

mod support;

use std::process::Command;
use std::time::Duration;

const SEDA: &str = env!("CARGO_BIN_EXE_seda");
const BOUND: Duration = Duration::from_secs(60);

#[test]
fn a_quick_soak_passes_against_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let output = support::run_bounded(
        Command::new(SEDA)
            .args(["experiment", "soak", "--quick", "--out"])
            .arg(&out),
        BOUND,
    );
    let status = output.status;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(status.success(), "exit {status}: {stderr}\n{stdout}");
    assert!(stdout.contains("soak passed"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("soak.json")).unwrap()).unwrap();
    let samples = json["samples"].as_array().unwrap();
    assert!(samples.len() >= 10, "{} samples", samples.len());
    assert!(samples.iter().all(|s| s["rss_kib"].as_u64().unwrap() > 0));
    assert!(!json["cycles"].as_array().unwrap().is_empty());
    // Every hostile kind ran and ended somehow; the well-behaved clients were
    // answered and nothing went unanswered.
    let hostile = json["hostile"].as_object().unwrap();
    for kind in [
        "slowloris",
        "stalled-reader",
        "slow-reader",
        "pipeline-flood",
        "oversized-head",
        "oversized-body",
        "half-close",
        "abrupt-reset",
        "garbage",
    ] {
        assert!(hostile[kind]["exchanges"].as_u64().unwrap() > 0, "{kind}");
    }
    // Slowloris gets 408 (or is closed) at the header timeout; a half-closing client
    // gets its three responses.
    assert_eq!(hostile["slowloris"]["unanswered"], 0);
    assert_eq!(hostile["half-close"]["unanswered"], 0);
    assert!(hostile["half-close"]["answered"].as_u64().unwrap() > 0);
    let v = &json["verdict"];
    assert_eq!(v["failures"].as_array().unwrap().len(), 0, "{v}");
    assert!(v["well_behaved"]["answered"].as_u64().unwrap() > 0);
    assert_eq!(v["well_behaved"]["unanswered"], 0);
    for f in ["summary.md", "rss.svg", "fds.svg"] {
        assert!(out.join(f).exists(), "{f}");
    }
}
