//! [`TlsWriter`] and [`TlsConnWriter`]: output to TLS connections, encrypted on the
//! caller's thread (as [`Writer`](crate::Writer) writes on the caller's thread) and
//! handed to the socket in record order.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::session::TlsConn;
use super::shared::Shared;
use crate::socket::{ConnId, Outgoing, WriteError};

/// Sends output on the TLS listener's connections. Cheap to clone.
#[derive(Clone)]
pub struct TlsWriter {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for TlsWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsWriter").finish_non_exhaustive()
    }
}

impl TlsWriter {
    /// A writer bound to `conn`, if it is a TLS connection of this listener whose
    /// handshake completed (the application heard `Accepted`).
    pub fn bind(&self, conn: ConnId) -> Option<TlsConnWriter> {
        let c = self.shared.table.get(conn)?;
        if !c.announced.load(Relaxed) {
            return None;
        }
        Some(TlsConnWriter {
            shared: Arc::clone(&self.shared),
            conn: c,
        })
    }
}

/// A [`TlsWriter`] bound to one connection: the same operations as a plain
/// connection's writer, with the bytes encrypted on the way out.
#[derive(Clone)]
pub struct TlsConnWriter {
    shared: Arc<Shared>,
    conn: Arc<TlsConn>,
}

impl fmt::Debug for TlsConnWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnWriter")
            .field("conn", &self.conn.id)
            .finish_non_exhaustive()
    }
}

impl TlsConnWriter {
    /// The connection.
    pub fn id(&self) -> ConnId {
        self.conn.id
    }

    /// Sends `out`, encrypted. A file is read and encrypted a window at a time as
    /// the peer takes it (no `sendfile` through TLS); output sent after it waits
    /// for it.
    pub fn send(&self, out: Outgoing) -> Result<(), WriteError> {
        let counters = &self.shared.counters;
        let mut s = self.conn.s.lock();
        match out {
            Outgoing::Bytes(b) => self.conn.put(&mut s, &mut vec![b], counters),
            Outgoing::Vectored(mut v) => self.conn.put(&mut s, &mut v, counters),
            Outgoing::File { file, offset, len } => {
                self.conn.put_file(&mut s, file, offset, len, counters)
            }
        }
    }

    /// As [`TlsConnWriter::send`] of the buffers of `bufs`, which is left empty.
    pub fn send_vectored(&self, bufs: &mut Vec<Bytes>) -> Result<(), WriteError> {
        let mut s = self.conn.s.lock();
        let res = self.conn.put(&mut s, bufs, &self.shared.counters);
        bufs.clear();
        res
    }

    /// Sends `close_notify` and closes once the output is out.
    pub fn close(&self) {
        let mut s = self.conn.s.lock();
        self.conn.close(&mut s, &self.shared.counters);
    }

    /// Closes now, dropping queued output.
    pub fn abort(&self) {
        let mut s = self.conn.s.lock();
        self.shared.end_handshake(&mut s);
        s.phase = super::session::Phase::Done;
        s.file = None;
        s.after_file.clear();
        drop(s);
        self.conn.writer.abort(self.conn.id);
    }

    /// Stops delivering the connection's data until [`TlsConnWriter::resume_reading`].
    pub fn pause_reading(&self) {
        let mut s = self.conn.s.lock();
        s.app_paused = true;
        self.conn.settle_reading(&s);
    }

    /// Delivers data again; the application then gets one `Resumed` event (if
    /// reading was paused).
    pub fn resume_reading(&self) {
        let mut s = self.conn.s.lock();
        if !s.app_paused {
            return;
        }
        s.app_paused = false;
        s.resume_owed = true;
        // The socket's `Resumed` (now, or when the file drains) brings the TLS stage
        // back, which hands the application its `Resumed`.
        if !s.draining && s.held.is_empty() {
            self.conn.writer.resume_reading(self.conn.id);
        }
    }

    /// Bytes waiting to go out (here and on the socket).
    pub fn queued(&self) -> usize {
        self.conn.queued()
    }
}
