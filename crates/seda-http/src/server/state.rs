//! What Haboob's stages share: settings, caches, the connection table, the route
//! table of dynamic handlers, counters, and the way every stage hands an answer to
//! HttpSend.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use seda::{Meta, Sink};
use seda_io::{ConnId, ConnState, Writer};
use serde::{Deserialize, Serialize};

use super::answer::{Answer, Framer};
use super::config::FileIo;
use super::conn::{Body, Conn, Exchange, Ns, Reply};
use super::conn_list::ConnList;
use super::events::SendEvent;
use super::routes::Routes;
use crate::access_log::events::{
    AccessEntry, AccessLog, Answerer, Origin, RequestRecord, status_of,
};
use crate::cache::{PageCache, PageCacheStats};
use crate::proto::{Dotfiles, Limits, Status};

/// Settings the stages read on every request, fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) root: PathBuf,
    pub(crate) index: String,
    pub(crate) max_cached_file: u64,
    pub(crate) residency_check: bool,
    pub(crate) file_io: FileIo,
    pub(crate) dotfiles: Dotfiles,
}

/// Settings a reload may change while requests run ([`Haboob::live`]): each
/// request reads the set in force when it is parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Live {
    pub(crate) limits: Limits,
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    /// Requests of one connection in flight at most (parsed, not yet answered).
    pub(crate) max_pipelined: u64,
}

/// Counters of the server, beside the stages' own statistics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) responses: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) dynamic: AtomicU64,
    pub(crate) overload: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) header_timeouts: AtomicU64,
    pub(crate) idle_closes: AtomicU64,
    pub(crate) handler_panics: AtomicU64,
    pub(crate) resident_reads: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) send_bypass: AtomicU64,
    pub(crate) pipeline_pauses: AtomicU64,
    pub(crate) bodies_discarded: AtomicU64,
    pub(crate) continues: AtomicU64,
}

/// Haboob's own counters, the `haboob` section of the admin stats document.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct HaboobStats {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Connections open now.
    pub connections_open: usize,
    /// Requests parsed.
    pub requests: u64,
    /// Responses HttpSend framed (every response, whatever stage settled it).
    pub responses: u64,
    /// Requests sent to CacheMiss.
    pub cache_misses: u64,
    /// Requests routed to dynamic handlers.
    pub dynamic_requests: u64,
    /// Requests answered with an overload action (a refused enqueue).
    pub overload_responses: u64,
    /// Requests that could not be parsed.
    pub bad_requests: u64,
    /// Connections cut off by the header (or body) timeout with a 408.
    pub header_timeouts: u64,
    /// Idle keep-alive connections closed.
    pub idle_closes: u64,
    /// Handler panics answered with 500.
    pub handler_panics: u64,
    /// Misses whose bytes were read without the file helper (already resident).
    pub resident_reads: u64,
    /// Requests dropped unanswered because their client was gone.
    pub cancelled: u64,
    /// Responses written by the stage that made them because HttpSend refused them.
    pub send_bypass: u64,
    /// Times a connection's reading stopped because `max_pipelined` requests were
    /// in flight.
    pub pipeline_pauses: u64,
    /// Request bodies skipped unread (no handler wanted them).
    pub bodies_discarded: u64,
    /// Interim `100 Continue` responses sent.
    pub continues: u64,
    /// Bytes the open connections' receive buffers hold (only a connection with
    /// part of a request buffered holds any; those busy being parsed at that instant
    /// are not counted).
    pub receive_buffer_bytes: u64,
    /// The pathname-translation cache.
    pub path_cache: PathCacheStats,
    /// The page cache.
    pub page_cache: PageCacheStats,
}

/// Size of the pathname-translation cache.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct PathCacheStats {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Bytes the entries are charged.
    pub bytes: u64,
    /// Entries.
    pub entries: usize,
}

