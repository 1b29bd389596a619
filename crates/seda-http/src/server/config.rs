//! The server's configuration, its checks, and its errors.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use seda::ThreadModel;
pub use seda_io::IoBackend;

use crate::handler::HandlerRegistration;
use crate::proto::{Dotfiles, Limits};

/// How Haboob's CPU-bound stages (HttpParse, HttpRecv, PageCache, HttpSend) and
/// the socket loops hand events to each other. They form one thread-pool domain
/// (`haboob`); the blocking stages and the dynamic handlers are outside it, behind
/// real queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handoff {
    /// The runtime runs the next stage's handler on the calling thread when its
    /// queue is empty and its admission admits, counting the event as a queued one
    /// (the default: see `docs/results.md` for the measurement).
    #[default]
    Inline,
    /// Every hop goes through the next stage's queue and pool.
    Queued,
}

/// Where the blocking calls of a cache miss (translation, `open`, `read`) run.
/// Flash (USENIX'99 section 3) compares the two: an event loop that blocks on the
/// disk (SPED) against one that hands the disk to helpers (AMPED).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileIo {
    /// Misses go to CacheMiss's pool and the reads to the file helper stage; the
    /// event loops never wait for the disk (AMPED, the default).
    #[default]
    Helper,
    /// PageCache translates and reads a miss itself, on its own thread: with inline
    /// handoff that is the socket event loop, which serves nothing else meanwhile
    /// (SPED). For comparison only.
    Inline,
}

impl std::str::FromStr for FileIo {
    type Err = seda::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "helper" => Ok(FileIo::Helper),
            "inline" => Ok(FileIo::Inline),
            _ => Err(seda::UnknownName::new("file I/O", "helper or inline", s)),
        }
    }
}

/// Configuration of a [`Server`](super::Server). `Default` gives the documented
/// defaults. `#[non_exhaustive]`: start from `Default` and set what differs with the
/// `with_*` setters (or assign the public fields).
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use std::net::TcpStream;
/// use std::time::Duration;
///
/// use seda_http::{DemoSite, Server, ServerConfig};
///
/// let site = DemoSite::create().unwrap();
/// let cfg = ServerConfig::default()
///     .with_listen("127.0.0.1:0".parse().unwrap()) // a free port
///     .with_root(site.path().to_owned())
///     .with_cache_bytes(8 << 20)
///     .with_admin_listen(None);
/// let server = Server::start(cfg).unwrap();
/// let mut c = TcpStream::connect(server.local_addr()).unwrap();
/// c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
///     .unwrap();
/// let mut answer = String::new();
/// c.read_to_string(&mut answer).unwrap();
/// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
/// let report = server.shutdown(Duration::from_secs(5));
/// assert_eq!(report.connections_cut, 0);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Directory to serve; must exist and be readable.
    pub root: PathBuf,
    /// Page-cache capacity, bytes. Default 200 MiB.
    pub cache_bytes: u64,
    /// Capacity of the pathname-translation cache, bytes (URLs, file metadata and
    /// cached headers counted); 0 turns it off (every request is translated, and the
    /// response-header cache goes with it). Default 16 MiB.
    pub path_cache_bytes: u64,
    /// Files larger than this bypass the page cache and stream with `sendfile`.
    /// Default 1 MiB.
    pub max_cached_file: u64,
    /// Thread model of Haboob's CPU-bound stages (HttpParse, HttpRecv, PageCache,
    /// HttpSend), and the runtime's default for stages added through
    /// [`Server::runtime`](super::Server::runtime). Blocking stages (socket loops,
    /// file helper, CacheMiss, dynamic handlers) always have pools of their own.
    pub thread_model: ThreadModel,
    /// Socket event loops. Default: one per core.
    pub event_loops: usize,
    /// System interface of the socket loops (epoll or io_uring). Default
    /// [`IoBackend::Auto`]: the faster one on this machine where io_uring is
    /// available, else epoll.
    pub io: IoBackend,
    /// Inline or queued handoff between the CPU-bound stages. Default inline.
    pub handoff: Handoff,
    /// Most threads of HttpParse's pool (per-stage model). Default 2.
    pub parse_threads: usize,
    /// Time a client has to send a complete request head (and body) once it started.
    /// Default 10 s.
    pub header_timeout: Duration,
    /// Time an idle keep-alive connection is kept. Default 30 s.
    pub idle_timeout: Duration,
    /// A connection whose client takes none of its pending output for this long is
    /// closed (a slow reader that makes progress is not). Default 60 s.
    pub send_timeout: Duration,
    /// Most open connections on each listener; past it a new plain connection gets
    /// a `503` and is closed (a TLS one is closed: nothing can be said in clear on a
    /// TLS port; its handshake counts). Default 10,000. Must fit the open-files limit beside the descriptors the
    /// server holds and keeps free ([`DescriptorBudget`](super::DescriptorBudget)):
    /// [`Server::start`](super::Server::start) fails with
    /// [`ServerError::Descriptors`] otherwise.
    pub max_connections: usize,
    /// Most requests of one connection in flight (parsed and not yet answered);
    /// past it the connection is not read until half are answered. Default 16.
    pub max_pipelined: usize,
    /// Request limits (414, 431, 413).
    pub limits: Limits,
    /// How long a cached translation is trusted before a `stat`. Default 2 s.
    pub revalidate: Duration,
    /// Index file of directories. Default `index.html`.
    pub index: String,
    /// Whether files and directories whose name starts with `.` are served
    /// (`.well-known` always is). Default [`Dotfiles::Hide`]: 404.
    pub dotfiles: Dotfiles,
    /// Let misses whose bytes are already in the OS page cache skip the file helper
    /// (Flash's residency check, `preadv2(RWF_NOWAIT)`). Default true.
    pub residency_check: bool,
    /// Where a miss's blocking calls run. Default [`FileIo::Helper`].
    pub file_io: FileIo,
    /// Keep each file's `200` header block with its translation (Flash 5.3's
    /// response-header cache); off, every response formats its header. Default true.
    pub header_cache: bool,
    /// Outgoing bytes queued on a connection past which it is not read until its
    /// client has taken half of them. Default 4 MiB.
    pub write_threshold: usize,
    /// `Retry-After` of the server's own `503`s (a full stage, too many
    /// connections), seconds. Default 1.
    pub retry_after_secs: u32,
    /// Address of the admin listener ([`AdminServer`](crate::AdminServer): stats,
    /// stage graph, metrics), or `None` for none. Default `None`; `seda serve`
    /// defaults to a loopback port.
    pub admin_listen: Option<SocketAddr>,
    /// Dynamic handlers to mount at start.
    pub handlers: Vec<HandlerRegistration>,
    /// The access log ([`AccessLog`](crate::AccessLog)), if any. Default none.
    pub access_log: Option<crate::AccessLogConfig>,
    /// Reverse-proxy routes to mount at start (the front door, `ProxyRoute`).
    pub proxies: Vec<crate::proxy::ProxyRoute>,
    /// A TLS listener beside the plain one, if any. Default none.
    pub tls: Option<TlsListen>,
}

