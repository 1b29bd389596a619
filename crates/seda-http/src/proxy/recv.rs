//! The upstream-events stage (`proxy-upstream`): the socket events of every upstream
//! connection (colored by connection, so one connection's run in order), turned
//! into the client's response.
//!
//! - `Connected`: the request's body (if any) is attached to the connection.
//! - `Data`: the response head is parsed (`head.rs`); the route's admission is
//!   settled with the response time; the client gets our head and the body as it
//!   comes, re-framed, with a window ([`RESPONSE_WINDOW`]) on the client's outgoing
//!   queue past which the upstream is not read until the client has taken half; a
//!   small `Content-Length` body ([`HOLD`]) is held whole first, so that an upstream
//!   that dies in it costs the client a clean `502`. Once the response is complete,
//!   the connection goes back to its upstream's pool if both sides allow.
//! - End of file or `Closed`: a close-delimited body ends; a connect failure, a
//!   stale kept-alive connection (closed before any byte of the answer) or a reset
//!   before the head is retried once (idempotent requests whose body, if any, is
//!   still whole), on another upstream for a failure; otherwise `502`, or a
//!   truncated response once the head went out.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use bytes::{Buf, Bytes};
use seda::{Batch, Context, EventHandler};
use seda_io::{ConnId, SocketEvent};

use super::dispatch::{dispatch, fail, meta_of, settle};
use super::flight::{BodyIn, Flight, HOLD, RESPONSE_WINDOW, Resp, UpConn, UpState};
use super::head::{
    self, BadResponse, CRLF, ClientBody, LAST_CHUNK, ResponseBody, chunk_header, client_head,
};
use super::state::{RouteState, Shared};
use crate::proto::{ChunkLimits, ChunkedDecoder, Status};

/// The handler of the upstream-events stage.
#[derive(Debug)]
pub(crate) struct UpstreamEvents {
    pub(crate) shared: Arc<Shared>,
}

impl EventHandler<SocketEvent> for UpstreamEvents {
    fn handle_events(&self, batch: Batch<'_, SocketEvent>, _cx: &Context<'_>) {
        let now = Instant::now();
        for ev in batch {
            match ev {
                SocketEvent::Connected { conn, .. } => self.connected(conn),
                SocketEvent::Data { conn, bytes, .. } => self.data(conn, bytes, now),
                SocketEvent::ReadClosed { conn, .. } => self.ended(conn, false, now),
                SocketEvent::Closed { conn, .. } => self.ended(conn, true, now),
                _ => {}
            }
        }
    }
}

/// What to do with an upstream connection once its lock is released.
enum After {
    Nothing,
    /// Back to its upstream's pool.
    Pool,
    /// Close it.
    Close,
    /// Close it and dispatch this flight again.
    Retry(Box<Flight>),
}

impl UpstreamEvents {
    fn route_of(&self, c: &UpConn) -> Option<&Arc<RouteState>> {
        self.shared.routes.get(c.route)
    }

    fn connected(&self, conn: ConnId) {
        let Some(c) = self.shared.conns.get(conn) else {
            return self.shared.writer.abort(conn);
        };
        let Some(route) = self.route_of(&c) else {
            return;
        };
        route.upstreams[c.upstream]
            .counters
            .connects
            .fetch_add(1, Relaxed);
        let mut st = c.st.lock();
        st.connected = true;
        let failed = match &st.flight {
            Some(f) => match &f.body {
                Some(b) if b.failure().is_some() => true,
                Some(b) => {
                    b.attach(conn);
                    false
                }
                None => false,
            },
            None => {
                st.dead = true;
                self.shared.writer.close(conn);
                false
            }
        };
        if failed {
            // The client's body failed while we connected: answer its status.
            let f = st.flight.take();
            st.dead = true;
            drop(st);
            self.shared.writer.abort(conn);
            if let (Some(f), Some(route)) = (f, self.route_of(&c)) {
                fail(
                    &self.shared,
                    route,
                    Some(c.upstream),
                    f,
                    Status::BAD_REQUEST,
                    Instant::now(),
                );
            }
        }
    }

