//! What a route is: a prefix, its upstreams, and the settings of its stage. Parsed
//! from `seda serve --proxy PREFIX=URL[,URL...]` and from `[[route]]` tables; checked
//! once, at start, with errors that name the value.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use seda::admission::AdmissionPolicy;

use crate::handler::{Classifier, OverloadAction};

/// Default time to an upstream's response head (and most silence while its body
/// streams): 30 s, as `--proxy-timeout-ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One upstream server of a route: `http://HOST:PORT[/BASE]`.
///
/// The host is resolved once, when the URL is parsed (a name that resolves to
/// several addresses uses the first). Without a base path the request's path goes
/// to the upstream unchanged; with one (`http://app:8000/v1`) the route's prefix is
/// replaced by it (`/api/users` under prefix `/api` becomes `/v1/users`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamUrl {
    text: String,
    addr: SocketAddr,
    /// The `Host` an HTTP/1.0 client that sent none is forwarded with.
    authority: String,
    base: Option<String>,
}

impl UpstreamUrl {
    /// The address connected to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base path replacing the route's prefix, if any.
    pub fn base(&self) -> Option<&str> {
        self.base.as_deref()
    }

    /// `host:port` as written in the URL.
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a proxy route (`--proxy`, `[[route]]`, [`ProxyRoute`]) or one of its upstream
/// URLs is refused. The text names the route, URL or flag, and what would be accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// An upstream URL that is not `http://HOST:PORT[/PATH]` or does not resolve.
    #[error("invalid upstream url `{url}`: {why}")]
    Upstream {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// A prefix that is not a plain absolute path.
    #[error("route prefix `{prefix}` {why}")]
    Prefix {
        /// The prefix as given.
        prefix: String,
        /// What it must be.
        why: &'static str,
    },
    /// A route with no upstream.
    #[error("route {prefix} has no upstream")]
    NoUpstream {
        /// The route's prefix.
        prefix: String,
    },
    /// A setting of the route out of its range.
    #[error("route {prefix}: {why}")]
    Setting {
        /// The route's prefix.
        prefix: String,
        /// Which setting, and what it must be.
        why: &'static str,
    },
    /// Two routes at one prefix.
    #[error("two routes are mounted at {prefix}")]
    Duplicate {
        /// The prefix.
        prefix: String,
    },
    /// A `--proxy` flag without `=`.
    #[error("--proxy `{flag}`: expected PREFIX=URL[,URL...]")]
    Flag {
        /// The flag's value.
        flag: String,
    },
    /// A `--proxy` flag whose route is refused.
    #[error("--proxy `{flag}`: {source}")]
    InFlag {
        /// The flag's value.
        flag: String,
        /// Why its route is refused.
        #[source]
        source: Box<RouteError>,
    },
}

impl FromStr for UpstreamUrl {
    type Err = RouteError;

