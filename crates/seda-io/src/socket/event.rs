//! The events and values the socket stages hand the application: connection ids,
//! [`SocketEvent`], why a connection closed, what a writer sends, why a send failed.
//! A leaf: it imports no other file of the socket stages.

use std::any::Any;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

/// A connection's identity: unique in the process (not reused before 2^40
/// connections have been opened), never 0. Its low 24 bits name the connection's
/// slot in its event loop's table, which the loop indexes instead of hashing the id
/// (`socket/slab.rs`); the rest is a process-wide sequence number. Events of one
/// connection carry `Color(conn.0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// The application's state of one connection, made when the connection is
/// admitted and handed over with each of its events (`state` of [`SocketEvent`];
/// see "Attached state" in the module docs of `socket`). The application takes its
/// own type back with [`Arc::downcast`].
pub type ConnState = Arc<dyn Any + Send + Sync>;

/// Why a connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The peer closed its side (read returned end of file).
    PeerClosed,
    /// A read or write failed.
    Error(io::ErrorKind),
    /// The outgoing queue passed the write threshold ([`BacklogAction::Close`](super::BacklogAction::Close)).
    Backlog,
    /// The application called [`Writer::close`](super::Writer::close) or [`Writer::abort`](super::Writer::abort).
    Local,
    /// The socket stages stopped.
    Shutdown,
}

/// An event the socket stages deliver to the application's sink. Each carries
/// `Color(conn.0)`; `born` is the time the event arose (bytes read, connection
/// accepted). Every event of a connection the application attached a state to
/// carries it in `state` (`None` otherwise). More kinds may be added: match with a
/// wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum SocketEvent {
    /// A new connection from the listener. The first event of an accepted
    /// connection.
    Accepted {
        /// The connection.
        conn: ConnId,
        /// The peer's address.
        peer: SocketAddr,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// A connection the application opened itself and handed over with
    /// [`Writer::adopt`](super::Writer::adopt) (an outgoing connection): its first event, in place of
    /// `Accepted`, so that the application tells the two directions apart
    /// without keeping a table of its own dials.
    Adopted {
        /// The connection (the id `adopt` returned).
        conn: ConnId,
        /// The peer's address (the address connected to).
        peer: SocketAddr,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// An outbound connection ([`Writer::connect`](super::Writer::connect)) is established. Always its first
    /// event; a connection whose connect fails gets only `Closed`.
    Connected {
        /// The connection.
        conn: ConnId,
        /// The address connected to.
        peer: SocketAddr,
    },
    /// Bytes read, at most `read_chunk` of them.
    Data {
        /// The connection.
        conn: ConnId,
        /// The bytes, in stream order.
        bytes: Vec<u8>,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// The outgoing queue passed its threshold ([`BacklogAction::Notify`](super::BacklogAction::Notify) only); sent
    /// once per crossing.
    WriteBacklog {
        /// The connection.
        conn: ConnId,
        /// Bytes queued when the threshold was passed.
        queued: usize,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// Reading resumed after [`Writer::pause_reading`](super::Writer::pause_reading): input the application held
    /// back meanwhile can be processed now. One per [`Writer::resume_reading`](super::Writer::resume_reading) that
    /// found reading paused, in order with the connection's other events.
    Resumed {
        /// The connection.
        conn: ConnId,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// The peer shut down its sending side (read returned end of file) and
    /// [`SocketConfig::half_close`](super::SocketConfig::half_close) is set: nothing more will be read, but the
    /// connection stays open for output until the application closes it. At most
    /// once, after every `Data` of the connection.
    ReadClosed {
        /// The connection.
        conn: ConnId,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
    /// The connection is closed. Exactly once per accepted connection, and last.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
        /// The application's state of the connection, if it attached one.
        state: Option<ConnState>,
    },
}

impl SocketEvent {
    /// The connection the event is about.
    pub fn conn(&self) -> ConnId {
        match self {
            SocketEvent::Accepted { conn, .. }
            | SocketEvent::Adopted { conn, .. }
            | SocketEvent::Connected { conn, .. }
            | SocketEvent::Data { conn, .. }
            | SocketEvent::WriteBacklog { conn, .. }
            | SocketEvent::ReadClosed { conn, .. }
            | SocketEvent::Resumed { conn, .. }
            | SocketEvent::Closed { conn, .. } => *conn,
        }
    }

    /// The application's state of the event's connection, if it attached one.
    pub fn state(&self) -> Option<&ConnState> {
        match self {
            SocketEvent::Accepted { state, .. }
            | SocketEvent::Adopted { state, .. }
            | SocketEvent::Data { state, .. }
            | SocketEvent::WriteBacklog { state, .. }
            | SocketEvent::ReadClosed { state, .. }
            | SocketEvent::Resumed { state, .. }
            | SocketEvent::Closed { state, .. } => state.as_ref(),
            SocketEvent::Connected { .. } => None,
        }
    }
}

/// What one piece of output is.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// A buffer.
    Bytes(Bytes),
    /// Several buffers, written with one `writev` where possible.
    Vectored(Vec<Bytes>),
    /// `len` bytes of `file` from `offset`, sent with `sendfile`.
    File {
        /// The file.
        file: Arc<File>,
        /// Where the range starts.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
}

impl From<Bytes> for Outgoing {
    fn from(b: Bytes) -> Self {
        Outgoing::Bytes(b)
    }
}

impl From<Vec<u8>> for Outgoing {
    fn from(v: Vec<u8>) -> Self {
        Outgoing::Bytes(Bytes::from(v))
    }
}

impl From<&'static [u8]> for Outgoing {
    fn from(s: &'static [u8]) -> Self {
        Outgoing::Bytes(Bytes::from_static(s))
    }
}

/// Why [`Writer::send`](super::Writer::send) did not take the output.
/// `#[non_exhaustive]`: a match needs a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// No open connection has this id (never existed, or closed and gone).
    NoConnection,
    /// The connection is closing or closed: `close`/`abort` was called, or it is
    /// being torn down.
    Closed,
    /// This output took the queue past the write threshold and the connection is
    /// being closed (`Closed { reason: Backlog }` follows).
    Backlog,
    /// A file range lies outside the file: `offset + len` beyond its size.
    InvalidRange,
    /// The socket failed; the connection is being closed (`Closed { reason:
    /// Error(kind) }` follows).
    Io(io::ErrorKind),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::NoConnection => f.write_str("no such connection"),
            WriteError::Closed => f.write_str("connection closed"),
            WriteError::Backlog => {
                f.write_str("outgoing queue passed its threshold; connection closed")
            }
            WriteError::InvalidRange => f.write_str("file range beyond the end of the file"),
            WriteError::Io(k) => write!(f, "socket error: {k}"),
        }
    }
}

impl std::error::Error for WriteError {}