/// A TLS listener of the server: HTTP/1.1 over TLS 1.2/1.3 (seda-io's TLS layer).
/// `#[non_exhaustive]`: built by [`TlsListen::new`] and the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsListen {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The certificate chain and key.
    pub keys: seda_io::TlsKeys,
    /// A handshake not finished in this time is aborted. Default 10 s.
    pub handshake_timeout: Duration,
    /// Most handshakes in progress. Default 1,024.
    pub max_handshakes: usize,
    /// Run the TLS stage inline on the socket loops (it joins Haboob's domain)
    /// instead of on a pool of its own behind a queue. Default false (a pool).
    pub inline: bool,
}

crate::setters::setters!(ServerConfig {
    with_listen: listen: SocketAddr,
    with_root: root: PathBuf,
    with_cache_bytes: cache_bytes: u64,
    with_path_cache_bytes: path_cache_bytes: u64,
    with_max_cached_file: max_cached_file: u64,
    with_thread_model: thread_model: ThreadModel,
    with_event_loops: event_loops: usize,
    with_io: io: IoBackend,
    with_handoff: handoff: Handoff,
    with_parse_threads: parse_threads: usize,
    with_header_timeout: header_timeout: Duration,
    with_idle_timeout: idle_timeout: Duration,
    with_send_timeout: send_timeout: Duration,
    with_max_connections: max_connections: usize,
    with_max_pipelined: max_pipelined: usize,
    with_limits: limits: Limits,
    with_revalidate: revalidate: Duration,
    with_index: index: String,
    with_dotfiles: dotfiles: Dotfiles,
    with_residency_check: residency_check: bool,
    with_file_io: file_io: FileIo,
    with_header_cache: header_cache: bool,
    with_write_threshold: write_threshold: usize,
    with_retry_after_secs: retry_after_secs: u32,
    with_admin_listen: admin_listen: Option<SocketAddr>,
    with_handlers: handlers: Vec<HandlerRegistration>,
    with_access_log: access_log: Option<crate::AccessLogConfig>,
    with_proxies: proxies: Vec<crate::proxy::ProxyRoute>,
    with_tls: tls: Option<TlsListen>,
});

crate::setters::setters!(TlsListen {
    with_listen: listen: SocketAddr,
    with_keys: keys: seda_io::TlsKeys,
    with_handshake_timeout: handshake_timeout: Duration,
    with_max_handshakes: max_handshakes: usize,
    with_inline: inline: bool,
});

