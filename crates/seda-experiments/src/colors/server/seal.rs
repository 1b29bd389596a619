//! Stage `seal`: encrypts and MACs each response, then writes it. The CPU-bound
//! step (SFS spent 75% of its time in encryption, thesis 5.2.1).
//!
//! Runs under the connection's color (or color 0 in the baseline): the cipher and
//! the nonce counter are the connection's state and need no lock, and a
//! connection's replies are sealed in the order `serve` emitted them, so nonces
//! follow request order. Writing from this stage keeps the socket's bytes in nonce
//! order too ([`seda_io::Writer::send`] keeps the order of its calls). It also
//! retires the request: the in-flight count drops, and a connection paused by
//! `recv` resumes reading at half of `max_in_flight`.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use seda::{Batch, Context, EventHandler, Runtime, RuntimeError, Sink};
use seda_io::Outgoing;

use super::state::{Conn, Shared, stage_builder};
use crate::colors::proto::{self, STATUS_BAD_REQUEST, STATUS_OK};

/// What `serve` hands `seal`.
pub(super) struct SealEvent {
    pub(super) conn: Arc<Conn>,
    pub(super) reply: Reply,
}

pub(super) enum Reply {
    /// The file range read.
    Data(Bytes),
    /// Why the request was refused; the connection closes after it.
    Error(String),
}

struct Seal {
    shared: Arc<Shared>,
}

pub(super) fn build(rt: &Runtime, shared: &Arc<Shared>) -> Result<Sink<SealEvent>, RuntimeError> {
    let h = Seal {
        shared: shared.clone(),
    };
    stage_builder(rt, shared, "seal", h, shared.cfg.workers).build()
}

impl EventHandler<SealEvent> for Seal {
    fn handle_events(&self, batch: Batch<'_, SealEvent>, _cx: &Context<'_>) {
        let (counters, writer) = (&self.shared.counters, &self.shared.writer);
        for SealEvent { conn, reply } in batch {
            let Ok(mut st) = conn.state.enter() else {
                self.shared.overlap(conn.id, "seal");
                continue;
            };
            // None: the connection closed and its state was dropped.
            let Some(session) = st.session.as_mut() else {
                counters.undelivered.fetch_add(1, Relaxed);
                continue;
            };
            let (status, text): (u8, &[u8]) = match &reply {
                Reply::Data(b) => (STATUS_OK, b),
                Reply::Error(msg) => (STATUS_BAD_REQUEST, msg.as_bytes()),
            };
            let frame = proto::seal(&session.cipher, session.next_nonce, status, text);
            session.next_nonce += 1;
            counters.responses.fetch_add(1, Relaxed);
            counters.bytes_sealed.fetch_add(text.len() as u64, Relaxed);
            if writer.send(conn.id, Outgoing::from(frame)).is_err() {
                counters.undelivered.fetch_add(1, Relaxed);
            }
            if status != STATUS_OK {
                counters.bad_requests.fetch_add(1, Relaxed);
                st.closing = true;
                writer.close(conn.id);
            }
            st.in_flight = st.in_flight.saturating_sub(1);
            if st.paused && st.in_flight <= self.shared.cfg.max_in_flight / 2 {
                st.paused = false;
                writer.resume_reading(conn.id);
            }
        }
    }
}
