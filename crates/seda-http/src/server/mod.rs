//! The server: start-up of the stages, the timeout sweeper and graceful shutdown.
//! One file per stage of SEDA Fig. 5:
//!
//! ```text
//!  sock-io ─> HttpParse ─> HttpRecv ─> PageCache ──hit──────────────────> HttpSend ─> socket
//!  (accept,     (parse,      (route)    │   ▲  (lookups, fills)              ▲
//!   read)        bodies)      │         │   └──── file-helper <─┐            │
//!                             │         └─miss─> CacheMiss ─────┘ (read)     │
//!                             │                  (translate, open)           │
//!                             └──> handler:<name> (one stage per handler) ───┘
//! ```
//!
//! The CPU-bound stages (HttpParse, HttpRecv, PageCache, HttpSend) and the socket
//! loops form one thread-pool domain: with [`Handoff::Inline`] (the default) a hop
//! among them runs the next stage's handler on the same thread when its queue is
//! empty and its admission admits, and the runtime counts it as a queued event.
//! CacheMiss, the file helper and the dynamic handlers stay behind real queues,
//! where calls block or load is conditioned.
//!
//! Every arrow is a stage boundary the runtime counts: after any mix of requests,
//! HttpSend's `processed` is the number of responses, PageCache's the number of
//! static lookups and fills, and the graph in the admin stats has these edges.
//!
//! Files: one per stage (`parse.rs`, `recv.rs`, `page_cache.rs`, `cache_miss.rs`,
//! `send.rs`, `dynamic.rs`); `events.rs`, the leaf every stage imports, holds the
//! events they exchange (and the request they carry); `conn.rs` the per-connection
//! state and the response slot (it imports no stage); `answer.rs` the one place that
//! frames responses; `state.rs` what the stages share; `lookup.rs` and `miss.rs`
//! the page cache's and the miss path's work, which more than one stage runs;
//! `routes.rs` the table of dynamic handlers. No two files import each other.
//! Stages that feed each other (PageCache and CacheMiss) are wired by sinks given
//! to their constructors: PageCache is declared ([`seda::Runtime::declare`]) first.

//! # Lifecycle
//! [`Server::start`] builds the runtime and every stage, binds the listeners and
//! returns once the server accepts connections. [`Server::shutdown`] stops taking new
//! work (new connections are closed, responses carry `Connection: close`), waits up
//! to its grace period for requests in flight to be answered and flushed, then stops
//! the sockets and the runtime. A request still waiting when the grace ends (queued,
//! not begun by a handler) is answered `503` with `Retry-After` and `Connection:
//! close` first; only a request a handler is running then is cut without an answer
//! (its effects may have happened: a `503` would say they had not).

mod answer;
mod budget;
mod cache_miss;
mod config;
mod conn;
mod conn_list;
mod descriptors;
mod dynamic;
mod events;
mod lookup;
mod miss;
mod page_cache;
mod parse;
mod peer;
mod recv;
mod reload;
mod request;
mod routes;
mod send;
mod send_half;
mod state;
mod timeouts;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use seda::control::ThreadPoolConfig;
use seda::{Runtime, ShutdownReport, ThreadModel};
use seda_io::{
    BacklogAction, BoundTls, FileConfig, FileHelper, SocketConfig, SocketHandle, SocketStats,
    Sockets, TlsConfig, TlsHandle, TlsSockets, TlsStats,
};

pub use budget::DescriptorBudget;
pub use config::{FileIo, Handoff, IoBackend, ServerConfig, ServerError, TlsListen};
// The seam the front door's stages (`crate::proxy`) use: a request, its response
// slot, the way to answer, a streamed response.
pub(crate) use answer::Answer;
pub(crate) use conn::Exchange;
pub(crate) use conn::stream::ResponseStream;
pub(crate) use events::Job;
pub use reload::Reloaded;
pub(crate) use state::Responder;
pub use state::{HaboobStats, PathCacheStats};

use self::answer::Framer;
use self::events::{PageEvent, Route};
use self::routes::Routes;
use self::state::{Haboob, Live, Settings};
use crate::access_log::events::AccessLog;
use crate::admin::{AdminBuilder, AdminServer, StatsDoc};
use crate::cache::PageCache;
use crate::handler::HandlerRegistration;
use crate::overload::OverloadControl;
use crate::policy_slot::PolicySlot;

