//! Certificates and keys, and the rustls configuration built from them: loaded from
//! PEM files, checked (the key signs for the certificate), replaceable while
//! connections run ([`TlsAcceptor::reload`]) with the session cache and the ticket
//! keys kept, so clients resume across a reload.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;

use super::counters::Counters;

/// A certificate chain and its private key, loaded and checked.
#[derive(Clone)]
pub struct TlsKeys {
    key: Arc<CertifiedKey>,
}

impl fmt::Debug for TlsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsKeys")
            .field("chain", &self.key.cert.len())
            .finish_non_exhaustive()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl TlsKeys {
    /// Loads a PEM certificate chain (leaf first, then intermediates) and a PEM
    /// private key (PKCS#8, PKCS#1 or SEC1; RSA, ECDSA or Ed25519), and checks that
    /// the key belongs to the leaf. Errors name the file and what is wrong.
    pub fn load(cert: &Path, key: &Path) -> io::Result<TlsKeys> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| invalid(format!("certificate {}: {e}", cert.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(format!("certificate {}: {e}", cert.display())))?;
        if chain.is_empty() {
            return Err(invalid(format!(
                "certificate {}: no PEM certificate in it",
                cert.display()
            )));
        }
        ParsedCertificate::try_from(&chain[0])
            .map_err(|e| invalid(format!("certificate {}: {e}", cert.display())))?;
        let der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| invalid(format!("key {}: {e}", key.display())))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| invalid(format!("key {}: {e}", key.display())))?;
        let certified = CertifiedKey::new(chain, signer);
        certified.keys_match().map_err(|e| {
            invalid(format!(
                "key {} does not match certificate {}: {e}",
                key.display(),
                cert.display()
            ))
        })?;
        Ok(TlsKeys {
            key: Arc::new(certified),
        })
    }

    /// Whether the leaf certificate is valid for the DNS name `name`.
    fn serves(&self, name: &str) -> bool {
        let Ok(server_name) = ServerName::try_from(name) else {
            return false;
        };
        self.key
            .end_entity_cert()
            .ok()
            .and_then(|c| ParsedCertificate::try_from(c).ok())
            .is_some_and(|c| rustls::client::verify_server_name(&c, &server_name).is_ok())
    }
}

/// Picks the certificate: the one there is, for a client that sends no name (an IP
/// address) or a name the certificate is valid for; none (the handshake fails, the
/// connection closes) for any other name.
#[derive(Debug)]
struct Resolver {
    keys: TlsKeys,
    counters: Arc<Counters>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            Some(name) if !self.keys.serves(name) => {
                self.counters.unknown_names.fetch_add(1, Relaxed);
                None
            }
            _ => Some(Arc::clone(&self.keys.key)),
        }
    }
}

/// The rustls server configuration in force, and what survives a reload.
#[derive(Clone)]
pub(crate) struct TlsAcceptor {
    current: Arc<RwLock<Arc<rustls::ServerConfig>>>,
    sessions: Arc<dyn StoresServerSessions>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
    counters: Arc<Counters>,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor").finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// HTTP/1.1 over TLS 1.2 and 1.3 (ALPN `http/1.1`), a session cache of
    /// `sessions` entries and stateless tickets for resumption.
    pub(crate) fn new(
        keys: &TlsKeys,
        sessions: usize,
        counters: Arc<Counters>,
    ) -> io::Result<TlsAcceptor> {
        let ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| io::Error::other(format!("TLS session tickets: {e}")))?;
        let sessions: Arc<dyn StoresServerSessions> =
            rustls::server::ServerSessionMemoryCache::new(sessions.max(1));
        let acceptor = TlsAcceptor {
            current: Arc::new(RwLock::new(Arc::new(build(
                keys, &sessions, &ticketer, &counters,
            )?))),
            sessions,
            ticketer,
            counters,
        };
        Ok(acceptor)
    }

    /// The configuration for a new connection.
    pub(crate) fn config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.current.read())
    }

    /// New connections use `keys` from now on; open ones keep theirs. Sessions and
    /// tickets issued before stay valid.
    pub(crate) fn reload(&self, keys: &TlsKeys) -> io::Result<()> {
        let cfg = build(keys, &self.sessions, &self.ticketer, &self.counters)?;
        *self.current.write() = Arc::new(cfg);
        self.counters.reloads.fetch_add(1, Relaxed);
        Ok(())
    }
}

fn build(
    keys: &TlsKeys,
    sessions: &Arc<dyn StoresServerSessions>,
    ticketer: &Arc<dyn rustls::server::ProducesTickets>,
    counters: &Arc<Counters>,
) -> io::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::other(format!("TLS configuration: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver {
            keys: keys.clone(),
            counters: Arc::clone(counters),
        }));
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.session_storage = Arc::clone(sessions);
    cfg.ticketer = Arc::clone(ticketer);
    Ok(cfg)
}
