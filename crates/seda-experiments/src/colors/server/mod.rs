//! The staged file server of the colors experiment: SFS's shape (libasync-mp thesis
//! 5.2) on seda's stages and seda-io's sockets.
//!
//! ```text
//! sock-io ──> ingress ──> recv ──> serve ──> seal ──> Writer (the socket)
//!  (conn)     (conn)     (mode)   (color 0)  (mode)
//! ```
//!
//! - `sock-io` (seda-io) reads the sockets; its events carry the connection's color.
//! - [`ingress`]: finds the connection's state and hands the event on under the
//!   [`Coloring`]'s color. It touches nothing but the connection table.
//! - [`recv`]: frames requests out of the byte stream, sends the hello (the session
//!   key), and stops reading a connection that has too many requests in flight.
//! - [`serve`]: the file system: the file and the lease table, state shared by every
//!   connection, always under color 0 (the thesis keeps such code in the default
//!   color).
//! - [`seal`]: encrypts and MACs each response with the connection's key and nonce
//!   counter (ChaCha20-Poly1305) and writes it: the CPU-bound step.
//!
//! With [`Coloring::Single`] every application event has color 0: libasync's default,
//! one handler at a time however many workers there are (the single-threaded
//! baseline). With [`Coloring::PerConnection`] `recv` and `seal` run under the
//! connection's color: different connections seal in parallel, while one
//! connection's events still run one at a time and in order.
//!
//! # Invariants
//! - A connection's [`ConnState`] (framing buffer, cipher, nonce counter, in-flight
//!   count) is touched only by `recv` and `seal`, which run under the same color for
//!   a given connection in both colorings; the file and lease table only by `serve`,
//!   under color 0. No lock is held around either: they sit in [`ColorGuarded`]
//!   cells, which never wait and count any overlap the colors failed to prevent
//!   ([`ServerStats::overlaps`] must stay 0).
//! - A connection's responses carry nonces 0, 1, 2, ... in request order: requests
//!   are framed in stream order by `recv`, pass `serve` (one color, FIFO) and are
//!   sealed under one color in enqueue order.
//! - Each connection has at most `max_in_flight` requests between `recv` and the
//!   end of `seal`; past that `recv` pauses reading it. So the queues, sized
//!   `max_connections * max_in_flight`, cannot fill from well-behaved load; an
//!   enqueue that fails anyway aborts that connection (counted in `shed`) rather
//!   than break its response order.

mod ingress;
mod recv;
mod seal;
mod serve;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use atomic_refcell::{AtomicRefCell, AtomicRefMut};
use bytes::Bytes;
use chacha20poly1305::ChaCha20Poly1305;
use parking_lot::RwLock;
use seda::{Color, Runtime, ThreadModel};
use seda_io::{ConnId, SocketConfig, SocketHandle, Sockets, Writer};
use serde::{Deserialize, Serialize};

use super::proto;

/// libasync's default color: every callback has it unless colored otherwise.
pub const DEFAULT_COLOR: Color = Color(0);

/// How the server colors its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coloring {
    /// Every application event has color 0 (libasync's default; the single-threaded
    /// baseline).
    Single,
    /// Per-connection work (framing, sealing) is colored by the connection.
    PerConnection,
}

impl Coloring {
    /// The color of `conn`'s per-connection events.
    pub fn of(self, conn: ConnId) -> Color {
        match self {
            Coloring::Single => DEFAULT_COLOR,
            // seda-io's ids start at 1, so no connection shares color 0.
            Coloring::PerConnection => Color(conn.0),
        }
    }

    /// `"single"` or `"per-connection"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coloring::Single => "single",
            Coloring::PerConnection => "per-connection",
        }
    }
}

/// Configuration of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// How events are colored.
    pub coloring: Coloring,
    /// Thread model of the application stages.
    pub thread_model: ThreadModel,
    /// Shared model: workers of the shared pool. Per-stage model: threads of `seal`
    /// (the other stages have one each). 1..=64.
    pub workers: usize,
    /// Bytes of the served file (kept in memory, as SFS's file in the buffer cache).
    /// 1..=1 GiB.
    pub file_len: usize,
    /// Seed of the file's content.
    pub seed: u64,
    /// Largest read a request may ask for, bytes. 1..=16 MiB.
    pub max_block: u32,
    /// Requests of one connection in flight before `recv` pauses reading it. 1..=4096.
    pub max_in_flight: u32,
    /// Most open connections. 1..=65,536.
    pub max_connections: usize,
    /// Events a handler takes per batch. 1..=1024.
    pub batch: usize,
    /// Socket event loops (threads). 1..=64.
    pub event_loops: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            coloring: Coloring::PerConnection,
            thread_model: ThreadModel::Shared,
            workers: 2,
            file_len: 64 << 20,
            seed: 1,
            max_block: 1 << 20,
            max_in_flight: 64,
            max_connections: 1024,
            batch: 4,
            event_loops: 1,
        }
    }
}

