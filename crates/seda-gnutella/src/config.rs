//! The router's settings.

use std::net::SocketAddr;
use std::time::Duration;

pub use crate::error::ConfigError;
use crate::routing::RoutingConfig;

/// Admission control on the router stage's queue (SEDA 5.2.3 names both: "threshold
/// each stage's incoming event queue and drop packets when the threshold has been
/// exceeded", or drop "probabilistically based on the length of the input queue"
/// as RED does). A refused read is dropped and counted as `router_overload`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum RouterAdmission {
    /// Only the queue's capacity.
    #[default]
    None,
    /// Refuse while the queue holds this many events.
    QueueThreshold(usize),
    /// Random early detection between `min` and `max` queued events, refusing with
    /// probability up to `max_p` (queue length averaged with weight 0.2).
    Red {
        /// Below this average length nothing is refused.
        min: usize,
        /// At and above this average length everything is refused.
        max: usize,
        /// Refusal probability reached at `max`.
        max_p: f64,
    },
}

/// Query routing tables (QRP): what we keep of our peers' tables and what we send.
///
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QrpConfig {
    /// log2 of the slots of the table we send ultrapeers that ask for it
    /// (`X-Ultrapeer-Query-Routing`): the union of our leaves' tables. Default 16
    /// (65,536 slots, 8 KiB), 8..=21.
    pub table_bits: u8,
    /// Largest table a peer may send us, log2 of its slots; a RESET asking for more
    /// drops that peer (Bye 413). Default 21 (2 Mi slots, 256 KiB: gtk-gnutella's
    /// largest), 8..=21.
    pub max_table_bits: u8,
    /// Bytes all received tables may hold together (with their inflaters while a
    /// patch is being received); a RESET that would pass it drops that peer.
    /// Default 32 MiB.
    pub memory: usize,
    /// Least time between two updates of our table to an ultrapeer. Default 10 s.
    pub update_every: Duration,
}

crate::setters::setters!(QrpConfig {
    with_table_bits: table_bits: u8,
    with_max_table_bits: max_table_bits: u8,
    with_memory: memory: usize,
    with_update_every: update_every: Duration,
});

impl Default for QrpConfig {
    fn default() -> Self {
        QrpConfig {
            table_bits: 16,
            max_table_bits: crate::proto::qrp::MAX_BITS,
            memory: 32 << 20,
            update_every: Duration::from_secs(10),
        }
    }
}

/// Pong caching, the 0.6 ping/pong scheme (LimeWire's ping reduction, as
/// gtk-gnutella's `pcache.c` implements it): a ping is answered from a cache of
/// recent pongs per hop count instead of being broadcast; the cache is refilled by
/// pinging our ultrapeers at most once per `lifespan`.
///
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PongCacheConfig {
    /// How long cached pongs are used before the cache is emptied and our
    /// ultrapeers are pinged again. Default 20 s (gtk-gnutella's ultrapeer value).
    pub lifespan: Duration,
    /// Most cached pongs answering one ping. Default 10.
    pub per_ping: usize,
    /// Most pongs cached per hop count. Default 32.
    pub per_hop: usize,
    /// A peer's pings are answered at most once per this long (others are dropped
    /// and counted): 3 s for an ultrapeer, 60 s for a leaf (gtk-gnutella's
    /// values). Alive pings (TTL 1, hops 0) are always answered.
    pub throttle: (Duration, Duration),
}

crate::setters::setters!(PongCacheConfig {
    with_lifespan: lifespan: Duration,
    with_per_ping: per_ping: usize,
    with_per_hop: per_hop: usize,
    with_throttle: throttle: (Duration, Duration),
});

impl Default for PongCacheConfig {
    fn default() -> Self {
        PongCacheConfig {
            lifespan: Duration::from_secs(20),
            per_ping: 10,
            per_hop: 32,
            throttle: (Duration::from_secs(3), Duration::from_secs(60)),
        }
    }
}

/// A rate limit on incoming handshakes, per address and per /24 network (/64 for
/// IPv6), as gtk-gnutella bans hammering hosts (`ban.c`): each attempt adds 1 to a
/// counter that decays linearly by `per_period` every `period`; past `per_period`
/// the source is banned for `ban`, doubled for each ban that follows within an
/// hour, up to `max_ban`; while banned every attempt is answered `429` with a
/// `Retry-After` header and closed.
///
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandshakeLimit {
    /// Attempts per address per period. Default 2 (gtk-gnutella's); 0: no limit.
    pub per_addr: u32,
    /// Attempts per /24 (IPv6: /64) per period. Default 8; 0: no limit.
    pub per_net: u32,
    /// The period. Default 60 s.
    pub period: Duration,
    /// First ban. Default 300 s.
    pub ban: Duration,
    /// Longest ban. Default 1 h.
    pub max_ban: Duration,
    /// Whether loopback addresses are exempt (local tools, tests and the load
    /// generator open many connections at once). Default true.
    pub exempt_loopback: bool,
}