    fn from_str(s: &str) -> Result<Self, RouteError> {
        let bad = |why: &str| RouteError::Upstream {
            url: s.to_owned(),
            why: why.to_owned(),
        };
        let rest = s.strip_prefix("http://").ok_or_else(|| {
            bad("expected http://HOST:PORT[/PATH] (https upstreams are not supported)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad("user information is not supported"));
        }
        if path.contains(['?', '#']) {
            return Err(bad("a query or fragment has no meaning here"));
        }
        let with_port = if authority.rsplit_once(':').is_some_and(|(h, p)| {
            !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
        }) {
            authority.to_owned()
        } else if authority.ends_with(']') || !authority.contains(':') {
            format!("{authority}:80")
        } else {
            return Err(bad("bad port"));
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| bad("the name resolves to no address"))?;
        let base = match path.trim_end_matches('/') {
            "" if path.is_empty() => None,
            "" => Some("/".to_owned()),
            p => Some(p.to_owned()),
        };
        Ok(UpstreamUrl {
            text: s.to_owned(),
            addr,
            authority: authority.to_owned(),
            base,
        })
    }
}

/// A route of the front door: requests under `prefix` go to `upstreams`, through a
/// stage of their own (`proxy:<name>`) with its own admission controller. Build with
/// [`ProxyRoute::new`] and the `with_*` methods; `seda serve` fills it from
/// `--proxy` and `[[route]]`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use seda_http::ProxyRoute;
/// let route = ProxyRoute::new("/api", &["http://127.0.0.1:9000"])
///     .unwrap()
///     .with_rt_target(Duration::from_millis(200))
///     .with_class_header("X-Class");
/// assert_eq!(route.stage_name(), "proxy:api");
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ProxyRoute {
    /// Decoded path prefix (`/api` matches `/api` and `/api/...`, not `/apiary`).
    pub prefix: String,
    /// Name of the route (its stage is `proxy:<name>`): the prefix without its
    /// slashes, `root` for `/`.
    pub name: String,
    /// The upstream servers, tried in turn.
    pub upstreams: Vec<UpstreamUrl>,
    /// p90 target of the route's stage; `None`: the server-wide one.
    pub rt_target: Option<Duration>,
    /// Header whose integer value is a request's class; `None`: the server-wide rules.
    pub class_header: Option<String>,
    /// Largest request body, bytes (413 past it). Default 1 MiB.
    pub max_body: u64,
    /// Time to the upstream's response head, and the longest silence while its body
    /// streams. Default [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// Time to establish an upstream connection. Default 3 s (capped by `timeout`).
    pub connect_timeout: Duration,
    /// Idle keep-alive connections kept per upstream. Default 256.
    pub max_idle: usize,
    /// How long an idle upstream connection is kept. Default 30 s.
    pub idle_timeout: Duration,
    /// Failures in a row after which an upstream is ejected. Default 3.
    pub max_fails: u32,
    /// How long an ejected upstream gets no requests before one is tried. Default 10 s.
    pub eject_for: Duration,
    /// Requests in the route at most (queued, or waiting for their upstream); past
    /// it the route refuses like a full stage. Default 4,096.
    pub max_in_flight: usize,
    /// The admission policy of the route's stage (`None`: none but
    /// `max_in_flight`). [`OverloadControl::apply_route`](crate::OverloadControl::apply_route)
    /// sets it from the server-wide settings and the route's target.
    pub admission: Option<Arc<dyn AdmissionPolicy>>,
    /// A request's class (`None`: class 0); [`OverloadControl::apply_route`]
    /// (crate::OverloadControl::apply_route) sets it from the class rules.
    pub classifier: Option<Classifier>,
    /// What a refused request gets (`Degrade` answers as `Reject503`).
    pub on_overload: OverloadAction,
}

impl fmt::Debug for ProxyRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyRoute")
            .field("prefix", &self.prefix)
            .field("upstreams", &self.upstreams)
            .field("rt_target", &self.rt_target)
            .field("admission", &self.admission.as_ref().map(|a| a.name()))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ProxyRoute {
    /// A route at `prefix` to the upstreams at `urls`, with the defaults above.
    pub fn new(prefix: &str, urls: &[&str]) -> Result<ProxyRoute, RouteError> {
        let upstreams = urls
            .iter()
            .map(|u| u.parse())
            .collect::<Result<Vec<UpstreamUrl>, _>>()?;
        Self::with_upstreams(prefix, upstreams)
    }

    /// As [`ProxyRoute::new`] with parsed URLs.
    pub fn with_upstreams(
        prefix: &str,
        upstreams: Vec<UpstreamUrl>,
    ) -> Result<ProxyRoute, RouteError> {
        let bad_prefix = |why| RouteError::Prefix {
            prefix: prefix.to_owned(),
            why,
        };
        if !prefix.starts_with('/') {
            return Err(bad_prefix("must start with `/`"));
        }
        if prefix.contains(['?', '#', '%', ' ']) {
            return Err(bad_prefix(
                "must be a plain decoded path (no `?`, `#`, `%` or space)",
            ));
        }
        if upstreams.is_empty() {
            return Err(RouteError::NoUpstream {
                prefix: prefix.to_owned(),
            });
        }
        let prefix = format!("/{}", prefix.trim_matches('/'));
        let name = match prefix.trim_start_matches('/') {
            "" => "root".to_owned(),
            p => p.replace('/', "_"),
        };
        Ok(ProxyRoute {
            prefix,
            name,
            upstreams,
            rt_target: None,
            class_header: None,
            max_body: 1 << 20,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(3),
            max_idle: 256,
            idle_timeout: Duration::from_secs(30),
            max_fails: 3,
            eject_for: Duration::from_secs(10),
            max_in_flight: 4096,
            admission: None,
            classifier: None,
            on_overload: OverloadAction::default(),
        })
    }

    /// `--proxy PREFIX=URL[,URL...]`.
    pub fn parse_flag(s: &str) -> Result<ProxyRoute, RouteError> {
        let (prefix, urls) = s
            .split_once('=')
            .ok_or_else(|| RouteError::Flag { flag: s.to_owned() })?;
        let urls: Vec<&str> = urls.split(',').map(str::trim).collect();
        Self::new(prefix.trim(), &urls).map_err(|e| RouteError::InFlag {
            flag: s.to_owned(),
            source: Box::new(e),
        })
    }

    /// The name of the route's stage.
    pub fn stage_name(&self) -> String {
        format!("proxy:{}", self.name)
    }

    /// The same route with a p90 target.
    #[must_use]
    pub fn with_rt_target(mut self, target: Duration) -> Self {
        self.rt_target = Some(target);
        self
    }

    /// The same route with a class header.
    #[must_use]
    pub fn with_class_header(mut self, name: &str) -> Self {
        self.class_header = Some(name.to_owned());
        self
    }

    /// The same route with a body limit, bytes.
    #[must_use]
    pub fn with_max_body(mut self, bytes: u64) -> Self {
        self.max_body = bytes;
        self
    }

    /// The same route with a response timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same route with passive-health settings: eject after `max_fails`
    /// failures in a row, for `eject_for`.
    #[must_use]
    pub fn with_health(mut self, max_fails: u32, eject_for: Duration) -> Self {
        self.max_fails = max_fails;
        self.eject_for = eject_for;
        self
    }

    /// Whether a decoded path belongs to this route.
    pub(crate) fn matches(&self, path: &str) -> bool {
        self.prefix == "/"
            || path
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Checks the settings; the message names the route.
    pub fn validate(&self) -> Result<(), RouteError> {
        let bad = |why| {
            Err(RouteError::Setting {
                prefix: self.prefix.clone(),
                why,
            })
        };
        if self.timeout < Duration::from_millis(1) {
            return bad("timeout-ms must be at least 1");
        }
        if self.connect_timeout < Duration::from_millis(1) {
            return bad("connect timeout must be at least 1 ms");
        }
        if self.max_in_flight == 0 {
            return bad("max-in-flight must be at least 1");
        }
        if self.max_fails == 0 {
            return bad("max-fails must be at least 1");
        }
        if self
            .upstreams
            .iter()
            .any(|u| u.base() != self.upstreams[0].base())
        {
            return bad("every upstream of a route must have the same base path");
        }
        if self.rt_target.is_some_and(|t| t.is_zero()) {
            return bad("rt-target-ms must be positive");
        }
        if self.class_header.as_deref().is_some_and(|h| {
            h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }) {
            return bad("class-header must be a header name");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_parse_with_and_without_a_base() {
        let u: UpstreamUrl = "http://127.0.0.1:9000".parse().unwrap();
        assert_eq!(u.addr(), "127.0.0.1:9000".parse().unwrap());
        assert_eq!((u.base(), u.authority()), (None, "127.0.0.1:9000"));
        let u: UpstreamUrl = "http://127.0.0.1:9000/v1/".parse().unwrap();
        assert_eq!(u.base(), Some("/v1"));
        let u: UpstreamUrl = "http://127.0.0.1:9000/".parse().unwrap();
        assert_eq!(u.base(), Some("/"));
        let u: UpstreamUrl = "http://localhost".parse().unwrap();
        assert_eq!(u.addr().port(), 80);
        let u: UpstreamUrl = "http://[::1]:81".parse().unwrap();
        assert_eq!(u.addr(), "[::1]:81".parse().unwrap());
        for bad in [
            "https://a:1",
            "127.0.0.1:80",
            "http://",
            "http://u@h:1",
            "http://h:1/?q",
            "http://h:x",
            "http://no-such-host.invalid:80",
        ] {
            let e = bad.parse::<UpstreamUrl>().unwrap_err();
            assert!(
                matches!(&e, RouteError::Upstream { url, .. } if url == bad),
                "{e:?}"
            );
            let e = e.to_string();
            assert!(e.contains(bad) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn the_flag_form_names_what_is_wrong() {
        let r = ProxyRoute::parse_flag("/api=http://127.0.0.1:1,http://127.0.0.1:2").unwrap();
        assert_eq!((r.prefix.as_str(), r.name.as_str()), ("/api", "api"));
        assert_eq!(r.upstreams.len(), 2);
        assert_eq!(
            ProxyRoute::parse_flag("/=http://127.0.0.1:1").unwrap().name,
            "root"
        );
        assert_eq!(
            ProxyRoute::parse_flag("/a/b/=http://127.0.0.1:1")
                .unwrap()
                .name,
            "a_b"
        );
        for (flag, says) in [
            ("/api", "PREFIX=URL"),
            ("api=http://127.0.0.1:1", "must start with"),
            ("/api=", "invalid upstream url"),
            ("/a%20=http://127.0.0.1:1", "plain decoded path"),
        ] {
            let e = ProxyRoute::parse_flag(flag).unwrap_err();
            assert!(
                matches!(e, RouteError::Flag { .. } | RouteError::InFlag { .. }),
                "{e:?}"
            );
            let e = e.to_string();
            assert!(e.contains(says) && e.contains("--proxy"), "{flag}: {e}");
        }
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let r = ProxyRoute::new("/api/", &["http://127.0.0.1:1"]).unwrap();
        assert!(r.matches("/api") && r.matches("/api/x") && !r.matches("/apiary"));
        let root = ProxyRoute::new("/", &["http://127.0.0.1:1"]).unwrap();
        assert!(root.matches("/anything"));
    }

    #[test]
    fn validation_names_the_route() {
        let r = ProxyRoute::new("/api", &["http://127.0.0.1:1"])
            .unwrap()
            .with_timeout(Duration::ZERO);
        assert!(matches!(
            r.validate(),
            Err(RouteError::Setting { ref prefix, .. }) if prefix == "/api"
        ));
        assert!(r.validate().unwrap_err().to_string().contains("route /api"));
        let r = ProxyRoute::new("/api", &["http://127.0.0.1:1"])
            .unwrap()
            .with_class_header("X Class");
        assert!(
            r.validate()
                .unwrap_err()
                .to_string()
                .contains("class-header")
        );
    }
}
