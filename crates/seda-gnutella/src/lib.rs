//! # seda-gnutella: a Gnutella 0.6 ultrapeer, SEDA's packet router (SOSP'01 5.2)
//!
//! Three stages on the [`seda`] runtime, over [`seda_io`]'s socket stages:
//! - **GnutellaServer** ([`SERVER_STAGE`]): the 0.6 three-way handshake (as an
//!   ultrapeer, `deflate` offered and accepted both ways), admission (ultrapeer and
//!   leaf slots, a handshake rate limit per address and per /24), message framing,
//!   the payload rules of today's servents, a peer's Bye;
//! - **GnutellaRouter** ([`ROUTER_STAGE`]): broadcast of queries (and, without the
//!   pong cache, pings) with TTL-1/Hops+1 and duplicate suppression, reverse-path
//!   routing of pongs and query hits, push routing by servent id, query routing
//!   tables (QRP: last-hop filtering to leaves and between ultrapeers, the union of
//!   our leaves' tables sent to ultrapeers), the 0.6 pong cache, our own pongs and
//!   link messages, slow-peer protection with value-ordered dropping (5.2.2), and
//!   Fig. 14's artificial query cost;
//! - **GnutellaCatcher** ([`CATCHER_STAGE`]): the host cache; keeps at least
//!   `min_outgoing` outgoing connections, with backoff between reconnects.
//!
//! Each stage owns its state and talks to the others by events (the types are in
//! one leaf module, so no stage imports another): the server owns the connections'
//! handshake and framing state, the router the routing tables and every
//! established connection's output, the catcher the host cache and the dials.
//!
//! [`proto`] is the wire protocol on its own; [`routing`] the routing decisions and
//! bounded tables (also used by the stage-less baseline of `seda experiment
//! gnutella-throughput`). The simulated peers that load it (`seda load gnutella`)
//! are in `seda-load`, with a codec of their own.
//!
//! ```no_run
//! use seda::Runtime;
//! use seda_gnutella::{Gnutella, RouterConfig};
//!
//! let rt = Runtime::builder().build();
//! let router = Gnutella::start(&rt, RouterConfig::default()).unwrap();
//! rt.start().unwrap();
//! println!("routing on {}", router.local_addr());
//! ```
#![forbid(unsafe_code)]

mod catcher;
mod config;
mod error;
mod events;
mod flow;
mod gnutella;
mod outq;
mod router;
mod server;
mod setters;
mod stats;

pub mod proto;
pub mod routing;

pub use crate::config::{
    ConfigError, HandshakeLimit, PongCacheConfig, QrpConfig, RouterAdmission, RouterConfig,
};
pub use crate::error::Error;
pub use crate::events::{CatcherEvent, Messages, PeerInfo, Role, RouterEvent};
pub use crate::gnutella::{CATCHER_STAGE, Gnutella, ROUTER_STAGE, SERVER_STAGE, StatsHandle};
pub use crate::stats::{GnutellaStats, PeerStats, PongCacheStats, QrpStats};
