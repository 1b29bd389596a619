//! What the proxy's stages share: the routes (each with its stage's sink, its gate,
//! its upstreams and counters), the table of upstream connections, the writer and
//! the sink of the upstream-events stage; and the stats types of the `proxy` section.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use seda::{Meta, Sink};

use seda_io::{SocketEvent, Writer};
use serde::{Deserialize, Serialize};

use super::config::ProxyRoute;
use super::events::Respond;
use super::flight::UpConns;
use super::gate::RouteGate;
use super::upstream::{Upstream, UpstreamStats};
use crate::handler::OverloadAction;
use crate::proto::Status;
use crate::server::{Answer, Exchange};

/// Counters of one route.
#[derive(Debug, Default)]
pub(crate) struct RouteCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) responses: AtomicU64,
    pub(crate) bad_gateway: AtomicU64,
    pub(crate) gateway_timeout: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) client_gone: AtomicU64,
}

/// A route and its stage.
#[derive(Debug)]
pub(crate) struct RouteState {
    pub(crate) cfg: ProxyRoute,
    pub(crate) index: usize,
    pub(crate) gate: Arc<RouteGate>,
    pub(crate) on_overload: OverloadAction,
    pub(crate) upstreams: Vec<Upstream>,
    /// Round-robin position.
    pub(crate) next: AtomicUsize,
    pub(crate) counters: RouteCounters,
}

impl RouteState {
    /// The next available upstream after the round-robin position, other than
    /// those in `exclude`.
    pub(crate) fn pick(&self, now: Instant, exclude: &[usize]) -> Option<usize> {
        let n = self.upstreams.len();
        let start = self.next.fetch_add(1, Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.upstreams[i].is_available(now) && !exclude.contains(&i))
    }
}

/// The proxy's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Routes, in configuration order (an upstream connection names its route by
    /// index).
    pub(crate) routes: Vec<Arc<RouteState>>,
    pub(crate) conns: UpConns,
    pub(crate) writer: Writer,
    /// The upstream-events stage.
    pub(crate) upstream_events: Sink<SocketEvent>,
    /// Haboob's HttpSend (see `events.rs`).
    pub(crate) out: Arc<dyn Respond>,
}

impl Shared {
    /// Answers `ex` with a status of the proxy's own (`502`, `504`, `400`, `413`).
    pub(crate) fn answer(&self, ex: Exchange, status: Status, meta: Meta) {
        self.out.answer(ex, Answer::Error(status), meta);
    }
}

/// Counters of one route, in the `proxy` section of the admin stats.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct RouteStats {
    /// The route's prefix.
    pub prefix: String,
    /// Its stage.
    pub stage: String,
    /// Requests routed to it.
    pub requests: u64,
    /// Requests its admission refused (`503`).
    pub refused: u64,
    /// Upstream responses forwarded.
    pub responses: u64,
    /// `502`s: no upstream available, upstream failure or garbage.
    pub bad_gateway: u64,
    /// `504`s: no response head within the timeout.
    pub gateway_timeout: u64,
    /// Requests retried on another connection or upstream.
    pub retries: u64,
    /// Requests dropped because their client went away.
    pub client_gone: u64,
    /// Requests in the route now (queued or at an upstream).
    pub in_flight: usize,
    /// Its upstreams.
    pub upstreams: Vec<UpstreamStats>,
}

/// The `proxy` section of the admin stats document.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Every route.
    pub routes: Vec<RouteStats>,
}

impl Shared {
    pub(crate) fn stats(&self) -> ProxyStats {
        let now = Instant::now();
        ProxyStats {
            routes: self
                .routes
                .iter()
                .map(|r| {
                    let c = &r.counters;
                    RouteStats {
                        prefix: r.cfg.prefix.clone(),
                        stage: r.cfg.stage_name(),
                        requests: c.requests.load(Relaxed),
                        refused: c.refused.load(Relaxed),
                        responses: c.responses.load(Relaxed),
                        bad_gateway: c.bad_gateway.load(Relaxed),
                        gateway_timeout: c.gateway_timeout.load(Relaxed),
                        retries: c.retries.load(Relaxed),
                        client_gone: c.client_gone.load(Relaxed),
                        in_flight: r.gate.in_flight(),
                        upstreams: r.upstreams.iter().map(|u| u.stats(now)).collect(),
                    }
                })
                .collect(),
        }
    }
}
