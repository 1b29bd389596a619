//! The Gnutella 0.6 wire protocol: handshake blocks, message framing and the
//! stream's deflate layer, payload rules, vendor messages. Nothing here knows of
//! stages or sockets; the stages and the load generator both build on it.

pub mod framing;
pub mod handshake;
pub mod message;
pub mod qrp;
pub mod vendor;
