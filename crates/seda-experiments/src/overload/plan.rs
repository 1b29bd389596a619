//! Which runs each scenario makes, and how long they take.

use std::time::Duration;

use super::config::{CLASS_HEADER, Front, OverloadConfig, RunSpec, Scenario, UserGroup};
use seda_load::schedule::{Phase, Schedule};

fn ms(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// `[response-time]` settings that pin the paper's token bucket at 0.05 tokens/s
/// with a depth of one token: the stage refuses nearly everything, so a run
/// measures what a refusal costs the server.
pub const REFUSE_ALL_TOML: &str =
    "[response-time]\nrate-min = 0.05\nrate-max = 0.05\ninitial-rate = 0.05\nburst-ms = 0\n";

/// The runs of `cfg`'s scenarios, each `cfg.repeats` times, without duplicates, in
/// run order (all repeats of a run one after the other), and for each scenario the
/// ids of its runs.
pub fn plan(cfg: &OverloadConfig) -> (Vec<RunSpec>, Vec<(Scenario, Vec<String>)>) {
    let mut bn = vec!["--bottleneck-ms".to_string(), ms(cfg.bottleneck_ms)];
    if let Some(k) = cfg.bottleneck_passes {
        bn.extend(["--bottleneck-passes".to_string(), k.to_string()]);
    }
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v = bn.clone();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let target = ms(cfg.target_ms);
    let rt = ["--rt-target-ms", target.as_str()];
    let sched = |levels: [u64; 3]| {
        Schedule::new(
            cfg.phases
                .iter()
                .zip(levels)
                .map(|(&duration, l)| Phase::new(duration, l as f64))
                .collect(),
        )
    };
    let spike = sched([cfg.base_users, cfg.spike_users, cfg.base_users]);
    let one = |schedule: Schedule| {
        vec![UserGroup {
            name: "all".into(),
            class: None,
            schedule,
        }]
    };
    let run = |scenario: Scenario, policy: &str, serve_args: Vec<String>, groups, window| RunSpec {
        id: format!("{}/{policy}", scenario.name()),
        scenario,
        policy: policy.to_string(),
        serve_args,
        groups,
        window_phase: window,
        repeat: 0,
        front: Front::Seda,
        retry_wait: None,
        config: None,
    };
    // The spike runs shared by `spike` and `policies`.
    let spike_run = |policy: &str, args: Vec<String>| {
        run(Scenario::Spike, policy, args, one(spike.clone()), Some(1))
    };
    let mut runs: Vec<RunSpec> = Vec::new();
    let mut scenarios = Vec::new();
    for &sc in &cfg.scenarios {
        let these: Vec<RunSpec> = match sc {
            Scenario::Knee => {
                let phases = cfg
                    .knee_users
                    .iter()
                    .map(|&u| Phase::new(cfg.knee_step, u as f64))
                    .collect();
                vec![run(
                    sc,
                    "none",
                    bn.clone(),
                    one(Schedule::new(phases)),
                    None,
                )]
            }
            Scenario::Refusal => {
                let [warm, measure] = cfg.refusal_phases;
                let schedule = Schedule::new(vec![
                    Phase::new(warm, cfg.refusal_users as f64),
                    Phase::new(measure, cfg.refusal_users as f64),
                ]);
                let mut r = run(
                    sc,
                    "refuse-all",
                    with(&["--admission", "response-time", rt[0], rt[1]]),
                    one(schedule),
                    Some(1),
                );
                r.retry_wait = Some(cfg.think);
                r.config = Some(REFUSE_ALL_TOML.to_string());
                vec![r]
            }
            Scenario::Fig13 => {
                let steady = Schedule::steady(cfg.fig13_duration, cfg.fig13_users as f64);
                vec![
                    run(sc, "none", bn.clone(), one(steady.clone()), None),
                    run(
                        sc,
                        "response-time",
                        with(&["--admission", "response-time", rt[0], rt[1]]),
                        one(steady),
                        None,
                    ),
                ]
            }
            Scenario::Spike => {
                let limit = cfg.max_connections.to_string();
                vec![
                    spike_run("none", bn.clone()),
                    spike_run(
                        "response-time",
                        with(&["--admission", "response-time", rt[0], rt[1]]),
                    ),
                    spike_run("default", with(&rt)),
                    spike_run(
                        "max-connections",
                        with(&["--max-connections", limit.as_str()]),
                    ),
                ]
            }
            Scenario::Degrade => vec![run(
                sc,
                "degrade+admission",
                with(&[rt[0], rt[1], "--degrade"]),
                one(spike.clone()),
                Some(1),
            )],
            Scenario::Classes => {
                let groups = vec![
                    UserGroup {
                        name: "low".into(),
                        class: Some(0),
                        schedule: sched([cfg.class_users; 3]),
                    },
                    UserGroup {
                        name: "high".into(),
                        class: Some(1),
                        schedule: sched([0, cfg.high_users, 0]),
                    },
                ];
                let classes = ["--class-header", CLASS_HEADER];
                vec![
                    run(
                        sc,
                        "default",
                        with(&[rt[0], rt[1], classes[0], classes[1]]),
                        groups.clone(),
                        Some(1),
                    ),
                    run(
                        sc,
                        "multiclass",
                        with(&[
                            "--admission",
                            "response-time",
                            rt[0],
                            rt[1],
                            classes[0],
                            classes[1],
                        ]),
                        groups,
                        Some(1),
                    ),
                ]
            }
            Scenario::Policies => {
                let mut nginx = spike_run("nginx-limit-req", bn.clone());
                nginx.scenario = sc;
                nginx.id = format!("{}/nginx-limit-req", sc.name());
                nginx.front = Front::NginxLimitReq;
                let mut v = vec![
                    spike_run("none", bn.clone()),
                    spike_run(
                        "response-time",
                        with(&["--admission", "response-time", rt[0], rt[1]]),
                    ),
                    spike_run("default", with(&rt)),
                ];
                for policy in ["codel", "gradient"] {
                    let mut r = spike_run(policy, with(&["--admission", policy]));
                    r.scenario = sc;
                    r.id = format!("{}/{policy}", sc.name());
                    v.push(r);
                }
                v.push(nginx);
                v
            }
        };
        let these: Vec<RunSpec> = these
            .into_iter()
            .filter(|r| cfg.only.is_empty() || cfg.only.contains(&r.id))
            .collect();
        let ids = these.iter().map(|r| r.id.clone()).collect();
        for r in these {
            if runs.iter().any(|x| x.id == r.id) {
                continue;
            }
            for k in 0..cfg.repeats.max(1) {
                runs.push(RunSpec {
                    repeat: k as u32,
                    ..r.clone()
                });
            }
        }
        scenarios.push((sc, ids));
    }
    (runs, scenarios)
}

/// Pause between runs so that sockets in TIME_WAIT settle.
pub const PAUSE: Duration = Duration::from_secs(2);
/// Expected overhead per run besides the load: start-up with calibration, drain, stop.
const OVERHEAD: Duration = Duration::from_secs(6);

/// Expected wall time of `runs`.
pub fn eta(runs: &[RunSpec]) -> Duration {
    runs.iter().map(|r| r.length() + OVERHEAD + PAUSE).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_plan_repeats_every_run_and_fits_twenty_five_minutes() {
        let cfg = OverloadConfig::new("out".into(), "seda".into());
        let (runs, scenarios) = plan(&cfg);
        let mut ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        ids.dedup();
        assert_eq!(
            ids,
            [
                "knee/none",
                "refusal/refuse-all",
                "spike/none",
                "spike/response-time",
                "spike/default",
                "policies/codel",
                "policies/gradient",
                "policies/nginx-limit-req",
                "classes/default",
                "classes/multiclass",
            ]
        );
        assert_eq!(runs.len(), 3 * ids.len(), "three repeats of each");
        assert_eq!(
            runs.iter()
                .filter(|r| r.id == "spike/default")
                .map(|r| r.repeat)
                .collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let eta = eta(&runs);
        assert!(eta < Duration::from_secs(25 * 60), "{eta:?}");
        let policies = &scenarios
            .iter()
            .find(|s| s.0 == Scenario::Policies)
            .unwrap()
            .1;
        assert_eq!(
            policies[..3],
            ["spike/none", "spike/response-time", "spike/default"]
        );
        // `--rt-target-ms` alone: the server's default policy.
        let default = runs.iter().find(|r| r.id == "spike/default").unwrap();
        assert_eq!(
            default.serve_args,
            ["--bottleneck-ms", "40", "--rt-target-ms", "1000"]
        );
        let levels: Vec<f64> = default.groups[0]
            .schedule
            .phases()
            .iter()
            .map(|p| p.level)
            .collect();
        assert_eq!(levels, [3.0, 1000.0, 3.0]);
        assert_eq!(default.window_phase, Some(1));
        let nginx = runs
            .iter()
            .find(|r| r.front == Front::NginxLimitReq)
            .unwrap();
        assert_eq!(
            nginx.serve_args,
            ["--bottleneck-ms", "40"],
            "no control behind nginx"
        );
        // The classes: the high class only in the middle phase, with its header.
        let classes = runs.iter().find(|r| r.id == "classes/default").unwrap();
        assert!(classes.serve_args.contains(&"--class-header".to_string()));
        assert!(!classes.serve_args.contains(&"--admission".to_string()));
        assert_eq!(classes.groups[1].class, Some(1));
        let high: Vec<f64> = classes.groups[1]
            .schedule
            .phases()
            .iter()
            .map(|p| p.level)
            .collect();
        assert_eq!(high, [0.0, 32.0, 0.0]);
        // The refusal run pins the bucket and retries at once.
        let refusal = runs.iter().find(|r| r.id == "refusal/refuse-all").unwrap();
        assert_eq!(refusal.config.as_deref(), Some(REFUSE_ALL_TOML));
        assert_eq!(refusal.retry_wait, Some(cfg.think));
        // The committed rerun (bench/overload/run.sh): every scenario but `spike`'s
        // connection limit, at 0.7 of the phases, also fits.
        let full = OverloadConfig {
            scenarios: vec![
                Scenario::Knee,
                Scenario::Refusal,
                Scenario::Fig13,
                Scenario::Degrade,
                Scenario::Classes,
                Scenario::Policies,
            ],
            ..cfg.clone()
        }
        .scaled(0.7);
        let eta_full = super::eta(&plan(&full).0);
        assert!(eta_full < Duration::from_secs(25 * 60), "{eta_full:?}");
        // One calibration for every server of the experiment.
        let fixed = OverloadConfig {
            bottleneck_passes: Some(1234),
            ..cfg.clone()
        };
        assert!(
            plan(&fixed)
                .0
                .iter()
                .all(|r| r.serve_args[..4]
                    == ["--bottleneck-ms", "40", "--bottleneck-passes", "1234"])
        );
        // Only the policies: the spike runs come along.
        let only = OverloadConfig {
            scenarios: vec![Scenario::Policies],
            repeats: 1,
            ..cfg.clone()
        };
        assert_eq!(plan(&only).0.len(), 6);
        let picked = OverloadConfig {
            only: vec!["knee/none".into(), "spike/default".into()],
            ..cfg.clone()
        };
        let ids: Vec<String> = plan(&picked).0.into_iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), 6);
        assert!(
            ids.iter()
                .all(|id| id == "knee/none" || id == "spike/default")
        );
    }
}
