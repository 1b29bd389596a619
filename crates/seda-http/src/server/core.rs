//! The logic of Haboob's stages (SEDA 5.1, Fig. 5), shared by their handlers.
//!
//! ```text
//!  sock-io ──> HttpParse ──> HttpRecv ──> PageCache ──hit──> HttpSend ──> socket
//!                              │   │          │miss            ▲
//!                              │   │          ▼                │
//!                              │   │      CacheMiss (blocking: translate, open, read)
//!                              │   │          └──fill──> PageCache
//!                              │   └──> handler:<name> (one stage per dynamic handler)
//!                              └──> admin endpoints (/_seda/...)
//! ```
//!
//! In *direct* mode (the default; DESIGN.md "Performance notes") the hops
//! HttpParse -> HttpRecv -> PageCache -> HttpSend on the hit path are direct calls
//! inside HttpParse's handler: a queue there conditions no load and blocks nothing.
//! Real queue boundaries remain where a call may block (CacheMiss) or where load must
//! be conditioned (each dynamic handler's stage). In *staged* mode every arrow is a
//! queue, as in the paper.
//!
//! # Invariants
//! - Every parsed request gets exactly one response, in request order per connection,
//!   unless the connection dies first (see `conn.rs`). An enqueue that fails is
//!   answered on the spot (503), never dropped.
//! - No static response is built from anything outside the root (`proto::translate`).

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::RwLock;
use seda::{EnqueueError, Meta, Runtime, Sink};
use seda_io::{FileHelper, FileOp, FileReply, SocketEvent, SocketHandle, Writer};
use serde::Serialize;

use super::conn::{Body, Conn, ConnState, ConnTable, Reply};
use crate::cache::{FileInfo, FileKey, PageCache, PathCache, Target};
use crate::handler::{HandlerContext, HandlerRegistration, Request, Response};
use crate::proto::{
    self, Conditional, HeaderScratch, Limits, Method, RangeRequest, Status, Translation,
    Validators, Version,
};

/// Settings the stages read on every request.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) root: PathBuf,
    pub(crate) index: String,
    pub(crate) limits: Limits,
    pub(crate) max_cached_file: u64,
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) direct: bool,
    pub(crate) residency_check: bool,
}

/// A static request, owned, for the stages behind a queue.
#[derive(Debug, Clone)]
pub(crate) struct StaticReq {
    path: Vec<u8>,
    query: Vec<u8>,
    head_only: bool,
    keep_alive: bool,
    inm: Option<Vec<u8>>,
    ims: Option<Vec<u8>>,
    range: Option<Vec<u8>>,
    if_range: Option<Vec<u8>>,
}

impl StaticReq {
    fn view(&self) -> StaticView<'_> {
        StaticView {
            path: &self.path,
            query: &self.query,
            head_only: self.head_only,
            keep_alive: self.keep_alive,
            inm: self.inm.as_deref(),
            ims: self.ims.as_deref(),
            range: self.range.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}

/// What the static path needs of a request, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StaticView<'a> {
    path: &'a [u8],
    query: &'a [u8],
    head_only: bool,
    keep_alive: bool,
    inm: Option<&'a [u8]>,
    ims: Option<&'a [u8]>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
}

impl StaticView<'_> {
    fn to_owned(self) -> StaticReq {
        StaticReq {
            path: self.path.to_vec(),
            query: self.query.to_vec(),
            head_only: self.head_only,
            keep_alive: self.keep_alive,
            inm: self.inm.map(<[u8]>::to_vec),
            ims: self.ims.map(<[u8]>::to_vec),
            range: self.range.map(<[u8]>::to_vec),
            if_range: self.if_range.map(<[u8]>::to_vec),
        }
    }
}

/// A parsed request, owned (staged mode: HttpParse -> HttpRecv).
#[derive(Debug)]
pub(crate) struct OwnedReq {
    method: Method,
    raw_path: Vec<u8>,
    keep_alive: bool,
    req: Request,
}

/// A request on its way to a stage, with its connection and sequence number.
#[derive(Debug)]
pub(crate) struct Job<R> {
    pub(crate) conn: Arc<Conn>,
    pub(crate) seq: u64,
    pub(crate) req: R,
}

/// Events of the PageCache stage.
#[derive(Debug)]
pub(crate) enum PageEvent {
    /// Look a static request up (staged mode).
    Lookup(Job<StaticReq>),
    /// A file was read (by the file helper, or resident): cache it and answer.
    Fill {
        job: Job<StaticReq>,
        info: Arc<FileInfo>,
        body: Bytes,
    },
    /// Reading the file failed: answer with this status.
    Failed { job: Job<StaticReq>, status: Status },
}

/// Events of the HttpSend stage (staged mode).
#[derive(Debug)]
pub(crate) struct SendEvent {
    pub(crate) conn: Arc<Conn>,
    pub(crate) seq: u64,
    pub(crate) reply: Reply,
}

