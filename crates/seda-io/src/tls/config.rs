//! The TLS layer's configuration (a leaf).

use std::time::Duration;

/// Configuration of the TLS layer. `#[non_exhaustive]`: start from `Default` and
/// use the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsConfig {
    /// A handshake not finished in this time is aborted. Default 10 s. At least
    /// 10 ms.
    pub handshake_timeout: Duration,
    /// Most handshakes in progress at once. Default 1,024. At least 1.
    pub max_handshakes: usize,
    /// Entries of the session cache (resumption by session id). Default 8,192.
    pub sessions: usize,
    /// Name of the TLS stage. Default `tls`.
    pub stage_name: String,
    /// A thread-pool domain the stage joins (see the module docs). Default none:
    /// a pool of its own.
    pub domain: Option<seda::Domain>,
    /// Most threads of the stage's own pool (without a domain). Default 2.
    pub threads: usize,
}

crate::setters::setters!(TlsConfig {
    with_handshake_timeout: handshake_timeout: Duration,
    with_max_handshakes: max_handshakes: usize,
    with_sessions: sessions: usize,
    with_stage_name: stage_name: String,
    with_domain: domain: Option<seda::Domain>,
    with_threads: threads: usize,
});

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 1024,
            sessions: 8192,
            stage_name: "tls".to_owned(),
            domain: None,
            threads: 2,
        }
    }
}
