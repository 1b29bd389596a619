//! What a load run is: [`LoadConfig`] (with its closed or open [`Mode`] and its
//! [`RequestMix`]), its checks, and the loopback-only URL parser.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::error::LoadError;
use crate::fileset::Manifest;
use crate::schedule::Schedule;

/// Closed or open loop.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Mode {
    /// Users that request, read, think, repeat. Schedule levels are user counts.
    Closed {
        /// Think time between a response and the next request.
        think: Duration,
        /// Requests per connection before the client closes it (>= 1).
        reqs_per_conn: u32,
    },
    /// Poisson arrivals. Schedule levels are requests per second.
    Open {
        /// Requests per connection before the client closes it (>= 1).
        reqs_per_conn: u32,
        /// Most connections open at once (>= 1); arrivals beyond wait in the client.
        max_conns: usize,
    },
}

/// What to request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RequestMix {
    /// Always this path.
    Path(String),
    /// Files of a SPECweb99 file set, by its popularity model.
    FileSet(Manifest),
}

/// A load run. `#[non_exhaustive]`: start from [`LoadConfig::new`] and set the rest
/// with the `with_*` setters (a new setting is then not a breaking change).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda_load::{LoadConfig, Mode, Schedule};
///
/// let cfg = LoadConfig::new("127.0.0.1:8080".parse().unwrap(), Schedule::steady(Duration::from_secs(10), 50.0))
///     .with_mode(Mode::Open { reqs_per_conn: 1, max_conns: 100 })
///     .with_threads(2);
/// assert_eq!(cfg.host, "127.0.0.1:8080");
/// assert_eq!(cfg.timeout, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoadConfig {
    /// Server address (loopback only, see [`parse_url`]).
    pub addr: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Closed or open loop.
    pub mode: Mode,
    /// Paths to request.
    pub requests: RequestMix,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Levels over time.
    pub schedule: Schedule,
    /// A request running longer than this fails with `timeout`.
    pub timeout: Duration,
    /// After the schedule, how long to wait for requests still running.
    pub drain: Duration,
    /// Event-loop threads (1 or 2 on this machine).
    pub threads: usize,
    /// Seed of all random choices.
    pub seed: u64,
    /// Response-time target: completions within it are counted per second and per
    /// phase as `within_target` (goodput). `None`: not counted (0).
    pub rt_target: Option<Duration>,
    /// Closed loop: after a 503 or a failed request a user waits this long instead of
    /// the think time (USITS'03 4.1: rejected users wait 5 s before trying again).
    /// `None`: the think time.
    pub retry_wait: Option<Duration>,
}

/// Parse `http://HOST[:PORT][/...]` (an [`http::Uri`]) into an address and a Host
/// header. Only loopback targets are accepted: this tool must never load a machine
/// other than this one.
pub fn parse_url(url: &str) -> Result<(SocketAddr, String), LoadError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| LoadError::parse(format!("--url {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(LoadError::parse(format!(
            "--url {url:?}: only http:// URLs are supported"
        )));
    }
    let authority = match uri.authority() {
        Some(a) if !a.host().is_empty() => a,
        _ => return Err(LoadError::parse(format!("--url {url:?} has no host"))),
    };
    if authority.as_str().contains('@') {
        return Err(LoadError::parse(format!(
            "--url {url:?}: a user name in the URL is not supported"
        )));
    }
    // `host()` keeps an IPv6 address's brackets, as `to_socket_addrs` wants them.
    let host = authority.host();
    let port = match authority.as_str()[host.len()..].strip_prefix(':') {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| LoadError::parse(format!("--url {url:?}: port {p:?} is not 0-65535")))?,
        None => 80,
    };
    let with_port = format!("{host}:{port}");
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(LoadError::io(format!(
            "--url {url:?}: cannot resolve {with_port}"
        )))?
        .collect();
    let addr = addrs
        .iter()
        .copied()
        .find(|a| a.ip().is_loopback())
        .ok_or_else(|| LoadError::config(format!("--url {url:?}: refusing a non-loopback target (this tool only loads 127.0.0.1 / ::1)")))?;
    Ok((addr, authority.as_str().to_string()))
}

crate::setters::setters!(LoadConfig {
    with_addr: addr: SocketAddr,
    with_host: host: String,
    with_mode: mode: Mode,
    with_requests: requests: RequestMix,
    with_headers: headers: Vec<(String, String)>,
    with_schedule: schedule: Schedule,
    with_timeout: timeout: Duration,
    with_drain: drain: Duration,
    with_threads: threads: usize,
    with_seed: seed: u64,
    with_rt_target: rt_target: Option<Duration>,
    with_retry_wait: retry_wait: Option<Duration>,
});