crate::setters::setters!(HandshakeLimit {
    with_per_addr: per_addr: u32,
    with_per_net: per_net: u32,
    with_period: period: Duration,
    with_ban: ban: Duration,
    with_max_ban: max_ban: Duration,
    with_exempt_loopback: exempt_loopback: bool,
});

impl Default for HandshakeLimit {
    fn default() -> Self {
        HandshakeLimit {
            per_addr: 2,
            per_net: 8,
            period: Duration::from_secs(60),
            ban: Duration::from_secs(300),
            max_ban: Duration::from_secs(3600),
            exempt_loopback: true,
        }
    }
}

/// Settings of a Gnutella router. `Default` gives a router on an ephemeral loopback
/// port with the values documented per field. `#[non_exhaustive]`: start from
/// `Default` and set what differs with the `with_*` setters (or assign the public
/// fields).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda_gnutella::RouterConfig;
///
/// let cfg = RouterConfig::default()
///     .with_max_peers(8)
///     .with_keepalive(Duration::from_secs(5));
/// assert!(cfg.validate().is_ok());
/// let bad = cfg.with_max_peers(0).validate().unwrap_err();
/// assert_eq!(bad.setting(), "max_peers");
/// assert_eq!(bad.to_string(), "max peers must be at least 1");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RouterConfig {
    /// Address to listen on. Default 127.0.0.1:0.
    pub listen: SocketAddr,
    /// Address to announce in `Listen-IP` and in our pongs; default: the listening
    /// address. A loopback or unspecified address is announced in `Listen-IP` only to
    /// neighbours, and our pong then answers only a neighbour's alive pings (TTL 1,
    /// hops 0), since no one else could connect to it.
    pub advertise: Option<SocketAddr>,
    /// `User-Agent` we send.
    pub user_agent: String,
    /// Most ultrapeer connections (both directions); more are refused with 503 and
    /// `X-Try-Ultrapeers`. Default 32, advertised as `X-Degree`.
    pub max_peers: usize,
    /// Most leaves (`X-Ultrapeer: False`); more are refused with 503. Default 32; 0
    /// refuses every leaf.
    pub max_leaves: usize,
    /// Query routing tables.
    pub qrp: QrpConfig,
    /// Pong caching; `None` broadcasts pings to every ultrapeer as SEDA's router
    /// did (Fig. 14's traffic model). Default on.
    pub pong_cache: Option<PongCacheConfig>,
    /// Rate limit on incoming handshakes.
    pub handshake_limit: HandshakeLimit,
    /// Outgoing connections the catcher keeps at least. Default 4 (SEDA 5.2.1).
    pub min_outgoing: usize,
    /// Hosts to connect to (`--peer`), retried with backoff for as long as we run.
    pub seeds: Vec<SocketAddr>,
    /// Wait before reconnecting to a host after a failure or a close; doubles per
    /// consecutive failure up to `max_backoff`. Default 30 s: servents ban an
    /// address that handshakes more than about twice a minute.
    pub backoff: Duration,
    /// Longest wait between reconnects. Default 10 min.
    pub max_backoff: Duration,
    /// Timeout of an outgoing TCP connect. Default 3 s.
    pub connect_timeout: Duration,
    /// A connection whose handshake has not finished after this long is closed.
    /// Default 15 s.
    pub handshake_timeout: Duration,
    /// Silence on a link after which we send a one-hop keep-alive ping. Servents
    /// probe a quiet link themselves and close it when their probes go unanswered
    /// (gtk-gnutella: alive pings after 20 s of quiet, Bye 406 after 6). Default 15 s.
    pub keepalive: Duration,
    /// Offer and accept `deflate` on the stream. Default true.
    pub deflate: bool,
    /// Largest payload accepted; a peer announcing more gets a Bye and is closed.
    /// Default 64 KiB.
    pub max_payload: u32,
    /// Routing tables and TTL rules.
    pub routing: RoutingConfig,
    /// Bytes of our own value-ordered outgoing queue per connection (SEDA 5.2.2's
    /// threshold). Default 1 MiB.
    pub out_queue_bytes: usize,
    /// Bytes we let wait in a connection's socket queue before holding messages in
    /// our own queue (where they can be dropped by value). Default 256 KiB.
    pub socket_budget: usize,
    /// A peer whose outgoing queue stays over its threshold this long, or that reads
    /// none of its queue this long, is closed. Default 5 s.
    pub slow_grace: Duration,
    /// Artificial cost of each query in the router stage (SEDA Fig. 14 sleeps 20 ms
    /// per query). Default none.
    pub query_delay: Option<Duration>,
    /// Router stage threads: `(min, max)`; the thread-pool controller moves between
    /// them. Default (2, 2): one per core of a two-core machine. Each connection's
    /// events reach the router in a color of their own, so its messages are routed
    /// one read at a time and in order (a query routing table's PATCH after its
    /// RESET) while other connections' reads are routed beside them.
    pub router_threads: (usize, usize),
    /// Whether the socket loops, the server and the router form one thread-pool
    /// domain, so that a read is framed and routed on the loop thread that read it
    /// whenever the next stage's queue is empty (a queue only where load builds up:
    /// Welsh's retrospective). Every hop is still counted by the stage it enters.
    /// Ignored (the router keeps its own queue) when `query_delay` is set: an
    /// artificial cost blocks, and Fig. 14 conditions load at the router's queue.
    /// Default false: on 2 cores, with the load generator beside the router, the
    /// loops that route inline read no faster than they route, so a sender's bytes
    /// wait in the kernel's socket buffers (4 MB per peer, query latency 195-276 ms
    /// at the same throughput as queued: docs/gnutella/README.md, Throughput);
    /// with a queue the loops keep reading and queries wait 2-7 ms.
    pub inline: bool,
    /// Whether the thread-pool controller sizes the router stage. Default false.
    pub router_pool_controller: bool,
    /// Router stage queue length above which the controller adds a thread.
    /// Default 1000 (Sandstorm's default).
    pub router_queue_threshold: usize,
    /// Router stage queue capacity. Default 65,536 events.
    pub router_capacity: usize,
    /// Admission control on the router stage's queue. Default none.
    pub router_admission: RouterAdmission,
    /// The router's queue bound in time: while reads stand in the router's queue
    /// (32 or more), the pings and queries of a read that waited longer than this
    /// for the router (from the socket read to the router taking it) are dropped
    /// unrouted and counted (`router_late`); its other messages (replies, pushes,
    /// QRP, vendor messages) are still handled. A late read with no queue behind
    /// it (a thread descheduled on a busy machine) is routed. A
    /// stale read costs the router a header walk, so under a load past its
    /// capacity it catches up instead of queueing: the queue's delay stays near
    /// the bound (SEDA's response-time control at the router, 5.2.3), where a
    /// queue bounded only in events (`router_capacity`) held 0.3-1 s of reads.
    /// `None`: no bound (Fig. 14 measures the queue's growth). Default 5 ms.
    pub max_queue_delay: Option<Duration>,
    /// Back-pressure: a read that finds this many reads queued at the router
    /// pauses its connection's reading until the router's queue is down to a
    /// quarter of it (TCP's flow control then slows the peer, instead of the router
    /// dropping what waited past `max_queue_delay`; see the `flow` module). 0:
    /// never pause; never with `router_pool_controller` either (a standing queue is
    /// its signal to add a thread). Default 0: on 2 cores it measured 0.93x the
    /// plain loop at a query p90 of 31-32 ms where shedding late reads measured
    /// 1.11x at 5.8-6.2 ms (2026-11-27, `docs/gnutella/README.md`).
    pub pause_reads_at: usize,
    /// Socket event loops. Default: one per core.
    pub event_loops: Option<usize>,
    /// Socket backend of the event loops. Default [`seda_io::IoBackend::Auto`]:
    /// io_uring where the kernel offers it, else epoll.
    pub io: seda_io::IoBackend,
    /// `SO_SNDBUF` of connections; default: the kernel's (which grows to megabytes,
    /// all of it memory a peer that stops reading can pin).
    pub send_buffer: Option<usize>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            user_agent: format!("seda-gnutella/{}", env!("CARGO_PKG_VERSION")),
            max_peers: 32,
            max_leaves: 32,
            qrp: QrpConfig::default(),
            pong_cache: Some(PongCacheConfig::default()),
            handshake_limit: HandshakeLimit::default(),
            min_outgoing: 4,
            seeds: Vec::new(),
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(15),
            keepalive: Duration::from_secs(15),
            deflate: true,
            max_payload: crate::proto::message::DEFAULT_MAX_PAYLOAD,
            routing: RoutingConfig::default(),
            out_queue_bytes: 1 << 20,
            socket_budget: 256 << 10,
            slow_grace: Duration::from_secs(5),
            query_delay: None,
            router_threads: (2, 2),
            inline: false,
            router_pool_controller: false,
            router_queue_threshold: 1000,
            router_capacity: 65_536,
            router_admission: RouterAdmission::None,
            max_queue_delay: Some(Duration::from_millis(5)),
            pause_reads_at: 0,
            event_loops: None,
            io: seda_io::IoBackend::Auto,
            send_buffer: None,
        }
    }
}

