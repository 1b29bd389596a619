//! HttpSend (SEDA 5.1): frames each answer ([`Framer::frame`](super::answer::Framer))
//! and writes it in its turn on its connection. Every response of the server passes
//! here, so this stage's `processed` count is the number of responses sent (or
//! dropped because their client had gone).

use std::sync::Arc;

use seda::{Batch, Context, EventHandler};

use super::events::SendEvent;
use super::state::Haboob;

/// The HttpSend stage.
#[derive(Debug)]
pub(crate) struct HttpSend {
    pub(crate) hb: Arc<Haboob>,
}

impl EventHandler<SendEvent> for HttpSend {
    fn handle_events(&self, batch: Batch<'_, SendEvent>, _cx: &Context<'_>) {
        for ev in batch {
            self.hb.send(ev);
        }
    }
}
