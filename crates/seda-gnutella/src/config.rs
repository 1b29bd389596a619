//! The router's settings.

use std::net::SocketAddr;
use std::time::Duration;

use crate::routing::RoutingConfig;

/// Admission control on the router stage's queue (SEDA 5.2.3 names both: "threshold
/// each stage's incoming event queue and drop packets when the threshold has been
/// exceeded", or drop "probabilistically based on the length of the input queue"
/// as RED does). A refused read is dropped and counted as `router_overload`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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

/// Settings of a Gnutella router. `Default` gives a router on an ephemeral loopback
/// port with the values documented per field.
#[derive(Clone, Debug)]
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
    /// Most Gnutella connections (both directions); more are refused with 503 and
    /// `X-Try-Ultrapeers`. Default 32, advertised as `X-Degree`.
    pub max_peers: usize,
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
    /// A peer whose outgoing queue stays over its threshold this long is closed.
    /// Default 5 s.
    pub slow_grace: Duration,
    /// Artificial cost of each query in the router stage (SEDA Fig. 14 sleeps 20 ms
    /// per query). Default none.
    pub query_delay: Option<Duration>,
    /// Router stage threads: `(min, max)`; the thread-pool controller moves between
    /// them. Default (1, 1).
    pub router_threads: (usize, usize),
    /// Whether the thread-pool controller sizes the router stage. Default false.
    pub router_pool_controller: bool,
    /// Router stage queue length above which the controller adds a thread.
    /// Default 1000 (Sandstorm's default).
    pub router_queue_threshold: usize,
    /// Router stage queue capacity. Default 65,536 events.
    pub router_capacity: usize,
    /// Admission control on the router stage's queue. Default none.
    pub router_admission: RouterAdmission,
    /// Socket event loops. Default: one per core.
    pub event_loops: Option<usize>,
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
            router_threads: (1, 1),
            router_pool_controller: false,
            router_queue_threshold: 1000,
            router_capacity: 65_536,
            router_admission: RouterAdmission::None,
            event_loops: None,
            send_buffer: None,
        }
    }
}

impl RouterConfig {
    /// Checks each field's range; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        self.routing.validate()?;
        let check = |ok: bool, msg: &str| if ok { Ok(()) } else { Err(msg.to_owned()) };
        check(self.max_peers >= 1, "max peers must be at least 1")?;
        check(
            self.max_payload >= 64,
            "max payload must be at least 64 bytes",
        )?;
        check(
            self.out_queue_bytes >= usize::try_from(self.max_payload).unwrap_or(usize::MAX) + 23,
            "outgoing queue must hold at least one largest message",
        )?;
        check(
            self.socket_budget >= 4096,
            "socket budget must be at least 4 KiB",
        )?;
        check(
            self.router_threads.0 >= 1 && self.router_threads.1 >= self.router_threads.0,
            "router threads: need 1 <= min <= max",
        )?;
        check(
            self.router_capacity >= 1,
            "router queue capacity must be at least 1",
        )?;
        check(
            self.router_queue_threshold >= 1,
            "router queue threshold must be at least 1",
        )?;
        check(
            !self.backoff.is_zero(),
            "reconnect backoff must be positive",
        )?;
        check(
            self.max_backoff >= self.backoff,
            "max backoff must not be below the backoff",
        )?;
        check(
            !self.handshake_timeout.is_zero(),
            "handshake timeout must be positive",
        )?;
        check(
            self.event_loops.is_none_or(|n| n >= 1),
            "event loops must be at least 1",
        )
    }
}