/// Stage names of Haboob (SEDA Fig. 5).
pub mod stages {
    /// The events of upstream connections of the proxy routes (each route's own
    /// stage is `proxy:<name>`).
    pub const PROXY_UPSTREAM: &str = crate::proxy::UPSTREAM_STAGE;
    /// Accepts connections and parses requests (colored by connection).
    pub const HTTP_PARSE: &str = "HttpParse";
    /// Routes requests: static, dynamic, or an error.
    pub const HTTP_RECV: &str = "HttpRecv";
    /// Page-cache lookups and fills.
    pub const PAGE_CACHE: &str = "PageCache";
    /// Translation and open of missed files (blocking, own pool).
    pub const CACHE_MISS: &str = "CacheMiss";
    /// The file helper that reads missed files (seda-io, blocking, own pool).
    pub const FILE_HELPER: &str = "file-helper";
    /// Frames and writes every response, in order.
    pub const HTTP_SEND: &str = "HttpSend";
    /// The socket event loops (seda-io).
    pub const SOCKETS: &str = seda_io::DEFAULT_STAGE;
    /// The TLS listener's socket event loops.
    pub const TLS_SOCKETS: &str = "sock-io-tls";
    /// Handshakes and decryption of the TLS listener's connections.
    pub const TLS: &str = "tls";
}

/// What a shutdown finished.
#[derive(Debug)]
#[non_exhaustive]
pub struct ServerShutdown {
    /// Whether every request in flight was answered before the grace period ended.
    pub requests_drained: bool,
    /// Requests not yet started when the grace period ended, answered `503` with
    /// `Retry-After` and `Connection: close` (one per connection: the requests
    /// pipelined behind it are left to the client to retry, as the close says).
    pub requests_refused: usize,
    /// Connections whose next response belonged to a request running in a handler
    /// when the grace period ended: cut without an answer (the request may have had
    /// its effects; a `503` would say it had not).
    pub requests_running: usize,
    /// Connections the sockets' stop closed under a client that was not told (not
    /// idle-closed, not closing after a last response): those of
    /// [`requests_running`](Self::requests_running), and any that had sent part of a
    /// request.
    pub connections_cut: usize,
    /// The runtime's report.
    pub runtime: ShutdownReport,
}

/// A running Haboob server.
pub struct Server {
    out: Responder,
    rt: Runtime,
    sockets: Arc<SocketHandle>,
    local_addr: SocketAddr,
    admin: Option<AdminServer>,
    sweeper_stop: Arc<AtomicBool>,
    sweeper: Option<JoinHandle<()>>,
    /// The front door's timeout sweeper, if routes are mounted.
    proxy: Option<crate::proxy::ProxyHandle>,
    /// The TLS listener, if configured.
    tls: Option<Arc<TlsHandle>>,
    /// The configuration the server started with (without its handlers): what a
    /// reload compares against.
    started: ServerConfig,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("root", &self.out.hb.set.root)
            .finish()
    }
}

/// What makes each connection's record as the socket layer admits it
/// ([`state::Haboob::attach`]). It holds the server's state weakly: the socket
/// layer keeps it for as long as it runs, and must not keep the server alive.
fn attach(
    hb: &Arc<Haboob>,
) -> impl Fn(seda_io::ConnId, SocketAddr) -> Option<seda_io::ConnState> + Send + Sync + 'static {
    let hb = Arc::downgrade(hb);
    move |conn, peer| hb.upgrade()?.attach(conn, peer)
}

