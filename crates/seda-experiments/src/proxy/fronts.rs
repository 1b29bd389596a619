//! The fronts of the experiment, started in front of a backend: nginx (`proxy_pass`,
//! or with `limit_req` + `limit_conn` sized at the capacity), HAProxy (`maxconn` +
//! `timeout queue`), and `seda serve --proxy` with a p90 target and any admission
//! policy.

use std::net::SocketAddr;
use std::path::Path;

use super::config::{CLASS_HEADER, Front, ProxyConfig, Shape};
use crate::ExperimentError;
use crate::harness::haproxy::HaproxyProcess;
use crate::harness::server::{ServerKind, ServerProcess, ServerSpec, free_port};

/// A running front.
pub(super) enum Running {
    Server(ServerProcess),
    Haproxy(HaproxyProcess),
}

impl Running {
    pub(super) fn addr(&self) -> SocketAddr {
        match self {
            Running::Server(s) => s.addr(),
            Running::Haproxy(h) => h.addr(),
        }
    }

    pub(super) fn stop(self) {
        match self {
            Running::Server(s) => {
                if let Err(e) = s.stop() {
                    eprintln!("   {e}");
                }
            }
            Running::Haproxy(h) => h.stop(),
        }
    }
}

/// nginx's `limit_req` + `limit_conn` at `capacity`: the rate, a burst of one target's
/// worth, and the requests in flight the target allows (at least the workers).
pub fn nginx_limits(capacity: f64, target_ms: f64, workers: u32) -> (String, String) {
    let rate = capacity.round().max(1.0);
    let burst = (capacity * target_ms / 1e3).round().max(1.0);
    let conns = burst.max(f64::from(workers));
    (
        format!(
            "\x20 limit_req_zone $binary_remote_addr zone=work:1m rate={rate}r/s;\n\
             \x20 limit_conn_zone $binary_remote_addr zone=inflight:1m;"
        ),
        format!(
            "limit_req zone=work burst={burst}; limit_req_status 503; \
             limit_conn inflight {conns}; limit_conn_status 503;"
        ),
    )
}

/// HAProxy in front of `upstream`: `maxconn` = the workers on the server, a request
/// that waits longer than the target in HAProxy's queue gets 503. A request with
/// `X-Class: 1` goes ahead of the others in that queue (`set-priority-class`), the
/// nearest HAProxy has to the high class of [`Shape::Classes`].
pub fn haproxy_config(
    bind: SocketAddr,
    upstream: SocketAddr,
    workers: u32,
    target_ms: f64,
) -> String {
    format!(
        "global\n  maxconn 8000\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  \
         timeout queue {}ms\n  option http-keep-alive\n\
         frontend front\n  bind {bind}\n  default_backend gunicorn\n\
         \x20 http-request set-priority-class int(-1) if {{ req.hdr({CLASS_HEADER}) -m str 1 }}\n\
         backend gunicorn\n  server g1 {upstream} maxconn {workers}\n",
        target_ms.round() as u64
    )
}

pub(super) fn start_front(
    cfg: &ProxyConfig,
    shape: Shape,
    front: Front,
    upstream: SocketAddr,
    capacity: f64,
    haproxy: Option<&Path>,
    root: &Path,
) -> Result<(Running, String), ExperimentError> {
    let nginx = |http: String, location: String| -> Result<(Running, String), ExperimentError> {
        let spec = ServerSpec {
            name: front.name().into(),
            kind: ServerKind::NginxProxy {
                workers: 1,
                upstream,
                http,
                location,
            },
        };
        let d = spec.describe();
        Ok((Running::Server(ServerProcess::start(&spec, root)?), d))
    };
    match front {
        Front::NginxProxy => nginx(String::new(), String::new()),
        Front::NginxLimit => {
            let (http, location) = nginx_limits(capacity, cfg.target_ms, cfg.workers);
            nginx(http, location)
        }
        Front::Haproxy => {
            let bin = haproxy.ok_or_else(|| ExperimentError::run("no haproxy"))?;
            let bind = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let text = haproxy_config(bind, upstream, cfg.workers, cfg.target_ms);
            let d = format!(
                "haproxy: server maxconn {}, timeout queue {} ms",
                cfg.workers, cfg.target_ms
            );
            Ok((
                Running::Haproxy(HaproxyProcess::start(bin, &text, bind)?),
                d,
            ))
        }
        _ => {
            let mut extra: Vec<String> = vec![
                "--proxy".into(),
                format!("/work=http://{upstream}"),
                "--rt-target-ms".into(),
                cfg.target_ms.to_string(),
                "--shutdown-grace".into(),
                "1".into(),
            ];
            if let Some(a) = front.admission() {
                extra.extend(["--admission".into(), a.into()]);
            }
            if matches!(shape, Shape::Classes(_)) {
                extra.extend(["--class-header".into(), CLASS_HEADER.into()]);
            }
            let d = format!("seda serve {}", extra.join(" "));
            let spec = ServerSpec {
                name: front.name().into(),
                kind: ServerKind::Haboob {
                    seda: cfg.seda.clone(),
                    cache_mb: 16,
                    extra,
                },
            };
            Ok((Running::Server(ServerProcess::start(&spec, root)?), d))
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_sized_from_the_capacity_and_the_target() {
        let (http, location) = nginx_limits(187.4, 100.0, 2);
        assert!(http.contains("rate=187r/s"), "{http}");
        assert!(location.contains("burst=19;"), "{location}");
        assert!(location.contains("limit_conn inflight 19;"), "{location}");
        assert!(
            nginx_limits(10.0, 100.0, 4)
                .1
                .contains("limit_conn inflight 4;")
        );
        let h = haproxy_config(
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            4,
            200.0,
        );
        assert!(h.contains("server g1 127.0.0.1:2 maxconn 4"), "{h}");
        assert!(h.contains("timeout queue 200ms"), "{h}");
        assert!(
            h.contains("set-priority-class int(-1) if { req.hdr(X-Class) -m str 1 }"),
            "{h}"
        );
    }
}
