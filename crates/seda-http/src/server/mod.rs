//! The server: configuration, start-up of the stages, the timeout sweeper and
//! graceful shutdown. The stages' logic is in `core.rs`.
//!
//! # Lifecycle
//! [`Server::start`] builds the runtime and every stage, binds the listeners and
//! returns once the server accepts connections. [`Server::shutdown`] stops taking new
//! work (new connections are closed, responses carry `Connection: close`), waits up
//! to its grace period for requests in flight to be answered and flushed, then stops
//! the sockets and the runtime.

mod admin;
mod conn;
mod core;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use seda::control::ThreadPoolConfig;
use seda::{Batch, Context, EventHandler, InitError, Runtime, ShutdownReport, ThreadModel};
use seda_io::{FileConfig, FileHelper, SocketConfig, SocketHandle, SocketStats, Sockets};

use self::core::{Counters, Haboob, Job, PageEvent, Route, SendEvent, Settings, Sinks};
use crate::cache::{PageCache, PathCache};
use crate::handler::{HandlerContext, HandlerRegistration};
use crate::proto::{DateCache, Limits};

/// Stage names of Haboob (SEDA Fig. 5).
pub mod stages {
    /// Parses requests of each connection (colored by connection).
    pub const HTTP_PARSE: &str = "HttpParse";
    /// Routes requests: static, admin, dynamic.
    pub const HTTP_RECV: &str = "HttpRecv";
    /// Page-cache lookups and fills.
    pub const PAGE_CACHE: &str = "PageCache";
    /// Translation, open and read of missed files (blocking, own pool).
    pub const CACHE_MISS: &str = "CacheMiss";
    /// Writes responses in order.
    pub const HTTP_SEND: &str = "HttpSend";
}

/// Configuration of a [`Server`]. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Directory to serve; must exist and be readable.
    pub root: PathBuf,
    /// Page-cache capacity, bytes. Default 200 MiB.
    pub cache_bytes: u64,
    /// Files larger than this bypass the page cache and stream with `sendfile`.
    /// Default 1 MiB.
    pub max_cached_file: u64,
    /// Thread model of Haboob's CPU-bound stages (HttpParse, HttpRecv, PageCache,
    /// HttpSend), and the runtime's default for stages added through
    /// [`Server::runtime`]. Blocking stages (socket loops, file helper, CacheMiss,
    /// dynamic handlers) always have pools of their own.
    pub thread_model: ThreadModel,
    /// Socket event loops. Default: one per core.
    pub event_loops: usize,
    /// Most threads of HttpParse's pool (per-stage model). Default 2.
    pub parse_threads: usize,
    /// Time a client has to send a complete request head (and body) once it started.
    /// Default 10 s.
    pub header_timeout: Duration,
    /// Time an idle keep-alive connection is kept. Default 30 s.
    pub idle_timeout: Duration,
    /// Most open connections. Default 10,000.
    pub max_connections: usize,
    /// Request limits (414, 431, 413).
    pub limits: Limits,
    /// How long a cached translation is trusted before a `stat`. Default 2 s.
    pub revalidate: Duration,
    /// Index file of directories. Default `index.html`.
    pub index: String,
    /// Direct calls on the hit path (true, default) or a queue between every stage
    /// (false, the paper's layout).
    pub direct: bool,
    /// Let misses whose bytes are already in the OS page cache skip the file helper
    /// (Flash's residency check, `preadv2(RWF_NOWAIT)`). Default true.
    pub residency_check: bool,
    /// Outgoing bytes queued per connection before it is closed. Default 4 MiB.
    pub write_threshold: usize,
    /// Dynamic handlers to mount at start.
    pub handlers: Vec<HandlerRegistration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            root: PathBuf::from("."),
            cache_bytes: 200 << 20,
            max_cached_file: 1 << 20,
            thread_model: ThreadModel::PerStage,
            event_loops: std::thread::available_parallelism().map_or(2, |n| n.get()),
            parse_threads: 2,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            limits: Limits::default(),
            revalidate: Duration::from_secs(2),
            index: "index.html".to_owned(),
            direct: true,
            residency_check: true,
            write_threshold: 4 << 20,
            handlers: Vec::new(),
        }
    }
}

