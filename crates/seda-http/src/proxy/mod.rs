//! The front door: Haboob routes whose requests go to upstream servers, each route a
//! stage with SEDA's overload control in front of whatever the upstream is.
//!
//! ```text
//!  sock-io ─> HttpParse ──ProxyJob──> proxy:<name> ──(connect / pooled conn)──> upstream
//!   (client)   (route,      (admission:  (forward head,                          │
//!               body pipe)   p90 target,  attach body)                           │
//!                            classes)                                            ▼
//!  client <── HttpSend / ResponseStream <── proxy-upstream <── sock-io (upstream conns)
//! ```
//!
//! - A route (`ProxyRoute`, `config.rs`) is a prefix and its upstreams; its stage
//!   `proxy:<name>` has its own queue, admission controller ([`gate`](self) wraps
//!   the configured policy so it sees the upstream's response time and the
//!   requests waiting there), stats and dashboard row. HttpParse offers a request to
//!   it as soon as its head is parsed (`route.rs`, early refusal with `503` +
//!   `Retry-After`).
//! - Upstream connections are seda-io's outbound connections, opened without
//!   blocking on the client's event loop and kept alive in a bounded pool per
//!   upstream (`upstream.rs`, `dispatch.rs`); their events go to one stage,
//!   `proxy-upstream` (`recv.rs`), which turns them into the client's response.
//! - Bodies stream both ways through bounded windows: the request body through a
//!   pipe (`body.rs`, 64 KiB), the response through the client's outgoing queue
//!   (256 KiB), each side's reading paused while the other is behind.
//! - One framing is forwarded (`head.rs`): the front refuses ambiguous requests, the
//!   upstream gets a normalised head, the client a head we write.
//! - Failures: `502` (no upstream available, connect failure, reset or garbage
//!   before the head), `504` (no head within the route's timeout, `sweep.rs`);
//!   idempotent requests retried once after a connect failure (on another upstream)
//!   or a stale kept-alive connection; passive health ejects an upstream that fails
//!   repeatedly.
//!
//! A proxied request is alone in flight on its client connection: HttpParse parses
//! it once every earlier response is out, and nothing after it until its response
//! is (as nginx serves pipelined requests to a proxy), so its response can stream.

mod body;
mod config;
mod dispatch;
mod events;
mod flight;
mod gate;
mod head;
mod recv;
mod route;
mod state;
mod sweep;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use seda::{Domain, Meta, Runtime, ThreadModel};
use seda_io::{ConnId, SocketEvent, Writer};

pub use config::{DEFAULT_TIMEOUT, ProxyRoute, RouteError, UpstreamUrl};
pub use state::{ProxyStats, RouteStats};
pub use upstream::UpstreamStats;

pub(crate) use body::{Accept, BodyPipe, BodySender};
pub(crate) use events::{ProxyJob, Respond};
pub(crate) use route::Mount;

use crate::server::Job;

/// Name of the upstream-events stage.
pub const UPSTREAM_STAGE: &str = "proxy-upstream";

/// The routes HttpParse looks up: mounted at start, cleared at shutdown (they hold
/// their stages' sinks).
#[derive(Debug, Default)]
pub(crate) struct ProxyTable {
    mounts: RwLock<Vec<Mount>>,
    shared: RwLock<Option<Arc<state::Shared>>>,
    /// The largest body limit of any route (HttpParse parses with it).
    max_body: std::sync::atomic::AtomicU64,
}

impl ProxyTable {
    /// The route whose prefix matches the raw (encoded) path, and its prefix's
    /// length, if any.
    pub(crate) fn find(&self, raw_path: &[u8]) -> Option<Mount> {
        let mounts = self.mounts.read();
        if mounts.is_empty() {
            return None;
        }
        let decoded;
        let path = if raw_path.contains(&b'%') {
            decoded = crate::proto::percent_decode(raw_path)?;
            String::from_utf8_lossy(&decoded)
        } else {
            String::from_utf8_lossy(raw_path)
        };
        mounts.iter().find(|m| m.route.cfg.matches(&path)).cloned()
    }

    /// Whether any route is mounted.
    pub(crate) fn is_empty(&self) -> bool {
        self.mounts.read().is_empty()
    }

