//! Configuration of the socket stages: [`SocketConfig`], what to do past the write
//! threshold ([`BacklogAction`]) and which I/O backend runs the loops ([`IoBackend`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What to do when a connection's outgoing queue passes its threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BacklogAction {
    /// Stop reading the connection until its queue drains below half the threshold:
    /// the peer cannot send more work until it reads what it asked for, so its
    /// output stays bounded by what its requests in flight produce.
    #[default]
    Pause,
    /// Close the connection (`Closed { reason: Backlog }`): a slow reader cannot
    /// grow memory.
    Close,
    /// Keep queueing and send the application a `WriteBacklog` event.
    Notify,
}

/// Configuration of the socket stages. `#[non_exhaustive]`: start from
/// [`SocketConfig::new`] (or `Default`) and set what differs with the `with_*`
/// setters (or assign the public fields).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SocketConfig {
    /// Address to listen on (port 0: an ephemeral port, see
    /// [`SocketHandle::local_addr`](crate::SocketHandle::local_addr)).
    pub listen: SocketAddr,
    /// Event loops, one thread each. Default: the number of cores. At least 1.
    pub event_loops: usize,
    /// Most bytes read from one connection per readiness event. Default 16 KiB.
    pub read_chunk: usize,
    /// Outgoing bytes queued per connection beyond which [`Self::on_backlog`]
    /// applies. Default 1 MiB. At least 1.
    pub write_threshold: usize,
    /// What to do past the write threshold. Default [`BacklogAction::Pause`].
    pub on_backlog: BacklogAction,
    /// Close a connection whose peer takes none of its queued output for this long.
    /// Default: none (never). At least 10 ms.
    pub send_timeout: Option<Duration>,
    /// Most open connections; further ones are closed on accept. Default 100,000.
    pub max_connections: usize,
    /// Bytes written (best effort, without blocking) to a connection refused because
    /// `max_connections` are open, before it is closed: e.g. an HTTP `503`. Default:
    /// none (closed silently).
    pub refusal: Option<Bytes>,
    /// Optional read-rate controller: a token bucket per connection, bytes per
    /// second, depth `read_chunk`. A connection over its rate is not read until its
    /// bucket refills. Default: none.
    pub read_rate: Option<f64>,
    /// `listen(2)` backlog. Default 1,024.
    pub listen_backlog: i32,
    /// `SO_SNDBUF` of accepted sockets; default: the kernel's.
    pub send_buffer: Option<usize>,
    /// Set `TCP_NODELAY` on accepted sockets. Default true.
    pub nodelay: bool,
    /// On end of file from the peer, deliver [`SocketEvent::ReadClosed`](crate::SocketEvent::ReadClosed) and keep the
    /// connection open for output (a client that sends its requests and then
    /// half-closes, as `nc -N` or a health check does, still gets its responses);
    /// the application closes it. Default false: end of file closes the connection
    /// (`Closed { reason: PeerClosed }`).
    pub half_close: bool,
    /// Name of the event-loop stage. Default `sock-io`.
    pub stage_name: String,
    /// A thread-pool domain the event loops join ([`seda::Domain::enter`]): the
    /// application's stage, if it is in the same domain, may then run inline on the
    /// loop thread when its queue is empty and its admission admits (the runtime
    /// counts the event as a queued one). Default: none (every event is queued).
    pub domain: Option<seda::Domain>,
    /// The system interface the event loops use. Default [`IoBackend::Auto`].
    pub backend: IoBackend,
}

/// Default name of the event-loop stage.
pub const DEFAULT_STAGE: &str = "sock-io";

