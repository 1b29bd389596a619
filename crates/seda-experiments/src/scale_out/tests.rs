//! Unit tests of the scale-out experiment's plan and tables.

use super::fleet::Fleet;
use super::*;
use crate::harness::stats::StatsLog;

#[test]
fn the_plan_compares_what_the_issue_asks_for() {
    let cfg = ScaleOutConfig::new("o".into(), "seda".into(), "haproxy".into());
    let runs = plan(&cfg);
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "throughput/direct-1",
            "throughput/haproxy-1",
            "throughput/haproxy-2",
            "throughput/haproxy-3",
            "slowed/agent",
            "slowed/plain",
            "killed/agent",
            "killed/plain",
        ]
    );
    // Throughput: replicas pinned round the cores.
    let three = &runs[3];
    assert_eq!(three.n(), 3);
    assert_eq!(three.replicas[0].cpu, Some(0));
    assert_eq!(three.replicas[2].cpu, Some(2 % cores()));
    // Slowed: the third replica does 4x the work.
    let slowed = &runs[4];
    assert_eq!(slowed.replicas[2].bottleneck_ms, 40.0);
    assert_eq!(slowed.replicas[0].bottleneck_ms, 10.0);
    assert_eq!(slowed.window_phase, 1);
    // Killed: the third replica, in the middle of the spike (10 + 30 / 2 s).
    assert_eq!(runs[6].kill, Some((2, 25.0)));
    assert_eq!(runs[7].proxy, ProxyMode::Plain);
    assert!(
        eta(&runs) < Duration::from_secs(10 * 60),
        "{:?}",
        eta(&runs)
    );
    let q = cfg.clone().quick();
    assert!(eta(&plan(&q)) < Duration::from_secs(4 * 60));
    assert!(q.check().is_ok());
    assert!(
        ScaleOutConfig {
            replica_counts: vec![0],
            ..cfg.clone()
        }
        .check()
        .is_err()
    );
    assert!(
        ScaleOutConfig {
            slow_factor: 0.5,
            ..cfg
        }
        .check()
        .is_err()
    );
}

#[test]
fn the_plain_proxy_ignores_the_agents_and_passes_503s_on() {
    let cfg = ScaleOutConfig::new("o".into(), "seda".into(), "haproxy".into());
    let runs = plan(&cfg);
    let fleet = Fleet {
        procs: Vec::new(),
        results: (0..3)
            .map(|i| ReplicaResult {
                name: format!("r{}", i + 1),
                addr: SocketAddr::from(([127, 0, 0, 1], 8081 + i)),
                agent: SocketAddr::from(([127, 0, 0, 1], 9301 + i)),
                bottleneck_ms: 10.0,
                cpu: None,
                pin_error: None,
                calibration: None,
                stats: StatsLog::default(),
                cpu_s: 0.0,
                killed_at: None,
            })
            .collect(),
    };
    let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let s: SocketAddr = "127.0.0.1:8404".parse().unwrap();
    let agent = haproxy_config(&cfg, &runs[4], &fleet, a, s)
        .render()
        .unwrap();
    assert!(agent.contains("agent-check agent-port 9303"));
    assert!(agent.contains("retry-on conn-failure empty-response 503"));
    let plain = haproxy_config(&cfg, &runs[5], &fleet, a, s)
        .render()
        .unwrap();
    assert!(!plain.contains("agent-check"));
    assert!(plain.contains("retry-on conn-failure\n"));
    assert!(plain.contains("balance roundrobin"));
}
