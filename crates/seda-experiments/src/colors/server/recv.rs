//! Stage `recv`: frames requests out of a connection's byte stream.
//!
//! Runs under the connection's color (or color 0 in the baseline), so the framing
//! buffer and the in-flight count need no lock. On `Accepted` it makes the session
//! key and sends the hello; on `Data` and `Resumed` it frames complete requests and
//! hands them to `serve` (color 0) until the connection has `max_in_flight` requests
//! unanswered, then pauses reading it (`seal` resumes it at half). A malformed
//! request is answered with a bad-request response, in order, and ends the
//! connection.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use chacha20poly1305::ChaCha20Poly1305;
use chacha20poly1305::aead::{KeyInit, OsRng};
use seda::{Batch, Context, EventHandler, Meta, Runtime, RuntimeError, Sink};
use seda_io::Outgoing;

use super::serve::{Op, ServeEvent};
use super::state::{Conn, ConnState, DEFAULT_COLOR, Session, Shared, stage_builder};
use crate::colors::proto::{self, REQUEST_LEN, ReadRequest};

/// What `ingress` hands `recv`.
pub(super) struct RecvEvent {
    pub(super) conn: Arc<Conn>,
    pub(super) input: Input,
}

pub(super) enum Input {
    Accepted,
    Data(Vec<u8>),
    Resumed,
    Closed,
}

/// Framed bytes kept at the front of the buffer before it is compacted.
const COMPACT_AT: usize = 64 * 1024;

struct Recv {
    shared: Arc<Shared>,
    serve: Sink<ServeEvent>,
}

pub(super) fn build(
    rt: &Runtime,
    shared: &Arc<Shared>,
    serve: Sink<ServeEvent>,
) -> Result<Sink<RecvEvent>, RuntimeError> {
    let h = Recv {
        shared: shared.clone(),
        serve,
    };
    stage_builder(rt, shared, "recv", h, 1).build()
}

impl EventHandler<RecvEvent> for Recv {
    fn handle_events(&self, mut batch: Batch<'_, RecvEvent>, _cx: &Context<'_>) {
        while let Some((RecvEvent { conn, input }, meta)) = batch.next_with_meta() {
            let Ok(mut st) = conn.state.enter() else {
                self.shared.overlap(conn.id, "recv");
                continue;
            };
            match input {
                Input::Accepted => self.open(&conn, &mut st),
                Input::Data(bytes) => {
                    st.input.extend_from_slice(&bytes);
                    self.frame(&conn, &mut st, meta);
                }
                Input::Resumed => self.frame(&conn, &mut st, meta),
                Input::Closed => {
                    *st = ConnState::default();
                    drop(st);
                    self.to_serve(conn, Op::Closed, meta);
                }
            }
        }
    }
}

impl Recv {
    /// A new connection: its session key, sent in the hello.
    fn open(&self, conn: &Conn, st: &mut ConnState) {
        self.shared.counters.connections.fetch_add(1, Relaxed);
        let key = ChaCha20Poly1305::generate_key(&mut OsRng);
        st.session = Some(Session {
            cipher: ChaCha20Poly1305::new(&key),
            next_nonce: 0,
        });
        // A failure means the connection is already gone; its Closed follows.
        let _ = self
            .shared
            .writer
            .send(conn.id, Outgoing::from(proto::hello(&key)));
    }

    fn frame(&self, conn: &Arc<Conn>, st: &mut ConnState, meta: Meta) {
        let cfg = &self.shared.cfg;
        while !st.closing && !st.paused && st.input.len() - st.framed >= REQUEST_LEN {
            if st.in_flight >= cfg.max_in_flight {
                st.paused = true;
                self.shared.counters.pauses.fetch_add(1, Relaxed);
                self.shared.writer.pause_reading(conn.id);
                break;
            }
            let mut raw = [0u8; REQUEST_LEN];
            raw.copy_from_slice(&st.input[st.framed..st.framed + REQUEST_LEN]);
            st.framed += REQUEST_LEN;
            let op = match ReadRequest::decode(&raw) {
                Ok(r) if r.len == 0 || r.len > cfg.max_block => Op::Invalid(format!(
                    "read length {} outside 1..={}",
                    r.len, cfg.max_block
                )),
                Ok(r) => Op::Read(r),
                Err(e) => Op::Invalid(e),
            };
            if matches!(op, Op::Invalid(_)) {
                st.closing = true;
            }
            st.in_flight += 1;
            self.shared.counters.requests.fetch_add(1, Relaxed);
            if !self.to_serve(conn.clone(), op, meta) {
                st.closing = true;
            }
        }
        if st.closing || st.framed == st.input.len() {
            st.input.clear();
            st.framed = 0;
        } else if st.framed >= COMPACT_AT {
            st.input.drain(..st.framed);
            st.framed = 0;
        }
    }

    /// Hands `op` to `serve` under color 0; false (and the connection aborted) if
    /// the queue refused it.
    fn to_serve(&self, conn: Arc<Conn>, op: Op, meta: Meta) -> bool {
        let id = conn.id;
        let ok = self
            .serve
            .try_enqueue_with(ServeEvent { conn, op }, meta.with_color(DEFAULT_COLOR))
            .is_ok();
        if !ok {
            self.shared.shed(id, "serve");
        }
        ok
    }
}
