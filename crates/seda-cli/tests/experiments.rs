//! Short runs of shipped experiments that no test ran (issue 29.8): `seda experiment
//! fig12`, the Gnutella throughput bench (the source of a published ratio) and the
//! scale-out runner (replicas behind HAProxy, which CI requires). Each checks what a
//! user of the full run relies on: every file written, every point measured, figures
//! that are counts of real work, not their values (these runs are seconds long).
//!
//! Every child runs bounded ([`support::run_bounded`]).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

fn seda(args: &[&str], bound: Duration) -> (Option<i32>, String, String) {
    let out = support::run_bounded(Command::new(env!("CARGO_BIN_EXE_seda")).args(args), bound);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first number found under any of `keys` in `v` (the reports nest their counts).
fn count(v: &Value, keys: &[&str]) -> Option<f64> {
    match v {
        Value::Object(m) => keys
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_f64))
            .or_else(|| m.values().find_map(|x| count(x, keys))),
        Value::Array(a) => a.iter().find_map(|x| count(x, keys)),
        _ => None,
    }
}

#[test]
fn fig12_measures_every_point_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fig12");
    let (code, stdout, stderr) = seda(
        &[
            "experiment",
            "fig12",
            "--out",
            out.to_str().unwrap(),
            "--clients",
            "1,4",
            "--duration-s",
            "1",
            "--warmup-s",
            "1",
            "--size-mb",
            "4",
            "--cache-mb",
            "2",
            "--servers",
            "haboob",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.is_empty(), "no table printed");
    for f in ["runs.json", "table.md", "throughput.svg"] {
        assert!(out.join(f).is_file(), "{f} missing; stderr: {stderr}");
    }
    let runs = json(&out.join("runs.json"));
    let points = runs["runs"].as_array().expect("runs");
    let clients: Vec<u64> = points
        .iter()
        .filter_map(|p| p["clients"].as_u64())
        .collect();
    assert_eq!(clients, [1, 4], "{runs}");
    for p in points {
        assert_eq!(p["server"], "haboob", "{p}");
        let done = count(p, &["completed", "ok", "responses"]).expect("a completed count");
        assert!(done > 0.0, "a point served nothing: {p}");
        assert!(p["server_cpu_s"].as_f64().is_some_and(|c| c > 0.0), "{p}");
    }
    assert!(
        runs["skipped"].as_array().is_some_and(Vec::is_empty),
        "{runs}"
    );
}

#[test]
fn the_gnutella_throughput_bench_measures_both_routers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gnutella");
    let (code, stdout, stderr) = seda(
        &[
            "experiment",
            "gnutella-throughput",
            "--out",
            out.to_str().unwrap(),
            "--duration-s",
            "1",
            "--rounds",
            "1",
            "--peers",
            "2",
        ],
        Duration::from_secs(180),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let table = std::fs::read_to_string(out.join("throughput.md")).expect("throughput.md");
    assert_eq!(stdout, table, "the printed table is the file's");
    let r = json(&out.join("throughput.json"));
    // One round of each router, each of which routed and delivered real messages;
    // the published ratio is staged over plain, the medians of those rounds.
    let text = r.to_string();
    let rounds = r["rounds"].as_array().expect("rounds");
    let mut routers: Vec<&str> = rounds.iter().filter_map(|x| x["router"].as_str()).collect();
    routers.sort_unstable();
    assert_eq!(routers, ["plain", "staged"], "{text}");
    let routed = |router: &str| {
        let x = rounds.iter().find(|x| x["router"] == router).unwrap();
        for key in ["routed_per_s", "delivered_per_s"] {
            assert!(
                x[key].as_f64().is_some_and(|v| v > 0.0),
                "{router}: {key} in {x}"
            );
        }
        x["routed_per_s"].as_f64().unwrap()
    };
    let (staged, plain) = (routed("staged"), routed("plain"));
    assert_eq!(r["staged_median"].as_f64(), Some(staged), "{text}");
    assert_eq!(r["plain_median"].as_f64(), Some(plain), "{text}");
    let ratio = r["ratio"].as_f64().expect("ratio");
    assert!((ratio - staged / plain).abs() <= 1e-9 * ratio, "{text}");
}

#[test]
fn the_scale_out_runner_measures_replicas_behind_haproxy() {
    let Some(_) = support::peer("haproxy") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scale-out");
    let (code, stdout, stderr) = seda(
        &[
            "experiment",
            "scale-out",
            "--quick",
            "--out",
            out.to_str().unwrap(),
            "--scenarios",
            "throughput",
            "--replicas",
            "2",
            "--users",
            "20",
            "--bottleneck-ms",
            "5",
            "--no-pin",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.is_empty(), "no table printed");
    assert!(
        out.join("runs.json").is_file(),
        "runs.json; stderr: {stderr}"
    );
    let runs = json(&out.join("runs.json"));
    let text = runs.to_string();
    assert!(text.contains("haproxy"), "{text}");
    let served = count(&runs, &["completed", "ok", "served"]).expect("a served count");
    assert!(served > 0.0, "nothing served through HAProxy: {text}");
    let cfgs: Vec<_> = std::fs::read_dir(out.join("haproxy"))
        .expect("haproxy/ with the configurations used")
        .filter_map(Result::ok)
        .collect();
    assert!(!cfgs.is_empty());
}

/// The colors experiment's generator dwell is checked before anything runs: a value
/// past one second is refused by name, with a failing exit code.
#[test]
fn colors_refuses_a_dwell_past_one_second() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let (code, _, stderr) = seda(
        &[
            "experiment",
            "colors",
            "--quick",
            "--client-dwell-us",
            "1000001",
            "--out",
            out,
        ],
        Duration::from_secs(60),
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("--client-dwell-us"), "{stderr}");
    assert!(
        !dir.path().join("runs.json").exists(),
        "nothing may run with a refused setting"
    );
}
