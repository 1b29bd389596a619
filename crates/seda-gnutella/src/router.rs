//! GnutellaRouter: routing of every message (SEDA 5.2.1), the slow-peer tick
//! (5.2.2), and Fig. 14's artificial query cost.
//!
//! One batch: decide each message with [`Routes::route`], collect the copies per
//! destination, then hand each destination its copies with one [`Peer::send`]
//! (fast path: one socket write per destination per batch). A fresh ping is also
//! answered with our own pong.
//!
//! Every [`TICK`] the router drains the held-back queues of slow peers and closes
//! a peer whose queue has stayed over its threshold for `slow_grace`. Ticks form a
//! chain (each schedules the next); the catcher re-arms a chain that broke (a tick
//! refused by a full queue) with a new generation, and stale generations die out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use seda::{Batch, Context, EventHandler, Meta, Runtime};
use seda_io::ConnId;

use crate::catcher::CatcherEvent;
use crate::node::Node;
use crate::peer::Pending;
use crate::proto::framing::Chunk;
use crate::proto::message::{Malformed, MsgType, pong_addr, pong_port, usable};
use crate::routing::{Action, Dropped};
use crate::stats::{Event, Tally};

/// Period of the router's slow-peer tick.
pub const TICK: Duration = Duration::from_millis(20);

/// An event of the router stage.
#[derive(Debug)]
pub enum RouterEvent {
    /// Messages read from one connection, checked against the payload rules.
    Messages {
        /// The connection they came from.
        from: ConnId,
        /// The messages.
        chunk: Chunk,
    },
    /// The periodic slow-peer tick of chain generation `.0`.
    Tick(u64),
}

/// Tick chain state shared with the catcher's watchdog.
#[derive(Debug, Default)]
pub(crate) struct TickChain {
    generation: AtomicU64,
    /// Milliseconds since `epoch` of the last tick handled.
    last_ms: AtomicU64,
}

/// The router stage's handler.
#[derive(Debug)]
pub(crate) struct Router {
    node: Arc<Node>,
}

impl Router {
    pub(crate) fn new(node: Arc<Node>) -> Router {
        Router { node }
    }

    fn tick(&self, generation: u64, cx: &Context<'_>) {
        let chain = &self.node.ticks;
        if generation != chain.generation.load(Relaxed) {
            return;
        }
        chain.last_ms.store(self.node.millis(), Relaxed);
        if let Some(sink) = self.node.router.get() {
            cx.runtime()
                .schedule_with(TICK, sink, RouterEvent::Tick(generation), Meta::new());
        }
        let Some(w) = self.node.writer() else { return };
        let now = Instant::now();
        let ms = self.node.millis();
        for peer in &self.node.peers.snapshot().list {
            // Keep-alive: a link we have been silent on gets a one-hop ping. Servents
            // probe a quiet link with "alive" pings and close it after a few go
            // unanswered (gtk-gnutella: 20 s quiet, 6 pings, Bye 406); traffic of ours
            // spares both sides the probing.
            if ms.saturating_sub(peer.last_tx_ms()) >= self.node.cfg.keepalive.as_millis() as u64
                && !peer.is_closing()
            {
                self.node.send_keepalive(peer);
            }
            if peer.queued_bytes() == 0 {
                continue;
            }
            if let Some(over) = peer.drain(w, now)
                && over >= self.node.cfg.slow_grace
                && peer.set_closing()
            {
                tracing::info!(conn = %peer.id, addr = %peer.addr, "closing a slow peer: outgoing queue over its threshold for {over:?}");
                self.node.counters.event(Event::SlowPeerClosed);
                // It does not read: a Bye would only queue behind the backlog.
                w.abort(peer.id);
            }
        }
    }
}