crate::setters::setters!(RouterConfig {
    with_listen: listen: SocketAddr,
    with_advertise: advertise: Option<SocketAddr>,
    with_user_agent: user_agent: String,
    with_max_peers: max_peers: usize,
    with_max_leaves: max_leaves: usize,
    with_qrp: qrp: QrpConfig,
    with_pong_cache: pong_cache: Option<PongCacheConfig>,
    with_handshake_limit: handshake_limit: HandshakeLimit,
    with_min_outgoing: min_outgoing: usize,
    with_seeds: seeds: Vec<SocketAddr>,
    with_backoff: backoff: Duration,
    with_max_backoff: max_backoff: Duration,
    with_connect_timeout: connect_timeout: Duration,
    with_handshake_timeout: handshake_timeout: Duration,
    with_keepalive: keepalive: Duration,
    with_deflate: deflate: bool,
    with_max_payload: max_payload: u32,
    with_routing: routing: RoutingConfig,
    with_out_queue_bytes: out_queue_bytes: usize,
    with_socket_budget: socket_budget: usize,
    with_slow_grace: slow_grace: Duration,
    with_query_delay: query_delay: Option<Duration>,
    with_router_threads: router_threads: (usize, usize),
    with_inline: inline: bool,
    with_router_pool_controller: router_pool_controller: bool,
    with_router_queue_threshold: router_queue_threshold: usize,
    with_router_capacity: router_capacity: usize,
    with_router_admission: router_admission: RouterAdmission,
    with_max_queue_delay: max_queue_delay: Option<Duration>,
    with_pause_reads_at: pause_reads_at: usize,
    with_event_loops: event_loops: Option<usize>,
    with_io: io: seda_io::IoBackend,
    with_send_buffer: send_buffer: Option<usize>,
});

