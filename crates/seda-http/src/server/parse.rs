//! HttpParse (SEDA 5.1): accepts connections and turns each connection's bytes into
//! requests, in order, for HttpRecv.
//!
//! Socket events of one connection carry its color, so they run one at a time and in
//! order. A request for a dynamic handler goes from here straight to the handler's
//! stage, whose admission decides at once (early refusal, see `dynamic.rs`); every
//! other request goes to HttpRecv. For each request HttpParse numbers the response slot ([`Exchange`]), decides
//! once whether a dynamic handler owns the path (only a handler reads a body: any
//! other request's body is skipped as it arrives, never buffered), reads or skips the
//! body (`Content-Length` or chunked, within [`Limits::max_body`]), and answers
//! `Expect: 100-continue` for a body that will be read.
//!
//! # Bounds
//! - At most `max_pipelined` requests of a connection are in flight (parsed and not
//!   answered). At the bound HttpParse stops parsing and asks the socket layer to stop
//!   reading the connection; HttpSend resumes it once half are answered, and the
//!   socket layer's `Resumed` event brings HttpParse back to the bytes it held.
//!   A connection's buffer is thus bounded by a read chunk plus one request.
//! - A body is buffered only for a handler, up to `max_body`.
//!
//! # `born`
//! A request's `born` (from which every stage measures its response time, USITS'03
//! 3.2) is when its first byte was read from the socket, or, for a connection's
//! first request, when the connection was accepted: the client's clock starts at
//! its connect, so the server's p90 covers what the client waits for, including
//! the socket layer's and this stage's queues.
//!
//! # Proxied requests (the front door, `crate::proxy`)
//! A request for a proxy route goes to the route's stage as soon as its head is
//! parsed; its body, if any, streams to the upstream through a bounded pipe as it
//! arrives ([`BodySender`]: when the pipe is full, the client is not read until the
//! upstream has taken half). Such a request is alone in flight on its connection: it
//! is parsed only once every earlier response is out, and nothing after it until
//! its own response is (its response streams). Its body's limit is the route's.
//!
//! # Half-close
//! A client that shuts down its sending side (`ReadClosed`: `nc -N`, a health check)
//! has sent all it will. Its requests are answered in order; one left incomplete gets
//! `400`; the connection closes once every response is out
//! ([`Conn::close_when_answered`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::{Buf, Bytes, BytesMut};
use seda::{Batch, Context, EventHandler, Meta, Sink};
use seda_io::SocketEvent;

use super::answer::Answer;
use super::conn::{Conn, Exchange, Ns, PendingBody, RecvState, ns};
use super::events::{HttpRequest, Job, Route};
use super::state::{Haboob, Responder};
use crate::access_log::events::{Origin, RequestRecord};
use crate::proto::{
    self, BodyFraming, ChunkLimits, ChunkedDecoder, ChunkedError, Method, RequestHead, Status,
};
use crate::proxy::{Accept, BodySender, Mount, ProxyTable};

/// The body of a request whose head is parsed.
#[derive(Debug)]
pub(crate) struct BodyInProgress {
    /// The request waiting for this body (a handler will read it); `None` when the
    /// body is skipped (its request went on without it).
    waiting: Option<Waiting>,
    reader: BodyReader,
    /// Decoded chunked data so far (kept bodies only).
    data: BytesMut,
    /// Where a proxied request's body goes (see the module docs).
    stream: Option<BodySender>,
}

#[derive(Debug)]
struct Waiting {
    ex: Exchange,
    born: Ns,
    raw: Bytes,
    head: RequestHead,
    route: Arc<Route>,
}

#[derive(Debug)]
enum BodyReader {
    Length { left: u64 },
    Chunked(ChunkedDecoder),
}

