//! TLS (rustls, ring backend) above the socket stages, so it works the same over
//! any socket backend.
//!
//! ```text
//!  sock-io (TLS listener) ──raw SocketEvent──> tls ──decrypted SocketEvent──> application
//!  application ──TlsConnWriter (encrypts on the caller's thread)──> socket
//! ```
//!
//! [`TlsSockets::bind`] binds a listener of its own; [`BoundTls::start`] registers
//! the `tls` stage between its socket loops and the application's stage. The
//! application sees the same events as from a plain listener (`Accepted` once the
//! handshake completed, `Data` decrypted, `ReadClosed` on the peer's `close_notify`
//! or end of file, `Closed` last) and writes through [`TlsConnWriter`], which has
//! the operations of a plain connection's writer.
//!
//! HTTP/1.1 over TLS 1.2 and 1.3, ALPN `http/1.1` (a client that offers only other
//! protocols is refused), session resumption by a session cache and by stateless
//! tickets (both survive [`TlsHandle::reload`]).
//!
//! # Where the TLS work runs
//! With [`TlsConfig::domain`] the stage joins the application's thread-pool domain:
//! when its queue is empty the socket loop runs it inline (decryption and
//! handshakes on the loop thread, no handoff). Without, it has a pool of its own
//! behind a real queue: a flood of handshakes waits there and never delays the
//! loops. `docs/results.md` has both measured.
//!
//! # Bounds
//! - Handshakes in progress are connections of the listener and count against its
//!   [`SocketConfig::max_connections`](crate::SocketConfig::max_connections); at
//!   most [`TlsConfig::max_handshakes`] run at once (more are closed at accept,
//!   counted `handshakes_refused`).
//! - A handshake not finished within [`TlsConfig::handshake_timeout`] is aborted
//!   (`handshake_timeouts`).
//! - Bytes that are not TLS (plain HTTP sent to the TLS port), a truncated or bad
//!   `ClientHello`, and a server name the certificate does not cover end in a clean
//!   close (after rustls's alert, when it has one); the application never hears of
//!   the connection.
//! - A file is encrypted a window ([`FILE_WINDOW`](session::FILE_WINDOW)) at a time
//!   as the peer takes it, never read whole into memory.
//!
//! # Invariants
//! - Every connection the application heard `Accepted` for gets exactly one
//!   `Closed`, last; no other connection reaches it.
//! - `handshakes_in_progress` = connections in the table still handshaking.

mod config;
mod counters;
mod keys;
mod session;
mod shared;
mod stage;
mod writer;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use seda::{Runtime, Sink, ThreadModel};
use serde::{Deserialize, Serialize};

pub use config::TlsConfig;
pub use keys::TlsKeys;
pub use writer::{TlsConnWriter, TlsWriter};

use counters::Counters;
use keys::TlsAcceptor;
use session::Table;
use shared::Shared;
use stage::TlsStage;

use crate::socket::{
    BoundSockets, ConnId, ConnState, SocketConfig, SocketEvent, SocketHandle, SocketStats, Sockets,
};

/// Counters of the TLS layer since start.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct TlsStats {
    /// Handshakes completed.
    pub handshakes: u64,
    /// Of which resumed a session (cache or ticket).
    pub resumed: u64,
    /// Of which TLS 1.3 (the rest 1.2).
    pub tls13: u64,
    /// Handshakes running now.
    pub handshakes_in_progress: usize,
    /// Handshakes that failed (a bad or truncated `ClientHello`, no common
    /// protocol or cipher, an unknown server name).
    pub handshake_failures: u64,
    /// Connections whose first bytes were not TLS (e.g. plain HTTP).
    pub not_tls: u64,
    /// `ClientHello`s naming a server the certificate does not cover.
    pub unknown_names: u64,
    /// Handshakes aborted by the handshake timeout.
    pub handshake_timeouts: u64,
    /// Connections closed at accept because `max_handshakes` were running.
    pub handshakes_refused: u64,
    /// Connections closed by the peer before their handshake finished.
    pub abandoned: u64,
    /// Established connections that failed (a bad record, a decryption error).
    pub protocol_errors: u64,
    /// Bytes read from the sockets (ciphertext).
    pub bytes_decrypted: u64,
    /// Bytes written to the sockets (ciphertext).
    pub bytes_encrypted: u64,
    /// Times the application's stage refused an event (held and retried).
    pub app_stalls: u64,
    /// Events the application's stage could not take at all (its shutdown).
    pub undelivered: u64,
    /// Certificate reloads.
    pub reloads: u64,
}

/// Entry point of the TLS layer.
#[derive(Debug)]
pub struct TlsSockets;

impl TlsSockets {
    /// Binds the TLS listener (`sock`: its socket stages' configuration; give its
    /// stage a name of its own) with `keys`.
    ///
    /// Errors: an invalid configuration, a bind failure (naming the address).
    pub fn bind(sock: SocketConfig, cfg: TlsConfig, keys: &TlsKeys) -> io::Result<BoundTls> {
        if cfg.max_handshakes == 0 || cfg.handshake_timeout < Duration::from_millis(10) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS: max_handshakes must be at least 1 and handshake_timeout at least 10 ms",
            ));
        }
        let raw = Sockets::bind(sock)?;
        let counters = Arc::new(Counters::default());
        let acceptor = TlsAcceptor::new(keys, cfg.sessions, Arc::clone(&counters))?;
        let shared = Arc::new(Shared {
            cfg,
            acceptor,
            table: Table::new(),
            counters,
            in_progress: AtomicUsize::new(0),
            raw: raw.writer(),
        });
        Ok(BoundTls { raw, shared })
    }
}

/// A TLS listener bound by [`TlsSockets::bind`], not yet served.
#[derive(Debug)]
pub struct BoundTls {
    raw: BoundSockets,
    shared: Arc<Shared>,
}

