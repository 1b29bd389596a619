//! A client's address as a connection keeps it (a leaf).

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

/// A client's address in 16 bytes (a `SocketAddr` takes 32): IPv4 inline, IPv6
/// boxed.
#[derive(Debug)]
pub(super) enum Peer {
    V4(SocketAddrV4),
    V6(Box<SocketAddrV6>),
}

impl Peer {
    pub(super) fn new(addr: SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(a) => Peer::V4(a),
            SocketAddr::V6(a) => Peer::V6(Box::new(a)),
        }
    }

    pub(super) fn get(&self) -> SocketAddr {
        match self {
            Peer::V4(a) => SocketAddr::V4(*a),
            Peer::V6(a) => SocketAddr::V6(**a),
        }
    }
}
