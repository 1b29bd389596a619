//! The TLS layer's counters (a leaf: every file of the layer counts, none of them is
//! imported here).

use std::sync::atomic::AtomicU64;

/// See [`TlsStats`](super::TlsStats) for what each counts.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) handshakes: AtomicU64,
    pub(crate) resumed: AtomicU64,
    pub(crate) tls13: AtomicU64,
    pub(crate) handshake_failures: AtomicU64,
    pub(crate) not_tls: AtomicU64,
    pub(crate) unknown_names: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) handshakes_refused: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) protocol_errors: AtomicU64,
    pub(crate) bytes_decrypted: AtomicU64,
    pub(crate) bytes_encrypted: AtomicU64,
    pub(crate) app_stalls: AtomicU64,
    pub(crate) undelivered: AtomicU64,
    pub(crate) reloads: AtomicU64,
}