    /// The largest body limit of the routes (0 without routes).
    pub(crate) fn max_body(&self) -> u64 {
        self.max_body.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Offers a parsed request to its route (see `route.rs`).
    pub(crate) fn submit(&self, mount: &Mount, job: Job, body: Option<BodyPipe>, meta: Meta) {
        let shared = self.shared.read().clone();
        match shared {
            Some(shared) => route::submit(&shared, mount, ProxyJob { job, body }, meta),
            None => drop(job),
        }
    }

    /// A pipe for the body of a request for a route.
    pub(crate) fn pipe(writer: Writer, client: ConnId, chunked: bool) -> (BodySender, BodyPipe) {
        body::pipe(writer, client, chunked)
    }

    /// The `proxy` section of the admin stats.
    pub(crate) fn stats(&self) -> ProxyStats {
        self.shared
            .read()
            .as_ref()
            .map(|s| s.stats())
            .unwrap_or_default()
    }

    /// Drops the routes and the upstream connections (breaks the reference cycles
    /// through the stages' sinks once nothing runs).
    pub(crate) fn clear(&self) {
        self.mounts.write().clear();
        if let Some(s) = self.shared.write().take() {
            s.conns.clear();
        }
    }
}

/// Why the routes could not be mounted (Haboob turns it into its `ServerError`).
#[derive(Debug)]
pub(crate) enum MountError {
    /// A route's configuration is invalid, or two routes share a prefix.
    Route(RouteError),
    /// The runtime refused a stage.
    Runtime(seda::RuntimeError),
    /// The sweeper's thread could not start.
    Io(std::io::Error),
}

impl From<seda::RuntimeError> for MountError {
    fn from(e: seda::RuntimeError) -> Self {
        MountError::Runtime(e)
    }
}

/// What mounting the routes leaves running besides the stages.
#[derive(Debug)]
pub(crate) struct ProxyHandle {
    _sweeper: sweep::Sweeper,
}

/// Builds the stages of `routes` (each with its policy, from `ProxyRoute::admission`)
/// and the upstream-events stage, in the socket loops' `domain`, and mounts them in
/// `table`. The route stages and the upstream-events stage never block, so they
/// run inline on the loops when their queues are empty.
pub(crate) fn mount(
    rt: &Runtime,
    domain: &Domain,
    model: ThreadModel,
    out: Arc<dyn Respond>,
    writer: Writer,
    table: &ProxyTable,
    routes: &[ProxyRoute],
) -> Result<Option<ProxyHandle>, MountError> {
    if routes.is_empty() {
        return Ok(None);
    }
    let mut seen = std::collections::HashSet::new();
    for r in routes {
        r.validate().map_err(MountError::Route)?;
        if !seen.insert(r.prefix.clone()) {
            return Err(MountError::Route(RouteError::Duplicate {
                prefix: r.prefix.clone(),
            }));
        }
    }
    let (events_sink, events_stage) = rt.declare::<SocketEvent>(UPSTREAM_STAGE)?;
    let mut states = Vec::with_capacity(routes.len());
    let mut declared = Vec::with_capacity(routes.len());
    for (index, cfg) in routes.iter().enumerate() {
        let (sink, stage) = rt.declare::<ProxyJob>(&cfg.stage_name())?;
        let state = Arc::new(state::RouteState {
            cfg: cfg.clone(),
            index,
            gate: Arc::new(gate::RouteGate::new(
                cfg.admission.clone(),
                cfg.max_in_flight,
            )),
            on_overload: cfg.on_overload.clone(),
            upstreams: cfg
                .upstreams
                .iter()
                .map(|u| {
                    upstream::Upstream::new(u.clone(), cfg.max_idle, cfg.max_fails, cfg.eject_for)
                })
                .collect(),
            next: Default::default(),
            counters: Default::default(),
        });
        states.push(Arc::clone(&state));
        declared.push((sink, stage, state));
    }
    let shared = Arc::new(state::Shared {
        routes: states,
        conns: Default::default(),
        writer,
        upstream_events: events_sink,
        out,
    });
    events_stage
        .handler(recv::UpstreamEvents {
            shared: Arc::clone(&shared),
        })
        .domain(domain)
        .thread_model(model)
        .capacity(65_536)
        .threads(1, 2)
        .build()?;
    let mut mounts = Vec::with_capacity(declared.len());
    for (sink, stage, route) in declared {
        stage
            .handler(route::RouteStage {
                shared: Arc::clone(&shared),
                route: Arc::clone(&route),
            })
            .domain(domain)
            .thread_model(model)
            .capacity(route.cfg.max_in_flight.clamp(1, 65_536))
            .threads(1, 2)
            .admission_shared(Arc::clone(&route.gate) as Arc<dyn seda::admission::AdmissionPolicy>)
            .build()?;
        mounts.push(Mount { route, sink });
    }
    mounts.sort_by_key(|m| std::cmp::Reverse(m.route.cfg.prefix.len()));
    let max_body = routes.iter().map(|r| r.max_body).max().unwrap_or(0);
    table
        .max_body
        .store(max_body, std::sync::atomic::Ordering::Relaxed);
    *table.mounts.write() = mounts;
    *table.shared.write() = Some(Arc::clone(&shared));
    let period = routes
        .iter()
        .map(|r| r.timeout.min(r.connect_timeout) / 4)
        .min()
        .unwrap_or(Duration::from_millis(100))
        .clamp(Duration::from_millis(5), Duration::from_millis(100));
    let sweeper = sweep::Sweeper::start(shared, period).map_err(MountError::Io)?;
    Ok(Some(ProxyHandle { _sweeper: sweeper }))
}