/// Why the server could not start or take a handler.
#[derive(Debug)]
pub enum ServerError {
    /// The root directory is missing or unreadable.
    Root(String),
    /// A configuration value is out of range.
    Config(String),
    /// Binding or another socket operation failed.
    Io(std::io::Error),
    /// The runtime refused a stage.
    Runtime(seda::RuntimeError),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Root(s) => write!(f, "root directory {s}"),
            ServerError::Config(s) => write!(f, "invalid configuration: {s}"),
            ServerError::Io(e) => write!(f, "{e}"),
            ServerError::Runtime(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ServerError {}

impl From<seda::RuntimeError> for ServerError {
    fn from(e: seda::RuntimeError) -> Self {
        ServerError::Runtime(e)
    }
}

/// What a shutdown finished.
#[derive(Debug)]
pub struct ServerShutdown {
    /// Whether every request in flight was answered before the grace period ended.
    pub requests_drained: bool,
    /// Connections still open when the sockets stopped.
    pub connections_cut: usize,
    /// The runtime's report.
    pub runtime: ShutdownReport,
}

/// A running Haboob server.
pub struct Server {
    hb: Arc<Haboob>,
    sockets: Arc<SocketHandle>,
    local_addr: SocketAddr,
    sweeper_stop: Arc<AtomicBool>,
    sweeper: Option<JoinHandle<()>>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("root", &self.hb.set.root)
            .finish()
    }
}

fn validate(cfg: &ServerConfig) -> Result<PathBuf, ServerError> {
    let root = std::fs::canonicalize(&cfg.root)
        .map_err(|e| ServerError::Root(format!("{}: {e}", cfg.root.display())))?;
    if !root.is_dir() {
        return Err(ServerError::Root(format!(
            "{}: not a directory",
            cfg.root.display()
        )));
    }
    std::fs::read_dir(&root)
        .map_err(|e| ServerError::Root(format!("{}: {e}", cfg.root.display())))?;
    let bad = |s: &str| Err(ServerError::Config(s.to_owned()));
    if cfg.event_loops == 0 {
        return bad("event_loops must be at least 1");
    }
    if cfg.parse_threads == 0 {
        return bad("parse_threads must be at least 1");
    }
    if cfg.max_connections == 0 {
        return bad("max_connections must be at least 1");
    }
    if cfg.header_timeout.is_zero() || cfg.idle_timeout.is_zero() {
        return bad("timeouts must be positive");
    }
    if cfg.index.is_empty() || cfg.index.contains('/') {
        return bad("index must be a plain file name");
    }
    if cfg.limits.max_headers == 0 || cfg.limits.max_headers > crate::proto::MAX_HEADERS {
        return bad("max_headers must be in 1..=128");
    }
    Ok(root)
}

impl Server {
    /// Builds the stages, binds the listeners and starts serving.
    pub fn start(cfg: ServerConfig) -> Result<Server, ServerError> {
        let root = validate(&cfg)?;
        // The chosen model is the runtime's default (stats report it) and each CPU-bound
        // stage names it too. Blocking stages pin the per-stage model themselves:
        // seda-io's socket loops and file helper always do, CacheMiss and the handler
        // stages below say so explicitly.
        let rt = Runtime::builder()
            .name("haboob")
            .thread_model(cfg.thread_model)
            .build();
        let model = cfg.thread_model;
        let files = FileHelper::start(&rt, FileConfig::default())?;
        let hb = Arc::new(Haboob {
            set: Settings {
                root,
                index: cfg.index.clone(),
                limits: cfg.limits.clone(),
                max_cached_file: cfg.max_cached_file,
                header_timeout: cfg.header_timeout,
                idle_timeout: cfg.idle_timeout,
                direct: cfg.direct,
                residency_check: cfg.residency_check,
            },
            rt: rt.clone(),
            conns: conn::ConnTable::new(),
            paths: PathCache::new(100_000, cfg.revalidate),
            pages: PageCache::new(cfg.cache_bytes),
            date: DateCache::new(),
            files,
            routes: RwLock::new(Vec::new()),
            writer: OnceLock::new(),
            sockets: OnceLock::new(),
            sinks: OnceLock::new(),
            counters: Counters::default(),
            draining: AtomicBool::new(false),
        });

        let h = Arc::clone(&hb);
        let send = rt
            .stage(
                stages::HTTP_SEND,
                move |batch: Batch<'_, SendEvent>, _cx: &Context<'_>| {
                    for ev in batch {
                        h.respond(&ev.conn, ev.seq, ev.reply);
                    }
                },
            )
            .thread_model(model)
            .capacity(16_384)
            .threads(1, 2)
            .build()?;
        let h = Arc::clone(&hb);
        let page = rt
            .stage(
                stages::PAGE_CACHE,
                move |mut batch: Batch<'_, PageEvent>, _cx: &Context<'_>| {
                    let mut events = Vec::with_capacity(batch.len());
                    while let Some(e) = batch.next_with_meta() {
                        events.push(e);
                    }
                    h.on_page_batch(events, Instant::now());
                },
            )
            .thread_model(model)
            .capacity(16_384)
            .threads(1, 2)
            .build()?;
        let h = Arc::clone(&hb);
        let miss = rt
            .stage(
                stages::CACHE_MISS,
                move |mut batch: Batch<'_, Job<core::StaticReq>>, _cx: &Context<'_>| {
                    while let Some((job, meta)) = batch.next_with_meta() {
                        h.on_miss(job, meta, Instant::now());
                    }
                },
            )
            .capacity(4096)
            .thread_model(ThreadModel::PerStage)
            .thread_pool(ThreadPoolConfig {
                min_threads: 1,
                max_threads: 16,
                queue_threshold: 10,
                ..ThreadPoolConfig::default()
            })
            .batch(4)
            .build()?;
        let h = Arc::clone(&hb);
        let recv = rt
            .stage(
                stages::HTTP_RECV,
                move |mut batch: Batch<'_, Job<core::OwnedReq>>, _cx: &Context<'_>| {
                    let now = Instant::now();
                    while let Some((job, meta)) = batch.next_with_meta() {
                        h.on_recv(job, meta, now);
                    }
                },
            )
            .thread_model(model)
            .capacity(16_384)
            .threads(1, 2)
            .build()?;
        let _ = hb.sinks.set(Sinks {
            recv,
            page,
            miss,
            send,
        });
        let h = Arc::clone(&hb);
        let parse = rt
            .stage(
                stages::HTTP_PARSE,
                move |mut batch: Batch<'_, seda_io::SocketEvent>, _cx: &Context<'_>| {
                    let now = Instant::now();
                    while let Some((ev, meta)) = batch.next_with_meta() {
                        h.on_socket_event(ev, meta, now);
                    }
                },
            )
            .thread_model(model)
            .capacity(65_536)
            .thread_pool(ThreadPoolConfig {
                min_threads: 1,
                max_threads: cfg.parse_threads,
                queue_threshold: 10,
                ..ThreadPoolConfig::default()
            })
            .batch(64)
            .build()?;
        for reg in cfg.handlers.iter().cloned() {
            register(&hb, reg)?;
        }
        let sock_cfg = SocketConfig {
            listen: cfg.listen,
            event_loops: cfg.event_loops,
            max_connections: cfg.max_connections,
            write_threshold: cfg.write_threshold,
            ..SocketConfig::default()
        };
        let sockets = Arc::new(Sockets::start(&rt, sock_cfg, parse).map_err(ServerError::Io)?);
        let _ = hb.writer.set(sockets.writer());
        let _ = hb.sockets.set(Arc::clone(&sockets));
        rt.start()?;
        let local_addr = sockets.local_addr();

        let sweeper_stop = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&sweeper_stop);
        let h = Arc::clone(&hb);
        let period = (cfg.header_timeout.min(cfg.idle_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_millis(500));
        let sweeper = std::thread::Builder::new()
            .name("haboob-timeouts".into())
            .spawn(move || {
                // Parked rather than asleep, so that shutdown wakes it at once instead
                // of waiting out the period (up to 500 ms).
                while !stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(period);
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    h.sweep(Instant::now());
                }
            })
            .map_err(ServerError::Io)?;
        Ok(Server {
            hb,
            sockets,
            local_addr,
            sweeper_stop,
            sweeper: Some(sweeper),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The runtime the stages run in (for statistics or extra stages).
    pub fn runtime(&self) -> &Runtime {
        &self.hb.rt
    }

    /// The `/_seda/stats` document.
    pub fn stats_json(&self) -> String {
        admin::stats_json(&self.hb)
    }

    /// Counters of the socket layer.
    pub fn socket_stats(&self) -> SocketStats {
        self.sockets.stats()
    }

    /// Mounts a dynamic handler on the running server; its stage starts at once.
    pub fn register(&self, reg: HandlerRegistration) -> Result<(), ServerError> {
        register(&self.hb, reg)
    }

    /// Graceful shutdown; see the module docs. Waits at most `grace` for requests in
    /// flight, then stops everything.
    pub fn shutdown(mut self, grace: Duration) -> ServerShutdown {
        let deadline = Instant::now() + grace;
        self.hb.draining.store(true, Ordering::Relaxed);
        // Idle connections close now; busy ones after their last response.
        self.hb.sweep(Instant::now());
        let mut requests_drained = false;
        while Instant::now() < deadline {
            if self.hb.quiescent() {
                requests_drained = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            self.hb.sweep(Instant::now());
        }
        // Give the last responses a moment to leave the socket buffers.
        let writer = self.sockets.writer();
        while Instant::now() < deadline
            && self
                .hb
                .conns
                .all()
                .iter()
                .any(|c| writer.queued(c.id).unwrap_or(0) > 0)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let connections_cut = self.sockets.open_connections();
        self.stop_sweeper();
        self.sockets.stop();
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(200));
        let runtime = self.hb.rt.shutdown(remaining);
        self.hb.routes.write().clear();
        ServerShutdown {
            requests_drained,
            connections_cut,
            runtime,
        }
    }

    fn stop_sweeper(&mut self) {
        self.sweeper_stop.store(true, Ordering::Release);
        if let Some(h) = self.sweeper.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.sweeper.is_some() {
            self.stop_sweeper();
            self.sockets.stop();
            self.hb.rt.shutdown(Duration::from_millis(500));
            self.hb.routes.write().clear();
        }
    }
}

/// The event handler of a dynamic handler's stage.
struct DynamicStage {
    hb: Arc<Haboob>,
    reg: HandlerRegistration,
}

impl EventHandler<core::DynEvent> for DynamicStage {
    fn init(&self, cx: &Context<'_>) -> Result<(), InitError> {
        self.reg.handler.init(&HandlerContext { cx });
        Ok(())
    }

    fn handle_events(&self, batch: Batch<'_, core::DynEvent>, cx: &Context<'_>) {
        for ev in batch {
            self.hb.on_dynamic(&self.reg, ev, cx);
        }
    }
}

/// Builds a dynamic handler's stage and adds its route (longest prefix first).
fn register(hb: &Arc<Haboob>, reg: HandlerRegistration) -> Result<(), ServerError> {
    if hb
        .routes
        .read()
        .iter()
        .any(|r| r.reg.prefix() == reg.prefix())
    {
        return Err(ServerError::Config(format!(
            "a handler is already mounted at {}",
            reg.prefix()
        )));
    }
    let stage = DynamicStage {
        hb: Arc::clone(hb),
        reg: reg.clone(),
    };
    let mut builder = hb
        .rt
        .stage(&reg.stage_name(), stage)
        .capacity(reg.capacity)
        .thread_model(ThreadModel::PerStage)
        .thread_pool(reg.pool.clone())
        .batch(1);
    if let Some(policy) = &reg.admission {
        builder = builder.admission_shared(Arc::clone(policy));
    }
    let sink = builder.build()?;
    let mut routes = hb.routes.write();
    routes.push(Route { reg, sink });
    routes.sort_by_key(|r| std::cmp::Reverse(r.reg.prefix().len()));
    Ok(())
}
