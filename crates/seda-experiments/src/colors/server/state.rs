//! The state the sealing server's stages share: the connection table, each
//! connection's session and framing state (entered only under its color, checked by
//! [`ColorGuarded`]), and the stage builder every stage uses. A leaf: every stage
//! imports it, it imports no stage.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ExperimentError;
use atomic_refcell::{AtomicRefCell, AtomicRefMut};
use chacha20poly1305::ChaCha20Poly1305;
use parking_lot::RwLock;
use seda::{Color, Runtime, ThreadModel};
use seda_io::{ConnId, IoBackend, Writer};
use serde::{Deserialize, Serialize};

/// libasync's default color: every callback has it unless colored otherwise.
pub const DEFAULT_COLOR: Color = Color::new(0);

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
            Coloring::PerConnection => Color::new(conn.0),
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
    /// The event loops' system interface. Default `Auto` (io_uring where the
    /// kernel offers it).
    pub io: IoBackend,
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
            io: IoBackend::Auto,
        }
    }
}

impl ServerConfig {
    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        let check = |ok: bool, what: String| {
            if ok {
                Ok(())
            } else {
                Err(ExperimentError::config(what))
            }
        };
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

    pub(super) fn queue_capacity(&self) -> usize {
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
pub(super) struct Counters {
    pub(super) connections: AtomicU64,
    pub(super) requests: AtomicU64,
    pub(super) responses: AtomicU64,
    pub(super) bytes_sealed: AtomicU64,
    pub(super) bad_requests: AtomicU64,
    pub(super) overlaps: AtomicU64,
    pub(super) undelivered: AtomicU64,
    pub(super) shed: AtomicU64,
    pub(super) pauses: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> ServerStats {
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
    pub(super) cell: AtomicRefCell<T>,
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
pub(super) struct Session {
    pub(super) cipher: ChaCha20Poly1305,
    pub(super) next_nonce: u64,
}

/// Everything the server keeps per connection (see the module's invariants).
#[derive(Default)]
pub(super) struct ConnState {
    /// Set by `recv` when the connection is announced.
    pub(super) session: Option<Session>,
    /// Bytes received and not yet framed; `framed` of them are consumed.
    pub(super) input: Vec<u8>,
    pub(super) framed: usize,
    /// Requests framed whose response is not sealed yet.
    pub(super) in_flight: u32,
    /// `recv` paused reading at `max_in_flight`; `seal` resumes it.
    pub(super) paused: bool,
    /// A bad request was seen: no more requests are framed.
    pub(super) closing: bool,
}

/// One connection, as the stages pass it along.
pub(super) struct Conn {
    pub(super) id: ConnId,
    pub(super) state: ColorGuarded<ConnState>,
}

/// What every stage of one server shares.
pub(super) struct Shared {
    pub(super) cfg: ServerConfig,
    pub(super) writer: Writer,
    pub(super) counters: Counters,
}

impl Shared {
    /// Aborts `conn` because a queue refused its event: dropping the event silently
    /// would break the connection's request/response pairing.
    pub(super) fn shed(&self, conn: ConnId, stage: &str) {
        self.counters.shed.fetch_add(1, Relaxed);
        tracing::warn!(%conn, stage, "queue refused an event; aborting the connection");
        self.writer.abort(conn);
    }

    pub(super) fn overlap(&self, conn: ConnId, what: &str) {
        self.counters.overlaps.fetch_add(1, Relaxed);
        tracing::error!(%conn, what, "state entered by two handlers at once");
        self.writer.abort(conn);
    }
}

/// Open connections, for `ingress` to find a connection's state. A read-mostly
/// index: its lock is held only to clone an `Arc`, never while state is used.
pub(super) type ConnTable = RwLock<HashMap<ConnId, Arc<Conn>>>;

/// Builds a stage of the server with the settings all four share.
pub(super) fn stage_builder<'r, E: Send + 'static>(
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
        // Shared: the runtime's workers, nothing to size.
        _ => b,
    }
}