impl ServerConfig {
    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
        check(
            (1..=64).contains(&self.workers),
            format!("workers must be in 1..=64, got {}", self.workers),
        )?;
        check(
            (1..=1 << 30).contains(&self.file_len),
            format!("file_len must be in 1..=1 GiB, got {}", self.file_len),
        )?;
        check(
            (1..=16 << 20).contains(&self.max_block),
            format!("max_block must be in 1..=16 MiB, got {}", self.max_block),
        )?;
        check(
            (1..=4096).contains(&self.max_in_flight),
            format!(
                "max_in_flight must be in 1..=4096, got {}",
                self.max_in_flight
            ),
        )?;
        check(
            (1..=65_536).contains(&self.max_connections),
            format!(
                "max_connections must be in 1..=65536, got {}",
                self.max_connections
            ),
        )?;
        check(
            (1..=1024).contains(&self.batch),
            format!("batch must be in 1..=1024, got {}", self.batch),
        )?;
        check(
            (1..=64).contains(&self.event_loops),
            format!("event_loops must be in 1..=64, got {}", self.event_loops),
        )
    }

    fn queue_capacity(&self) -> usize {
        self.max_connections * self.max_in_flight as usize
    }
}

/// Counters of a running server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: u64,
    /// Requests framed.
    pub requests: u64,
    /// Responses sealed and handed to the socket.
    pub responses: u64,
    /// Plaintext bytes sealed.
    pub bytes_sealed: u64,
    /// Requests answered with `STATUS_BAD_REQUEST`.
    pub bad_requests: u64,
    /// Times a handler found state it needs held by another handler: colors failed.
    /// Must be 0.
    pub overlaps: u64,
    /// Responses whose connection was gone when they were written.
    pub undelivered: u64,
    /// Connections aborted because a queue refused one of their events.
    pub shed: u64,
    /// Times `recv` paused reading a connection at `max_in_flight`.
    pub pauses: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    responses: AtomicU64,
    bytes_sealed: AtomicU64,
    bad_requests: AtomicU64,
    overlaps: AtomicU64,
    undelivered: AtomicU64,
    shed: AtomicU64,
    pauses: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ServerStats {
        let g = |a: &AtomicU64| a.load(Relaxed);
        ServerStats {
            connections: g(&self.connections),
            requests: g(&self.requests),
            responses: g(&self.responses),
            bytes_sealed: g(&self.bytes_sealed),
            bad_requests: g(&self.bad_requests),
            overlaps: g(&self.overlaps),
            undelivered: g(&self.undelivered),
            shed: g(&self.shed),
            pauses: g(&self.pauses),
        }
    }
}

/// A handler found a [`ColorGuarded`] cell held by another handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap;

/// State that the colors alone guard: a cell whose borrow flag is atomic. Entering
/// never waits (this is not a lock and serialises nothing); it only *detects* a
/// second handler entering while the first is inside, which colors rule out.
#[derive(Debug, Default)]
pub struct ColorGuarded<T> {
    cell: AtomicRefCell<T>,
}

impl<T> ColorGuarded<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        ColorGuarded {
            cell: AtomicRefCell::new(value),
        }
    }

    /// Exclusive access, or [`Overlap`] if another handler is inside now.
    pub fn enter(&self) -> Result<AtomicRefMut<'_, T>, Overlap> {
        self.cell.try_borrow_mut().map_err(|_| Overlap)
    }
}

/// A connection's session: its cipher and the nonce of its next response.
struct Session {
    cipher: ChaCha20Poly1305,
    next_nonce: u64,
}

/// Everything the server keeps per connection (see the module's invariants).
#[derive(Default)]
struct ConnState {
    /// Set by `recv` when the connection is announced.
    session: Option<Session>,
    /// Bytes received and not yet framed; `framed` of them are consumed.
    input: Vec<u8>,
    framed: usize,
    /// Requests framed whose response is not sealed yet.
    in_flight: u32,
    /// `recv` paused reading at `max_in_flight`; `seal` resumes it.
    paused: bool,
    /// A bad request was seen: no more requests are framed.
    closing: bool,
}

/// One connection, as the stages pass it along.
struct Conn {
    id: ConnId,
    state: ColorGuarded<ConnState>,
}

/// What every stage of one server shares.
struct Shared {
    cfg: ServerConfig,
    writer: Writer,
    counters: Counters,
}