/// The answer to a connection over `max_connections`.
fn refusal(retry_after_secs: u32) -> Bytes {
    let body = "503 Service Unavailable: too many connections, retry later\n";
    Bytes::from(format!(
        "HTTP/1.1 503 Service Unavailable\r\nServer: seda\r\nRetry-After: {retry_after_secs}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
}

impl Server {
    /// Builds the stages, binds the listeners and starts serving.
    pub fn start(cfg: ServerConfig) -> Result<Server, ServerError> {
        let root = config::validate(&cfg)?;
        // The chosen model is the runtime's default (stats report it) and each CPU-bound
        // stage names it too. Blocking stages pin the per-stage model themselves.
        let rt = Runtime::builder()
            .name("haboob")
            .thread_model(cfg.thread_model)
            .build();
        let model = cfg.thread_model;
        // The CPU-bound stages and the socket loops form one domain: a hop among them
        // runs inline when the next queue is empty (or is queued, with Handoff::Queued).
        let domain = rt.domain("haboob");
        domain.set_inline(cfg.handoff == Handoff::Inline);
        let bound = Sockets::bind(
            SocketConfig::default()
                .with_listen(cfg.listen)
                .with_event_loops(cfg.event_loops)
                .with_backend(cfg.io)
                .with_max_connections(cfg.max_connections)
                .with_write_threshold(cfg.write_threshold)
                .with_on_backlog(BacklogAction::Pause)
                .with_send_timeout(Some(cfg.send_timeout))
                .with_refusal(Some(refusal(cfg.retry_after_secs)))
                .with_domain(Some(domain.clone()))
                // A client that half-closes is answered before the close (parse.rs).
                .with_half_close(true),
        )
        .map_err(ServerError::Io)?;
        let tls_bound = match &cfg.tls {
            Some(t) => Some(
                TlsSockets::bind(
                    SocketConfig::default()
                        .with_listen(t.listen)
                        .with_event_loops(cfg.event_loops)
                        .with_max_connections(cfg.max_connections)
                        .with_write_threshold(cfg.write_threshold)
                        .with_on_backlog(BacklogAction::Pause)
                        .with_send_timeout(Some(cfg.send_timeout))
                        // The plain listener's backend: TLS runs above either.
                        .with_backend(cfg.io)
                        // Nothing can be said in plain text on a TLS port.
                        .with_refusal(None)
                        .with_domain(Some(domain.clone()))
                        .with_half_close(true)
                        .with_stage_name(stages::TLS_SOCKETS.to_owned()),
                    TlsConfig::default()
                        .with_handshake_timeout(t.handshake_timeout)
                        .with_max_handshakes(t.max_handshakes)
                        .with_stage_name(stages::TLS.to_owned())
                        .with_domain(t.inline.then(|| domain.clone())),
                    &t.keys,
                )
                .map_err(ServerError::Io)?,
            ),
            None => None,
        };
        // With the listeners and loops bound (and the limit raised), the connections
        // must leave the server its reserve (descriptors.rs).
        let budget = descriptors::budget(&cfg).map_err(ServerError::Io)?;
        if !budget.fits() {
            return Err(ServerError::Descriptors(budget));
        }
        let files = FileHelper::start(&rt, FileConfig::default())?;
        let log = match &cfg.access_log {
            Some(l) => Some(AccessLog::start(&rt, l).map_err(ServerError::Io)?),
            None => None,
        };
        let hb = Arc::new(Haboob {
            set: Settings {
                root,
                index: cfg.index.clone(),
                max_cached_file: cfg.max_cached_file,
                residency_check: cfg.residency_check,
                file_io: cfg.file_io,
                dotfiles: cfg.dotfiles,
            },
            live: arc_swap::ArcSwap::from_pointee(Live::of(&cfg)),
            conns: conn_list::ConnList::new(),
            pages: PageCache::with_paths(cfg.cache_bytes, cfg.path_cache_bytes, cfg.revalidate),
            framer: Framer::new(cfg.retry_after_secs, cfg.header_cache),
            writer: bound.writer(),
            tls: tls_bound.as_ref().map(BoundTls::writer),
            routes: Routes::default(),
            log,
            proxies: crate::proxy::ProxyTable::default(),
            counters: state::Counters::default(),
            clock_ms: std::sync::atomic::AtomicU64::new(seda::clock::now() / 1_000_000),
        });

        // Downstream first, so each stage is built with the sinks it feeds; PageCache
        // and CacheMiss feed each other: PageCache is declared first.
        let (page, page_stage) = rt.declare::<PageEvent>(stages::PAGE_CACHE)?;
        let send = rt
            .stage(
                stages::HTTP_SEND,
                send::HttpSend {
                    hb: Arc::clone(&hb),
                },
            )
            .domain(&domain)
            .thread_model(model)
            .capacity(65_536)
            .threads(1, 2)
            .build()?;
        let out = Responder {
            hb: Arc::clone(&hb),
            send,
        };
        let miss = rt
            .stage(
                stages::CACHE_MISS,
                cache_miss::CacheMiss {
                    files,
                    out: out.clone(),
                    page: page.clone(),
                },
            )
            .capacity(4096)
            .thread_model(ThreadModel::PerStage)
            .thread_pool(
                ThreadPoolConfig::default()
                    .with_min_threads(1)
                    .with_max_threads(descriptors::CACHE_MISS_THREADS)
                    .with_queue_threshold(10),
            )
            .batch(4)
            .build()?;
        page_stage
            .handler(page_cache::PageCache {
                miss,
                out: out.clone(),
            })
            .domain(&domain)
            .thread_model(model)
            .capacity(16_384)
            .threads(1, 2)
            .build()?;
        let recv = rt
            .stage(
                stages::HTTP_RECV,
                recv::HttpRecv {
                    page,
                    out: out.clone(),
                },
            )
            .domain(&domain)
            .thread_model(model)
            .capacity(16_384)
            .threads(1, 2)
            .build()?;
        let parse = rt
            .stage(
                stages::HTTP_PARSE,
                parse::HttpParse {
                    hb: Arc::clone(&hb),
                    recv,
                    out: out.clone(),
                },
            )
            .domain(&domain)
            .thread_model(model)
            .capacity(65_536)
            .thread_pool(
                ThreadPoolConfig::default()
                    .with_min_threads(1)
                    .with_max_threads(cfg.parse_threads)
                    .with_queue_threshold(10),
            )
            .batch(64)
            .build()?;
        for reg in cfg.handlers.iter().cloned() {
            register(&rt, &out, reg)?;
        }
        for r in &cfg.proxies {
            if hb.routes.has_prefix(&r.prefix) {
                return Err(ServerError::Config(format!(
                    "a handler and a route are both mounted at {}",
                    r.prefix
                )));
            }
        }
        let proxy = crate::proxy::mount(
            &rt,
            &domain,
            model,
            Arc::new(out.clone()),
            bound.writer(),
            &hb.proxies,
            &cfg.proxies,
        )?;
        let tls = match tls_bound {
            Some(t) => Some(Arc::new(
                t.start_attached(&rt, parse.clone(), attach(&hb))
                    .map_err(ServerError::Io)?,
            )),
            None => None,
        };
        let sockets = Arc::new(
            bound
                .start_attached(&rt, parse, attach(&hb))
                .map_err(ServerError::Io)?,
        );
        rt.start()?;
        let local_addr = sockets.local_addr();
        let mut server = Server {
            out,
            rt,
            sockets,
            local_addr,
            admin: None,
            sweeper_stop: Arc::new(AtomicBool::new(false)),
            sweeper: None,
            proxy,
            tls,
            started: ServerConfig {
                handlers: Vec::new(),
                ..cfg.clone()
            },
        };
        if let Some(addr) = cfg.admin_listen {
            server.admin = Some(
                server
                    .admin_builder()
                    .start(addr)
                    .map_err(ServerError::Io)?,
            );
        }
        let (stop, out) = (Arc::clone(&server.sweeper_stop), server.out.clone());
        let period = (cfg.header_timeout.min(cfg.idle_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_millis(500));
        server.sweeper = Some(
            std::thread::Builder::new()
                .name("haboob-timeouts".into())
                .spawn(move || {
                    // Parked rather than asleep, so that shutdown wakes it at once.
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(period);
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        timeouts::sweep(&out, Instant::now());
                    }
                })
                .map_err(ServerError::Io)?,
        );
        Ok(server)
    }
    /// Applies `cfg` (and, if given, `overload` to every dynamic handler) to the
    /// running server; see the `reload` module for what changes and how. `cfg.root`
    /// must name the directory being served (it cannot change), `cfg.handlers` is
    /// ignored (handlers are mounted with [`Server::register`]).
    ///
    /// Errors: a value [`Server::start`] would refuse, a policy that cannot be built
    /// for a mounted handler, a per-handler target naming no mounted handler, an
    /// access log that cannot be opened. Nothing is changed then.
    pub fn reload(
        &self,
        cfg: &ServerConfig,
        overload: Option<&OverloadControl>,
    ) -> Result<Reloaded, ServerError> {
        reload::apply(
            &self.out.hb,
            &self.sockets,
            self.tls.as_deref(),
            &self.started,
            cfg,
            overload,
        )
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the TLS listener, if [`ServerConfig::tls`] set one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().map(|t| t.local_addr())
    }

    /// Counters of the TLS layer, if there is a TLS listener.
    pub fn tls_stats(&self) -> Option<TlsStats> {
        self.tls.as_ref().map(|t| t.stats())
    }

    /// The address of the admin listener, if [`ServerConfig::admin_listen`] set one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(AdminServer::local_addr)
    }

    /// The runtime the stages run in (for statistics or extra stages).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// An admin listener's pages for this server (its runtime, Haboob's counters and
    /// socket statistics, handler qualities), to add sections or endpoints to and
    /// start on an address of the caller's choice.
    pub fn admin_builder(&self) -> AdminBuilder {
        let (hb, sockets) = (Arc::clone(&self.out.hb), Arc::clone(&self.sockets));
        let (q, m, p) = (Arc::clone(&hb), Arc::clone(&hb), Arc::clone(&hb));
        let mut admin = AdminServer::builder(&self.rt);
        if let Some(log) = hb.log.clone() {
            admin = admin.section("access_log", move || log.stats());
        }
        if let Some(tls) = self.tls.clone() {
            let sockets = Arc::clone(&tls);
            admin = admin
                .section("tls", move || tls.stats())
                .section("tls_sockets", move || sockets.socket_stats());
        }
        let builder = admin
            .section("haboob", move || hb.stats())
            .section("sockets", move || sockets.stats())
            .qualities(move || q.routes.qualities())
            .metrics(move |out| metrics(&m.stats(), out));
        if p.proxies.is_empty() {
            return builder;
        }
        builder.section("proxy", move || p.proxies.stats())
    }

    /// The stats document (what the admin listener's `/_seda/stats` serves).
    pub fn stats(&self) -> StatsDoc {
        self.admin_builder().stats()
    }

    /// The stats document as JSON.
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats()).unwrap_or_default()
    }

    /// Haboob's own counters.
    pub fn haboob_stats(&self) -> HaboobStats {
        self.out.hb.stats()
    }

    /// The access log, if [`ServerConfig::access_log`] set one (to reopen it, read
    /// its counters).
    pub fn access_log(&self) -> Option<&AccessLog> {
        self.out.hb.log.as_ref()
    }

    /// Counters of the socket layer.
    pub fn socket_stats(&self) -> SocketStats {
        self.sockets.stats()
    }

    /// The socket loops' backend ([`ServerConfig::io`] resolved: never `Auto`) and
    /// why it runs, in words (for the start-up line).
    pub fn io_backend(&self) -> (IoBackend, &str) {
        (self.sockets.backend(), self.sockets.backend_reason())
    }

    /// Mounts a dynamic handler on the running server; its stage starts at once.
    pub fn register(&self, reg: HandlerRegistration) -> Result<(), ServerError> {
        register(&self.rt, &self.out, reg)
    }

    /// Graceful shutdown; see the module docs. Waits at most `grace` for requests in
    /// flight, then stops everything.
    pub fn shutdown(mut self, grace: Duration) -> ServerShutdown {
        let hb = Arc::clone(&self.out.hb);
        let deadline = Instant::now() + grace;
        hb.framer.draining.store(true, Ordering::Relaxed);
        // Idle connections close now; busy ones after their last response.
        timeouts::sweep(&self.out, Instant::now());
        let mut requests_drained = false;
        while Instant::now() < deadline {
            if timeouts::quiescent(&self.out) {
                requests_drained = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            timeouts::sweep(&self.out, Instant::now());
        }
        // The grace is over: a request that has not started gets a 503 now (not
        // the silence of a closed socket); one running in a handler is cut.
        let (mut requests_refused, mut requests_running) = (0, 0);
        if !requests_drained {
            for c in hb.conns.all() {
                match c.cut(hb.framer.shutdown_refusal()) {
                    conn::Cut::Refused => requests_refused += 1,
                    conn::Cut::Running => requests_running += 1,
                    conn::Cut::Idle => {}
                }
            }
        }
        // Give the last responses a moment to leave the socket buffers (the 503s
        // of the cut are small and written at once: a short extension at most).
        let flush_by = deadline.max(Instant::now() + Duration::from_millis(100));
        while Instant::now() < flush_by && hb.conns.all().iter().any(|c| c.queued() > 0) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Open and not closing on the server's own terms (after a last response).
        let connections_cut = hb.conns.all().iter().filter(|c| !c.is_gone()).count();
        self.stop_background();
        self.stop_sockets();
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(200));
        let runtime = self.rt.shutdown(remaining);
        self.release();
        ServerShutdown {
            requests_drained,
            requests_refused,
            requests_running,
            connections_cut,
            runtime,
        }
    }

    fn stop_sockets(&self) {
        if let Some(t) = &self.tls {
            t.stop();
        }
        self.sockets.stop();
    }

    fn stop_background(&mut self) {
        if let Some(a) = self.admin.take() {
            a.stop();
        }
        self.sweeper_stop.store(true, Ordering::Release);
        if let Some(h) = self.sweeper.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        self.proxy = None;
    }

    /// Breaks the reference cycles (routes hold stages' sinks; a request waiting for
    /// its body holds its connection) once nothing runs.
    fn release(&self) {
        let hb = &self.out.hb;
        hb.routes.clear();
        hb.proxies.clear();
        for c in hb.conns.all() {
            c.mark_gone();
            c.rx.lock().stop();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.sweeper.is_some() {
            self.stop_background();
            self.stop_sockets();
            self.rt.shutdown(Duration::from_millis(500));
            self.release();
        }
    }
}

