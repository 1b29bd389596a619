//! HttpSend (SEDA 5.1): frames each answer ([`Framer::frame`](super::answer::Framer))
//! and writes it in its turn on its connection. Every response of the server passes
//! here, so this stage's `processed` count is the number of responses sent (or
//! dropped because their client had gone).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use seda::{Batch, Context, EventHandler};

use super::answer::Answer;
use super::conn::Exchange;
use super::state::Haboob;

/// An answer on its way out.
#[derive(Debug)]
pub(crate) struct SendEvent {
    pub(crate) ex: Exchange,
    pub(crate) answer: Answer,
}

/// The HttpSend stage.
#[derive(Debug)]
pub(crate) struct HttpSend {
    pub(crate) hb: Arc<Haboob>,
}

impl EventHandler<SendEvent> for HttpSend {
    fn handle_events(&self, batch: Batch<'_, SendEvent>, _cx: &Context<'_>) {
        for ev in batch {
            send(&self.hb, ev);
        }
    }
}

/// Frames and writes one answer (HttpSend's work, also done in place by a stage
/// whose answer HttpSend refused).
pub(crate) fn send(hb: &Haboob, ev: SendEvent) {
    let SendEvent { ex, answer } = ev;
    let slot = ex.take();
    hb.counters.responses.fetch_add(1, Relaxed);
    let reply = hb.framer.frame(&slot, answer);
    slot.conn.deliver(slot.seq, reply, hb.set.max_pipelined);
    slot.conn.touch(hb.coarse_ms());
}