/// State shared by all of Haboob's stages.
#[derive(Debug)]
pub(crate) struct Haboob {
    pub(crate) set: Settings,
    pub(crate) live: ArcSwap<Live>,
    /// The open connections (for the sweep, the shutdown and the stats; no
    /// event looks one up: see [`Haboob::attach`]).
    pub(crate) conns: ConnList,
    /// The page cache with the path cache: one lock for both.
    pub(crate) pages: PageCache,
    pub(crate) framer: Framer,
    pub(crate) writer: Writer,
    /// The TLS listener's writer, if there is one.
    pub(crate) tls: Option<seda_io::TlsWriter>,
    pub(crate) routes: Routes,
    /// The access log, if on.
    pub(crate) log: Option<AccessLog>,
    /// The front door's routes (`crate::proxy`).
    pub(crate) proxies: crate::proxy::ProxyTable,
    pub(crate) counters: Counters,
    /// Milliseconds on the runtime's clock ([`seda::clock`]), refreshed by the sweeper (at least every 500 ms):
    /// a clock for idle times and cache freshness that costs no system call.
    pub(crate) clock_ms: AtomicU64,
}

impl Haboob {
    /// The output of connection `conn`, TLS or plain; `None` if it is not open.
    pub(crate) fn link(&self, conn: seda_io::ConnId) -> Option<seda_io::Link> {
        if let Some(l) = self.tls.as_ref().and_then(|t| t.bind(conn)) {
            return Some(seda_io::Link::Tls(l));
        }
        seda_io::Link::plain(&self.writer, conn)
    }

    /// Makes the record of connection `conn` as the socket layer admits it (on its
    /// event loop's thread, or the TLS stage's once the handshake is done, before
    /// `Accepted`) and lists it; every event of the connection then carries it
    /// (`BoundSockets::start_attached`). While the server drains, closes the
    /// connection instead and makes none.
    pub(crate) fn attach(&self, conn: ConnId, peer: SocketAddr) -> Option<ConnState> {
        let link = self.link(conn);
        if self.draining() {
            if let Some(l) = link {
                l.close();
            }
            return None;
        }
        let c = Arc::new(Conn::new(conn, peer, link, self.millis(Instant::now())));
        self.conns.insert(&c);
        Some(c)
    }

    pub(crate) fn draining(&self) -> bool {
        self.framer.draining.load(Relaxed)
    }

    /// Refreshes the coarse clock (the sweeper, every period).
    pub(crate) fn tick(&self, now: Instant) {
        self.clock_ms.store(self.millis(now), Relaxed);
    }

    /// The coarse clock (see `clock_ms`) as milliseconds on the runtime's clock.
    pub(crate) fn coarse_ms(&self) -> u64 {
        self.clock_ms.load(Relaxed)
    }

    /// The coarse clock as an instant.
    pub(crate) fn coarse_now(&self) -> Instant {
        seda::clock::instant(self.coarse_ms().saturating_mul(1_000_000))
    }

    /// Milliseconds on the runtime's clock ([`seda::clock`]) at `now`.
    pub(crate) fn millis(&self, now: Instant) -> u64 {
        seda::clock::nanos(now) / 1_000_000
    }

    /// Milliseconds on the runtime's clock at the reading `now` (an event's `born`):
    /// a division, where an `Instant` would cost a subtraction of ~37 instructions.
    #[inline]
    pub(crate) fn millis_at(&self, now: Ns) -> u64 {
        now.get() / 1_000_000
    }

    /// Frames and writes one answer: HttpSend's work, also done in place by a stage
    /// whose answer HttpSend refused.
    pub(crate) fn send(&self, ev: SendEvent) {
        let SendEvent { ex, answer } = ev;
        let mut slot = ex.take();
        self.counters.responses.fetch_add(1, Relaxed);
        let logged = slot.log.take().map(|rec| {
            let by = answerer(&rec, &answer);
            (rec, by)
        });
        let reply = self.framer.frame(&slot, answer);
        if let (Some(log), Some((rec, by))) = (&self.log, logged) {
            log.offer(entry(rec, &reply, by));
        }
        slot.conn.deliver(slot.seq, reply);
        slot.conn.touch(self.coarse_ms());
    }

