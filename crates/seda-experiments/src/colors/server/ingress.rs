//! Stage `ingress`: the socket layer's events, under the experiment's colors.
//!
//! seda-io colors each event by its connection. This stage finds the connection's
//! state in the table (creating it on `Accepted`, dropping it on `Closed`) and hands
//! the event to `recv` under [`Coloring::of`](super::Coloring::of): color 0 for the
//! single-color baseline, the connection's color otherwise. It is the only
//! application code outside color 0 in the baseline, and it touches no state but
//! the table: the hop exists in both colorings, so they do the same work.

use std::sync::Arc;

use seda::{Batch, Context, EventHandler, Runtime, RuntimeError, Sink};
use seda_io::SocketEvent;

use super::recv::{Input, RecvEvent};
use super::state::{ColorGuarded, Conn, ConnState, ConnTable, Shared, stage_builder};

struct Ingress {
    shared: Arc<Shared>,
    table: Arc<ConnTable>,
    recv: Sink<RecvEvent>,
}

pub(super) fn build(
    rt: &Runtime,
    shared: &Arc<Shared>,
    table: Arc<ConnTable>,
    recv: Sink<RecvEvent>,
) -> Result<Sink<SocketEvent>, RuntimeError> {
    let h = Ingress {
        shared: shared.clone(),
        table,
        recv,
    };
    stage_builder(rt, shared, "ingress", h, 1).build()
}

impl EventHandler<SocketEvent> for Ingress {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, _cx: &Context<'_>) {
        while let Some((ev, meta)) = batch.next_with_meta() {
            let id = ev.conn();
            let (conn, input) = match ev {
                SocketEvent::Accepted { .. } => {
                    let conn = Arc::new(Conn {
                        id,
                        state: ColorGuarded::new(ConnState::default()),
                    });
                    self.table.write().insert(id, conn.clone());
                    (Some(conn), Input::Accepted)
                }
                SocketEvent::Data { bytes, .. } => {
                    (self.table.read().get(&id).cloned(), Input::Data(bytes))
                }
                SocketEvent::Resumed { .. } => {
                    (self.table.read().get(&id).cloned(), Input::Resumed)
                }
                SocketEvent::Closed { .. } => (self.table.write().remove(&id), Input::Closed),
                // Backlog notices are not asked for (the sockets pause instead).
                _ => continue,
            };
            let Some(conn) = conn else {
                tracing::debug!(%id, "event for a connection not in the table");
                continue;
            };
            let color = self.shared.cfg.coloring.of(id);
            if self
                .recv
                .try_enqueue_with(RecvEvent { conn, input }, meta.with_color(color))
                .is_err()
            {
                self.shared.shed(id, "recv");
            }
        }
    }
}
