//! The router as a whole: the wiring of its three stages, and the handle that
//! starts and stops it.
//!
//! Stage graph (SEDA 5.2.1, Fig. 5's style):
//! ```text
//! sock-io --SocketEvent--> GnutellaServer --RouterEvent--> GnutellaRouter --> Writer
//!   ^                           |                               |
//!   | Writer::adopt             +--CatcherEvent--> GnutellaCatcher <--+ (pongs)
//!   +------------------------------------------------------+
//! ```
//! Each stage owns its state and is built with the sinks it sends to: the router
//! and the catcher are declared first ([`seda::Runtime::declare`]), so the server
//! gets both sinks, the router the catcher's and its own (for its ticks), the
//! catcher its own. The sockets are bound before any stage, so every stage that
//! writes gets the [`Writer`] in its constructor.
//!
//! The server stage runs the handshake and framing per connection (socket events
//! are colored by connection, so each connection's bytes are handled in order); the
//! router stage decides and sends; the catcher dials out. Router events are
//! colored by connection too (a color apart from the socket events', see
//! `server::router_color`): a router stage with several threads routes different
//! connections' reads in parallel (the thread-pool controller of Fig. 14 depends on
//! that) and each connection's reads one at a time, in the order they were read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use seda::admission::{QueueThreshold, Red};
use seda::control::ThreadPoolConfig;
use seda::{Meta, Runtime, Sink, ThreadModel};
use seda_io::{BacklogAction, SocketConfig, SocketHandle, Sockets};

use crate::catcher::Catcher;
use crate::config::{RouterAdmission, RouterConfig};
use crate::error::Error;
use crate::events::{CatcherEvent, RouterEvent};
use crate::flow::ReadPause;
use crate::router::{Peers, Router};
use crate::server::Server;
use crate::stats::{Counters, GnutellaStats, PeerStats};

/// Name of the server stage.
pub const SERVER_STAGE: &str = "GnutellaServer";
/// Name of the router stage.
pub const ROUTER_STAGE: &str = "GnutellaRouter";
/// Name of the catcher stage.
pub const CATCHER_STAGE: &str = "GnutellaCatcher";

/// How long [`Gnutella::stop`] waits for the router to send its Byes.
const BYE_WAIT: Duration = Duration::from_secs(1);

/// What a stats snapshot reads: each stage's counters and the router's peers.
/// Read-only: only the owning stage writes any of it.
#[derive(Debug)]
struct Probe {
    server: Arc<Counters>,
    router: Arc<Counters>,
    catcher: Arc<Counters>,
    peers: Arc<Peers>,
}

impl Probe {
    fn stats(&self) -> GnutellaStats {
        let mut s = GnutellaStats::from_counters(&[&self.server, &self.router, &self.catcher]);
        let snap = self.peers.snapshot();
        s.peers = snap.list.len();
        s.leaves = snap
            .list
            .iter()
            .filter(|p| p.info.role == crate::events::Role::Leaf)
            .count();
        s.connections = snap
            .list
            .iter()
            .map(|p| {
                use std::sync::atomic::Ordering::Relaxed;
                PeerStats {
                    conn: p.id.0,
                    addr: p.addr.to_string(),
                    outgoing: p.outgoing,
                    user_agent: p.info.user_agent.clone(),
                    deflate: (p.info.deflate_out, p.info.deflate_in),
                    received: p.received.load(Relaxed),
                    sent: p.sent.load(Relaxed),
                    dropped: p.dropped.load(Relaxed),
                    queued_bytes: p.queued_bytes(),
                    leaf: p.info.role == crate::events::Role::Leaf,
                    qrp_table: p.qrt.read().table().map(|t| (t.slots(), t.present())),
                }
            })
            .collect();
        s.queued_bytes = s.connections.iter().map(|c| c.queued_bytes).sum();
        s
    }
}

/// Reads a router's counters; cloneable and `Send + Sync`.
#[derive(Clone, Debug)]
pub struct StatsHandle(Arc<Probe>);

impl StatsHandle {
    /// A snapshot of the counters.
    pub fn stats(&self) -> GnutellaStats {
        self.0.stats()
    }
}

/// A running Gnutella router: the three stages and the socket stages under them.
#[derive(Debug)]
pub struct Gnutella {
    probe: Arc<Probe>,
    router: Sink<RouterEvent>,
    catcher: Sink<CatcherEvent>,
    sockets: SocketHandle,
}