    fn data(&self, conn: ConnId, bytes: Vec<u8>, now: Instant) {
        let Some(c) = self.shared.conns.get(conn) else {
            return self.shared.writer.abort(conn);
        };
        let Some(route) = self.route_of(&c).cloned() else {
            return;
        };
        let mut st = c.st.lock();
        if st.flight.is_none() {
            // Bytes nobody asked for: the connection is out of step.
            st.dead = true;
            drop(st);
            return self.close(&c, &route);
        }
        if st.buf.is_empty() {
            // The read's buffer becomes the connection's, without a copy.
            st.buf = bytes::BytesMut::from(Bytes::from(bytes));
        } else {
            st.buf.extend_from_slice(&bytes);
        }
        let after = self.advance(&c, &route, &mut st, now);
        drop(st);
        self.after(&c, &route, after, now);
    }

    /// The upstream's end of file (`closed`: the connection is gone).
    fn ended(&self, conn: ConnId, closed: bool, now: Instant) {
        let c = if closed {
            self.shared.conns.remove(conn)
        } else {
            self.shared.conns.get(conn)
        };
        let Some(c) = c else { return };
        let Some(route) = self.route_of(&c).cloned() else {
            return;
        };
        if closed {
            route.upstreams[c.upstream].forget_idle(conn);
        }
        let mut st = c.st.lock();
        st.dead = true;
        let after = match st.flight.take() {
            Some(f) => self.eof(&c, &route, &mut st, f, now),
            None => After::Close,
        };
        drop(st);
        self.after(&c, &route, after, now);
    }

    fn after(&self, c: &Arc<UpConn>, route: &Arc<RouteState>, after: After, now: Instant) {
        match after {
            After::Nothing => {}
            After::Pool => {
                let up = &route.upstreams[c.upstream];
                if !up.put_idle(Arc::clone(c)) {
                    c.st.lock().dead = true;
                    self.close(c, route);
                }
            }
            After::Close => self.close(c, route),
            After::Retry(f) => {
                let f = *f;
                self.close(c, route);
                route.counters.retries.fetch_add(1, Relaxed);
                let client = f.ex.as_ref().map(|ex| ex.conn_id());
                match client {
                    Some(client) => dispatch(&self.shared, route, f, client, now),
                    None => fail(&self.shared, route, None, f, Status::BAD_GATEWAY, now),
                }
            }
        }
    }

    fn close(&self, c: &UpConn, route: &RouteState) {
        route.upstreams[c.upstream].forget_idle(c.id);
        self.shared.writer.close(c.id);
    }

    /// Processes what the connection's buffer holds of the response.
    fn advance(&self, c: &UpConn, route: &RouteState, st: &mut UpState, now: Instant) -> After {
        loop {
            let Some(f) = st.flight.as_mut() else {
                return After::Nothing;
            };
            f.deadline = now + route.cfg.timeout;
            if let Resp::Head = f.resp {
                match head::parse_response(&st.buf, f.head_request) {
                    Ok(None) => return After::Nothing,
                    Err(bad) => {
                        tracing::debug!(conn = %c.id, "bad upstream response: {bad:?}");
                        let f = st.flight.take().expect("checked above");
                        return self.garbage(c, route, f, bad, now);
                    }
                    Ok(Some(h)) if h.status < 200 => {
                        st.buf.advance(h.len);
                        continue;
                    }
                    Ok(Some(h)) => {
                        st.buf.advance(h.len);
                        if let Some(after) = self.head(c, route, st, h, now) {
                            return after;
                        }
                        continue;
                    }
                }
            }
            return self.body(c, route, st, now);
        }
    }