impl TlsListen {
    /// A listener at `listen` with `keys` and the defaults.
    pub fn new(listen: SocketAddr, keys: seda_io::TlsKeys) -> Self {
        TlsListen {
            listen,
            keys,
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 1024,
            inline: false,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            root: PathBuf::from("."),
            cache_bytes: 200 << 20,
            path_cache_bytes: 16 << 20,
            max_cached_file: 1 << 20,
            thread_model: ThreadModel::PerStage,
            event_loops: std::thread::available_parallelism().map_or(2, |n| n.get()),
            io: IoBackend::Auto,
            handoff: Handoff::Inline,
            parse_threads: 2,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_pipelined: 16,
            limits: Limits::default(),
            revalidate: Duration::from_secs(2),
            index: "index.html".to_owned(),
            dotfiles: Dotfiles::Hide,
            residency_check: true,
            file_io: FileIo::Helper,
            header_cache: true,
            write_threshold: 4 << 20,
            retry_after_secs: 1,
            admin_listen: None,
            handlers: Vec::new(),
            access_log: None,
            proxies: Vec::new(),
            tls: None,
        }
    }
}

impl ServerConfig {
    /// Checks the configuration as [`Server::start`](super::Server::start) does
    /// (the root, the ranges, memory and open files), without starting anything:
    /// what `seda serve --check` runs.
    pub fn check(&self) -> Result<(), ServerError> {
        validate(self).map(|_| ())
    }
}

/// Why the server could not start or take a handler. `#[non_exhaustive]`: a match
/// needs a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The root directory is missing or unreadable.
    #[error("root directory {0}")]
    Root(String),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A proxy route is refused.
    #[error("invalid configuration: {0}")]
    Route(#[from] crate::proxy::RouteError),
    /// Binding or another socket operation failed (the message names the address).
    #[error(transparent)]
    Io(std::io::Error),
    /// The runtime refused a stage.
    #[error(transparent)]
    Runtime(#[from] seda::RuntimeError),
    /// `max_connections` does not fit the open-files limit beside what the server
    /// holds and keeps free; the budget says how many would.
    #[error("invalid configuration: {0}")]
    Descriptors(super::budget::DescriptorBudget),
}

impl From<crate::proxy::MountError> for ServerError {
    fn from(e: crate::proxy::MountError) -> Self {
        use crate::proxy::MountError;
        match e {
            MountError::Route(e) => ServerError::Route(e),
            MountError::Runtime(e) => ServerError::Runtime(e),
            MountError::Io(e) => ServerError::Io(e),
        }
    }
}

/// Checks the configuration; returns the canonical root.
pub(crate) fn validate(cfg: &ServerConfig) -> Result<PathBuf, ServerError> {
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
    if cfg.event_loops == 0 || cfg.event_loops > 1024 {
        return bad("event_loops must be in 1..=1024");
    }
    if cfg.parse_threads == 0 || cfg.parse_threads > 1024 {
        return bad("parse_threads must be in 1..=1024");
    }
    if cfg.max_connections == 0 {
        return bad("max_connections must be at least 1");
    }
    if cfg.max_pipelined == 0 || cfg.max_pipelined > 4096 {
        return bad("max_pipelined must be in 1..=4096");
    }
    if cfg.header_timeout.is_zero() || cfg.idle_timeout.is_zero() {
        return bad("timeouts must be positive");
    }
    if cfg.send_timeout < Duration::from_millis(10) {
        return bad("send_timeout must be at least 10 ms");
    }
    if cfg.index.is_empty() || cfg.index.contains('/') {
        return bad("index must be a plain file name");
    }
    if cfg.limits.max_headers == 0 || cfg.limits.max_headers > crate::proto::MAX_HEADERS {
        return bad("max_headers must be in 1..=128");
    }
    if cfg.write_threshold == 0 {
        return bad("write_threshold must be at least 1 byte");
    }
    if let Some(total) = memory_bytes()
        && cfg.cache_bytes > total
    {
        return Err(ServerError::Config(format!(
            "cache_bytes {} MiB exceeds this machine's memory ({} MiB)",
            cfg.cache_bytes >> 20,
            total >> 20
        )));
    }
    // The descriptors are checked once the listeners are bound (descriptors.rs).
    Ok(root)
}

/// Physical memory of the machine (`sysinfo(2)`, what `/proc/meminfo` calls
/// `MemTotal`).
fn memory_bytes() -> Option<u64> {
    let info = rustix::system::sysinfo();
    info.totalram.checked_mul(u64::from(info.mem_unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sysinfo(2)` gives what `/proc/meminfo` calls `MemTotal` (in KiB there).
    #[test]
    fn the_machines_memory_is_memtotal() {
        let info = std::fs::read_to_string("/proc/meminfo").unwrap();
        let line = info.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(memory_bytes(), Some(kib * 1024));
    }

    #[test]
    fn a_cache_larger_than_the_machine_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig::default()
            .with_root(dir.path().to_owned())
            .with_cache_bytes(memory_bytes().unwrap() + (1 << 20));
        let e = cfg.check().unwrap_err();
        assert!(
            matches!(&e, ServerError::Config(m) if m.contains("cache_bytes") && m.contains("exceeds this machine's memory")),
            "{e}"
        );
        let fits = ServerConfig::default()
            .with_root(dir.path().to_owned())
            .with_cache_bytes(1 << 20);
        fits.check().unwrap();
    }
}