    pub(crate) fn stats(&self) -> HaboobStats {
        let c = &self.counters;
        HaboobStats {
            connections_accepted: c.connections.load(Relaxed),
            connections_open: self.conns.len(),
            requests: c.requests.load(Relaxed),
            responses: c.responses.load(Relaxed),
            cache_misses: c.misses.load(Relaxed),
            dynamic_requests: c.dynamic.load(Relaxed),
            overload_responses: c.overload.load(Relaxed),
            bad_requests: c.bad_requests.load(Relaxed),
            header_timeouts: c.header_timeouts.load(Relaxed),
            idle_closes: c.idle_closes.load(Relaxed),
            handler_panics: c.handler_panics.load(Relaxed),
            resident_reads: c.resident_reads.load(Relaxed),
            cancelled: c.cancelled.load(Relaxed),
            send_bypass: c.send_bypass.load(Relaxed),
            pipeline_pauses: c.pipeline_pauses.load(Relaxed),
            bodies_discarded: c.bodies_discarded.load(Relaxed),
            continues: c.continues.load(Relaxed),
            receive_buffer_bytes: self
                .conns
                .all()
                .iter()
                .filter_map(|c| c.rx.try_lock().map(|rx| rx.buffer_bytes() as u64))
                .sum(),
            path_cache: PathCacheStats {
                capacity_bytes: self.pages.path_capacity(),
                bytes: self.pages.path_bytes(),
                entries: self.pages.path_len(),
            },
            page_cache: self.pages.stats(),
        }
    }
}

/// Which stage answered the request of `rec` with `answer` (the access log's word).
fn answerer(rec: &RequestRecord, answer: &Answer) -> Answerer {
    let stage = || rec.stage.clone();
    match (rec.origin, answer) {
        (Origin::Parse, _) => Answerer::Parse,
        (Origin::Timeout, _) | (_, Answer::Error(Status::REQUEST_TIMEOUT)) => Answerer::Timeout,
        (_, Answer::Overload) => Answerer::Admission(stage().unwrap_or_else(|| "static".into())),
        (Origin::Proxied, _) => match stage() {
            Some(s) => Answerer::Stage(s),
            None => Answerer::Static,
        },
        (_, Answer::Dynamic(_)) => match stage() {
            Some(s) => Answerer::Stage(s),
            None => Answerer::Static,
        },
        // A handler's request answered with an error: its body could not be read.
        (_, Answer::Error(_)) if rec.stage.is_some() => Answerer::Parse,
        _ => Answerer::Static,
    }
}

/// The access log's line for a response framed as `reply`.
fn entry(rec: Box<RequestRecord>, reply: &Reply, by: Answerer) -> AccessEntry {
    let body_bytes = match &reply.body {
        Body::None => 0,
        Body::Bytes(b) => b.len() as u64,
        Body::File { len, .. } => *len,
    };
    AccessEntry::now(rec, status_of(&reply.head), body_bytes, by)
}

/// How every stage hands an answer to HttpSend: through its queue, or, if HttpSend
/// refuses it, framed and written right here (counted as `send_bypass`), so no
/// answer is ever lost.
#[derive(Debug, Clone)]
pub(crate) struct Responder {
    pub(crate) hb: Arc<Haboob>,
    pub(crate) send: Sink<SendEvent>,
}

impl Responder {
    /// Answers `ex`. `meta` is the request's (its color is dropped: HttpSend orders
    /// a connection's responses itself).
    pub(crate) fn answer(&self, ex: Exchange, answer: Answer, meta: Meta) {
        if let Answer::Overload = answer {
            self.hb.counters.overload.fetch_add(1, Relaxed);
        }
        let ev = SendEvent { ex, answer };
        if let Err(e) = self.send.try_enqueue_with(ev, meta.with_color(None)) {
            self.hb.counters.send_bypass.fetch_add(1, Relaxed);
            self.hb.send(e.into_inner());
        }
    }

    /// Drops `ex` because its connection is gone.
    pub(crate) fn cancel(&self, ex: Exchange) {
        self.hb.counters.cancelled.fetch_add(1, Relaxed);
        ex.cancel();
    }
}

impl crate::proxy::Respond for Responder {
    fn answer(&self, ex: Exchange, answer: Answer, meta: Meta) {
        Responder::answer(self, ex, answer, meta);
    }

    fn cancel(&self, ex: Exchange) {
        Responder::cancel(self, ex);
    }

    fn draining(&self) -> bool {
        self.hb.draining()
    }

    fn retry_after_secs(&self) -> u32 {
        self.hb.framer.retry_after_secs
    }
}
