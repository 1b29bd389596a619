//! The router as a whole: its shared state and the handle that starts and stops it.
//!
//! Stage graph (SEDA 5.2.1, Fig. 5's style):
//! ```text
//! sock-io --SocketEvent--> GnutellaServer --Messages--> GnutellaRouter --> Writer
//!                               |   ^                        |
//!                               v   | adopt                  v Learned (pongs)
//!                          GnutellaCatcher <-----------------+
//! ```
//! The server stage runs the handshake and framing per connection (socket events
//! are colored by connection, so each connection's bytes are handled in order);
//! the router stage decides and sends; the catcher dials out. Router events are
//! uncolored, so a router stage with several threads routes in parallel (the
//! thread-pool controller of Fig. 14 depends on that).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::admission::{QueueThreshold, Red};
use seda::control::ThreadPoolConfig;
use seda::{Runtime, Sink, ThreadModel};
use seda_io::{BacklogAction, ConnId, SocketConfig, SocketHandle, Sockets, Writer};

use crate::catcher::{self, CatcherEvent, HostCache};
use crate::config::{RouterAdmission, RouterConfig};
use crate::peer::{Peer, Peers, Pending};
use crate::proto::handshake::Block;
use crate::proto::message::{Guid, Header, MsgType, bye_payload, pong_payload, usable};
use crate::router::{self, RouterEvent, TickChain};
use crate::routing::Routes;
use crate::server::{self, ConnTable};
use crate::stats::{Counters, Event, GnutellaStats, PeerStats};

/// Name of the server stage.
pub const SERVER_STAGE: &str = "GnutellaServer";
/// Name of the router stage.
pub const ROUTER_STAGE: &str = "GnutellaRouter";
/// Name of the catcher stage.
pub const CATCHER_STAGE: &str = "GnutellaCatcher";

/// The router's error: a bad setting or a failure to start.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// State shared by the three stages.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) cfg: RouterConfig,
    pub(crate) routes: Routes,
    pub(crate) peers: Peers,
    pub(crate) conns: ConnTable,
    pub(crate) counters: Counters,
    pub(crate) hosts: Mutex<HostCache>,
    /// Outgoing connections handed to the sockets whose `Accepted` has not been
    /// handled yet, by remote address (the host we dialled).
    pub(crate) dialing: Mutex<HashMap<SocketAddr, Instant>>,
    pub(crate) writer: OnceLock<Writer>,
    pub(crate) router: OnceLock<Sink<RouterEvent>>,
    pub(crate) catcher: OnceLock<Sink<CatcherEvent>>,
    pub(crate) listen: OnceLock<SocketAddr>,
    /// Our servent id.
    pub(crate) guid: Guid,
    pub(crate) ticks: TickChain,
    pub(crate) epoch: Instant,
}

