//! The TLS stage: the socket events of the TLS listener in, the application's
//! events out, decrypted. A connection is announced to the application
//! (`Accepted`) only once its handshake completed; a connection whose handshake
//! fails, times out, or is refused never reaches it.
//!
//! # Invariants
//! - Nothing is offered to the application while a session's lock is held: with
//!   inline handoff the application's handler may run on this thread and write to
//!   the same connection, which takes that lock. Events are collected under the
//!   lock and offered after it is released.
//! - A connection's events reach the application in order: once one is refused
//!   and held, every later one is held behind it until the retry delivers them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::session::{Phase, Session, TlsConn, feed};
use super::shared::Shared;
use crate::socket::{ConnId, ConnState, SocketEvent};

/// How long an event the application's stage refused waits before it is offered
/// again.
const RETRY: Duration = Duration::from_millis(5);

/// A TLS record header's first byte: handshake.
const HANDSHAKE: u8 = 0x16;

/// The stage's handler.
#[derive(Debug)]
pub(crate) struct TlsStage {
    pub(crate) shared: Arc<Shared>,
    /// The application's stage.
    pub(crate) app: Sink<SocketEvent>,
    /// This stage (a refused event's retry comes back here).
    pub(crate) me: Sink<SocketEvent>,
    /// What makes a connection's state for the application, if it gave one.
    pub(crate) attach: Option<Attach>,
}

/// The application's function that makes a connection's state, called once its
/// handshake is done, before `Accepted` (`BoundTls::start_attached`).
pub(crate) struct Attach(pub(crate) Box<AttachFn>);

pub(crate) type AttachFn = dyn Fn(ConnId, SocketAddr) -> Option<ConnState> + Send + Sync;

impl std::fmt::Debug for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attach")
    }
}

impl EventHandler<SocketEvent> for TlsStage {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, cx: &Context<'_>) {
        let mut out = Vec::new();
        while let Some((ev, meta)) = batch.next_with_meta() {
            if let Some(c) = self.on_event(ev, meta, &mut out) {
                self.deliver(&c, &mut out, meta, cx);
            }
        }
    }
}

