//! [`Link`]: one connection's output, plain or TLS, for an application that serves
//! both kinds of listener with one stage (it binds each connection once, on
//! `Accepted`, and writes through the link from then on).

use bytes::Bytes;

use crate::socket::{ConnId, ConnWriter, Outgoing, WriteError, Writer};
use crate::tls::TlsConnWriter;

/// A connection's output: plain, or encrypted by the TLS layer.
#[derive(Clone, Debug)]
pub enum Link {
    /// A plain connection: its writer, and the writer bound to it.
    Plain {
        /// The sockets' writer (for the by-id operations).
        writer: Writer,
        /// Bound to the connection.
        conn: ConnWriter,
    },
    /// A TLS connection.
    Tls(TlsConnWriter),
}

impl Link {
    /// The plain connection `conn` of `writer`'s sockets, if it is open.
    pub fn plain(writer: &Writer, conn: ConnId) -> Option<Link> {
        Some(Link::Plain {
            conn: writer.bind(conn)?,
            writer: writer.clone(),
        })
    }

    /// The connection.
    pub fn id(&self) -> ConnId {
        match self {
            Link::Plain { conn, .. } => conn.id(),
            Link::Tls(t) => t.id(),
        }
    }

    /// Whether the connection is a TLS one.
    pub fn is_tls(&self) -> bool {
        matches!(self, Link::Tls(_))
    }

    /// As [`Writer::send`].
    pub fn send(&self, out: Outgoing) -> Result<(), WriteError> {
        match self {
            Link::Plain { conn, .. } => conn.send(out),
            Link::Tls(t) => t.send(out),
        }
    }

    /// As [`Writer::send_vectored`].
    pub fn send_vectored(&self, bufs: &mut Vec<Bytes>) -> Result<(), WriteError> {
        match self {
            Link::Plain { conn, .. } => conn.send_vectored(bufs),
            Link::Tls(t) => t.send_vectored(bufs),
        }
    }

    /// As [`Writer::close`] (a TLS connection sends `close_notify` first).
    pub fn close(&self) {
        match self {
            Link::Plain { writer, conn } => writer.close(conn.id()),
            Link::Tls(t) => t.close(),
        }
    }

    /// As [`Writer::abort`].
    pub fn abort(&self) {
        match self {
            Link::Plain { writer, conn } => writer.abort(conn.id()),
            Link::Tls(t) => t.abort(),
        }
    }

    /// As [`Writer::pause_reading`].
    pub fn pause_reading(&self) {
        match self {
            Link::Plain { writer, conn } => writer.pause_reading(conn.id()),
            Link::Tls(t) => t.pause_reading(),
        }
    }

    /// As [`Writer::resume_reading`].
    pub fn resume_reading(&self) {
        match self {
            Link::Plain { writer, conn } => writer.resume_reading(conn.id()),
            Link::Tls(t) => t.resume_reading(),
        }
    }

    /// Bytes waiting to go out.
    pub fn queued(&self) -> usize {
        match self {
            Link::Plain { writer, conn } => writer.queued(conn.id()).unwrap_or(0),
            Link::Tls(t) => t.queued(),
        }
    }
}
