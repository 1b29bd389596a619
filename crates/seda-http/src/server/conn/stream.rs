//! A response whose body streams (a proxied response): [`Exchange::stream`] starts
//! it, and [`ResponseStream`] holds its connection's next response slot until it
//! finishes (see the module invariants of [`super`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::*};

use bytes::Bytes;
use seda_io::ConnId;

use super::{Conn, Exchange};
use crate::access_log::events::{AccessEntry, Answerer, RequestRecord, status_of};

impl Exchange {
    /// Starts a response whose body streams (a proxied response): `bufs` (its head
    /// and the body bytes at hand) go out now, the rest through the returned
    /// [`ResponseStream`]. The request must be alone in flight on its connection
    /// (HttpParse parses a proxied request only once every earlier response is out,
    /// and nothing after it until its response is): the exchange comes back if an
    /// earlier response is still pending, or if the connection is gone.
    pub(crate) fn stream(
        mut self,
        bufs: &mut Vec<Bytes>,
        close: bool,
    ) -> Result<ResponseStream, Exchange> {
        let Some(mut slot) = self.slot.take() else {
            return Err(self);
        };
        let mut tx = slot.conn.tx.lock();
        if tx.dead || tx.next != slot.seq {
            drop(tx);
            self.slot = Some(slot);
            return Err(self);
        }
        let log = slot.log.take().map(|rec| StreamLog::start(rec, bufs));
        slot.conn.flush(&mut tx, bufs);
        drop(tx);
        Ok(ResponseStream {
            conn: slot.conn,
            log,
            close,
            finished: false,
        })
    }
}

/// A response whose body streams, holding its connection's next response slot
/// until [`ResponseStream::finish`]. Dropped unfinished (the upstream failed
/// mid-body), it aborts the connection: the client sees a truncated response
/// (short of its `Content-Length`, or without the last chunk), never a response
/// spliced with the next.
#[derive(Debug)]
pub(crate) struct ResponseStream {
    conn: Arc<Conn>,
    /// The access log's record, status and body bytes so far (log on only).
    log: Option<StreamLog>,
    close: bool,
    finished: bool,
}

impl ResponseStream {
    /// The client's connection.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.conn.id
    }

    /// Whether the client is gone.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.conn.is_gone()
    }

    /// Sends more of the body; false once the connection is gone.
    pub(crate) fn send(&self, bufs: &mut Vec<Bytes>) -> bool {
        if let Some(l) = &self.log {
            let n: usize = bufs.iter().map(Bytes::len).sum();
            l.body.fetch_add(n as u64, Relaxed);
        }
        let mut tx = self.conn.tx.lock();
        self.conn.flush(&mut tx, bufs);
        !tx.dead
    }

    /// Bytes waiting in the client's outgoing queue.
    pub(crate) fn queued(&self) -> usize {
        self.conn.queued()
    }

    /// The response is complete: the slot is released (the next response may go),
    /// and the connection closes if the response said so.
    pub(crate) fn finish(mut self) {
        self.finished = true;
        self.log_line();
        let mut tx = self.conn.tx.lock();
        let seq = tx.next;
        tx.running.remove(seq);
        tx.next += 1;
        self.conn.sent.fetch_add(1, SeqCst);
        if self.close {
            self.conn.close();
            tx.dead = true;
            self.conn.gone.store(true, Relaxed);
        }
        let next = tx.next;
        let parked = tx.take_parked(next);
        drop(tx);
        match parked {
            // Cannot happen while proxied requests are alone in flight; kept correct.
            Some(r) => {
                self.conn.deliver(next, r);
            }
            None => self.conn.answered(),
        }
    }
}

impl ResponseStream {
    /// Offers the response's access log line (once).
    fn log_line(&mut self) {
        if let Some(mut l) = self.log.take()
            && let Some(log) = l.rec.to.take()
        {
            let by = match &l.rec.stage {
                Some(s) => Answerer::Stage(Arc::clone(s)),
                None => Answerer::Static,
            };
            let body = l.body.load(Relaxed);
            log.offer(AccessEntry::now(l.rec, l.status, body, by));
        }
    }
}

/// What the access log keeps of a streamed response until it ends.
#[derive(Debug)]
struct StreamLog {
    rec: Box<RequestRecord>,
    status: u16,
    /// Body bytes handed to the connection so far.
    body: AtomicU64,
}

impl StreamLog {
    /// `bufs`: the head and the first body bytes.
    fn start(rec: Box<RequestRecord>, bufs: &[Bytes]) -> Self {
        let first = bufs.first().map_or(&[][..], |b| &b[..]);
        let head = first
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(first.len(), |p| p + 4);
        let total: usize = bufs.iter().map(Bytes::len).sum();
        StreamLog {
            rec,
            status: status_of(first),
            body: AtomicU64::new(total.saturating_sub(head) as u64),
        }
    }
}

impl Drop for ResponseStream {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Cut short: logged with the bytes that went out.
        self.log_line();
        let mut tx = self.conn.tx.lock();
        tx.dead = true;
        tx.drop_parked();
        drop(tx);
        self.conn.gone.store(true, Relaxed);
        self.conn.abort();
    }
}
