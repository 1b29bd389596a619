//! What the TLS stage, the writers and the handle share.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::config::TlsConfig;
use super::counters::Counters;
use super::keys::TlsAcceptor;
use super::session::{self, Table};
use crate::socket::Writer;

/// What the stage, the writers and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: TlsConfig,
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) table: Table,
    pub(crate) counters: Arc<Counters>,
    pub(crate) in_progress: AtomicUsize,
    /// The TLS listener's socket writer (ciphertext).
    pub(crate) raw: Writer,
}

impl Shared {
    /// The connection leaves its handshake (done, failed, or cut): one fewer in
    /// progress. Call before changing a handshaking session's phase.
    pub(crate) fn end_handshake(&self, s: &mut session::Session) {
        if let session::Phase::Handshaking(_) = s.phase {
            self.in_progress.fetch_sub(1, Relaxed);
        }
    }
}
