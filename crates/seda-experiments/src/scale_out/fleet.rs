//! The replicas of a run: `seda serve` processes started with the same work per
//! request and pinned, HAProxy's configuration in front of them, and the wait until
//! HAProxy sees them all up.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::config::{BACKEND, ProxyMode, RunSpec, ScaleOutConfig};
use super::results::ReplicaResult;
use crate::ExperimentError;
use crate::harness::haproxy::process as proxy;
use crate::harness::haproxy::{Balance, HaproxyConfig, Replica};
use crate::harness::server::{ServerKind, ServerProcess, ServerSpec, free_port};
use crate::harness::stats::{self, StatsLog};

/// The replicas of a run, started and pinned.
pub(super) struct Fleet {
    pub(super) procs: Vec<Option<ServerProcess>>,
    pub(super) results: Vec<ReplicaResult>,
}

pub(super) fn start_fleet(
    cfg: &ScaleOutConfig,
    spec: &RunSpec,
    root: &Path,
) -> Result<Fleet, ExperimentError> {
    let mut fleet = Fleet {
        procs: Vec::new(),
        results: Vec::new(),
    };
    for (i, r) in spec.replicas.iter().enumerate() {
        let agent = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let ms = r.bottleneck_ms.to_string();
        let base = cfg
            .passes
            .ok_or_else(|| ExperimentError::run("the bottleneck is not calibrated"))?;
        let passes = ((base as f64 * r.bottleneck_ms / cfg.bottleneck_ms).round() as u64)
            .max(1)
            .to_string();
        let target = cfg.target_ms.to_string();
        let server_spec = ServerSpec {
            name: format!("{}-r{}", spec.id.replace('/', "-"), i + 1),
            kind: ServerKind::Haboob {
                seda: cfg.seda.clone(),
                cache_mb: 16,
                extra: [
                    "--bottleneck-ms",
                    &ms,
                    "--bottleneck-passes",
                    &passes,
                    "--rt-target-ms",
                    &target,
                    "--agent-listen",
                    &agent.to_string(),
                    "--shutdown-grace",
                    "1",
                ]
                .map(String::from)
                .to_vec(),
            },
        };
        let p = ServerProcess::start(&server_spec, root)?;
        let probe =
            stats::http_get(p.addr(), "/bottleneck", Duration::from_secs(10)).map_err(|e| {
                ExperimentError::step(format!("GET /bottleneck on replica {}", i + 1), e)
            })?;
        if probe.status != 200 {
            return Err(ExperimentError::run(format!(
                "replica {} answered {} to /bottleneck: {}",
                i + 1,
                probe.status,
                p.log_tail()
            )));
        }
        let pin_error = r
            .cpu
            .and_then(|c| proxy::pin_to_cpu(p.pid(), c).err())
            .map(|e| e.to_string());
        fleet.results.push(ReplicaResult {
            name: format!("r{}", i + 1),
            addr: p.addr(),
            agent,
            bottleneck_ms: r.bottleneck_ms,
            cpu: r.cpu,
            pin_error,
            calibration: p
                .log_tail()
                .lines()
                .find(|l| l.starts_with("bottleneck:"))
                .map(|l| l.trim().to_owned()),
            stats: StatsLog::default(),
            cpu_s: 0.0,
            killed_at: None,
        });
        fleet.procs.push(Some(p));
    }
    Ok(fleet)
}

pub(super) fn haproxy_config(
    cfg: &ScaleOutConfig,
    spec: &RunSpec,
    fleet: &Fleet,
    bind: SocketAddr,
    stats: SocketAddr,
) -> HaproxyConfig {
    let agent = spec.proxy == ProxyMode::Agent;
    let replicas = fleet
        .results
        .iter()
        .map(|r| Replica {
            addr: r.addr.to_string(),
            agent_port: agent.then_some(r.agent.port()),
        })
        .collect();
    let mut h = HaproxyConfig::new(&bind.to_string(), replicas);
    h.stats = Some(stats.to_string());
    h.timeout_server = cfg.timeout;
    h.timeout_client = cfg.timeout + Duration::from_secs(5);
    h.check_inter = Duration::from_secs(1);
    if !agent {
        h.balance = Balance::RoundRobin;
        h.retry_503 = false;
        h.retry_empty_response = false;
        h.retries = 3;
    }
    h
}

/// Waits up to 10 s until HAProxy sees every replica up (health and agent checks done).
pub(super) fn wait_all_up(stats: SocketAddr, n: usize) -> Result<(), ExperimentError> {
    let t0 = Instant::now();
    let mut last = Vec::new();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(rows) = proxy::read_stats(stats, BACKEND) {
            let up = rows
                .iter()
                .filter(|r| r.name != "BACKEND" && r.status.starts_with("UP"))
                .count();
            if up == n {
                return Ok(());
            }
            last = rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(ExperimentError::run(format!(
        "haproxy did not see all {n} replicas up within 10 s: {last:?}"
    )))
}
