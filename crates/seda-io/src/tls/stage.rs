//! The TLS stage: the socket events of the TLS listener in, the application's
//! events out, decrypted. A connection is announced to the application
//! (`Accepted`) only once its handshake completed; a connection whose handshake
//! fails, times out, or is refused never reaches it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use seda::{Batch, Context, EventHandler, Meta, Sink};

use super::Shared;
use super::session::{Phase, Session, TlsConn, feed};
use crate::socket::SocketEvent;

/// How long an event the application's stage refused waits before it is offered
/// again.
const RETRY: Duration = Duration::from_millis(5);

/// The stage's handler.
#[derive(Debug)]
pub(crate) struct TlsStage {
    pub(crate) shared: Arc<Shared>,
    /// The application's stage.
    pub(crate) app: Sink<SocketEvent>,
    /// This stage (a refused event's retry comes back here).
    pub(crate) me: Sink<SocketEvent>,
}

/// A TLS record header's first byte: handshake.
const HANDSHAKE: u8 = 0x16;

impl EventHandler<SocketEvent> for TlsStage {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, cx: &Context<'_>) {
        while let Some((ev, meta)) = batch.next_with_meta() {
            self.on_event(ev, meta, cx);
        }
    }
}

impl TlsStage {
    fn on_event(&self, ev: SocketEvent, meta: Meta, cx: &Context<'_>) {
        let sh = &self.shared;
        match ev {
            SocketEvent::Accepted { conn, peer } => {
                if sh.in_progress.load(Relaxed) >= sh.cfg.max_handshakes {
                    sh.counters.handshakes_refused.fetch_add(1, Relaxed);
                    sh.raw.abort(conn);
                    return;
                }
                let Some(raw) = sh.raw.bind(conn) else {
                    return;
                };
                let tls = match rustls::ServerConnection::new(sh.acceptor.config()) {
                    Ok(mut t) => {
                        t.set_buffer_limit(None);
                        t
                    }
                    Err(e) => {
                        tracing::warn!("TLS session: {e}");
                        sh.raw.abort(conn);
                        return;
                    }
                };
                sh.in_progress.fetch_add(1, Relaxed);
                let c = TlsConn::new(conn, peer, raw, sh.raw.clone(), tls, meta.born());
                sh.table.insert(Arc::new(c));
            }
            SocketEvent::Data { conn, bytes } => {
                let Some(c) = sh.table.get(conn) else {
                    return;
                };
                sh.counters
                    .bytes_decrypted
                    .fetch_add(bytes.len() as u64, Relaxed);
                let mut s = c.s.lock();
                if s.phase == Phase::Done {
                    return;
                }
                let first = !s.seen_bytes;
                s.seen_bytes = true;
                if first && bytes.first().is_some_and(|&b| b != HANDSHAKE) {
                    // Not TLS at all (plain HTTP on the TLS port): close, no alert.
                    sh.counters.not_tls.fetch_add(1, Relaxed);
                    self.fail(&c, &mut s);
                    return;
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
                    return;
                }
                if matches!(s.phase, Phase::Handshaking(_)) && !s.tls.is_handshaking() {
                    self.established(&c, &mut s, meta);
                }
                if s.phase == Phase::Open {
                    if !plain.is_empty() {
                        self.deliver(
                            &c,
                            &mut s,
                            SocketEvent::Data { conn, bytes: plain },
                            meta,
                            cx,
                        );
                    }
                    if s.read_closed {
                        s.read_closed = false;
                        self.deliver(&c, &mut s, SocketEvent::ReadClosed { conn }, meta, cx);
                    }
                }
            }
            SocketEvent::ReadClosed { conn } => {
                let Some(c) = sh.table.get(conn) else {
                    return;
                };
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
                        self.deliver(&c, &mut s, SocketEvent::ReadClosed { conn }, meta, cx)
                    }
                    Phase::Done => {}
                }
            }
            SocketEvent::Resumed { conn } => {
                let Some(c) = sh.table.get(conn) else {
                    return;
                };
                let mut s = c.s.lock();
                self.resumed(&c, &mut s, meta, cx);
            }
            SocketEvent::WriteBacklog { conn, queued } => {
                if let Some(c) = sh.table.get(conn) {
                    let mut s = c.s.lock();
                    if s.phase == Phase::Open {
                        let ev = SocketEvent::WriteBacklog { conn, queued };
                        self.deliver(&c, &mut s, ev, meta, cx);
                    }
                }
            }
            SocketEvent::Closed { conn, reason } => {
                let Some(c) = sh.table.remove(conn) else {
                    return;
                };
                let mut s = c.s.lock();
                let was = s.phase;
                sh.end_handshake(&mut s);
                s.phase = Phase::Done;
                s.file = None;
                s.after_file.clear();
                let held = std::mem::take(&mut s.held);
                drop(s);
                match was {
                    Phase::Handshaking(_) => {
                        sh.counters.abandoned.fetch_add(1, Relaxed);
                    }
                    // The application heard `Accepted` (the handshake finished even if
                    // the connection failed since): it hears `Closed`, after what it
                    // was still owed.
                    Phase::Open | Phase::Done if c.announced.load(Relaxed) => {
                        for ev in held {
                            let _ = self.app.try_enqueue_with(ev, meta);
                        }
                        if self
                            .app
                            .try_enqueue_with(SocketEvent::Closed { conn, reason }, meta)
                            .is_err()
                        {
                            sh.counters.undelivered.fetch_add(1, Relaxed);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// The handshake completed: count it and announce the connection.
    fn established(&self, c: &TlsConn, s: &mut Session, meta: Meta) {
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
        let ev = SocketEvent::Accepted {
            conn: c.id,
            peer: c.peer,
        };
        // The connection's first event; its `born` is the accept's, so the first
        // request's response time covers the handshake.
        if self.app.try_enqueue_with(ev, meta).is_err() {
            // The application cannot take a new connection: it never hears of it.
            sh.counters.undelivered.fetch_add(1, Relaxed);
            s.phase = Phase::Done;
            c.announced.store(false, Relaxed);
            c.writer.abort(c.id);
        }
    }

    /// Hands `ev` to the application, or holds it (and pauses reading) if its stage
    /// refuses; a retry comes back as a `Resumed`.
    fn deliver(&self, c: &TlsConn, s: &mut Session, ev: SocketEvent, meta: Meta, cx: &Context<'_>) {
        if s.held.is_empty() {
            match self.app.try_enqueue_with(ev, meta) {
                Ok(()) => return,
                Err(e) => s.held.push_back(e.into_inner()),
            }
        } else {
            s.held.push_back(ev);
        }
        self.shared.counters.app_stalls.fetch_add(1, Relaxed);
        c.settle_reading(s);
        cx.schedule_with(RETRY, &self.me, SocketEvent::Resumed { conn: c.id }, meta);
    }

    /// The socket resumed reading (a drained file, a retry, the application's
    /// resume): do what waited.
    fn resumed(&self, c: &TlsConn, s: &mut Session, meta: Meta, cx: &Context<'_>) {
        let sh = &self.shared;
        while let Some(ev) = s.held.pop_front() {
            if let Err(e) = self.app.try_enqueue_with(ev, meta) {
                s.held.push_front(e.into_inner());
                c.settle_reading(s);
                cx.schedule_with(RETRY, &self.me, SocketEvent::Resumed { conn: c.id }, meta);
                return;
            }
        }
        if s.draining {
            s.draining = false;
            if c.pump(s, &sh.counters).is_err() {
                self.fail(c, s);
                return;
            }
        }
        if s.resume_owed && !s.app_paused {
            s.resume_owed = false;
            let _ = self
                .app
                .try_enqueue_with(SocketEvent::Resumed { conn: c.id }, meta);
        } else if !s.draining && !s.app_paused && s.phase == Phase::Open {
            // A resume the TLS layer did not ask for (e.g. a relay's drain watch):
            // the application's to hear.
            let _ = self
                .app
                .try_enqueue_with(SocketEvent::Resumed { conn: c.id }, meta);
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
