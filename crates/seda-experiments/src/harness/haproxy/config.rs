//! HAProxy in front of `seda serve` replicas: the configuration that `seda
//! haproxy-config` prints and `seda experiment scale-out` runs.
//!
//! Each replica runs `seda serve --agent-listen ADDR`, which answers HAProxy's
//! agent-check with its admission state (`seda_http::AgentServer`): `ready N%` scales
//! the replica's weight by what its overload controllers admit and by its p90 against
//! the target (a replica refusing nearly everything falls to a few percent), `drain`
//! takes it out of rotation while it shuts down (and, with `--agent-drain-refused`,
//! while it refuses nearly everything). HAProxy then:
//! - balances by `leastconn` (or weighted `roundrobin`) over the agents' weights;
//! - retries a request that a replica refused with `503`, that could not connect, or
//!   whose connection died without an answer (`retry-on`), on another replica each
//!   time (`option redispatch 1`), at most `retries` times;
//! - checks that each replica accepts connections (`check`, optionally an HTTP
//!   check of a path), so a killed replica leaves the rotation after `fall` checks;
//! - answers `503` with `Retry-After` itself when no replica can take a request.
//!
//! Retrying a `503` replays the request, so it is only safe for requests that can be
//! replayed: a replica's admission control refuses a request before its handler runs,
//! so Haboob's 503s are safe to retry; a service whose handlers refuse after acting
//! must not use `retry-on 503`.

use crate::ExperimentError;
use std::fmt::Write as _;
use std::time::Duration;

/// How HAProxy picks a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// Fewest connections per unit of weight: follows slow replicas by itself.
    LeastConn,
    /// Weighted round robin.
    RoundRobin,
}

impl Balance {
    fn keyword(self) -> &'static str {
        match self {
            Balance::LeastConn => "leastconn",
            Balance::RoundRobin => "roundrobin",
        }
    }
}

impl std::str::FromStr for Balance {
    type Err = seda::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "leastconn" => Ok(Balance::LeastConn),
            "roundrobin" => Ok(Balance::RoundRobin),
            _ => Err(seda::UnknownName::new(
                "balance",
                "leastconn or roundrobin",
                s,
            )),
        }
    }
}

/// One replica: where it serves and where its agent answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// `HOST:PORT` of the service (`[::1]:8080` for IPv6).
    pub addr: String,
    /// Port of its agent (`--agent-listen`) on the same host; `None`: no agent check.
    pub agent_port: Option<u16>,
}

/// Everything the generated configuration says.
#[derive(Clone, Debug, PartialEq)]
pub struct HaproxyConfig {
    /// Where HAProxy listens for clients, `HOST:PORT` (`:80` for every address).
    pub bind: String,
    /// The replicas, in order; named `r1`, `r2`, ...
    pub replicas: Vec<Replica>,
    /// How a replica is picked.
    pub balance: Balance,
    /// Interval of the agent checks.
    pub agent_inter: Duration,
    /// Interval of the connection (or HTTP) health checks.
    pub check_inter: Duration,
    /// Failed checks before a replica is down, and good ones before it is up again.
    pub fall: u32,
    /// Good checks before a replica that was down is up again.
    pub rise: u32,
    /// `GET` this path as the health check (any 2xx/3xx is healthy); `None`: a TCP
    /// connect check.
    pub health_path: Option<String>,
    /// Retries of a refused or failed request, each on another replica.
    pub retries: u32,
    /// Retry requests a replica refused with 503 on another replica (see the module
    /// doc); ignored with a single replica.
    pub retry_503: bool,
    /// Retry requests whose connection closed before any answer (a replica that died
    /// with requests in flight).
    pub retry_empty_response: bool,
    /// Client and server inactivity timeouts.
    pub timeout_client: Duration,
    /// Longest wait for a replica's response.
    pub timeout_server: Duration,
    /// Longest wait to connect to a replica.
    pub timeout_connect: Duration,
    /// Longest wait in HAProxy's queue for a free replica slot.
    pub timeout_queue: Duration,
    /// Most connections HAProxy accepts (`None`: HAProxy derives it from its
    /// file-descriptor limit).
    pub maxconn: Option<u32>,
    /// Most concurrent connections HAProxy opens to one replica (`None`: no limit).
    pub server_maxconn: Option<u32>,
    /// `Retry-After` of HAProxy's own 503 (no replica could take the request), seconds.
    pub retry_after_secs: u32,
    /// Address of HAProxy's statistics page (`None`: none).
    pub stats: Option<String>,
}

