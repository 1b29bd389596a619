//! The state of one upstream connection, and of the request in flight on it.
//!
//! # Invariants
//! - An [`UpConn`] carries at most one [`Flight`] (HTTP/1.1 without pipelining to
//!   the upstream); a connection with none is idle (in its upstream's pool) or
//!   closing.
//! - A flight's client slot is in exactly one place: `ex` until the response head
//!   goes out, then `stream` (or the held response) until the body is complete.
//! - The route's admission is settled exactly once per flight (`settled`): when the
//!   response head arrives, or when the flight fails or is dropped.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use seda::Class;
use seda_io::ConnId;

use super::body::BodyPipe;
use super::head::ClientBody;
use crate::proto::{ChunkedDecoder, Version};
use crate::server::{Exchange, ResponseStream};

/// An upstream connection (see the module invariants).
#[derive(Debug)]
pub(crate) struct UpConn {
    pub(crate) id: ConnId,
    /// Index of its route in the proxy, and of its upstream in the route.
    pub(crate) route: usize,
    pub(crate) upstream: usize,
    /// The event loop that owns it (its place in the upstream's pool).
    pub(crate) event_loop: usize,
    pub(crate) st: Mutex<UpState>,
}

impl UpConn {
    pub(crate) fn new(
        id: ConnId,
        route: usize,
        upstream: usize,
        event_loop: usize,
        flight: Flight,
    ) -> Self {
        UpConn {
            id,
            route,
            upstream,
            event_loop,
            st: Mutex::new(UpState {
                connected: false,
                reused: false,
                flight: Some(flight),
                buf: BytesMut::new(),
                idle_since: None,
                dead: false,
            }),
        }
    }

    /// When it became idle (`None` while busy).
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        self.st.lock().idle_since
    }
}

#[derive(Debug)]
pub(crate) struct UpState {
    pub(crate) connected: bool,
    /// It served a request before the current flight (a close before any byte of
    /// the answer is then a stale keep-alive connection, not a failure).
    pub(crate) reused: bool,
    pub(crate) flight: Option<Flight>,
    /// Bytes of the upstream not yet processed.
    pub(crate) buf: BytesMut,
    pub(crate) idle_since: Option<Instant>,
    /// Closed or closing: never reused.
    pub(crate) dead: bool,
}

/// A proxied request between its dispatch and its last response byte.
#[derive(Debug)]
pub(crate) struct Flight {
    /// The client's slot, until the response head goes out.
    pub(crate) ex: Option<Exchange>,
    pub(crate) class: Class,
    pub(crate) born: Instant,
    /// When it was handed to its current upstream connection.
    pub(crate) started: Instant,
    /// When the sweeper gives up on it (head timeout, then body silence).
    pub(crate) deadline: Instant,
    /// The head forwarded (kept for a retry).
    pub(crate) head: Bytes,
    pub(crate) body: Option<BodyPipe>,
    pub(crate) head_request: bool,
    pub(crate) idempotent: bool,
    pub(crate) client_version: Version,
    /// Retried once already (after a connect failure or a stale connection).
    pub(crate) retried: bool,
    /// Admission settled (module invariants).
    pub(crate) settled: bool,
    /// Upstream indices that failed for this request (not tried again).
    pub(crate) failed_on: Vec<usize>,
    pub(crate) resp: Resp,
}

/// Where the upstream's response is.
#[derive(Debug)]
pub(crate) enum Resp {
    /// Waiting for (the rest of) its head.
    Head,
    /// Its body.
    Body {
        input: BodyIn,
        output: ClientBody,
        /// A small `Content-Length` response held whole until complete (so an
        /// upstream that dies mid-body costs the client a clean `502`), with the
        /// head and body parts so far.
        held: Option<(Exchange, Bytes, Vec<Bytes>)>,
        stream: Option<ResponseStream>,
        /// The client's connection closes after it.
        close: bool,
        /// The upstream keeps its connection after it.
        keep_alive: bool,
    },
}

/// How the upstream's body is read.
#[derive(Debug)]
pub(crate) enum BodyIn {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    Close,
}

/// Largest `Content-Length` body held whole before the client gets anything.
pub(crate) const HOLD: u64 = 64 * 1024;

/// Bytes of a response allowed in the client's outgoing queue before the upstream
/// is no longer read (a slow client never makes us buffer a whole response).
pub(crate) const RESPONSE_WINDOW: usize = 256 * 1024;

/// The upstream connections of a proxy, by id.
#[derive(Debug, Default)]
pub(crate) struct UpConns(Mutex<IdMap<Arc<UpConn>>>);

/// A map keyed by connection id (our own sequence numbers: a fast hash is safe).
type IdMap<V> = std::collections::HashMap<u64, V, foldhash::fast::RandomState>;

impl UpConns {
    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<UpConn>> {
        self.0.lock().get(&id.0).cloned()
    }

    /// Opens a connection (`connect`) and enters it (`make`) under the table's lock,
    /// so that its first event, which may come at once on another thread, finds it.
    /// On failure `value` comes back.
    pub(crate) fn open<T>(
        &self,
        value: T,
        connect: impl FnOnce() -> std::io::Result<ConnId>,
        make: impl FnOnce(ConnId, T) -> Arc<UpConn>,
    ) -> Result<ConnId, (std::io::Error, T)> {
        let mut table = self.0.lock();
        match connect() {
            Ok(id) => {
                table.insert(id.0, make(id, value));
                Ok(id)
            }
            Err(e) => Err((e, value)),
        }
    }

    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<UpConn>> {
        self.0.lock().remove(&id.0)
    }

    pub(crate) fn all(&self) -> Vec<Arc<UpConn>> {
        self.0.lock().values().cloned().collect()
    }

    pub(crate) fn clear(&self) {
        self.0.lock().clear();
    }
}