impl EventHandler<RouterEvent> for Router {
    fn handle_events(&self, batch: Batch<'_, RouterEvent>, cx: &Context<'_>) {
        let node = &*self.node;
        let snap = node.peers.snapshot();
        let mut out: Vec<Pending> = Vec::new();
        out.resize_with(snap.list.len(), Pending::default);
        let mut t = Tally::default();
        let mut learned: Vec<SocketAddr> = Vec::new();
        let now = Instant::now();
        for ev in batch {
            let (from, chunk) = match ev {
                RouterEvent::Messages { from, chunk } => (from, chunk),
                RouterEvent::Tick(g) => {
                    self.tick(g, cx);
                    continue;
                }
            };
            let src = snap.position(from);
            for f in &chunk.frames {
                let h = f.header;
                let p = chunk.payload(f);
                if h.kind == MsgType::Query
                    && let Some(d) = node.cfg.query_delay
                {
                    std::thread::sleep(d);
                }
                let action = node.routes.route(from, &h, p, now);
                if h.kind == MsgType::Ping
                    && matches!(action, Action::Broadcast(_) | Action::Absorb)
                    && let (Some(i), Some((ph, pp))) = (src, node.pong_for(&h))
                {
                    out[i].push(&ph, &pp);
                    t.sent(MsgType::Pong, 1);
                }
                match action {
                    Action::Broadcast(next) => {
                        let mut n = 0;
                        for (i, peer) in snap.list.iter().enumerate() {
                            if peer.id != from && peer.wants(&next) && !peer.is_closing() {
                                out[i].push(&next, p);
                                n += 1;
                            }
                        }
                        if n > 0 {
                            t.routed(h.kind);
                            t.sent(h.kind, n);
                        }
                    }
                    Action::Absorb => {}
                    // A pong naming an address no one can reach is useless (and
                    // counted against us) once it leaves its sender's neighbour.
                    Action::Forward(..) if h.kind == MsgType::Pong && !usable(pong_addr(p)) => {
                        t.malformed(Malformed::UnusableAddress);
                    }
                    Action::Forward(to, next) => match snap.position(to) {
                        Some(i) if !snap.list[i].is_closing() => {
                            out[i].push(&next, p);
                            t.routed(h.kind);
                            t.sent(h.kind, 1);
                        }
                        _ => t.dropped(Dropped::NoRoute),
                    },
                    Action::Local => {
                        if h.kind == MsgType::Pong && usable(pong_addr(p)) {
                            learned.push(SocketAddr::from((pong_addr(p), pong_port(p))));
                        }
                    }
                    Action::Drop(d) => t.dropped(d),
                }
            }
        }
        if let Some(w) = node.writer() {
            for (i, pending) in out.iter_mut().enumerate() {
                if !pending.is_empty() {
                    snap.list[i].touch_tx(node.millis());
                    let sent = snap.list[i].send(w, pending, now);
                    t.slow_drops(&sent.dropped);
                }
            }
        }
        node.counters.add(&t);
        if !learned.is_empty()
            && let Some(c) = node.catcher.get()
        {
            let _ = c.try_enqueue(CatcherEvent::Learned(learned));
        }
    }
}

/// Starts the tick chain.
pub(crate) fn start_ticks(rt: &Runtime, node: &Arc<Node>) {
    rearm(rt, node);
}

/// Starts a new tick chain if the last tick is older than `stale` (the old chain,
/// if it still exists, ends at its next tick).
pub(crate) fn rearm_if_stale(rt: &Runtime, node: &Arc<Node>, stale: Duration) {
    let last = node.ticks.last_ms.load(Relaxed);
    if node.millis().saturating_sub(last) > stale.as_millis() as u64 {
        rearm(rt, node);
    }
}

fn rearm(rt: &Runtime, node: &Arc<Node>) {
    let g = node.ticks.generation.fetch_add(1, Relaxed) + 1;
    node.ticks.last_ms.store(node.millis(), Relaxed);
    if let Some(sink) = node.router.get() {
        rt.schedule_with(TICK, sink, RouterEvent::Tick(g), Meta::new());
    }
}
