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
mod state;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use seda::Runtime;
use seda_io::{IoBackend, SocketConfig, SocketHandle, Sockets};

use super::proto;

pub use state::{ColorGuarded, Coloring, DEFAULT_COLOR, Overlap, ServerConfig, ServerStats};
use state::{ConnTable, Counters, Shared};

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
        sock_cfg.backend = cfg.io;
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

    /// The socket backend the event loops run (`Auto` resolved).
    pub fn backend(&self) -> IoBackend {
        self.sockets
            .as_ref()
            .map_or(self.shared.cfg.io, |s| s.backend())
    }

    /// Counters since start.
    pub fn stats(&self) -> ServerStats {
        self.shared.counters.snapshot()
    }

    /// The runtime's statistics now (queue lengths, per stage).
    pub fn snapshot(&self) -> seda::RuntimeSnapshot {
        self.rt.snapshot()
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

#[cfg(test)]
mod tests {
    use seda::Color;
    use seda_io::ConnId;

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
        assert_eq!(Coloring::PerConnection.of(ConnId(7)), Color::new(7));
        assert_ne!(Coloring::PerConnection.of(ConnId(1)), DEFAULT_COLOR);
    }

    #[test]
    fn config_ranges_are_checked() {
        assert!(ServerConfig::default().validate().is_ok());
        let bad = ServerConfig {
            workers: 0,
            ..ServerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("workers"));
        let bad = ServerConfig {
            max_block: 0,
            ..ServerConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("max_block")
        );
    }
}