    /// A response head: settle admission, start the client's response.
    fn head(
        &self,
        c: &UpConn,
        route: &RouteState,
        st: &mut UpState,
        h: head::ResponseHead,
        now: Instant,
    ) -> Option<After> {
        let f = st.flight.as_mut()?;
        settle(route, Some(c.upstream), f, now);
        route.upstreams[c.upstream].succeeded();
        route.counters.responses.fetch_add(1, Relaxed);
        let ex = f.ex.take()?;
        if ex.is_cancelled() {
            route.counters.client_gone.fetch_add(1, Relaxed);
            ex.cancel();
            st.flight = None;
            return Some(After::Close);
        }
        let (body, keep_alive) = (h.body, h.keep_alive);
        let output = ClientBody::of(body, f.client_version);
        let close = ex.closes() || self.shared.out.draining() || output == ClientBody::Close;
        let out_head = client_head(h, output, close);
        let whole = match body {
            ResponseBody::Length(n) => usize::try_from(n).is_ok_and(|n| n <= st.buf.len()),
            _ => false,
        };
        if whole && let ResponseBody::Length(n) = body {
            // The whole body came with the head (a small response): it goes out
            // with the head at once, neither held nor streamed piece by piece.
            let n = n as usize;
            let mut bufs = Vec::with_capacity(2);
            bufs.push(out_head);
            if n > 0 {
                bufs.push(st.buf.split_to(n).freeze());
            }
            match ex.stream(&mut bufs, close) {
                Ok(s) => s.finish(),
                Err(ex) => ex.cancel(),
            }
            // Bytes after the body: the upstream is out of step, never reused.
            let keep =
                keep_alive && st.buf.is_empty() && f.body.as_ref().is_none_or(|b| b.is_finished());
            st.flight = None;
            return Some(self.done(st, keep, now));
        }
        let input = match body {
            ResponseBody::None => None,
            ResponseBody::Length(0) => None,
            ResponseBody::Length(n) => Some(BodyIn::Length(n)),
            ResponseBody::Chunked => Some(BodyIn::Chunked(Box::new(ChunkedDecoder::new(
                ChunkLimits::new(u64::MAX),
            )))),
            ResponseBody::Close => Some(BodyIn::Close),
        };
        let Some(input) = input else {
            // No body: the response is whole.
            let mut bufs = vec![out_head];
            if let Ok(s) = ex.stream(&mut bufs, close) {
                s.finish();
            }
            let keep = keep_alive && f.body.as_ref().is_none_or(|b| b.is_finished());
            st.flight = None;
            return Some(self.done(st, keep, now));
        };
        let hold = matches!(body, ResponseBody::Length(n) if n <= HOLD);
        let (held, stream) = if hold {
            (Some((ex, out_head, Vec::new())), None)
        } else {
            let mut bufs = vec![out_head];
            match ex.stream(&mut bufs, close) {
                Ok(s) => (None, Some(s)),
                Err(ex) => {
                    // Cannot happen while a proxied request is alone in flight.
                    ex.cancel();
                    st.flight = None;
                    return Some(After::Close);
                }
            }
        };
        f.resp = Resp::Body {
            input,
            output,
            held,
            stream,
            close,
            keep_alive,
        };
        None
    }