impl Node {
    /// Milliseconds since the node was created.
    pub(crate) fn millis(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub(crate) fn writer(&self) -> Option<&Writer> {
        self.writer.get()
    }

    /// The address we announce.
    pub(crate) fn advertised(&self) -> SocketAddr {
        let listen = self.listen.get().copied().unwrap_or(self.cfg.listen);
        self.cfg.advertise.unwrap_or(listen)
    }

    /// The headers every handshake block of ours carries.
    pub(crate) fn our_headers(&self, mut b: Block) -> Block {
        let adv = self.advertised();
        b = b
            .header("User-Agent", self.cfg.user_agent.clone())
            .header("X-Ultrapeer", "True")
            .header("X-Degree", self.cfg.max_peers.max(16).to_string())
            .header("X-Max-TTL", self.cfg.routing.max_ttl.to_string())
            .header("X-Dynamic-Querying", "0.1")
            .header("X-Query-Routing", "0.2")
            .header("GGEP", "0.5")
            .header("Vendor-Message", "0.2")
            .header("Bye-Packet", "0.1")
            .header("Listen-IP", adv.to_string());
        if self.cfg.deflate {
            b = b.header("Accept-Encoding", "deflate");
        }
        b
    }

    /// A few hosts for `X-Try-Ultrapeers` (never more than 10: servents kick peers
    /// whose headers are oversized).
    pub(crate) fn try_hosts(&self, not: SocketAddr) -> Option<String> {
        let hosts = self.hosts.lock().sample(10, not);
        (!hosts.is_empty()).then(|| {
            hosts
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(",")
        })
    }

    /// Sends one message of ours to `peer` (TTL and hops given).
    pub(crate) fn send_own(&self, peer: &Peer, h: Header, payload: &[u8]) {
        let Some(w) = self.writer() else { return };
        let mut p = Pending::default();
        p.push(
            &Header {
                len: payload.len() as u32,
                ..h
            },
            payload,
        );
        peer.touch_tx(self.millis());
        peer.send(w, &mut p, Instant::now());
    }

    /// A one-hop ping of ours (its pong comes back `Local`).
    pub(crate) fn send_keepalive(&self, peer: &Peer) {
        let guid = Guid::random();
        self.routes.originate(guid, MsgType::Ping, Instant::now());
        self.send_own(
            peer,
            Header {
                guid,
                kind: MsgType::Ping,
                ttl: 1,
                hops: 0,
                len: 0,
            },
            &[],
        );
    }

    /// Our pong answering a ping `h` from `peer`, if our address may be named to
    /// whoever sent the ping (see [`RouterConfig::advertise`]).
    pub(crate) fn pong_for(&self, h: &Header) -> Option<(Header, [u8; 14])> {
        let adv = self.advertised();
        let ip = match adv.ip() {
            IpAddr::V4(ip) => ip,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        // An unusable address (loopback, ...) only answers a neighbour's alive ping
        // (TTL 1, hops 0), which servents match by GUID before they look at the
        // address; anywhere else it would be counted as an unusable pong.
        if !(usable(ip) || (h.hops == 0 && h.ttl == 1)) {
            tracing::debug!(guid = %h.guid, ttl = h.ttl, hops = h.hops, "own pong withheld: our address is not usable");
            self.counters.event(Event::PongSuppressed);
            return None;
        }
        self.counters.event(Event::OwnPong);
        let payload = pong_payload(ip, adv.port(), 0, 0);
        let header = Header {
            guid: h.guid,
            kind: MsgType::Pong,
            ttl: h.hops.saturating_add(1),
            hops: 0,
            len: 14,
        };
        Some((header, payload))
    }

    /// Ends a connection: an established peer gets a Bye (code, reason) and the
    /// connection closes once it is flushed; a connection in the handshake closes.
    pub(crate) fn bye(&self, conn: ConnId, code: u16, reason: &str) {
        let Some(w) = self.writer() else { return };
        if let Some(peer) = self.peers.get(conn) {
            if peer.is_closing() {
                return;
            }
            let payload = bye_payload(code, reason);
            let h = Header {
                guid: Guid::random(),
                kind: MsgType::Bye,
                ttl: 1,
                hops: 0,
                len: payload.len() as u32,
            };
            self.send_own(&peer, h, &payload);
            peer.set_closing();
            self.counters.event(Event::ByeSent);
        }
        w.close(conn);
    }

    pub(crate) fn stats(&self) -> GnutellaStats {
        let mut s = GnutellaStats::default();
        self.counters.fill(&mut s);
        let snap = self.peers.snapshot();
        s.peers = snap.list.len();
        s.handshaking = self.conns.len().saturating_sub(s.peers);
        let (routes, push) = self.routes.sizes();
        s.route_entries = routes;
        s.push_entries = push;
        s.known_hosts = self.hosts.lock().len();
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
                }
            })
            .collect();
        s.queued_bytes = s.connections.iter().map(|c| c.queued_bytes).sum();
        s
    }
}

/// Reads a router's counters; cloneable and `Send + Sync`.
#[derive(Clone, Debug)]
pub struct StatsHandle(Arc<Node>);

impl StatsHandle {
    /// A snapshot of the counters.
    pub fn stats(&self) -> GnutellaStats {
        self.0.stats()
    }
}

/// A running Gnutella router: the three stages and the socket stages under them.
#[derive(Debug)]
pub struct Gnutella {
    node: Arc<Node>,
    sockets: SocketHandle,
}