impl Shared {
    /// Aborts `conn` because a queue refused its event: dropping the event silently
    /// would break the connection's request/response pairing.
    fn shed(&self, conn: ConnId, stage: &str) {
        self.counters.shed.fetch_add(1, Relaxed);
        tracing::warn!(%conn, stage, "queue refused an event; aborting the connection");
        self.writer.abort(conn);
    }

    fn overlap(&self, conn: ConnId, what: &str) {
        self.counters.overlaps.fetch_add(1, Relaxed);
        tracing::error!(%conn, what, "state entered by two handlers at once");
        self.writer.abort(conn);
    }
}

/// Open connections, for `ingress` to find a connection's state. A read-mostly
/// index: its lock is held only to clone an `Arc`, never while state is used.
type ConnTable = RwLock<HashMap<ConnId, Arc<Conn>>>;

/// A running server. Dropping it stops it.
pub struct ColorsServer {
    rt: Runtime,
    sockets: Option<SocketHandle>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ColorsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColorsServer")
            .field("addr", &self.local_addr())
            .field("coloring", &self.shared.cfg.coloring)
            .finish_non_exhaustive()
    }
}

impl ColorsServer {
    /// Builds the file, the stages and the sockets, and starts them.
    pub fn start(cfg: ServerConfig) -> io::Result<ColorsServer> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let file = Bytes::from(proto::file_content(cfg.file_len, cfg.seed));
        let rt = Runtime::builder()
            .name("colors")
            .thread_model(cfg.thread_model)
            .shared_workers(cfg.workers)
            .build();
        let mut sock_cfg = SocketConfig::new(cfg.listen);
        sock_cfg.event_loops = cfg.event_loops;
        sock_cfg.max_connections = cfg.max_connections;
        let bound = Sockets::bind(sock_cfg)?;
        let shared = Arc::new(Shared {
            writer: bound.writer(),
            counters: Counters::default(),
            cfg,
        });
        let table: Arc<ConnTable> = Arc::default();
        let err = |e: seda::RuntimeError| io::Error::other(e.to_string());
        let seal = seal::build(&rt, &shared).map_err(err)?;
        let serve = serve::build(&rt, &shared, file, seal).map_err(err)?;
        let recv = recv::build(&rt, &shared, serve).map_err(err)?;
        let ingress = ingress::build(&rt, &shared, table, recv).map_err(err)?;
        let sockets = bound.start(&rt, ingress)?;
        rt.start().map_err(err)?;
        Ok(ColorsServer {
            rt,
            sockets: Some(sockets),
            shared,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.sockets
            .as_ref()
            .map_or(self.shared.cfg.listen, |s| s.local_addr())
    }

    /// Counters since start.
    pub fn stats(&self) -> ServerStats {
        self.shared.counters.snapshot()
    }

    /// Stops the sockets and the runtime; returns the final counters.
    pub fn stop(mut self) -> ServerStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.sockets.take() {
            s.stop();
            let report = self.rt.shutdown(Duration::from_secs(5));
            if !report.drained {
                tracing::warn!(?report, "colors server did not drain");
            }
        }
    }
}

impl Drop for ColorsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Builds a stage of the server with the settings all four share.
fn stage_builder<'r, E: Send + 'static>(
    rt: &'r Runtime,
    shared: &Shared,
    name: &str,
    handler: impl seda::EventHandler<E>,
    threads: usize,
) -> seda::StageBuilder<'r, E> {
    let b = rt
        .stage(name, handler)
        .capacity(shared.cfg.queue_capacity())
        .batch(shared.cfg.batch);
    match shared.cfg.thread_model {
        ThreadModel::PerStage => b.fixed_threads(threads),
        ThreadModel::Shared => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_guarded_detects_a_second_entry_and_never_waits() {
        let cell = Arc::new(ColorGuarded::new(0u64));
        let mut inside = cell.enter().unwrap();
        *inside += 1;
        // Another thread entering meanwhile is told at once.
        let c = cell.clone();
        let other = std::thread::spawn(move || c.enter().map(|_| ()));
        assert_eq!(other.join().unwrap(), Err(Overlap));
        drop(inside);
        assert_eq!(*cell.enter().unwrap(), 1);
    }

    #[test]
    fn per_connection_colors_never_share_the_default_color() {
        assert_eq!(Coloring::Single.of(ConnId(7)), DEFAULT_COLOR);
        assert_eq!(Coloring::PerConnection.of(ConnId(7)), Color(7));
        assert_ne!(Coloring::PerConnection.of(ConnId(1)), DEFAULT_COLOR);
    }

    #[test]
    fn config_ranges_are_checked() {
        assert!(ServerConfig::default().validate().is_ok());
        let bad = ServerConfig {
            workers: 0,
            ..ServerConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("workers"));
        let bad = ServerConfig {
            max_block: 0,
            ..ServerConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("max_block"));
    }
}