impl BoundTls {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.raw.local_addr()
    }

    /// A writer for the connections this listener will accept.
    pub fn writer(&self) -> TlsWriter {
        TlsWriter {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Registers the TLS stage in `rt`, delivering decrypted events to `app`, and
    /// starts the listener's socket loops.
    ///
    /// Errors: the runtime refusing a stage (e.g. a duplicate name).
    pub fn start(self, rt: &Runtime, app: Sink<SocketEvent>) -> io::Result<TlsHandle> {
        self.start_with(rt, app, None)
    }

    /// As [`BoundTls::start`], and each connection gets the state `attach` makes
    /// for it once its handshake is done (`None`: no state), before its `Accepted`;
    /// every event of the connection then carries it, `Closed` last, as with
    /// [`crate::BoundSockets::start_attached`] (the same invariants). `attach` runs
    /// on the TLS stage's thread: it must be quick and must not block.
    ///
    /// Errors: as [`BoundTls::start`].
    pub fn start_attached(
        self,
        rt: &Runtime,
        app: Sink<SocketEvent>,
        attach: impl Fn(ConnId, SocketAddr) -> Option<ConnState> + Send + Sync + 'static,
    ) -> io::Result<TlsHandle> {
        self.start_with(rt, app, Some(stage::Attach(Box::new(attach))))
    }

    fn start_with(
        self,
        rt: &Runtime,
        app: Sink<SocketEvent>,
        attach: Option<stage::Attach>,
    ) -> io::Result<TlsHandle> {
        let BoundTls { raw, shared } = self;
        let cfg = &shared.cfg;
        let (me, declared) = rt
            .declare::<SocketEvent>(&cfg.stage_name)
            .map_err(io::Error::other)?;
        let stage = TlsStage {
            shared: Arc::clone(&shared),
            app,
            me: me.clone(),
            attach,
        };
        let mut builder = declared.handler(stage).capacity(16_384).batch(64);
        builder = match &cfg.domain {
            Some(d) => builder.domain(d).threads(1, cfg.threads.max(1)),
            None => builder
                .thread_model(ThreadModel::PerStage)
                .threads(1, cfg.threads.max(1)),
        };
        builder.build().map_err(io::Error::other)?;
        let sockets = raw.start(rt, me)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (sh, st) = (Arc::clone(&shared), Arc::clone(&stop));
        let period = (shared.cfg.handshake_timeout / 4)
            .clamp(Duration::from_millis(5), Duration::from_secs(1));
        let sweeper = std::thread::Builder::new()
            .name("seda-tls-sweep".into())
            .spawn(move || {
                while !st.load(Relaxed) {
                    std::thread::park_timeout(period);
                    stage::sweep(&sh, Instant::now());
                }
            })?;
        Ok(TlsHandle {
            sockets,
            shared,
            stop,
            sweeper: Some(sweeper),
        })
    }
}

/// The running TLS listener. Dropping it stops it.
#[derive(Debug)]
pub struct TlsHandle {
    sockets: SocketHandle,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    sweeper: Option<JoinHandle<()>>,
}

impl TlsHandle {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.sockets.local_addr()
    }

    /// The socket backend the listener's loops run on (TLS works the same above
    /// either).
    pub fn backend(&self) -> crate::socket::IoBackend {
        self.sockets.backend()
    }

    /// A writer for the listener's connections.
    pub fn writer(&self) -> TlsWriter {
        TlsWriter {
            shared: Arc::clone(&self.shared),
        }
    }

    /// New connections use `keys` from now on (open ones keep theirs); sessions and
    /// tickets issued before stay valid.
    pub fn reload(&self, keys: &TlsKeys) -> io::Result<()> {
        self.shared.acceptor.reload(keys)
    }

    /// Counters of the TLS layer.
    pub fn stats(&self) -> TlsStats {
        let c = &self.shared.counters;
        TlsStats {
            handshakes: c.handshakes.load(Relaxed),
            resumed: c.resumed.load(Relaxed),
            tls13: c.tls13.load(Relaxed),
            handshakes_in_progress: self.shared.in_progress.load(Relaxed),
            handshake_failures: c.handshake_failures.load(Relaxed),
            not_tls: c.not_tls.load(Relaxed),
            unknown_names: c.unknown_names.load(Relaxed),
            handshake_timeouts: c.handshake_timeouts.load(Relaxed),
            handshakes_refused: c.handshakes_refused.load(Relaxed),
            abandoned: c.abandoned.load(Relaxed),
            protocol_errors: c.protocol_errors.load(Relaxed),
            bytes_decrypted: c.bytes_decrypted.load(Relaxed),
            bytes_encrypted: c.bytes_encrypted.load(Relaxed),
            app_stalls: c.app_stalls.load(Relaxed),
            undelivered: c.undelivered.load(Relaxed),
            reloads: c.reloads.load(Relaxed),
        }
    }

    /// Counters of the listener's socket stages.
    pub fn socket_stats(&self) -> SocketStats {
        self.sockets.stats()
    }

    /// Connections open now (handshaking or established).
    pub fn open_connections(&self) -> usize {
        self.sockets.open_connections()
    }

    /// As [`SocketHandle::set_max_connections`].
    pub fn set_max_connections(&self, n: usize) {
        self.sockets.set_max_connections(n);
    }

    /// Stops the listener: as [`SocketHandle::stop`].
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        if let Some(s) = &self.sweeper {
            s.thread().unpark();
        }
        self.sockets.stop();
    }
}

impl Drop for TlsHandle {
    fn drop(&mut self) {
        self.stop();
        if let Some(s) = self.sweeper.take() {
            let _ = s.join();
        }
    }
}