/// Events of a dynamic handler's stage.
#[derive(Debug)]
pub(crate) struct DynEvent {
    pub(crate) conn: Arc<Conn>,
    pub(crate) seq: u64,
    pub(crate) req: Request,
    pub(crate) keep_alive: bool,
}

/// Where HttpRecv sent a request that may belong to a dynamic handler.
enum Dispatch {
    /// No handler is mounted at its path.
    NoRoute,
    /// Its handler's stage took it; the stage will answer.
    Enqueued,
    /// The stage refused it; this is the overload action's answer.
    Refused(Reply),
}

pub(crate) struct Route {
    pub(crate) reg: HandlerRegistration,
    pub(crate) sink: Sink<DynEvent>,
}

/// Sinks of the queued stages, set once at start.
#[derive(Debug)]
pub(crate) struct Sinks {
    pub(crate) recv: Sink<Job<OwnedReq>>,
    pub(crate) page: Sink<PageEvent>,
    pub(crate) miss: Sink<Job<StaticReq>>,
    pub(crate) send: Sink<SendEvent>,
}

/// Counters of the server, beside the stages' own statistics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) direct_hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) dynamic: AtomicU64,
    pub(crate) overload: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) header_timeouts: AtomicU64,
    pub(crate) idle_closes: AtomicU64,
    pub(crate) handler_panics: AtomicU64,
    pub(crate) resident_reads: AtomicU64,
    /// Pages PageCache refused (its queue full or closed), answered by the stage
    /// that read them.
    pub(crate) page_refusals: AtomicU64,
}

/// The counters as the admin endpoint shows them.
#[derive(Debug, Serialize)]
pub(crate) struct CounterSnapshot {
    pub(crate) connections_accepted: u64,
    pub(crate) connections_open: usize,
    pub(crate) requests: u64,
    pub(crate) direct_hits: u64,
    pub(crate) cache_misses: u64,
    pub(crate) dynamic_requests: u64,
    pub(crate) overload_responses: u64,
    pub(crate) bad_requests: u64,
    pub(crate) header_timeouts: u64,
    pub(crate) idle_closes: u64,
    pub(crate) handler_panics: u64,
    pub(crate) resident_reads: u64,
    pub(crate) page_cache_refusals: u64,
    pub(crate) path_cache_entries: usize,
    pub(crate) page_cache: crate::cache::PageCacheStats,
    pub(crate) direct_calls: bool,
}

/// State shared by all of Haboob's stages.
pub(crate) struct Haboob {
    pub(crate) set: Settings,
    pub(crate) rt: Runtime,
    pub(crate) conns: ConnTable,
    pub(crate) paths: PathCache,
    pub(crate) pages: PageCache,
    pub(crate) date: proto::DateCache,
    pub(crate) files: FileHelper,
    pub(crate) routes: RwLock<Vec<Route>>,
    pub(crate) writer: OnceLock<Writer>,
    pub(crate) sockets: OnceLock<Arc<SocketHandle>>,
    pub(crate) sinks: OnceLock<Sinks>,
    pub(crate) counters: Counters,
    pub(crate) draining: AtomicBool,
}

impl std::fmt::Debug for Haboob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Haboob")
            .field("root", &self.set.root)
            .finish_non_exhaustive()
    }
}

/// The meta of an event handed to a stage that does not need the connection's color.
fn uncolored(meta: Meta) -> Meta {
    meta.with_color(None)
}

impl Haboob {
    fn draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    pub(crate) fn counter_snapshot(&self) -> CounterSnapshot {
        let c = &self.counters;
        CounterSnapshot {
            connections_accepted: c.connections.load(Relaxed),
            connections_open: self.conns.len(),
            requests: c.requests.load(Relaxed),
            direct_hits: c.direct_hits.load(Relaxed),
            cache_misses: c.misses.load(Relaxed),
            dynamic_requests: c.dynamic.load(Relaxed),
            overload_responses: c.overload.load(Relaxed),
            bad_requests: c.bad_requests.load(Relaxed),
            header_timeouts: c.header_timeouts.load(Relaxed),
            idle_closes: c.idle_closes.load(Relaxed),
            handler_panics: c.handler_panics.load(Relaxed),
            resident_reads: c.resident_reads.load(Relaxed),
            page_cache_refusals: c.page_refusals.load(Relaxed),
            path_cache_entries: self.paths.len(),
            page_cache: self.pages.stats(),
            direct_calls: self.set.direct,
        }
    }

    // ---------------------------------------------------------------- HttpParse