/// Builds a dynamic handler's stage and adds its route (longest prefix first).
fn register(rt: &Runtime, out: &Responder, reg: HandlerRegistration) -> Result<(), ServerError> {
    if out.hb.routes.has_prefix(reg.prefix()) {
        return Err(ServerError::Config(format!(
            "a handler is already mounted at {}",
            reg.prefix()
        )));
    }
    let stage = dynamic::DynamicStage {
        reg: reg.clone(),
        out: out.clone(),
    };
    // Every handler's policy sits in a slot a reload can refill (an empty slot
    // admits everything and shows `none`).
    let policy = Arc::new(PolicySlot::new(reg.admission.clone()));
    let sink = rt
        .stage(&reg.stage_name(), stage)
        .capacity(reg.capacity)
        .thread_model(ThreadModel::PerStage)
        .thread_pool(reg.pool.clone())
        .batch(1)
        .admission_shared(Arc::clone(&policy) as Arc<dyn seda::admission::AdmissionPolicy>)
        .build()?;
    let stage = Arc::from(reg.stage_name());
    out.hb.routes.add(Route {
        reg,
        sink,
        stage,
        policy,
    });
    Ok(())
}

/// Haboob's counters in Prometheus text.
fn metrics(s: &HaboobStats, out: &mut String) {
    let lines: [(&str, &str, u64); 12] = [
        ("haboob_requests_total", "Requests parsed.", s.requests),
        ("haboob_responses_total", "Responses sent.", s.responses),
        (
            "haboob_cache_misses_total",
            "Requests sent to CacheMiss.",
            s.cache_misses,
        ),
        (
            "haboob_dynamic_requests_total",
            "Requests routed to dynamic handlers.",
            s.dynamic_requests,
        ),
        (
            "haboob_overload_responses_total",
            "Requests answered with an overload action.",
            s.overload_responses,
        ),
        (
            "haboob_bad_requests_total",
            "Requests that failed to parse.",
            s.bad_requests,
        ),
        (
            "haboob_header_timeouts_total",
            "Connections cut off by the header timeout.",
            s.header_timeouts,
        ),
        (
            "haboob_cancelled_total",
            "Requests dropped because their client was gone.",
            s.cancelled,
        ),
        (
            "haboob_pipeline_pauses_total",
            "Times a connection stopped being read at max_pipelined.",
            s.pipeline_pauses,
        ),
        (
            "haboob_connections_open",
            "Open connections.",
            s.connections_open as u64,
        ),
        (
            "haboob_page_cache_bytes",
            "Bytes in the page cache.",
            s.page_cache.bytes,
        ),
        (
            "haboob_path_cache_bytes",
            "Bytes charged to the path cache.",
            s.path_cache.bytes,
        ),
    ];
    let mut w = seda::PrometheusText::new(out);
    for (name, help, v) in lines {
        let kind = if name.ends_with("_total") {
            seda::MetricKind::Counter
        } else {
            seda::MetricKind::Gauge
        };
        w.metric(name, kind, help, v);
    }
}