crate::setters::setters!(SocketConfig {
    with_listen: listen: SocketAddr,
    with_event_loops: event_loops: usize,
    with_read_chunk: read_chunk: usize,
    with_write_threshold: write_threshold: usize,
    with_on_backlog: on_backlog: BacklogAction,
    with_send_timeout: send_timeout: Option<Duration>,
    with_max_connections: max_connections: usize,
    with_refusal: refusal: Option<Bytes>,
    with_read_rate: read_rate: Option<f64>,
    with_listen_backlog: listen_backlog: i32,
    with_send_buffer: send_buffer: Option<usize>,
    with_nodelay: nodelay: bool,
    with_half_close: half_close: bool,
    with_stage_name: stage_name: String,
    with_domain: domain: Option<seda::Domain>,
    with_backend: backend: IoBackend,
});

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            event_loops: std::thread::available_parallelism().map_or(2, |n| n.get()),
            read_chunk: 16 * 1024,
            write_threshold: 1 << 20,
            on_backlog: BacklogAction::Pause,
            send_timeout: None,
            max_connections: 100_000,
            refusal: None,
            read_rate: None,
            listen_backlog: 1024,
            send_buffer: None,
            nodelay: true,
            half_close: false,
            stage_name: DEFAULT_STAGE.to_owned(),
            domain: None,
            backend: IoBackend::Auto,
        }
    }
}

impl SocketConfig {
    /// Defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        SocketConfig {
            listen,
            ..SocketConfig::default()
        }
    }

    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        if self.event_loops == 0 || self.event_loops > 1024 {
            return bad(format!(
                "event_loops must be in 1..=1024, got {}",
                self.event_loops
            ));
        }
        if self.read_chunk == 0 || self.read_chunk > 64 << 20 {
            return bad(format!(
                "read_chunk must be in 1..=64 MiB, got {}",
                self.read_chunk
            ));
        }
        if self.write_threshold == 0 {
            return bad("write_threshold must be at least 1 byte".to_owned());
        }
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".to_owned());
        }
        if let Some(t) = self.send_timeout
            && t < Duration::from_millis(10)
        {
            return bad(format!("send_timeout must be at least 10 ms, got {t:?}"));
        }
        if let Some(r) = self.read_rate
            && !(r.is_finite() && r > 0.0)
        {
            return bad(format!(
                "read_rate must be a positive number of bytes per second, got {r}"
            ));
        }
        if self.listen_backlog <= 0 {
            return bad(format!(
                "listen_backlog must be positive, got {}",
                self.listen_backlog
            ));
        }
        if self.stage_name.is_empty() {
            return bad("stage_name must not be empty".to_owned());
        }
        Ok(())
    }
}

/// The system interface of the event loops. Both give the same events, bounds and
/// counters behind the same API ([`crate::Sockets`], [`crate::Writer`]); they differ in
/// how many system calls a turn of a loop costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum IoBackend {
    /// The faster backend on this machine ([`IoBackend::PREFERRED`], chosen by
    /// measurement, see `docs/results.md`) if the kernel offers it, else `Epoll`.
    #[default]
    Auto,
    /// Readiness with edge-triggered epoll: one `read` per received chunk, and a
    /// `writev`/`sendfile` per response straight from the sending thread.
    Epoll,
    /// Completions with io_uring: one multishot accept per listener, one multishot
    /// receive per connection into a ring of kernel-provided buffers, and the sends a
    /// turn of the loop produces submitted together with its wait, in one system call
    /// (Linux 6.0 or later). Starting fails if the kernel does not offer it.
    Uring,
}

impl IoBackend {
    /// What [`IoBackend::Auto`] picks where io_uring is available, by measurement on
    /// the development machine (`docs/results.md`, "io_uring"; 2026-11-26, Haboob 1 KiB
    /// keep-alive: io_uring 1.24x epoll's requests/s at 100 connections and 1.39x at
    /// 1,000, at 0.78x and 0.68x its CPU time per request).
    pub const PREFERRED: IoBackend = IoBackend::Uring;

    /// The name used by `--io` and the stats: `auto`, `epoll` or `uring`.
    pub fn as_str(self) -> &'static str {
        match self {
            IoBackend::Auto => "auto",
            IoBackend::Epoll => "epoll",
            IoBackend::Uring => "uring",
        }
    }
}

impl fmt::Display for IoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IoBackend {
    type Err = seda::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(IoBackend::Auto),
            "epoll" => Ok(IoBackend::Epoll),
            "uring" | "io_uring" | "io-uring" => Ok(IoBackend::Uring),
            other => Err(seda::UnknownName::new(
                "I/O backend",
                "auto, epoll or uring",
                other,
            )),
        }
    }
}
