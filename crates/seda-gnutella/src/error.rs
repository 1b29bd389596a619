//! The router's errors, a leaf: a setting out of range ([`ConfigError`], from
//! [`RouterConfig::validate`](crate::RouterConfig::validate) and
//! [`RoutingConfig::validate`](crate::routing::RoutingConfig::validate)) and a
//! router that could not start ([`Error`], from
//! [`Gnutella::start`](crate::Gnutella::start)).

use std::io;
use std::net::SocketAddr;

/// A setting of [`RouterConfig`](crate::RouterConfig) (or of its
/// [`RoutingConfig`](crate::routing::RoutingConfig)) out of range: which one, and
/// the rule it breaks (the error's text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rule}")]
pub struct ConfigError {
    setting: &'static str,
    rule: &'static str,
}

impl ConfigError {
    pub(crate) fn new(setting: &'static str, rule: &'static str) -> Self {
        ConfigError { setting, rule }
    }

    /// The setting, as the field's path: `max_peers`, `qrp.table_bits`,
    /// `routing.max_ttl`, ...
    pub fn setting(&self) -> &'static str {
        self.setting
    }
}

/// Why a router could not start. `#[non_exhaustive]`: a match needs a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The runtime refused one of the router's stages.
    #[error("cannot register a stage: {0}")]
    Stage(#[from] seda::RuntimeError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address of [`RouterConfig::listen`](crate::RouterConfig::listen).
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The socket stages could not start.
    #[error("cannot start the socket stages: {0}")]
    Sockets(#[source] io::Error),
}