impl TlsStage {
    /// Handles one socket event; returns the connection whose events `out` holds
    /// for the application (collected under its lock, offered by the caller).
    fn on_event(
        &self,
        ev: SocketEvent,
        meta: Meta,
        out: &mut Vec<SocketEvent>,
    ) -> Option<Arc<TlsConn>> {
        let sh = &self.shared;
        match ev {
            SocketEvent::Accepted { conn, peer, .. } => {
                if sh.in_progress.load(Relaxed) >= sh.cfg.max_handshakes {
                    sh.counters.handshakes_refused.fetch_add(1, Relaxed);
                    sh.raw.abort(conn);
                    return None;
                }
                let raw = sh.raw.bind(conn)?;
                let tls = match rustls::ServerConnection::new(sh.acceptor.config()) {
                    Ok(mut t) => {
                        t.set_buffer_limit(None);
                        t
                    }
                    Err(e) => {
                        tracing::warn!("TLS session: {e}");
                        sh.raw.abort(conn);
                        return None;
                    }
                };
                sh.in_progress.fetch_add(1, Relaxed);
                let c = TlsConn::new(conn, peer, raw, sh.raw.clone(), tls, meta.born());
                sh.table.insert(Arc::new(c));
                None
            }
            SocketEvent::Data { conn, bytes, .. } => {
                let c = sh.table.get(conn)?;
                sh.counters
                    .bytes_decrypted
                    .fetch_add(bytes.len() as u64, Relaxed);
                let mut s = c.s.lock();
                if s.phase == Phase::Done {
                    return None;
                }
                let first = !s.seen_bytes;
                s.seen_bytes = true;
                if first && bytes.first().is_some_and(|&b| b != HANDSHAKE) {
                    // Not TLS at all (plain HTTP on the TLS port): close, no alert.
                    sh.counters.not_tls.fetch_add(1, Relaxed);
                    self.fail(&c, &mut s);
                    return None;
                }
                let mut plain = Vec::new();
                let fed = feed(&mut s, &bytes, &mut plain);
                // Handshake records, alerts: out before anything else happens.
                let _ = c.flush_records(&mut s, &sh.counters);
                if let Err(e) = fed {
                    tracing::debug!(conn = %conn, "TLS: {e}");
                    match s.phase {
                        Phase::Handshaking(_) => {
                            sh.counters.handshake_failures.fetch_add(1, Relaxed)
                        }
                        _ => sh.counters.protocol_errors.fetch_add(1, Relaxed),
                    };
                    self.fail(&c, &mut s);
                    return None;
                }
                if matches!(s.phase, Phase::Handshaking(_)) && !s.tls.is_handshaking() {
                    self.established(&c, &mut s);
                    // The application's attach function runs with the session
                    // unlocked: it may bind and write to (or close) the connection,
                    // which takes the lock. Nothing else handles this connection
                    // meanwhile (its events run one at a time here, and its phase
                    // is no longer the handshake the sweeper cuts).
                    drop(s);
                    let state = self.attach.as_ref().and_then(|a| (a.0)(c.id, c.peer));
                    s = c.s.lock();
                    s.state.clone_from(&state);
                    // The connection's first event; its `born` is the accept's, so
                    // the first request's response time covers the handshake.
                    let first = SocketEvent::Accepted {
                        conn: c.id,
                        peer: c.peer,
                        state,
                    };
                    push(&mut s, out, first);
                }
                if s.phase == Phase::Open {
                    if !plain.is_empty() {
                        let state = s.state.clone();
                        push(
                            &mut s,
                            out,
                            SocketEvent::Data {
                                conn,
                                bytes: plain,
                                state,
                            },
                        );
                    }
                    if s.read_closed {
                        s.read_closed = false;
                        let state = s.state.clone();
                        push(&mut s, out, SocketEvent::ReadClosed { conn, state });
                    }
                }
                drop(s);
                Some(c)
            }
            SocketEvent::ReadClosed { conn, .. } => {
                let c = sh.table.get(conn)?;
                let mut s = c.s.lock();
                match s.phase {
                    // A truncated handshake (or none at all): nothing more will come.
                    Phase::Handshaking(_) => {
                        let counter = if s.seen_bytes {
                            &sh.counters.handshake_failures
                        } else {
                            &sh.counters.abandoned
                        };
                        counter.fetch_add(1, Relaxed);
                        self.fail(&c, &mut s);
                    }
                    Phase::Open => {
                        let state = s.state.clone();
                        push(&mut s, out, SocketEvent::ReadClosed { conn, state });
                    }
                    Phase::Done => {}
                }
                drop(s);
                Some(c)
            }
            SocketEvent::Resumed { conn, .. } => {
                let c = sh.table.get(conn)?;
                let mut s = c.s.lock();
                self.resumed(&c, &mut s, out);
                drop(s);
                Some(c)
            }
            SocketEvent::WriteBacklog { conn, queued, .. } => {
                let c = sh.table.get(conn)?;
                let mut s = c.s.lock();
                if s.phase == Phase::Open {
                    let state = s.state.clone();
                    push(
                        &mut s,
                        out,
                        SocketEvent::WriteBacklog {
                            conn,
                            queued,
                            state,
                        },
                    );
                }
                drop(s);
                Some(c)
            }
            SocketEvent::Closed { conn, reason, .. } => {
                let c = sh.table.remove(conn)?;
                let mut s = c.s.lock();
                let was = s.phase;
                sh.end_handshake(&mut s);
                s.phase = Phase::Done;
                s.file = None;
                s.after_file.clear();
                let held = std::mem::take(&mut s.held);
                // The stage's last hold of the application's state: it goes with
                // `Closed`.
                let state = s.state.take();
                drop(s);
                if let Phase::Handshaking(_) = was {
                    sh.counters.abandoned.fetch_add(1, Relaxed);
                }
                // The application heard (or holds) `Accepted`: it hears `Closed`,
                // last, after what it was still owed. Nothing is held any more.
                if c.announced.load(Relaxed) {
                    for ev in held.into_iter().chain([SocketEvent::Closed {
                        conn,
                        reason,
                        state,
                    }]) {
                        if self.app.try_enqueue_with(ev, meta).is_err() {
                            sh.counters.undelivered.fetch_add(1, Relaxed);
                        }
                    }
                }
                None
            }
            _ => None,
        }
    }

