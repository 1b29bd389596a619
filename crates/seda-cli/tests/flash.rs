//! `seda experiment flash --quick`: every server and every cache switch of the Flash
//! experiment serves the SPECweb99 set without errors, and the results are written.

use std::process::Command;

#[test]
fn flash_quick_runs_every_server_and_cache_switch() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_seda"))
        .args(["experiment", "flash", "--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    let runs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("runs.json")).unwrap())
            .unwrap();
    let disk = runs["disk"].as_array().unwrap();
    for server in ["haboob-amped", "haboob-sped"] {
        for share in [1.0, 0.25] {
            let r = disk
                .iter()
                .find(|r| r["server"] == server && r["share"].as_f64() == Some(share))
                .unwrap_or_else(|| panic!("no {server} at {share}: {log}"));
            assert!(r["report"]["completed"].as_u64().unwrap() > 0, "{r}");
            assert_eq!(r["report"]["errors"].as_u64(), Some(0), "{r}");
            assert_eq!(r["report"]["status_counts"].as_object().unwrap().len(), 1);
        }
    }
    let caches = runs["caches"].as_array().unwrap();
    let configs: Vec<&str> = caches
        .iter()
        .map(|c| c["config"].as_str().unwrap())
        .collect();
    assert_eq!(
        configs,
        [
            "all",
            "sped",
            "no-path-cache",
            "no-header-cache",
            "no-page-cache",
            "no-caches"
        ]
    );
    for c in caches {
        assert!(c["report"]["completed"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["report"]["errors"].as_u64(), Some(0), "{c}");
    }
    // The switches took: no page bytes without the page cache, no translations
    // without the path cache.
    assert_eq!(caches[4]["page_cache_bytes"].as_u64(), Some(0));
    assert_eq!(caches[2]["path_cache_bytes"].as_u64(), Some(0));
    assert!(caches[0]["page_cache_bytes"].as_u64().unwrap() > 0);
    let table = std::fs::read_to_string(out.path().join("table.md")).unwrap();
    assert!(table.contains("AMPED / SPED"), "{table}");
    for chart in ["throughput.svg", "p90.svg"] {
        assert!(out.path().join(chart).exists(), "{chart}");
    }
}