impl Gnutella {
    /// Registers the router's stages in `rt` and binds its listener. The router
    /// runs once `rt` runs (at once if it already does).
    pub fn start(rt: &Runtime, cfg: RouterConfig) -> Result<Gnutella, Error> {
        cfg.validate().map_err(Error)?;
        let node = Arc::new(Node {
            routes: Routes::new(cfg.routing.clone()),
            peers: Peers::default(),
            conns: ConnTable::default(),
            counters: Counters::default(),
            hosts: Mutex::new(HostCache::new(&cfg)),
            dialing: Mutex::new(HashMap::new()),
            writer: OnceLock::new(),
            router: OnceLock::new(),
            catcher: OnceLock::new(),
            listen: OnceLock::new(),
            guid: Guid::random(),
            ticks: TickChain::default(),
            epoch: Instant::now(),
            cfg,
        });
        let cfg = &node.cfg;
        let stage_err = |e: seda::RuntimeError| Error(format!("cannot register a stage: {e}"));
        let mut pool = ThreadPoolConfig::bounded(cfg.router_threads.0, cfg.router_threads.1);
        pool.queue_threshold = cfg.router_queue_threshold;
        let mut router_stage = rt
            .stage(ROUTER_STAGE, router::Router::new(Arc::clone(&node)))
            .capacity(cfg.router_capacity)
            .thread_model(ThreadModel::PerStage)
            .thread_pool(pool)
            .batch(64);
        if !cfg.router_pool_controller {
            router_stage = router_stage.fixed_threads(cfg.router_threads.0);
        }
        router_stage = match cfg.router_admission {
            RouterAdmission::None => router_stage,
            RouterAdmission::QueueThreshold(n) => router_stage.admission(QueueThreshold::new(n)),
            RouterAdmission::Red { min, max, max_p } => {
                router_stage.admission(Red::new(min, max, max_p, 0.2))
            }
        };
        let router_sink = router_stage.build().map_err(stage_err)?;
        let _ = node.router.set(router_sink);
        let catcher_sink = rt
            .stage(CATCHER_STAGE, catcher::Catcher::new(Arc::clone(&node)))
            .capacity(4096)
            .thread_model(ThreadModel::PerStage)
            .fixed_threads(1)
            .build()
            .map_err(stage_err)?;
        let _ = node.catcher.set(catcher_sink);
        let server_sink = rt
            .stage(SERVER_STAGE, server::Server::new(Arc::clone(&node)))
            .capacity(16_384)
            .batch(64)
            .build()
            .map_err(stage_err)?;
        let mut sc = SocketConfig::new(cfg.listen);
        if let Some(n) = cfg.event_loops {
            sc.event_loops = n;
        }
        sc.send_buffer = cfg.send_buffer;
        // A safety net under our own bound (socket_budget + one chunk per peer).
        sc.write_threshold = cfg.socket_budget * 2 + (256 << 10);
        sc.on_backlog = BacklogAction::Close;
        let sockets = Sockets::start(rt, sc, server_sink)
            .map_err(|e| Error(format!("cannot listen on {}: {e}", cfg.listen)))?;
        let _ = node.writer.set(sockets.writer());
        let _ = node.listen.set(sockets.local_addr());
        catcher::start_ticks(rt, &node);
        router::start_ticks(rt, &node);
        Ok(Gnutella { node, sockets })
    }

    /// The address the router listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.sockets.local_addr()
    }

    /// Our servent id.
    pub fn servent_id(&self) -> Guid {
        self.node.guid
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GnutellaStats {
        self.node.stats()
    }

    /// A cheap, cloneable source of [`Gnutella::stats`] (for an admin listener).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(Arc::clone(&self.node))
    }

    /// Counters of the socket stages.
    pub fn socket_stats(&self) -> seda_io::SocketStats {
        self.sockets.stats()
    }

    /// Adds a host for the catcher to connect to (as `--peer`).
    pub fn add_peer(&self, addr: SocketAddr) {
        self.node.hosts.lock().add_seed(addr);
    }

    /// Closes every connection and stops the sockets; the runtime's shutdown
    /// stops the stages.
    pub fn stop(&self) {
        self.sockets.stop();
    }

    /// How long a stage tick is (router flushes slow peers; catcher dials).
    pub fn tick() -> Duration {
        router::TICK
    }
}
