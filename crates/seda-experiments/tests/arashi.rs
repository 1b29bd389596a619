//! The emulated users against a real Arashi over loopback (a few seconds), and the
//! quick `seda experiment arashi`.

use std::sync::Arc;
use std::time::Duration;

use seda_arashi::{Arashi, ArashiConfig, SeedPlan};
use seda_load::arashi::RequestType;
use seda_load::arashi::{ArashiLoadConfig, LoadProgress, run};

#[test]
fn markov_users_exercise_every_common_request_type() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arashi::start(
        ArashiConfig::default()
            .with_listen("127.0.0.1:0".parse().unwrap())
            .with_data(dir.path().join("data"))
            .with_seed(
                SeedPlan::default()
                    .with_users(8)
                    .with_largest_folder(80)
                    .with_hash_iterations(1)
                    .with_seed(3),
            )
            .with_stage_threads(2),
        &mut |_| {},
    )
    .unwrap();
    let mut cfg = ArashiLoadConfig::steady(a.local_addr(), 6, Duration::from_secs(4));
    cfg.accounts = 8;
    let progress = Arc::new(LoadProgress::default());
    let r = run(&cfg, Arc::clone(&progress)).unwrap();
    assert_eq!(r.all.errors, 0, "{}", r.summary());
    assert_eq!(
        r.all.rejected, 0,
        "no admission control: nothing is rejected"
    );
    assert!(r.all.completed > 100, "{}", r.summary());
    for t in [
        RequestType::Login,
        RequestType::Folders,
        RequestType::List,
        RequestType::Show,
        RequestType::Delete,
    ] {
        assert!(r.of_type(t).unwrap().completed > 0, "{t}: {}", r.summary());
    }
    // The mix follows the model: mostly reading.
    let show = r.of_type(RequestType::Show).unwrap().completed as f64;
    assert!(show / r.all.completed as f64 > 0.25, "{}", r.summary());
    assert!(r.all.rt_p90_ms > 0.0 && r.timeseries.len() >= 4);
    let back = seda_load::arashi::ArashiReport::from_json(&r.to_json()).unwrap();
    assert_eq!(
        (back.all.completed, back.all.rt_p90_ms),
        (r.all.completed, r.all.rt_p90_ms)
    );
    a.shutdown(Duration::from_secs(2));
}

#[test]
fn the_quick_experiment_writes_every_table_and_chart() {
    use seda_experiments::arashi::{ExperimentConfig, run, write_outputs};
    let out = tempfile::tempdir().unwrap();
    let mut cfg = ExperimentConfig::new(out.path().to_owned()).quick();
    cfg.loads = vec![4];
    cfg.light = 4;
    cfg.heavy = 4;
    let r = run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(r.runs.len(), 7);
    assert!(
        r.runs.iter().all(|x| x.report.all.completed > 0),
        "every run served requests"
    );
    write_outputs(out.path(), &r).unwrap();
    let table = std::fs::read_to_string(out.path().join("table.md")).unwrap();
    for h in [
        "Fig. 8",
        "Fig. 9",
        "Fig. 10",
        "Fig. 11",
        "Figs. 14-15",
        "| show |",
    ] {
        assert!(table.contains(h), "{h} in {table}");
    }
    for f in [
        "runs.json",
        "fig7.svg",
        "fig8.svg",
        "fig8-reject.svg",
        "fig10.svg",
        "fig10-reject.svg",
        "fig14.svg",
        "fig15.svg",
        "fig15-p90.svg",
    ] {
        assert!(out.path().join(f).is_file(), "{f}");
    }
    // Class 1 users only come in the middle phase.
    let fig15 = r.run("fig15").unwrap();
    assert_eq!(fig15.report.phases.len(), 3);
    let high = |i: usize| {
        fig15.report.phases[i]
            .classes
            .get(1)
            .map_or(0, |s| s.completed)
    };
    assert!(high(1) > 0 && high(0) == 0, "{:?}", fig15.report.phases);
}

/// The mail readers know Arashi from the wire only (`seda_load::arashi::request`);
/// this holds their request types, paths and accounts to the service's.
#[test]
fn the_readers_request_types_and_accounts_are_arashis() {
    use seda_load::arashi::request;
    let ours: Vec<(&str, String)> = RequestType::ALL
        .iter()
        .map(|t| (t.name(), t.path()))
        .collect();
    let theirs: Vec<(&str, String)> = seda_arashi::RequestType::ALL
        .iter()
        .map(|t| (t.name(), t.path()))
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(request::DEFAULT_ACCOUNTS, SeedPlan::default().users);
    for k in [1, 7, 1024] {
        let name = request::user_name(k);
        assert_eq!(name, seda_arashi::seed::user_name(k));
        assert_eq!(request::password(&name), seda_arashi::seed::password(&name));
    }
}