    /// The handshake completed: count it and announce the connection.
    /// The caller then makes the application's state and delivers `Accepted`.
    fn established(&self, c: &TlsConn, s: &mut Session) {
        let sh = &self.shared;
        sh.end_handshake(s);
        s.phase = Phase::Open;
        c.announced.store(true, Relaxed);
        let counters = &sh.counters;
        counters.handshakes.fetch_add(1, Relaxed);
        if matches!(s.tls.handshake_kind(), Some(rustls::HandshakeKind::Resumed)) {
            counters.resumed.fetch_add(1, Relaxed);
        }
        if s.tls.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
            counters.tls13.fetch_add(1, Relaxed);
        }
    }

    /// Offers `out` to the application, in order, with no lock held; what it
    /// refuses is held (reading paused) and offered again after [`RETRY`].
    fn deliver(&self, c: &TlsConn, out: &mut Vec<SocketEvent>, meta: Meta, cx: &Context<'_>) {
        let mut events = out.drain(..);
        while let Some(ev) = events.next() {
            if let Err(e) = self.app.try_enqueue_with(ev, meta) {
                let mut s = c.s.lock();
                // Ahead of anything held since (nothing can be: this stage handles
                // the connection's events one at a time).
                let rest: Vec<SocketEvent> =
                    std::iter::once(e.into_inner()).chain(events).collect();
                for ev in rest.into_iter().rev() {
                    s.held.push_front(ev);
                }
                self.shared.counters.app_stalls.fetch_add(1, Relaxed);
                c.settle_reading(&s);
                drop(s);
                let retry = SocketEvent::Resumed {
                    conn: c.id,
                    state: None,
                };
                cx.schedule_with(RETRY, &self.me, retry, meta);
                return;
            }
        }
    }

    /// The socket resumed reading (a drained file, a retry, the application's
    /// resume): do what waited. The held events go to `out`.
    fn resumed(&self, c: &TlsConn, s: &mut Session, out: &mut Vec<SocketEvent>) {
        out.extend(s.held.drain(..));
        if s.draining {
            s.draining = false;
            if c.pump(s, &self.shared.counters).is_err() {
                self.fail(c, s);
                return;
            }
        }
        let owed = s.resume_owed && !s.app_paused;
        // A resume the TLS layer did not ask for (e.g. a relay's drain watch) is the
        // application's to hear too.
        let unasked = !s.draining && !s.app_paused && s.phase == Phase::Open;
        if owed || unasked {
            s.resume_owed = false;
            out.push(SocketEvent::Resumed {
                conn: c.id,
                state: s.state.clone(),
            });
        }
        c.settle_reading(s);
    }

    /// Closes a connection that failed (after any alert rustls queued).
    fn fail(&self, c: &TlsConn, s: &mut Session) {
        self.shared.end_handshake(s);
        s.phase = Phase::Done;
        c.writer.close(c.id);
    }
}

/// Queues `ev` for the application: behind the held events if there are any.
fn push(s: &mut Session, out: &mut Vec<SocketEvent>, ev: SocketEvent) {
    if s.held.is_empty() {
        out.push(ev);
    } else {
        s.held.push_back(ev);
    }
}

/// Aborts connections whose handshake ran longer than the timeout (a slow or
/// stalled client cannot hold a connection slot). Returns how many.
pub(crate) fn sweep(shared: &Shared, now: Instant) -> usize {
    let mut cut = 0;
    for c in shared.table.all() {
        let mut s = c.s.lock();
        if let Phase::Handshaking(since) = s.phase
            && now.saturating_duration_since(since) > shared.cfg.handshake_timeout
        {
            shared.end_handshake(&mut s);
            s.phase = Phase::Done;
            drop(s);
            shared.counters.handshake_timeouts.fetch_add(1, Relaxed);
            shared.raw.abort(c.id);
            cut += 1;
        }
    }
    cut
}