impl LoadConfig {
    /// A run against `addr` over `schedule` with `seda load http`'s defaults: Host
    /// `addr`, a closed loop (20 ms think time, 5 requests per connection) asking
    /// for `/`, no extra headers, a 60 s timeout, 5 s drain, one thread, seed 1, no
    /// response-time target, the think time after a refusal.
    pub fn new(addr: SocketAddr, schedule: Schedule) -> Self {
        LoadConfig {
            addr,
            host: addr.to_string(),
            mode: Mode::Closed {
                think: Duration::from_millis(20),
                reqs_per_conn: 5,
            },
            requests: RequestMix::Path("/".to_owned()),
            headers: Vec::new(),
            schedule,
            timeout: Duration::from_secs(60),
            drain: Duration::from_secs(5),
            threads: 1,
            seed: 1,
            rt_target: None,
            retry_wait: None,
        }
    }

    pub(super) fn validate(&self) -> Result<(), LoadError> {
        if !self.addr.ip().is_loopback() {
            return Err(LoadError::config(format!(
                "refusing non-loopback target {}",
                self.addr
            )));
        }
        if !(1..=16).contains(&self.threads) {
            return Err(LoadError::config("--threads must be 1..16"));
        }
        self.schedule.check()?;
        match self.mode {
            Mode::Closed { reqs_per_conn, .. } => {
                if reqs_per_conn == 0 {
                    return Err(LoadError::config("--reqs-per-conn must be at least 1"));
                }
                if let Some(p) = self
                    .schedule
                    .phases()
                    .iter()
                    .find(|p| p.level.fract() != 0.0)
                {
                    return Err(LoadError::config(format!(
                        "closed-loop schedule levels are user counts, got {}",
                        p.level
                    )));
                }
                if self.schedule.max_level() > 1_000_000.0 {
                    return Err(LoadError::config("at most 1,000,000 users"));
                }
            }
            Mode::Open {
                reqs_per_conn,
                max_conns,
            } => {
                if reqs_per_conn == 0 || max_conns == 0 {
                    return Err(LoadError::config(
                        "--reqs-per-conn and --max-conns must be at least 1",
                    ));
                }
            }
        }
        for (k, v) in &self.headers {
            if k.is_empty() || k.contains([':', '\r', '\n', ' ']) || v.contains(['\r', '\n']) {
                return Err(LoadError::config(format!("bad header {k:?}: {v:?}")));
            }
        }
        if let RequestMix::Path(p) = &self.requests {
            if !p.starts_with('/') || p.contains([' ', '\r', '\n']) {
                return Err(LoadError::config(format!(
                    "--path {p:?} must start with / and hold no spaces"
                )));
            }
        }
        Ok(())
    }

    pub(super) fn echo(&self) -> serde_json::Value {
        let (mode, think_ms, rpc, max_conns) = match self.mode {
            Mode::Closed {
                think,
                reqs_per_conn,
            } => (
                "closed",
                Some(think.as_secs_f64() * 1e3),
                reqs_per_conn,
                None,
            ),
            Mode::Open {
                reqs_per_conn,
                max_conns,
            } => ("open", None, reqs_per_conn, Some(max_conns)),
        };
        let requests = match &self.requests {
            RequestMix::Path(p) => serde_json::json!({ "path": p }),
            RequestMix::FileSet(m) => serde_json::json!({
                "fileset": { "dirs": m.dirs, "files": m.files, "total_bytes": m.total_bytes, "seed": m.seed }
            }),
        };
        serde_json::json!({
            "addr": self.addr.to_string(),
            "mode": mode,
            "think_ms": think_ms,
            "reqs_per_conn": rpc,
            "max_conns": max_conns,
            "requests": requests,
            "headers": self.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>(),
            "schedule": self.schedule,
            "timeout_s": self.timeout.as_secs_f64(),
            "drain_s": self.drain.as_secs_f64(),
            "threads": self.threads,
            "seed": self.seed,
            "rt_target_ms": self.rt_target.map(|d| d.as_secs_f64() * 1e3),
            "retry_wait_ms": self.retry_wait.map(|d| d.as_secs_f64() * 1e3),
        })
    }
}