impl Gnutella {
    /// Registers the router's stages in `rt` and binds its listener. The router
    /// runs once `rt` runs (at once if it already does).
    pub fn start(rt: &Runtime, cfg: RouterConfig) -> Result<Gnutella, Error> {
        cfg.validate()?;
        let cfg = Arc::new(cfg);
        let mut sc = SocketConfig::new(cfg.listen);
        if let Some(n) = cfg.event_loops {
            sc.event_loops = n;
        }
        sc.backend = cfg.io;
        sc.send_buffer = cfg.send_buffer;
        // A safety net under our own bound (socket_budget + one chunk per peer).
        sc.write_threshold = cfg.socket_budget * 2 + (256 << 10);
        sc.on_backlog = BacklogAction::Close;
        // The loops, the server and (unless it must block) the router: one domain.
        let domain = rt.domain("gnutella");
        let inline_router = cfg.inline && cfg.query_delay.is_none();
        domain.set_inline(cfg.inline);
        sc.domain = Some(domain.clone());
        let bound = Sockets::bind(sc).map_err(|source| Error::Listen {
            addr: cfg.listen,
            source,
        })?;
        let writer = bound.writer();
        let listen = bound.local_addr();
        let advertised = cfg.advertise.unwrap_or(listen);

        let (router_sink, router_decl) = rt.declare::<RouterEvent>(ROUTER_STAGE)?;
        let (catcher_sink, catcher_decl) = rt.declare::<CatcherEvent>(CATCHER_STAGE)?;
        let counters = [(); 3].map(|()| Arc::new(Counters::default()));
        let peers = Arc::new(Peers::default());
        // With the thread-pool controller a standing queue is its signal to add a
        // thread (Fig. 14): no pause.
        let pause_at = if cfg.router_pool_controller {
            0
        } else {
            cfg.pause_reads_at
        };
        let pause = Arc::new(ReadPause::new(pause_at, pause_at / 4));

        let router = Router::new(
            Arc::clone(&cfg),
            advertised,
            writer.clone(),
            router_sink.clone(),
            catcher_sink.clone(),
            Arc::clone(&peers),
            Arc::clone(&counters[1]),
            Arc::clone(&pause),
        );
        let mut pool = ThreadPoolConfig::bounded(cfg.router_threads.0, cfg.router_threads.1);
        pool.queue_threshold = cfg.router_queue_threshold;
        let mut router_stage = router_decl
            .handler(router)
            .capacity(cfg.router_capacity)
            .thread_model(ThreadModel::PerStage)
            .thread_pool(pool)
            .batch(64);
        if !cfg.router_pool_controller {
            router_stage = router_stage.fixed_threads(cfg.router_threads.0);
        }
        if inline_router {
            router_stage = router_stage.domain(&domain);
        }
        router_stage = match cfg.router_admission {
            RouterAdmission::None => router_stage,
            RouterAdmission::QueueThreshold(n) => router_stage.admission(QueueThreshold::new(n)),
            RouterAdmission::Red { min, max, max_p } => {
                router_stage.admission(Red::new(min, max, max_p, 0.2))
            }
        };
        router_stage.build()?;

        let catcher = Catcher::new(
            Arc::clone(&cfg),
            listen,
            advertised,
            writer.clone(),
            catcher_sink.clone(),
            Arc::clone(&counters[2]),
        );
        catcher_decl
            .handler(catcher)
            .capacity(4096)
            .thread_model(ThreadModel::PerStage)
            .fixed_threads(1)
            .build()?;

        let server = Server::new(
            Arc::clone(&cfg),
            advertised,
            writer,
            router_sink.clone(),
            catcher_sink.clone(),
            Arc::clone(&counters[0]),
            pause,
        );
        let server_sink = rt
            .stage(SERVER_STAGE, server)
            .capacity(16_384)
            .batch(64)
            .domain(&domain)
            .build()?;
        let sockets = bound.start(rt, server_sink).map_err(Error::Sockets)?;
        rt.schedule_with(
            Duration::ZERO,
            &catcher_sink,
            Catcher::first_tick(),
            Meta::new(),
        );
        rt.schedule_with(
            crate::router::TICK,
            &router_sink,
            Router::first_tick(),
            Meta::new(),
        );
        let [server_c, router_c, catcher_c] = counters;
        Ok(Gnutella {
            probe: Arc::new(Probe {
                server: server_c,
                router: router_c,
                catcher: catcher_c,
                peers,
            }),
            router: router_sink,
            catcher: catcher_sink,
            sockets,
        })
    }

    /// The address the router listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.sockets.local_addr()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GnutellaStats {
        self.probe.stats()
    }

    /// A cheap, cloneable source of [`Gnutella::stats`] (for an admin listener).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(Arc::clone(&self.probe))
    }

    /// Counters of the socket stages.
    pub fn socket_stats(&self) -> seda_io::SocketStats {
        self.sockets.stats()
    }

    /// Adds a host for the catcher to connect to (as `--peer`). False if the
    /// catcher's queue did not take it (full, or the router stopped).
    pub fn add_peer(&self, addr: SocketAddr) -> bool {
        self.catcher.try_enqueue(CatcherEvent::Seed(addr)).is_ok()
    }

    /// Says Bye (200, "Servent shutdown") to every peer, as `Bye-Packet: 0.1`
    /// promises, waiting up to a second for the router to hand the Byes to the
    /// sockets; then closes every connection (each gets one last flush) and stops
    /// the sockets. The runtime's shutdown stops the stages.
    pub fn stop(&self) {
        let (done, heard) = std::sync::mpsc::sync_channel(1);
        if self
            .router
            .try_enqueue_with(RouterEvent::Shutdown { done }, Meta::new())
            .is_ok()
        {
            let _ = heard.recv_timeout(BYE_WAIT);
        }
        self.sockets.stop();
    }

    /// How long a router tick is (it flushes slow peers and sends keep-alives).
    pub fn tick() -> Duration {
        crate::router::TICK
    }
}