impl RouterConfig {
    /// Checks each field's range; the error names the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.routing.validate()?;
        let check = |ok: bool, setting: &'static str, rule: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::new(setting, rule))
            }
        };
        check(
            self.max_peers >= 1,
            "max_peers",
            "max peers must be at least 1",
        )?;
        check(
            (8..=crate::proto::qrp::MAX_BITS).contains(&self.qrp.table_bits),
            "qrp.table_bits",
            "QRP table bits must be 8..=21",
        )?;
        check(
            (8..=crate::proto::qrp::MAX_BITS).contains(&self.qrp.max_table_bits),
            "qrp.max_table_bits",
            "largest QRP table bits must be 8..=21",
        )?;
        check(
            self.qrp.memory >= 64 << 10,
            "qrp.memory",
            "QRP memory must be at least 64 KiB",
        )?;
        if let Some(pc) = &self.pong_cache {
            check(
                pc.lifespan >= Duration::from_secs(1),
                "pong_cache.lifespan",
                "pong cache lifespan must be at least 1 s",
            )?;
            check(
                pc.per_ping >= 1 && pc.per_hop >= 1,
                "pong_cache.per_ping",
                "pong cache sizes must be at least 1",
            )?;
        }
        let hl = &self.handshake_limit;
        check(
            hl.period >= Duration::from_secs(1) && hl.ban >= Duration::from_secs(1),
            "handshake_limit.period",
            "handshake limit period and ban must be at least 1 s",
        )?;
        check(
            hl.max_ban >= hl.ban,
            "handshake_limit.max_ban",
            "handshake limit: longest ban must not be below the first",
        )?;
        check(
            self.max_payload >= 64,
            "max_payload",
            "max payload must be at least 64 bytes",
        )?;
        check(
            self.out_queue_bytes >= usize::try_from(self.max_payload).unwrap_or(usize::MAX) + 23,
            "out_queue_bytes",
            "outgoing queue must hold at least one largest message",
        )?;
        check(
            self.socket_budget >= 4096,
            "socket_budget",
            "socket budget must be at least 4 KiB",
        )?;
        check(
            self.router_threads.0 >= 1 && self.router_threads.1 >= self.router_threads.0,
            "router_threads",
            "router threads: need 1 <= min <= max",
        )?;
        check(
            self.router_capacity >= 1,
            "router_capacity",
            "router queue capacity must be at least 1",
        )?;
        check(
            self.max_queue_delay
                .is_none_or(|d| d >= Duration::from_micros(100)),
            "max_queue_delay",
            "router queue delay bound must be at least 0.1 ms",
        )?;
        check(
            self.router_queue_threshold >= 1,
            "router_queue_threshold",
            "router queue threshold must be at least 1",
        )?;
        check(
            !self.backoff.is_zero(),
            "backoff",
            "reconnect backoff must be positive",
        )?;
        check(
            self.max_backoff >= self.backoff,
            "max_backoff",
            "max backoff must not be below the backoff",
        )?;
        check(
            !self.handshake_timeout.is_zero(),
            "handshake_timeout",
            "handshake timeout must be positive",
        )?;
        check(
            self.event_loops.is_none_or(|n| n >= 1),
            "event_loops",
            "event loops must be at least 1",
        )
    }
}