    /// HttpParse: one socket event of one connection (events of a connection carry
    /// its color, so they never run concurrently and arrive in order).
    pub(crate) fn on_socket_event(&self, ev: SocketEvent, meta: Meta, now: Instant) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        match ev {
            SocketEvent::Accepted { conn, peer } => {
                self.counters.connections.fetch_add(1, Relaxed);
                if self.draining() {
                    writer.close(conn);
                    return;
                }
                self.conns.insert(Arc::new(Conn::new(conn, peer, now)));
            }
            SocketEvent::Data { conn, bytes } => {
                let Some(c) = self.conns.get(conn) else {
                    return;
                };
                let mut st = c.st.lock();
                if st.dead || st.closing {
                    return;
                }
                st.last_active = now;
                if st.buf.is_empty() {
                    st.buf = bytes;
                } else {
                    st.buf.extend_from_slice(&bytes);
                }
                let mut out = Vec::new();
                self.parse(&c, &mut st, meta, &mut out, writer, now);
                c.flush(&mut st, &mut out, writer);
            }
            SocketEvent::WriteBacklog { .. } => {}
            SocketEvent::Closed { conn, .. } => {
                if let Some(c) = self.conns.remove(conn) {
                    let mut st = c.st.lock();
                    st.dead = true;
                    st.pending.clear();
                }
            }
        }
    }

    /// Parses every complete request in the connection's buffer (pipelining) and
    /// routes each.
    fn parse(
        &self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        meta: Meta,
        out: &mut Vec<Bytes>,
        writer: &Writer,
        now: Instant,
    ) {
        let buf = std::mem::take(&mut st.buf);
        let mut at = 0;
        let mut scratch = HeaderScratch::default();
        while !st.closing && !st.dead {
            at += proto::skip_leading_crlf(&buf[at..]);
            if at >= buf.len() {
                break;
            }
            match proto::parse_head(&buf[at..], &mut scratch, &self.set.limits) {
                Ok(None) => break,
                Err(e) => {
                    self.counters.bad_requests.fetch_add(1, Relaxed);
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    st.closing = true;
                    at = buf.len();
                    c.deliver(
                        st,
                        seq,
                        self.error_reply(e.status(), true, &[]),
                        out,
                        writer,
                    );
                }
                Ok(Some(head)) => {
                    let total = head.total_len();
                    if buf.len() - at < total {
                        break;
                    }
                    self.counters.requests.fetch_add(1, Relaxed);
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    if !head.keep_alive {
                        st.closing = true;
                    }
                    let body = &buf[at + head.head_len..at + total];
                    let view = ReqView::from_head(&head, body);
                    if self.set.direct {
                        self.recv(c, st, seq, &view, meta, out, writer, now);
                    } else {
                        self.forward_to_recv(c, st, seq, &view, meta, out, writer);
                    }
                    at += total;
                }
            }
        }
        let mut buf = buf;
        if at >= buf.len() {
            buf.clear();
            st.head_started = None;
        } else {
            buf.drain(..at);
            if at > 0 || st.head_started.is_none() {
                st.head_started = Some(now);
            }
        }
        if !st.closing {
            st.buf = buf;
        }
    }

    /// Staged mode: HttpParse -> HttpRecv through a queue.
    #[allow(clippy::too_many_arguments)]
    fn forward_to_recv(
        &self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        seq: u64,
        v: &ReqView<'_>,
        meta: Meta,
        out: &mut Vec<Bytes>,
        writer: &Writer,
    ) {
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        let owned = OwnedReq {
            method: v.method,
            raw_path: v.path.to_vec(),
            keep_alive: v.keep_alive,
            req: v.to_request(c.peer),
        };
        let job = Job {
            conn: Arc::clone(c),
            seq,
            req: owned,
        };
        if sinks.recv.try_enqueue_with(job, uncolored(meta)).is_err() {
            self.counters.overload.fetch_add(1, Relaxed);
            c.deliver(
                st,
                seq,
                self.response_reply(Response::unavailable(1), false, !v.keep_alive),
                out,
                writer,
            );
        }
    }

    /// HttpRecv (staged mode): one request from the queue.
    pub(crate) fn on_recv(&self, job: Job<OwnedReq>, meta: Meta, now: Instant) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        let Job { conn, seq, req } = job;
        let view = ReqView::from_owned(&req);
        let mut st = conn.st.lock();
        let mut out = Vec::new();
        self.recv(&conn, &mut st, seq, &view, meta, &mut out, writer, now);
        conn.flush(&mut st, &mut out, writer);
    }

    // ---------------------------------------------------------------- HttpRecv

    /// HttpRecv: routes one request to the admin endpoints, a dynamic handler, or
    /// the static path.
    #[allow(clippy::too_many_arguments)]
    fn recv(
        &self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        seq: u64,
        v: &ReqView<'_>,
        meta: Meta,
        out: &mut Vec<Bytes>,
        writer: &Writer,
        now: Instant,
    ) {
        let close = !v.keep_alive || self.draining();
        let get_or_head = matches!(v.method, Method::Get | Method::Head);
        if v.path.starts_with(b"/_seda/") {
            let reply = match get_or_head
                .then(|| super::admin::respond(self, v.path))
                .flatten()
            {
                Some(resp) => self.response_reply(resp, v.method == Method::Head, close),
                None if !get_or_head => self.method_not_allowed(close),
                None => self.error_reply(Status::NOT_FOUND, close, &[]),
            };
            c.deliver(st, seq, reply, out, writer);
            return;
        }
        match self.try_dynamic(c, seq, v, meta, close) {
            Dispatch::NoRoute => {}
            Dispatch::Enqueued => return,
            Dispatch::Refused(reply) => return c.deliver(st, seq, reply, out, writer),
        }
        if !get_or_head {
            c.deliver(st, seq, self.method_not_allowed(close), out, writer);
            return;
        }
        let sv = StaticView {
            path: v.path,
            query: v.query,
            head_only: v.method == Method::Head,
            keep_alive: v.keep_alive,
            inm: v.inm,
            ims: v.ims,
            range: v.range,
            if_range: v.if_range,
        };
        if self.set.direct {
            match self.lookup(&sv, now) {
                Some(reply) => {
                    self.counters.direct_hits.fetch_add(1, Relaxed);
                    c.deliver(st, seq, reply, out, writer);
                }
                None => self.to_cache_miss(c, st, seq, sv, meta, out, writer),
            }
        } else {
            let Some(sinks) = self.sinks.get() else {
                return;
            };
            let job = Job {
                conn: Arc::clone(c),
                seq,
                req: sv.to_owned(),
            };
            if sinks
                .page
                .try_enqueue_with(PageEvent::Lookup(job), uncolored(meta))
                .is_err()
            {
                self.counters.overload.fetch_add(1, Relaxed);
                c.deliver(
                    st,
                    seq,
                    self.response_reply(Response::unavailable(1), false, close),
                    out,
                    writer,
                );
            }
        }
    }

    /// Sends a request to its dynamic handler's stage, if one is mounted there.
    fn try_dynamic(
        &self,
        c: &Arc<Conn>,
        seq: u64,
        v: &ReqView<'_>,
        meta: Meta,
        close: bool,
    ) -> Dispatch {
        let routes = self.routes.read();
        if routes.is_empty() {
            return Dispatch::NoRoute;
        }
        let Some(decoded) = proto::percent_decode(v.path) else {
            return Dispatch::NoRoute;
        };
        let path = String::from_utf8_lossy(&decoded);
        let Some(route) = routes.iter().find(|r| r.reg.matches(&path)) else {
            return Dispatch::NoRoute;
        };
        self.counters.dynamic.fetch_add(1, Relaxed);
        let req = v.to_request(c.peer);
        let class = route.reg.classifier.as_ref().map_or(0, |f| f(&req));
        let ev = DynEvent {
            conn: Arc::clone(c),
            seq,
            req,
            keep_alive: v.keep_alive,
        };
        match route
            .sink
            .try_enqueue_with(ev, uncolored(meta).with_class(class))
        {
            Ok(()) => Dispatch::Enqueued,
            Err(e) => {
                self.counters.overload.fetch_add(1, Relaxed);
                let ev = e.into_inner();
                let resp = route.reg.overload_response(&ev.req);
                Dispatch::Refused(self.response_reply(resp, ev.req.method == "HEAD", close))
            }
        }
    }

    /// A dynamic handler's stage: runs the handler and sends its response.
    pub(crate) fn on_dynamic(
        &self,
        reg: &HandlerRegistration,
        ev: DynEvent,
        cx: &seda::Context<'_>,
    ) {
        let hcx = HandlerContext { cx };
        let resp = match catch_unwind(AssertUnwindSafe(|| reg.handler.handle(&ev.req, &hcx))) {
            Ok(r) => r,
            Err(_) => {
                self.counters.handler_panics.fetch_add(1, Relaxed);
                Response::text(Status::INTERNAL_SERVER_ERROR, "500 Internal Server Error\n")
            }
        };
        let reply = self.response_reply(
            resp,
            ev.req.method == "HEAD",
            !ev.keep_alive || self.draining(),
        );
        self.respond(&ev.conn, ev.seq, reply);
    }

    // ---------------------------------------------------------------- PageCache

    /// The hit path: pathname-translation cache, then page cache. `None` is a miss.
    fn lookup(&self, v: &StaticView<'_>, now: Instant) -> Option<Reply> {
        match self.paths.get(v.path, now)? {
            Target::File(info) => {
                if info.stream.is_some() {
                    return Some(self.static_reply(&info, None, v));
                }
                let body = self.pages.get(&info.key)?;
                Some(self.static_reply(&info, Some(body), v))
            }
            Target::Redirect(loc) => Some(self.redirect_reply(&loc, v)),
            Target::Error(s) => Some(self.error_reply(s, !v.keep_alive || self.draining(), &[])),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn to_cache_miss(
        &self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        seq: u64,
        v: StaticView<'_>,
        meta: Meta,
        out: &mut Vec<Bytes>,
        writer: &Writer,
    ) {
        self.counters.misses.fetch_add(1, Relaxed);
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        let job = Job {
            conn: Arc::clone(c),
            seq,
            req: v.to_owned(),
        };
        if sinks.miss.try_enqueue_with(job, uncolored(meta)).is_err() {
            self.counters.overload.fetch_add(1, Relaxed);
            c.deliver(
                st,
                seq,
                self.response_reply(Response::unavailable(1), false, !v.keep_alive),
                out,
                writer,
            );
        }
    }

    /// PageCache stage: a batch of lookups and fills. Hits are answered before misses
    /// are forwarded, shortest response first (SEDA 5.1).
    pub(crate) fn on_page_batch(&self, events: Vec<(PageEvent, Meta)>, now: Instant) {
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        let mut ready: Vec<(Arc<Conn>, u64, Reply, Meta)> = Vec::with_capacity(events.len());
        let mut misses = Vec::new();
        for (ev, meta) in events {
            match ev {
                PageEvent::Lookup(job) => match self.lookup(&job.req.view(), now) {
                    Some(reply) => ready.push((job.conn, job.seq, reply, meta)),
                    None => misses.push((job, meta)),
                },
                PageEvent::Fill { job, info, body } => {
                    self.pages.insert(info.key, body.clone());
                    let reply = self.static_reply(&info, Some(body), &job.req.view());
                    ready.push((job.conn, job.seq, reply, meta));
                }
                PageEvent::Failed { job, status } => {
                    let reply =
                        self.error_reply(status, !job.req.keep_alive || self.draining(), &[]);
                    ready.push((job.conn, job.seq, reply, meta));
                }
            }
        }
        ready.sort_by_key(|(_, _, r, _)| r.wire_len());
        for (conn, seq, reply, meta) in ready {
            self.send(conn, seq, reply, meta);
        }
        for (job, meta) in misses {
            self.counters.misses.fetch_add(1, Relaxed);
            if let Err(e) = sinks.miss.try_enqueue_with(job, meta) {
                self.counters.overload.fetch_add(1, Relaxed);
                let job = e.into_inner();
                let reply =
                    self.response_reply(Response::unavailable(1), false, !job.req.keep_alive);
                self.respond(&job.conn, job.seq, reply);
            }
        }
    }

    // ---------------------------------------------------------------- CacheMiss

    /// CacheMiss (blocking, own pool): translates the path, opens and reads the file,
    /// and hands the page to PageCache.
    pub(crate) fn on_miss(self: &Arc<Self>, job: Job<StaticReq>, meta: Meta, now: Instant) {
        let v = job.req.view();
        let (target, file) = match self.paths.get(v.path, now) {
            Some(t) => (t, None),
            None => {
                let (t, f) = self.translate(v.path);
                self.paths.insert(v.path, t.clone(), now);
                (t, f)
            }
        };
        let info = match target {
            Target::File(info) => info,
            Target::Redirect(loc) => {
                return self.respond(&job.conn, job.seq, self.redirect_reply(&loc, &v));
            }
            Target::Error(s) => {
                return self.respond(
                    &job.conn,
                    job.seq,
                    self.error_reply(s, !v.keep_alive || self.draining(), &[]),
                );
            }
        };
        if info.stream.is_some() {
            return self.respond(&job.conn, job.seq, self.static_reply(&info, None, &v));
        }
        if let Some(body) = self.pages.get(&info.key) {
            return self.respond(&job.conn, job.seq, self.static_reply(&info, Some(body), &v));
        }
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        let file = match file {
            Some(f) => Arc::new(f),
            None => match File::open(&info.path) {
                Ok(f) => Arc::new(f),
                Err(_) => {
                    return self.respond(
                        &job.conn,
                        job.seq,
                        self.error_reply(Status::NOT_FOUND, !v.keep_alive, &[]),
                    );
                }
            },
        };
        let Ok(len) = usize::try_from(info.key.len) else {
            return self.respond(
                &job.conn,
                job.seq,
                self.error_reply(Status::INTERNAL_SERVER_ERROR, true, &[]),
            );
        };
        // Flash's residency check: bytes already in the OS page cache skip the
        // helper hop.
        if let Some(data) = self
            .set
            .residency_check
            .then(|| seda_io::read_resident(&file, 0, len))
            .flatten()
            .filter(|d| d.len() == len)
        {
            self.counters.resident_reads.fetch_add(1, Relaxed);
            return self.fill(
                PageEvent::Fill {
                    job,
                    info,
                    body: Bytes::from(data),
                },
                meta,
            );
        }
        let (conn, seq, keep_alive) = (Arc::clone(&job.conn), job.seq, job.req.keep_alive);
        let op = FileOp::Read {
            file,
            offset: 0,
            len,
        };
        let wrap = move |res: std::io::Result<FileReply>| match res {
            Ok(FileReply::Data(d)) if d.len() == len => PageEvent::Fill {
                job,
                info,
                body: Bytes::from(d),
            },
            // Shorter or longer than stat'ed: the file changed under us.
            _ => PageEvent::Failed {
                job,
                status: Status::INTERNAL_SERVER_ERROR,
            },
        };
        // If PageCache will not take the page (full for the helper's patience, or
        // closed), the helper hands it back and the request is answered from there.
        let hb = Arc::clone(self);
        let undelivered = move |e: EnqueueError<PageEvent>| hb.page_refused(e.into_inner());
        if let Err(e) = self
            .files
            .submit_to_with(op, meta, &sinks.page, wrap, undelivered)
        {
            // The helper is overloaded: an overload answer, like any refused stage.
            self.counters.overload.fetch_add(1, Relaxed);
            tracing::debug!("{e}");
            self.respond(
                &conn,
                seq,
                self.response_reply(Response::unavailable(1), false, !keep_alive),
            );
        }
    }

    /// Hands a read page to PageCache; answers here if PageCache refuses it.
    fn fill(&self, ev: PageEvent, meta: Meta) {
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        if let Err(e) = sinks.page.try_enqueue_with(ev, meta) {
            self.page_refused(e.into_inner());
        }
    }

    /// PageCache refused `ev`: do its work here, so the request is still answered.
    /// The page was read already, so sending it costs less than a 503 and a retry.
    fn page_refused(&self, ev: PageEvent) {
        self.counters.page_refusals.fetch_add(1, Relaxed);
        match ev {
            PageEvent::Fill { job, info, body } => {
                self.pages.insert(info.key, body.clone());
                let reply = self.static_reply(&info, Some(body), &job.req.view());
                self.respond(&job.conn, job.seq, reply);
            }
            PageEvent::Failed { job, status } => {
                let reply = self.error_reply(status, !job.req.keep_alive || self.draining(), &[]);
                self.respond(&job.conn, job.seq, reply);
            }
            PageEvent::Lookup(job) => {
                let reply = self
                    .lookup(&job.req.view(), Instant::now())
                    .unwrap_or_else(|| {
                        self.counters.overload.fetch_add(1, Relaxed);
                        self.response_reply(Response::unavailable(1), false, !job.req.keep_alive)
                    });
                self.respond(&job.conn, job.seq, reply);
            }
        }
    }

    /// Translates a URL path to a target (blocking). For a file, also returns the
    /// open file, whose metadata the target describes.
    fn translate(&self, raw_path: &[u8]) -> (Target, Option<File>) {
        match proto::translate(&self.set.root, raw_path, &self.set.index) {
            Ok(Translation::File(path, _)) => {
                let opened = File::open(&path).and_then(|f| f.metadata().map(|m| (f, m)));
                let (file, meta) = match opened {
                    Ok(fm) => fm,
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        return (Target::Error(Status::FORBIDDEN), None);
                    }
                    Err(_) => return (Target::Error(Status::NOT_FOUND), None),
                };
                let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
                let mtime_ns = mtime
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i128);
                let key = FileKey {
                    dev: meta.dev(),
                    ino: meta.ino(),
                    mtime_ns,
                    len: meta.len(),
                };
                let validators = Validators::of(meta.len(), mtime, meta.ino());
                let ctype = proto::content_type(&path);
                let big = meta.len() > self.set.max_cached_file || !self.pages.admits(meta.len());
                if big {
                    let info = FileInfo::new(path, key, validators, ctype, Some(Arc::new(file)));
                    (Target::File(Arc::new(info)), None)
                } else {
                    (
                        Target::File(Arc::new(FileInfo::new(path, key, validators, ctype, None))),
                        Some(file),
                    )
                }
            }
            Ok(Translation::AddSlash(loc)) => (Target::Redirect(Bytes::from(loc)), None),
            Err(e) => (Target::Error(e.status()), None),
        }
    }

    // ---------------------------------------------------------------- HttpSend

    /// Hands a finished response to HttpSend: a direct call in direct mode, a queue
    /// in staged mode (falling back to a direct call if the queue refuses).
    fn send(&self, conn: Arc<Conn>, seq: u64, reply: Reply, meta: Meta) {
        if !self.set.direct
            && let Some(sinks) = self.sinks.get()
        {
            match sinks
                .send
                .try_enqueue_with(SendEvent { conn, seq, reply }, meta)
            {
                Ok(()) => return,
                Err(e) => {
                    let ev = e.into_inner();
                    return self.respond(&ev.conn, ev.seq, ev.reply);
                }
            }
        }
        self.respond(&conn, seq, reply);
    }

    /// HttpSend: writes a response in its turn on its connection.
    pub(crate) fn respond(&self, conn: &Conn, seq: u64, reply: Reply) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        let mut st = conn.st.lock();
        let mut out = Vec::with_capacity(4);
        conn.deliver(&mut st, seq, reply, &mut out, writer);
        conn.flush(&mut st, &mut out, writer);
        st.last_active = Instant::now();
    }

    // ---------------------------------------------------------------- replies

    /// The response to a static GET/HEAD for a file: 304, 206, 416 or 200. `body` is
    /// the cached page; `None` streams `info.stream`.
    fn static_reply(&self, info: &FileInfo, body: Option<Bytes>, v: &StaticView<'_>) -> Reply {
        let close = !v.keep_alive || self.draining();
        let len = info.key.len;
        if proto::evaluate_conditional(v.inm, v.ims, &info.validators) == Conditional::NotModified {
            let fields = [
                ("ETag", info.validators.etag.as_str()),
                ("Last-Modified", info.last_modified.as_str()),
            ];
            return self.head_reply(Status::NOT_MODIFIED, &fields, None, close, Body::None);
        }
        if let Some(range) = v.range.filter(|_| if_range_holds(v.if_range, info)) {
            match proto::parse_range(range, len) {
                RangeRequest::Full => {}
                RangeRequest::Partial(r) => {
                    let content_range = format!("bytes {}-{}/{len}", r.start, r.end);
                    let fields = [
                        ("Content-Type", info.content_type),
                        ("Content-Range", content_range.as_str()),
                        ("ETag", info.validators.etag.as_str()),
                        ("Last-Modified", info.last_modified.as_str()),
                    ];
                    let b = if v.head_only {
                        Body::None
                    } else {
                        match (&body, &info.stream) {
                            (Some(b), _) => Body::Bytes(b.slice(r.start as usize..=r.end as usize)),
                            (None, Some(f)) => Body::File {
                                file: Arc::clone(f),
                                offset: r.start,
                                len: r.len(),
                            },
                            (None, None) => Body::None,
                        }
                    };
                    return self.head_reply(
                        Status::PARTIAL_CONTENT,
                        &fields,
                        Some(r.len()),
                        close,
                        b,
                    );
                }
                RangeRequest::Unsatisfiable => {
                    let content_range = format!("bytes */{len}");
                    return self.error_reply(
                        Status::RANGE_NOT_SATISFIABLE,
                        close,
                        &[("Content-Range", &content_range)],
                    );
                }
            }
        }
        let b = if v.head_only {
            Body::None
        } else {
            match (body, &info.stream) {
                (Some(b), _) => Body::Bytes(b),
                (None, Some(f)) => Body::File {
                    file: Arc::clone(f),
                    offset: 0,
                    len,
                },
                (None, None) => Body::None,
            }
        };
        Reply {
            head: info.head_200.clone(),
            date: Some(self.date.line()),
            body: b,
            close,
        }
    }

    fn head_reply(
        &self,
        status: Status,
        fields: &[(&str, &str)],
        len: Option<u64>,
        close: bool,
        body: Body,
    ) -> Reply {
        let mut head = Vec::with_capacity(256);
        proto::write_head(&mut head, status, fields, len, !close, &self.date.line());
        Reply {
            head: Bytes::from(head),
            date: None,
            body,
            close,
        }
    }

    fn redirect_reply(&self, loc: &Bytes, v: &StaticView<'_>) -> Reply {
        let mut location = String::from_utf8_lossy(loc).into_owned();
        if !v.query.is_empty() {
            location.push('?');
            location.push_str(&String::from_utf8_lossy(v.query));
        }
        let resp = Response::text(Status::MOVED_PERMANENTLY, "301 Moved Permanently\n")
            .with_header("Location", &location);
        self.response_reply(resp, v.head_only, !v.keep_alive || self.draining())
    }

    fn method_not_allowed(&self, close: bool) -> Reply {
        self.error_reply(Status::METHOD_NOT_ALLOWED, close, &[("Allow", "GET, HEAD")])
    }

    /// A short `text/plain` error response.
    pub(crate) fn error_reply(&self, status: Status, close: bool, extra: &[(&str, &str)]) -> Reply {
        let body = Bytes::from(format!("{} {}\n", status.code(), status.reason()));
        let mut fields: Vec<(&str, &str)> = vec![("Content-Type", "text/plain; charset=utf-8")];
        fields.extend_from_slice(extra);
        self.head_reply(
            status,
            &fields,
            Some(body.len() as u64),
            close,
            Body::Bytes(body),
        )
    }

    /// A handler's or an admin endpoint's response.
    pub(crate) fn response_reply(&self, resp: Response, head_only: bool, close: bool) -> Reply {
        let fields: Vec<(&str, &str)> = resp
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let bodiless = resp.status.bodiless();
        let len = (!bodiless).then_some(resp.body.len() as u64);
        let body = if head_only || bodiless {
            Body::None
        } else {
            Body::Bytes(resp.body)
        };
        self.head_reply(resp.status, &fields, len, close, body)
    }

    // ---------------------------------------------------------------- timeouts

    /// Closes connections whose request head is overdue (408) or that sat idle too
    /// long between requests. Called periodically by the sweeper thread.
    pub(crate) fn sweep(&self, now: Instant) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        for c in self.conns.all() {
            let Some(mut st) = c.st.try_lock() else {
                continue;
            };
            if st.dead {
                continue;
            }
            if let Some(t0) = st.head_started
                && now.saturating_duration_since(t0) > self.set.header_timeout
            {
                self.counters.header_timeouts.fetch_add(1, Relaxed);
                let seq = st.next_seq;
                st.next_seq += 1;
                st.closing = true;
                st.buf = Vec::new();
                st.head_started = None;
                let mut out = Vec::new();
                c.deliver(
                    &mut st,
                    seq,
                    self.error_reply(Status::REQUEST_TIMEOUT, true, &[]),
                    &mut out,
                    writer,
                );
                c.flush(&mut st, &mut out, writer);
                continue;
            }
            let idle = st.buf.is_empty() && st.outstanding() == 0;
            if idle
                && (self.draining()
                    || now.saturating_duration_since(st.last_active) > self.set.idle_timeout)
            {
                self.counters.idle_closes.fetch_add(1, Relaxed);
                st.dead = true;
                writer.close(c.id);
            }
        }
    }

    /// Whether every connection is idle (no request in progress or unanswered).
    pub(crate) fn quiescent(&self) -> bool {
        self.conns.all().iter().all(|c| {
            let st = c.st.lock();
            st.dead || (st.outstanding() == 0 && st.buf.is_empty())
        })
    }
}

