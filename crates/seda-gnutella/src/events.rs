//! The events the three stages send each other, and what they carry.
//!
//! A leaf module: it imports no stage, so every stage imports it and no stage
//! imports another. Who sends what (SEDA 5.2.1's graph):
//! ```text
//! sock-io --SocketEvent--> GnutellaServer --RouterEvent--> GnutellaRouter --> sockets
//!                               |                               |
//!                               +--CatcherEvent--> GnutellaCatcher <--+ (hosts from pongs)
//!                                                  | dials: Writer::adopt -> sock-io
//! ```
//! The server owns each connection until its handshake ends, then hands its output
//! to the router with [`RouterEvent::Joined`]; from then on only the router writes to
//! it (its deflate stream and value-ordered queue have one owner), and the server
//! only frames what the peer sends.

use std::net::SocketAddr;
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use seda_io::ConnId;

/// What a peer is to us.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Another ultrapeer: gets broadcasts, routes for others.
    #[default]
    Ultrapeer,
    /// A leaf (`X-Ultrapeer: False`) shielded by us: gets only the queries its
    /// query routing table matches, never a ping it did not ask for.
    Leaf,
}

/// What the handshake told us about a peer.
#[derive(Clone, Debug, Default)]
pub struct PeerInfo {
    /// Its `User-Agent` (at most 128 characters).
    pub user_agent: String,
    /// Its listening address (`Listen-IP`, `X-My-Address` or `Node`), if it said.
    pub listen: Option<SocketAddr>,
    /// Whether we compress what we send.
    pub deflate_out: bool,
    /// Whether it compresses what it sends.
    pub deflate_in: bool,
    /// Whether it understands vendor messages (`Vendor-Message`).
    pub vendor: bool,
    /// Ultrapeer or leaf.
    pub role: Role,
    /// Whether it speaks QRP (`X-Query-Routing`): a leaf sends us its table.
    pub qrp: bool,
    /// Whether it wants our query routing table (`X-Ultrapeer-Query-Routing`, an
    /// ultrapeer doing last-hop filtering towards us).
    pub up_qrp: bool,
}

/// Complete messages read from one connection, back to back in `buf`, that passed
/// the server's payload rules. `skip` holds the offsets (ascending) of messages in
/// `buf` that the server consumed or refused: the router passes over them.
#[derive(Debug, Default)]
pub struct Messages {
    /// The messages' bytes, each a 23-byte header and its payload.
    pub buf: Vec<u8>,
    /// Offsets of messages not for the router.
    pub skip: Vec<u32>,
    /// Messages in `buf`, skipped ones included.
    pub count: u32,
}

/// An event of the router stage.
#[derive(Debug)]
pub enum RouterEvent {
    /// A connection finished its handshake: the router owns its output from now
    /// on. The first event of a connection at the router.
    Joined {
        /// The connection.
        conn: ConnId,
        /// Remote address of the socket.
        addr: SocketAddr,
        /// Whether we opened it.
        outgoing: bool,
        /// What its handshake said.
        info: PeerInfo,
    },
    /// Messages read from a joined connection.
    Messages {
        /// The connection they came from.
        from: ConnId,
        /// The messages.
        messages: Messages,
    },
    /// End a joined connection with a Bye (bad input seen by the server).
    Bye {
        /// The connection.
        conn: ConnId,
        /// Bye code (HTTP-like).
        code: u16,
        /// Reason sent to the peer.
        reason: String,
    },
    /// A joined connection closed. The last event of a connection at the router.
    Left {
        /// The connection.
        conn: ConnId,
    },
    /// The periodic tick of chain generation `.0` (slow peers, keep-alives).
    Tick(u64),
    /// Say Bye to every peer (the router is stopping); `done` hears when the Byes
    /// are handed to the sockets.
    Shutdown {
        /// Told once the Byes are written or queued.
        done: SyncSender<()>,
    },
}

/// An event of the catcher stage.
#[derive(Debug)]
pub enum CatcherEvent {
    /// The periodic tick of chain generation `.0`: dial if needed, close stalled
    /// handshakes.
    Tick(u64),
    /// Hosts learned from pongs, `X-Try-Ultrapeers` or a peer's own address.
    Learned(Vec<SocketAddr>),
    /// A host to keep connecting to (`--peer`), never forgotten.
    Seed(SocketAddr),
    /// An ultrapeer that dialled us listens at `addr` (`open`), or that connection
    /// closed (`!open`): the catcher learns the host and does not dial it while the
    /// connection is up.
    Inbound {
        /// Its listening address, from its handshake.
        addr: SocketAddr,
        /// Whether the connection is up.
        open: bool,
    },
    /// The handshake of an outgoing connection to `addr` completed.
    Connected {
        /// The host.
        addr: SocketAddr,
    },
    /// An outgoing connection to `addr` closed (`established`: after its handshake).
    Lost {
        /// The host.
        addr: SocketAddr,
        /// Whether the handshake had completed.
        established: bool,
    },
    /// A connection entered its handshake at `since`: close it if it has not
    /// settled within the handshake timeout.
    Handshaking {
        /// The connection.
        conn: ConnId,
        /// When it was accepted or adopted.
        since: Instant,
    },
    /// A connection left its handshake (established, refused or closed).
    Settled {
        /// The connection.
        conn: ConnId,
    },
}