impl PendingBody for BodyInProgress {
    fn take_waiting(&mut self) -> Option<Exchange> {
        self.waiting.take().map(|w| w.ex)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// HttpParse's own view of the body a connection keeps (it only ever stores a
/// [`BodyInProgress`] there).
fn body_mut(body: &mut Option<Box<dyn PendingBody>>) -> Option<&mut BodyInProgress> {
    body.as_mut()
        .and_then(|b| b.as_any_mut().downcast_mut::<BodyInProgress>())
}

fn take_body(rx: &mut RecvState) -> Option<BodyInProgress> {
    rx.body
        .take()
        .and_then(|b| b.into_any().downcast::<BodyInProgress>().ok())
        .map(|b| *b)
}

/// What parsing produced, dispatched once the connection is unlocked.
enum Step {
    /// A request and its `born` (see the module docs).
    Forward(Job, Ns),
    /// A request for a proxy route, its body's pipe, its `born`.
    Proxy(Mount, Job, Option<crate::proxy::BodyPipe>, Ns),
    Answer(Exchange, Answer),
}

/// The HttpParse stage.
#[derive(Debug)]
pub(crate) struct HttpParse {
    pub(crate) hb: Arc<Haboob>,
    pub(crate) recv: Sink<Job>,
    pub(crate) out: Responder,
}

thread_local! {
    /// Each thread's buffer of steps, reused (no allocation per event).
    static STEPS: std::cell::Cell<Vec<Step>> = const { std::cell::Cell::new(Vec::new()) };
}

impl EventHandler<SocketEvent> for HttpParse {
    fn handle_events(&self, mut batch: Batch<'_, SocketEvent>, _cx: &Context<'_>) {
        let mut steps = STEPS.take();
        while let Some((ev, meta)) = batch.next_with_meta() {
            let meta = meta.with_color(None);
            // The socket layer's clock of the event (its loop reads the clock once
            // per turn) stands for now: no clock read per request here.
            let born = ns(meta.born_nanos());
            self.on_event(ev, born, born, &mut steps);
            for step in steps.drain(..) {
                self.dispatch(step, meta);
            }
        }
        STEPS.with(|c| c.set(steps));
    }
}

impl HttpParse {
    /// `read_at` is the event's `born`: when the socket layer read its bytes (or
    /// accepted the connection).
    fn on_event(&self, ev: SocketEvent, read_at: Ns, now: Ns, steps: &mut Vec<Step>) {
        let hb = &self.hb;
        match ev {
            // The connection's record was made as the socket layer admitted it
            // (`Haboob::attach`; none while draining) and comes with each event.
            SocketEvent::Accepted { state, .. } => {
                hb.counters.connections.fetch_add(1, Relaxed);
                if let Some(c) = Conn::of(state) {
                    c.rx.lock().born = Some(read_at);
                }
            }
            SocketEvent::Data { bytes, state, .. } => {
                let Some(c) = Conn::of(state) else {
                    return;
                };
                let mut rx = c.rx.lock();
                if rx.closing || c.is_gone() {
                    return;
                }
                c.touch(hb.millis_at(now));
                rx.arrived(read_at, bytes.len());
                if rx.buf.is_empty() {
                    // The read buffer itself, no copy (it is uniquely owned).
                    rx.buf = Bytes::from(bytes)
                        .try_into_mut()
                        .unwrap_or_else(|b| BytesMut::from(&b[..]));
                } else {
                    rx.buf.extend_from_slice(&bytes);
                }
                self.advance(&c, &mut rx, now, steps);
            }
            SocketEvent::Resumed { state, .. } => {
                if let Some(c) = Conn::of(state) {
                    let mut rx = c.rx.lock();
                    self.advance(&c, &mut rx, now, steps);
                }
            }
            SocketEvent::ReadClosed { state, .. } => {
                // The client sent all it will: answer what it sent, then close.
                if let Some(c) = Conn::of(state) {
                    let mut rx = c.rx.lock();
                    rx.peer_done = true;
                    if !rx.closing && !c.is_gone() {
                        self.advance(&c, &mut rx, now, steps);
                    }
                }
            }
            SocketEvent::Closed { state, .. } => {
                if let Some(c) = Conn::of(state) {
                    hb.conns.remove(&c);
                    c.mark_gone();
                    // Drops a waiting request's slot (its Exchange holds the
                    // connection: a cycle otherwise).
                    *c.rx.lock() = RecvState::default();
                }
            }
            _ => {}
        }
    }

    fn dispatch(&self, step: Step, meta: Meta) {
        match step {
            Step::Forward(job, born) => {
                let meta = meta.with_born_nanos(born.get());
                if let Some(route) = job.req.route.clone() {
                    return super::dynamic::submit(&self.out, &route, job, meta);
                }
                if let Err(e) = self.recv.try_enqueue_with(job, meta) {
                    let job = e.into_inner();
                    self.out.answer(job.ex, Answer::Overload, meta);
                }
            }
            Step::Proxy(mount, job, body, born) => {
                self.hb
                    .proxies
                    .submit(&mount, job, body, meta.with_born_nanos(born.get()));
            }
            Step::Answer(ex, answer) => self.out.answer(ex, answer, meta),
        }
    }

    /// Parses every complete request (and body) at the front of the connection's
    /// buffer, within the pipelining bound.
    fn advance(&self, c: &Arc<Conn>, rx: &mut RecvState, now: Ns, steps: &mut Vec<Step>) {
        self.parse_buffered(c, rx, now, steps);
        // An idle connection keeps no buffer: what the reads brought is parsed, and
        // the next read brings a buffer of its own.
        rx.release_empty_buffer();
    }

    /// [`HttpParse::advance`]'s work.
    fn parse_buffered(&self, c: &Arc<Conn>, rx: &mut RecvState, now: Ns, steps: &mut Vec<Step>) {
        let hb = &self.hb;
        // Heads are parsed with the largest body limit of any proxy route; the
        // handlers' limit is checked once the route is known.
        let live = hb.live.load();
        let raised;
        let limits = if hb.proxies.max_body() > live.limits.max_body {
            raised = crate::proto::Limits {
                max_body: hb.proxies.max_body(),
                ..live.limits.clone()
            };
            &raised
        } else {
            &live.limits
        };
        loop {
            if let Some(body) = body_mut(&mut rx.body) {
                let read = match read_body(body, &mut rx.buf) {
                    // The rest of the body will never come.
                    Ok(false) if rx.peer_done => Err(Status::BAD_REQUEST),
                    read => read,
                };
                // A body streaming to an upstream is timed by its route (its
                // response timeout); one that is read for us or skipped, here.
                let streaming = body
                    .stream
                    .as_ref()
                    .is_some_and(|s| s.accepting() != Accept::Discard);
                match read {
                    Ok(false) => {
                        if !streaming {
                            rx.head_started.get_or_insert(now);
                        }
                        return;
                    }
                    Ok(true) => {
                        let done = take_body(rx);
                        rx.head_started = None;
                        let done = match done {
                            Some(BodyInProgress {
                                stream: Some(s), ..
                            }) => {
                                s.finish();
                                None
                            }
                            other => other,
                        };
                        if let Some(BodyInProgress {
                            waiting: Some(w),
                            data,
                            ..
                        }) = done
                        {
                            let body = match w.head.body {
                                BodyFraming::Chunked => data.freeze(),
                                _ => rx.buf.split_to(body_len(&w.head)).freeze(),
                            };
                            let req =
                                HttpRequest::new(w.raw, w.head, body, c.peer(), Some(w.route));
                            let job = Job {
                                ex: w.ex,
                                req: Box::new(req),
                            };
                            steps.push(Step::Forward(job, w.born));
                        }
                        continue;
                    }
                    Err(status) => {
                        hb.counters.bad_requests.fetch_add(1, Relaxed);
                        let mut body = take_body(rx);
                        if let Some(s) = body.as_mut().and_then(|b| b.stream.take()) {
                            if streaming {
                                // The route answers it (the exchange is its).
                                s.fail(Some(status));
                                rx.stop();
                                return;
                            }
                            s.fail(None);
                        }
                        let ex = match body.and_then(|mut b| b.take_waiting()) {
                            Some(mut ex) => {
                                ex.close_after();
                                ex
                            }
                            // The request went on without its body: the stream cannot
                            // be framed after it, so a last response says so and closes.
                            None => {
                                let mut ex =
                                    Exchange::new(Arc::clone(c), c.next_seq(), false, false);
                                if hb.log.is_some() {
                                    let born = rx.born.unwrap_or(now);
                                    ex.log(RequestRecord::unparsed(
                                        b"",
                                        c.peer(),
                                        seda::clock::instant(born.get()),
                                        Origin::Parse,
                                    ));
                                }
                                ex
                            }
                        };
                        steps.push(Step::Answer(ex, Answer::Error(status)));
                        rx.stop();
                        return;
                    }
                }
            }
            if rx.closing {
                rx.buf.clear();
                return;
            }
            if rx.solo {
                // The proxied request before is alone in flight (module docs). With
                // nothing after it to hold back, reading goes on: a later read finds
                // it still in flight and pauses then (a request-response client
                // sends its next request after the response, so it never does).
                // At end of input the pause is kept: its `Resumed` brings this stage
                // back to close the connection once the response is out.
                // (`in_flight` only falls while this stage holds the receive half.)
                if c.in_flight() > 0 {
                    if rx.buf.is_empty() && !rx.peer_done {
                        return;
                    }
                    if c.pause_until_idle() {
                        return;
                    }
                }
                rx.solo = false;
            }
            if c.in_flight() >= live.max_pipelined && c.pause_pipeline(live.max_pipelined) {
                hb.counters.pipeline_pauses.fetch_add(1, Relaxed);
                return;
            }
            let skip = proto::skip_leading_crlf(&rx.buf);
            rx.buf.advance(skip);
            if rx.buf.is_empty() {
                rx.head_started = None;
                if rx.peer_done {
                    c.close_when_answered();
                }
                return;
            }
            // One match on the parse's result, which is moved once: the head is the
            // largest value of the request path (a second match copied it twice).
            let head = match proto::parse_head(&rx.buf, limits) {
                Ok(Some(head)) => head,
                Ok(None) if !rx.peer_done => {
                    rx.head_started.get_or_insert(now);
                    return;
                }
                // `Ok(None)` at end of input: the rest of the head will never come.
                failed => {
                    let e = failed.err().unwrap_or(proto::ParseError::Malformed);
                    hb.counters.bad_requests.fetch_add(1, Relaxed);
                    let mut ex = Exchange::new(Arc::clone(c), c.next_seq(), false, false);
                    if hb.log.is_some() {
                        let born = rx.born.unwrap_or(now);
                        ex.log(RequestRecord::unparsed(
                            &rx.buf,
                            c.peer(),
                            seda::clock::instant(born.get()),
                            Origin::Parse,
                        ));
                    }
                    steps.push(Step::Answer(ex, Answer::Error(e.status())));
                    rx.stop();
                    return;
                }
            };
            let path = head.path(&rx.buf);
            let route = hb.routes.find(path);
            let proxy = match hb.proxies.is_empty() {
                true => None,
                false => hb.proxies.find(path).filter(|m| {
                    route
                        .as_ref()
                        .is_none_or(|r| m.route.cfg.prefix.len() >= r.reg.prefix().len())
                }),
            };
            if let Some(mount) = proxy {
                // Alone in flight (module docs): wait for earlier responses.
                if c.in_flight() > 0 && c.pause_until_idle() {
                    return;
                }
                self.proxied(c, rx, head, mount, now, steps);
                if rx.closing {
                    return;
                }
                continue;
            }
            if matches!(head.body, BodyFraming::Length(n) if n > live.limits.max_body) {
                hb.counters.bad_requests.fetch_add(1, Relaxed);
                let ex = Exchange::new(Arc::clone(c), c.next_seq(), false, false);
                steps.push(Step::Answer(ex, Answer::Error(Status::PAYLOAD_TOO_LARGE)));
                rx.stop();
                return;
            }
            hb.counters.requests.fetch_add(1, Relaxed);
            let raw = rx.take_front(head.head_len);
            let born = rx.take_born(now);
            let head_only = head.method == Method::Head;
            let mut ex = Exchange::new(Arc::clone(c), c.next_seq(), head_only, head.keep_alive);
            if hb.log.is_some() {
                let handler = route.as_ref().map(|r| Arc::clone(&r.stage));
                ex.log(RequestRecord::parsed(
                    &raw,
                    &head,
                    c.peer(),
                    seda::clock::instant(born.get()),
                    handler,
                ));
            }
            if !head.keep_alive {
                rx.closing = true;
            }
            let reader = match head.body {
                BodyFraming::None => {
                    rx.head_started = None;
                    let req = HttpRequest::new(raw, head, Bytes::new(), c.peer(), route);
                    let job = Job {
                        ex,
                        req: Box::new(req),
                    };
                    steps.push(Step::Forward(job, born));
                    continue;
                }
                BodyFraming::Length(n) => BodyReader::Length { left: n },
                BodyFraming::Chunked => {
                    BodyReader::Chunked(ChunkedDecoder::new(ChunkLimits::new(live.limits.max_body)))
                }
            };
            rx.head_started = Some(now);
            match route {
                Some(route) => {
                    if head.expect_continue {
                        hb.counters.continues.fetch_add(1, Relaxed);
                        c.send_continue(ex.seq());
                    }
                    rx.body = Some(Box::new(BodyInProgress {
                        waiting: Some(Waiting {
                            ex,
                            born,
                            raw,
                            head,
                            route,
                        }),
                        reader,
                        data: BytesMut::new(),
                        stream: None,
                    }));
                }
                None => {
                    hb.counters.bodies_discarded.fetch_add(1, Relaxed);
                    let expect = head.expect_continue;
                    if expect {
                        // The client may or may not send the body now; what follows
                        // cannot be framed, so answer and close (RFC 9110 10.1.1).
                        ex.close_after();
                    }
                    let req = HttpRequest::new(raw, head, Bytes::new(), c.peer(), None);
                    let job = Job {
                        ex,
                        req: Box::new(req),
                    };
                    steps.push(Step::Forward(job, born));
                    if expect {
                        rx.stop();
                        return;
                    }
                    rx.body = Some(Box::new(BodyInProgress {
                        waiting: None,
                        reader,
                        data: BytesMut::new(),
                        stream: None,
                    }));
                }
            }
        }
    }

    /// Takes a request for a proxy route whose head is at the front of the buffer:
    /// its body (if any) will stream through a pipe; nothing after it is parsed until
    /// its response is out (module docs).
    fn proxied(
        &self,
        c: &Arc<Conn>,
        rx: &mut RecvState,
        head: RequestHead,
        mount: Mount,
        now: Ns,
        steps: &mut Vec<Step>,
    ) {
        let hb = &self.hb;
        let max_body = mount.route.cfg.max_body;
        if matches!(head.body, BodyFraming::Length(n) if n > max_body) {
            hb.counters.bad_requests.fetch_add(1, Relaxed);
            let ex = Exchange::new(Arc::clone(c), c.next_seq(), false, false);
            steps.push(Step::Answer(ex, Answer::Error(Status::PAYLOAD_TOO_LARGE)));
            rx.stop();
            return;
        }
        hb.counters.requests.fetch_add(1, Relaxed);
        let raw = rx.take_front(head.head_len);
        let born = rx.take_born(now);
        let head_only = head.method == Method::Head;
        let mut ex = Exchange::new(Arc::clone(c), c.next_seq(), head_only, head.keep_alive);
        if hb.log.is_some() {
            let stage = Some(Arc::from(mount.route.cfg.stage_name()));
            let mut rec = RequestRecord::parsed(
                &raw,
                &head,
                c.peer(),
                seda::clock::instant(born.get()),
                stage,
            );
            rec.origin = Origin::Proxied;
            // Its response streams and logs itself when it ends (conn.rs).
            rec.to = hb.log.clone();
            ex.log(rec);
        }
        if !head.keep_alive {
            rx.closing = true;
        }
        rx.solo = true;
        let reader = match head.body {
            BodyFraming::None => None,
            BodyFraming::Length(n) => Some(BodyReader::Length { left: n }),
            BodyFraming::Chunked => Some(BodyReader::Chunked(ChunkedDecoder::new(
                ChunkLimits::new(max_body),
            ))),
        };
        let pipe = reader.map(|reader| {
            let chunked = matches!(reader, BodyReader::Chunked(_));
            let (sender, pipe) = ProxyTable::pipe(hb.writer.clone(), c.id, chunked);
            // The body is read even if the request asked to close after it (its
            // response closes the connection).
            rx.closing = false;
            rx.body = Some(Box::new(BodyInProgress {
                waiting: None,
                reader,
                data: BytesMut::new(),
                stream: Some(sender),
            }));
            pipe
        });
        let req = HttpRequest::new(raw, head, Bytes::new(), c.peer(), None);
        let job = Job {
            ex,
            req: Box::new(req),
        };
        steps.push(Step::Proxy(mount, job, pipe, born));
    }
}

fn body_len(head: &RequestHead) -> usize {
    match head.body {
        BodyFraming::Length(n) => usize::try_from(n).unwrap_or(usize::MAX),
        _ => 0,
    }
}

/// Reads or skips as much of the body as `buf` holds. `Ok(true)` when it is complete;
/// a kept `Content-Length` body is then at the front of `buf`.
fn read_body(body: &mut BodyInProgress, buf: &mut BytesMut) -> Result<bool, Status> {
    if let Some(s) = &body.stream {
        return stream_body(s, &mut body.reader, buf);
    }
    let keep = body.waiting.is_some();
    match &mut body.reader {
        BodyReader::Length { left } => {
            if keep {
                // Left in `buf` until complete, then split off whole (no copy).
                return Ok(buf.len() as u64 >= *left);
            }
            let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
            buf.advance(n);
            *left -= n as u64;
            Ok(*left == 0)
        }
        BodyReader::Chunked(d) => {
            let data = &mut body.data;
            let fed = d
                .feed(buf, |piece| {
                    if keep {
                        data.extend_from_slice(piece);
                    }
                })
                .map_err(chunked_status)?;
            buf.advance(fed.consumed);
            Ok(fed.done)
        }
    }
}

/// The answer to a chunked body the decoder refused: 413 past a limit, else 400.
fn chunked_status(e: ChunkedError) -> Status {
    match e {
        ChunkedError::TooLarge => Status::PAYLOAD_TOO_LARGE,
        _ => Status::BAD_REQUEST,
    }
}

/// Moves as much of a proxied request's body as `buf` holds and the pipe takes
/// (skipping it if the route gave it up). `Ok(true)` when it is complete.
fn stream_body(
    s: &BodySender,
    reader: &mut BodyReader,
    buf: &mut BytesMut,
) -> Result<bool, Status> {
    loop {
        let room = match s.accepting() {
            // Full: the client is paused until the upstream has taken half.
            Accept::Full => return Ok(false),
            Accept::Discard => usize::MAX,
            Accept::Room(n) => n,
        };
        let take = buf.len().min(room);
        let done = match reader {
            BodyReader::Length { left } => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(take);
                s.push(&buf[..n]);
                buf.advance(n);
                *left -= n as u64;
                *left == 0
            }
            BodyReader::Chunked(d) => {
                let fed = d
                    .feed(&buf[..take], |piece| s.push(piece))
                    .map_err(chunked_status)?;
                buf.advance(fed.consumed);
                if fed.consumed == 0 && !fed.done {
                    return Ok(false);
                }
                fed.done
            }
        };
        if done {
            return Ok(true);
        }
        if buf.is_empty() {
            return Ok(false);
        }
    }
}