fn if_range_holds(if_range: Option<&[u8]>, info: &FileInfo) -> bool {
    let Some(v) = if_range else { return true };
    let v = std::str::from_utf8(v).unwrap_or("").trim();
    if v.starts_with('"') {
        return v == info.validators.etag;
    }
    httpdate::parse_http_date(v).is_ok_and(|t| t == info.validators.last_modified)
}

/// A request as HttpRecv sees it, borrowed from the parse buffer or an owned request.
#[derive(Debug)]
pub(crate) struct ReqView<'a> {
    method: Method,
    method_str: &'a str,
    path: &'a [u8],
    query: &'a [u8],
    version: Version,
    keep_alive: bool,
    inm: Option<&'a [u8]>,
    ims: Option<&'a [u8]>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
    headers: Headers<'a>,
    body: &'a [u8],
}

#[derive(Debug)]
enum Headers<'a> {
    Parsed(&'a [httparse::Header<'a>]),
    Owned(&'a [(String, Vec<u8>)]),
}

impl<'a> ReqView<'a> {
    fn from_head(h: &proto::RequestHead<'a, 'a>, body: &'a [u8]) -> Self {
        ReqView {
            method: h.method,
            method_str: h.method_str,
            path: h.path,
            query: h.query,
            version: h.version,
            keep_alive: h.keep_alive,
            inm: h.if_none_match,
            ims: h.if_modified_since,
            range: h.range,
            if_range: h.if_range,
            headers: Headers::Parsed(h.fields()),
            body,
        }
    }

    fn from_owned(o: &'a OwnedReq) -> Self {
        let find = |name: &str| o.req.header(name);
        ReqView {
            method: o.method,
            method_str: &o.req.method,
            path: &o.raw_path,
            query: o.req.query.as_bytes(),
            version: o.req.version,
            keep_alive: o.keep_alive,
            inm: find("if-none-match"),
            ims: find("if-modified-since"),
            range: find("range"),
            if_range: find("if-range"),
            headers: Headers::Owned(&o.req.headers),
            body: &o.req.body,
        }
    }

    /// The owned, decoded request a dynamic handler gets.
    fn to_request(&self, peer: std::net::SocketAddr) -> Request {
        let decoded = proto::percent_decode(self.path).unwrap_or_else(|| self.path.to_vec());
        let headers = match self.headers {
            Headers::Parsed(h) => h
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
            Headers::Owned(h) => h.to_vec(),
        };
        Request {
            method: self.method_str.to_owned(),
            path: String::from_utf8_lossy(&decoded).into_owned(),
            query: String::from_utf8_lossy(self.query).into_owned(),
            version: self.version,
            headers,
            body: Bytes::copy_from_slice(self.body),
            peer: Some(peer),
        }
    }
}