    /// Moves what the buffer holds of the body to the client.
    fn body(&self, c: &UpConn, route: &RouteState, st: &mut UpState, now: Instant) -> After {
        let UpState { flight, buf, .. } = st;
        let Some(f) = flight.as_mut() else {
            return After::Nothing;
        };
        let Resp::Body {
            input,
            output,
            held,
            stream,
            keep_alive,
            close,
        } = &mut f.resp
        else {
            return After::Nothing;
        };
        let mut parts: Vec<Bytes> = Vec::new();
        let chunked_out = *output == ClientBody::Chunked;
        let emit = |data: Bytes, parts: &mut Vec<Bytes>| {
            if data.is_empty() {
                return;
            }
            if chunked_out {
                parts.push(chunk_header(data.len()));
                parts.push(data);
                parts.push(CRLF.clone());
            } else {
                parts.push(data);
            }
        };
        let done = match input {
            BodyIn::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                emit(buf.split_to(n).freeze(), &mut parts);
                *left -= n as u64;
                *left == 0
            }
            BodyIn::Chunked(d) => {
                let mut pieces = Vec::new();
                match d.feed(buf, |p| pieces.push(Bytes::copy_from_slice(p))) {
                    Ok(fed) => {
                        buf.advance(fed.consumed);
                        for p in pieces {
                            emit(p, &mut parts);
                        }
                        fed.done
                    }
                    Err(_) => {
                        let f = flight.take().expect("checked above");
                        return self.broken(c, route, f, now);
                    }
                }
            }
            BodyIn::Close => {
                let all = buf.split().freeze();
                emit(all, &mut parts);
                false
            }
        };
        if done && chunked_out {
            parts.push(LAST_CHUNK.clone());
        }
        if let Some((_, _, held_parts)) = held.as_mut() {
            held_parts.append(&mut parts);
            if !done {
                return After::Nothing;
            }
            if let Some((ex, head, rest)) = held.take() {
                let mut bufs = Vec::with_capacity(rest.len() + 1);
                bufs.push(head);
                bufs.extend(rest);
                match ex.stream(&mut bufs, *close) {
                    Ok(s) => s.finish(),
                    Err(ex) => ex.cancel(),
                }
            }
        } else if let Some(s) = stream.as_ref() {
            if !parts.is_empty() && !s.send(&mut parts) {
                // The client is gone: stop here.
                route.counters.client_gone.fetch_add(1, Relaxed);
                *flight = None;
                return After::Close;
            }
            if !done && s.queued() > RESPONSE_WINDOW {
                self.shared.writer.pause_reading(c.id);
                self.shared
                    .writer
                    .resume_on_drain(s.conn_id(), RESPONSE_WINDOW / 2, c.id);
            }
            if done && let Some(s) = stream.take() {
                s.finish();
            }
        }
        if !done {
            return After::Nothing;
        }
        let keep = *keep_alive && buf.is_empty() && f.body.as_ref().is_none_or(|b| b.is_finished());
        *flight = None;
        self.done(st, keep, now)
    }

    /// The flight is over: the connection goes back to the pool or closes.
    fn done(&self, st: &mut UpState, keep: bool, now: Instant) -> After {
        if keep && !st.dead {
            st.idle_since = Some(now);
            After::Pool
        } else {
            st.dead = true;
            After::Close
        }
    }

    /// An unparsable or oversized response head.
    fn garbage(
        &self,
        c: &UpConn,
        route: &RouteState,
        f: Flight,
        bad: BadResponse,
        now: Instant,
    ) -> After {
        let _ = bad;
        route.upstreams[c.upstream].failed(now);
        fail(
            &self.shared,
            route,
            Some(c.upstream),
            f,
            Status::BAD_GATEWAY,
            now,
        );
        After::Close
    }

    /// A body that cannot go on (malformed chunks, the upstream gone mid-body): a
    /// held response becomes a `502`; a streaming one is cut (the client sees it
    /// truncated).
    fn broken(&self, c: &UpConn, route: &RouteState, mut f: Flight, now: Instant) -> After {
        route.upstreams[c.upstream].failed(now);
        let meta = meta_of(&f);
        if let Resp::Body { held, stream, .. } = &mut f.resp {
            if let Some((ex, _, _)) = held.take() {
                route.counters.bad_gateway.fetch_add(1, Relaxed);
                self.shared.answer(ex, Status::BAD_GATEWAY, meta);
            }
            // Dropped unfinished: the client's connection is aborted.
            drop(stream.take());
        }
        After::Close
    }

    /// End of file with a flight on the connection.
    fn eof(
        &self,
        c: &UpConn,
        route: &RouteState,
        st: &mut UpState,
        mut f: Flight,
        now: Instant,
    ) -> After {
        let up = &route.upstreams[c.upstream];
        match &mut f.resp {
            Resp::Head => {
                let never_connected = !st.connected;
                let stale = st.connected && st.reused && st.buf.is_empty();
                if never_connected {
                    up.counters.connect_failures.fetch_add(1, Relaxed);
                }
                if !stale {
                    up.failed(now);
                }
                let body_whole = f.body.as_ref().is_none_or(|b| b.detach());
                let retry = (never_connected || stale)
                    && !f.retried
                    && f.idempotent
                    && body_whole
                    && f.ex.as_ref().is_some_and(|ex| !ex.is_cancelled());
                up.counters.in_flight.fetch_sub(1, Relaxed);
                if retry {
                    f.retried = true;
                    if never_connected {
                        f.failed_on.push(c.upstream);
                    }
                    return After::Retry(Box::new(f));
                }
                fail(&self.shared, route, None, f, Status::BAD_GATEWAY, now);
                After::Close
            }
            Resp::Body {
                input: BodyIn::Close,
                ..
            } => {
                // The close ends the body: whatever is buffered, then the end.
                st.flight = Some(f);
                if let Some(Resp::Body { input, .. }) = st.flight.as_mut().map(|f| &mut f.resp) {
                    *input = BodyIn::Length(st.buf.len() as u64);
                }
                match self.body(c, route, st, now) {
                    After::Pool | After::Nothing => After::Close,
                    other => other,
                }
            }
            Resp::Body { .. } => self.broken(c, route, f, now),
        }
    }
}
