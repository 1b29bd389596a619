//! `seda experiment overload` end to end: one tiny scenario (SEDA Fig. 13, no control
//! vs the response-time controller) against the real `seda serve` on loopback.
//!
//! Bounded: the experiment process is killed if it runs past [`BOUND`].

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SEDA: &str = env!("CARGO_BIN_EXE_seda");
const BOUND: Duration = Duration::from_secs(90);

#[test]
fn fig13_quick_runs_against_the_real_server_and_control_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("overload");
    let mut child = Command::new(SEDA)
        .args([
            "experiment",
            "overload",
            "--quick",
            "--scale",
            "0.5",
            "--scenarios",
            "knee,refusal,fig13",
            "--fig13-users",
            "100",
            // Far under what 100 users queue on a 10 ms bottleneck (about 500 ms on
            // two cores; 150 ms if the machine were three times faster), so that
            // the controller must refuse however loaded the machine is.
            "--target-ms",
            "50",
            "--out",
        ])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("seda experiment overload ran longer than {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "exit {status}: {stderr}");
    // Progress: one line per run, naming the run.
    assert!(stderr.contains("fig13/none") && stderr.contains("fig13/response-time"));
    assert!(!stderr.contains("failed:"), "{stderr}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("runs.json")).unwrap()).unwrap();
    let all = json["runs"].as_array().unwrap();
    assert_eq!(all.len(), 4, "{stderr}");
    let runs = &all[2..];
    let report = |i: usize| &runs[i]["groups"][0]["report"];
    for (i, run) in runs.iter().enumerate() {
        let report = &run["groups"][0]["report"];
        assert!(report["completed"].as_u64().unwrap() > 0, "run {i}");
        assert!(!report["timeseries"].as_array().unwrap().is_empty());
        assert!(
            !run["stats"]["samples"].as_array().unwrap().is_empty(),
            "run {i} has no /_seda/stats samples: {stderr}"
        );
    }
    // 100 users with 20 ms think time on a 10 ms bottleneck: without control nothing is
    // refused; with a 50 ms target the controller refuses some requests with a 503.
    assert_eq!(report(0)["rejected"], 0);
    assert!(
        report(1)["rejected"].as_u64().unwrap() > 0,
        "the response-time controller rejected nothing: {stderr}"
    );
    let sample = &runs[1]["stats"]["samples"][0];
    assert_eq!(sample["policy"], "response-time", "{sample}");
    assert_eq!(sample["target_ms"], 50.0, "{sample}");
    // Every server did the same work: the passes calibrated once by the experiment.
    let passes = json["setup"]["bottleneck_passes"].as_u64().expect("passes");
    assert!(passes > 0);
    for run in all {
        assert!(
            run["calibration"]
                .as_str()
                .is_some_and(|c| c.ends_with(&format!(
                    "set by --bottleneck-passes to {passes} iterations"
                ))),
            "{}",
            run["calibration"]
        );
    }

    // The refusal run refused nearly everything; its cost is reported.
    let refusal = &all[1]["groups"][0]["report"];
    assert!(refusal["rejected"].as_u64().unwrap() > 10 * refusal["completed"].as_u64().unwrap());
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("SEDA SOSP'01 Fig. 13") && table.contains("response-time"));
    assert!(
        table.contains("Capacity:") && table.contains("CPU per refusal"),
        "{table}"
    );
    for chart in ["knee.svg", "fig13-p90.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
    }
}
