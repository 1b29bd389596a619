//! The emulated users against a real Arashi over loopback (a few seconds).

use std::sync::Arc;
use std::time::Duration;

use seda_arashi::load::{ArashiLoadConfig, LoadProgress, run};
use seda_arashi::{Arashi, ArashiConfig, RequestType, SeedPlan};

#[test]
fn markov_users_exercise_every_common_request_type() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arashi::start(
        ArashiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            data: dir.path().join("data"),
            seed: SeedPlan {
                users: 8,
                largest_folder: 80,
                hash_iterations: 1,
                seed: 3,
            },
            stage_threads: 2,
            ..ArashiConfig::default()
        },
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
    let back = seda_arashi::load::ArashiReport::from_json(&r.to_json()).unwrap();
    assert_eq!(
        (back.all.completed, back.all.rt_p90_ms),
        (r.all.completed, r.all.rt_p90_ms)
    );
    a.shutdown(Duration::from_secs(2));
}