impl HaproxyConfig {
    /// Defaults for `replicas`: leastconn, agent checks every second, TCP checks every
    /// 2 s (down after 2 failures), 2 retries on other replicas including 503s,
    /// 30 s client and server timeouts, no statistics page.
    pub fn new(bind: &str, replicas: Vec<Replica>) -> HaproxyConfig {
        HaproxyConfig {
            bind: bind.to_owned(),
            replicas,
            balance: Balance::LeastConn,
            agent_inter: Duration::from_secs(1),
            check_inter: Duration::from_secs(2),
            fall: 2,
            rise: 2,
            health_path: None,
            retries: 2,
            retry_503: true,
            retry_empty_response: true,
            timeout_client: Duration::from_secs(30),
            timeout_server: Duration::from_secs(30),
            timeout_connect: Duration::from_secs(2),
            timeout_queue: Duration::from_secs(10),
            maxconn: None,
            server_maxconn: None,
            retry_after_secs: 1,
            stats: None,
        }
    }

    /// Checks what HAProxy would refuse or what cannot work; the error says which.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        check_addr("listen address", &self.bind)?;
        if self.replicas.is_empty() {
            return Err(ExperimentError::config("no replicas"));
        }
        for r in &self.replicas {
            check_addr("replica", &r.addr)?;
            if r.agent_port == Some(0) {
                return Err(ExperimentError::config(format!(
                    "agent port of replica {} must not be 0",
                    r.addr
                )));
            }
        }
        for (i, a) in self.replicas.iter().enumerate() {
            if self.replicas[..i].iter().any(|b| b.addr == a.addr) {
                return Err(ExperimentError::config(format!(
                    "replica {} is listed twice",
                    a.addr
                )));
            }
        }
        if let Some(s) = &self.stats {
            check_addr("stats address", s)?;
        }
        if let Some(p) = &self.health_path
            && (!p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(ExperimentError::config(format!(
                "health path must start with / and have no spaces, got {p:?}"
            )));
        }
        for (name, d) in [
            ("agent interval", self.agent_inter),
            ("check interval", self.check_inter),
            ("client timeout", self.timeout_client),
            ("server timeout", self.timeout_server),
            ("connect timeout", self.timeout_connect),
            ("queue timeout", self.timeout_queue),
        ] {
            if d < Duration::from_millis(10) || d > Duration::from_secs(24 * 3600) {
                return Err(ExperimentError::config(format!(
                    "{name} must be 10 ms ..= 24 h, got {d:?}"
                )));
            }
        }
        if self.fall == 0 || self.rise == 0 {
            return Err(ExperimentError::config("fall and rise must be at least 1"));
        }
        if self.retries > 16 {
            return Err(ExperimentError::config(format!(
                "retries must be 0 ..= 16, got {}",
                self.retries
            )));
        }
        if self.maxconn == Some(0) || self.server_maxconn == Some(0) {
            return Err(ExperimentError::config("maxconn must be at least 1"));
        }
        Ok(())
    }

    /// The configuration file's text.
    pub fn render(&self) -> Result<String, ExperimentError> {
        self.validate()?;
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut t = String::new();
        let w = &mut t;
        let names: Vec<&str> = self.replicas.iter().map(|r| r.addr.as_str()).collect();
        let _ = writeln!(
            w,
            "# HAProxy in front of {} seda serve replica(s): {}.\n\
             # Generated by `seda haproxy-config`. Each replica runs\n\
             #   seda serve --listen ADDR --agent-listen ADDR:AGENT_PORT ...\n\
             # and answers the agent check with `ready N%` (its weight, from the fraction\n\
             # of requests its admission control admits and its p90 against the target) or\n\
             # `drain` (shutting down). Run in the foreground:\n\
             #   haproxy -f THIS_FILE -db\n",
            self.replicas.len(),
            names.join(", ")
        );
        match self.maxconn {
            Some(m) => {
                let _ = writeln!(w, "global\n    maxconn {m}\n");
            }
            None => {
                let _ = writeln!(
                    w,
                    "global\n    # maxconn: derived by HAProxy from its file-descriptor limit\n"
                );
            }
        }
        let _ = writeln!(
            w,
            "defaults\n    mode http\n    timeout connect {}\n    timeout client {}\n    \
             timeout server {}\n    timeout queue {}\n    timeout http-request 10s\n    \
             timeout http-keep-alive 5s\n    timeout check {}",
            ms(self.timeout_connect),
            ms(self.timeout_client),
            ms(self.timeout_server),
            ms(self.timeout_queue),
            ms(self.check_inter.min(Duration::from_secs(5))),
        );
        let _ = writeln!(
            w,
            "    # A refused (503), unreachable or dead replica: try another one, each retry\n    \
             # on a different replica. Haboob refuses before a handler runs, so a 503 is\n    \
             # safe to replay.\n    retries {}\n    option redispatch 1",
            self.retries
        );
        let mut retry_on = String::from("conn-failure");
        if self.retry_empty_response {
            retry_on.push_str(" empty-response");
        }
        // With one replica a 503 would be retried on the replica that just refused
        // it: more load where there is already too much.
        if self.retry_503 && self.replicas.len() > 1 {
            retry_on.push_str(" 503");
        }
        let _ = writeln!(w, "    retry-on {retry_on}\n");
        let _ = writeln!(
            w,
            "frontend seda\n    bind {}\n    default_backend seda_replicas\n",
            self.bind
        );
        let _ = writeln!(
            w,
            "backend seda_replicas\n    balance {}",
            self.balance.keyword()
        );
        if let Some(p) = &self.health_path {
            let _ = writeln!(
                w,
                "    option httpchk\n    http-check send meth GET uri {p}\n    http-check expect status 200-399"
            );
        }
        let _ = writeln!(
            w,
            "    # No replica can take the request: say so the way a replica would.\n    \
             http-error status 503 content-type \"text/plain; charset=utf-8\" string \
             \"503 Service Unavailable: every replica is busy\" hdr Retry-After {}",
            self.retry_after_secs
        );
        let maxconn = self
            .server_maxconn
            .map(|m| format!(" maxconn {m}"))
            .unwrap_or_default();
        let _ = writeln!(
            w,
            "    default-server check inter {} fall {} rise {} weight 100{maxconn}",
            ms(self.check_inter),
            self.fall,
            self.rise
        );
        for (i, r) in self.replicas.iter().enumerate() {
            let agent = r
                .agent_port
                .map(|p| {
                    format!(
                        " agent-check agent-port {p} agent-inter {}",
                        ms(self.agent_inter)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(w, "    server r{} {}{agent}", i + 1, r.addr);
        }
        if let Some(s) = &self.stats {
            let _ = writeln!(
                w,
                "\nlisten stats\n    bind {s}\n    stats enable\n    stats uri /\n    stats refresh 2s"
            );
        }
        Ok(t)
    }
}

/// `HOST:PORT` with a port in 1..=65535 and a host without spaces (empty = any).
fn check_addr(what: &str, a: &str) -> Result<(), ExperimentError> {
    let bad = || ExperimentError::config(format!("{what} {a:?} is not HOST:PORT"));
    let (host, port) = a.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 {
        return Err(ExperimentError::config(format!("{what} {a:?} has port 0")));
    }
    let v6 = host.starts_with('[') && host.ends_with(']');
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '#')
        || (!v6 && host.contains(':'))
    {
        return Err(bad());
    }
    Ok(())
}

/// `ADDR,ADDR,...` with `--agent-port P` (the same on every host) or `P1,P2,...` (one
/// per replica, e.g. several replicas on one host).
pub fn replicas(addrs: &[String], agent_ports: &[u16]) -> Result<Vec<Replica>, ExperimentError> {
    if addrs.is_empty() {
        return Err(ExperimentError::run("no replicas"));
    }
    if agent_ports.len() > 1 && agent_ports.len() != addrs.len() {
        return Err(ExperimentError::run(format!(
            "{} agent ports for {} replicas: give one port for all, or one per replica",
            agent_ports.len(),
            addrs.len()
        )));
    }
    Ok(addrs
        .iter()
        .enumerate()
        .map(|(i, a)| Replica {
            addr: a.trim().to_owned(),
            agent_port: match agent_ports.len() {
                0 => None,
                1 => Some(agent_ports[0]),
                _ => Some(agent_ports[i]),
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> HaproxyConfig {
        let r = replicas(
            &[
                "127.0.0.1:8081".into(),
                "127.0.0.1:8082".into(),
                "[::1]:8083".into(),
            ],
            &[9301, 9302, 9303],
        )
        .unwrap();
        HaproxyConfig::new("127.0.0.1:8080", r)
    }

    #[test]
    fn the_config_has_agents_retries_and_redispatch() {
        let text = three().render().unwrap();
        for line in [
            "mode http",
            "bind 127.0.0.1:8080",
            "balance leastconn",
            "retries 2",
            "option redispatch 1",
            "retry-on conn-failure empty-response 503",
            "default-server check inter 2000ms fall 2 rise 2 weight 100",
            "server r1 127.0.0.1:8081 agent-check agent-port 9301 agent-inter 1000ms",
            "server r3 [::1]:8083 agent-check agent-port 9303 agent-inter 1000ms",
            "timeout server 30000ms",
            "hdr Retry-After 1",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.trim() == line || l.trim().ends_with(line)),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("httpchk") && !text.contains("listen stats"));
        // Every section keyword starts a line; everything else is indented.
        for l in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let section = ["global", "defaults", "frontend ", "backend ", "listen "]
                .iter()
                .any(|s| l.starts_with(s));
            assert!(section || l.starts_with("    "), "{l:?}");
        }
    }

    #[test]
    fn options_change_the_text() {
        let mut c = three();
        c.balance = Balance::RoundRobin;
        c.retry_503 = false;
        c.health_path = Some("/health".into());
        c.stats = Some("127.0.0.1:8404".into());
        c.server_maxconn = Some(64);
        c.replicas[0].agent_port = None;
        let text = c.render().unwrap();
        assert!(text.contains("balance roundrobin"));
        assert!(text.contains("retry-on conn-failure empty-response\n"));
        assert!(text.contains("http-check send meth GET uri /health"));
        assert!(text.contains("listen stats\n    bind 127.0.0.1:8404"));
        assert!(text.contains("weight 100 maxconn 64"));
        assert!(text.contains("server r1 127.0.0.1:8081\n"));
    }

    #[test]
    fn a_single_replica_does_not_retry_its_own_503s() {
        let one = replicas(&["127.0.0.1:8081".into()], &[9301]).unwrap();
        let text = HaproxyConfig::new("127.0.0.1:8080", one).render().unwrap();
        assert!(
            text.contains("retry-on conn-failure empty-response\n"),
            "{text}"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(replicas(&[], &[]).is_err());
        assert!(replicas(&["a:1".into(), "b:2".into()], &[1, 2, 3]).is_err());
        let one = replicas(&["a:1".into(), "b:2".into()], &[7]).unwrap();
        assert!(one.iter().all(|r| r.agent_port == Some(7)));
        for (field, f) in [
            (
                "bind",
                Box::new(|c: &mut HaproxyConfig| c.bind = "nope".into())
                    as Box<dyn Fn(&mut HaproxyConfig)>,
            ),
            (
                "port 0",
                Box::new(|c: &mut HaproxyConfig| c.replicas[0].addr = "h:0".into()),
            ),
            (
                "space",
                Box::new(|c: &mut HaproxyConfig| c.replicas[0].addr = "a b:80".into()),
            ),
            (
                "v6 without brackets",
                Box::new(|c: &mut HaproxyConfig| c.replicas[0].addr = "::1:80".into()),
            ),
            (
                "twice",
                Box::new(|c: &mut HaproxyConfig| c.replicas[1].addr = c.replicas[0].addr.clone()),
            ),
            (
                "agent 0",
                Box::new(|c: &mut HaproxyConfig| c.replicas[0].agent_port = Some(0)),
            ),
            (
                "health path",
                Box::new(|c: &mut HaproxyConfig| c.health_path = Some("health check".into())),
            ),
            ("retries", Box::new(|c: &mut HaproxyConfig| c.retries = 100)),
            (
                "interval",
                Box::new(|c: &mut HaproxyConfig| c.agent_inter = Duration::ZERO),
            ),
            ("none", Box::new(|c: &mut HaproxyConfig| c.replicas.clear())),
        ] {
            let mut c = three();
            f(&mut c);
            assert!(c.render().is_err(), "{field} accepted");
        }
        assert_eq!(":80".parse::<Balance>().ok(), None);
        assert_eq!("leastconn".parse::<Balance>(), Ok(Balance::LeastConn));
    }
}
