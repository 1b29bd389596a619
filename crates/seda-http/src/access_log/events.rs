//! The access log's events and its handle: what a request leaves for the log
//! ([`RequestRecord`], built when it is parsed), the finished response's line
//! ([`AccessEntry`]), the log stage's event ([`LogEvent`]) and [`AccessLog`], the
//! handle that offers lines to the stage. A leaf: it imports no stage, so
//! connection state (`server/conn.rs`), HttpSend and HttpParse import it, and the log
//! stage itself (`access_log.rs`: its writer, `AccessLog::start`, `reopen`, `stats`)
//! imports it too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use seda::Sink;

use crate::proto::RequestHead;

/// Line format of the access log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessLogFormat {
    /// nginx's `combined`, plus the request time and the answering stage.
    #[default]
    Combined,
    /// JSON lines.
    Json,
}

impl FromStr for AccessLogFormat {
    type Err = seda::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "combined" => Ok(AccessLogFormat::Combined),
            "json" => Ok(AccessLogFormat::Json),
            _ => Err(seda::UnknownName::new(
                "access log format",
                "combined or json",
                s,
            )),
        }
    }
}

/// Which stage answered a request (see the module docs for the words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answerer {
    Static,
    /// A handler's or a proxy route's stage, by its name.
    Stage(Arc<str>),
    Admission(Arc<str>),
    Parse,
    Timeout,
}

/// What the log keeps of a request from the moment it is parsed (HttpParse builds
/// it only when the log is on). Its byte fields share the request head's buffer.
#[derive(Debug)]
pub(crate) struct RequestRecord {
    pub(crate) peer: SocketAddr,
    /// The request line, or what arrived of it for a request that did not parse.
    pub(crate) line: Bytes,
    pub(crate) referer: Option<Bytes>,
    pub(crate) user_agent: Option<Bytes>,
    pub(crate) born: Instant,
    /// The stage the request was routed to (`handler:NAME`, `proxy:NAME`), if a
    /// dynamic handler's or a proxy route's.
    pub(crate) stage: Option<Arc<str>>,
    /// Parsed, timed out, or refused by the parser.
    pub(crate) origin: Origin,
    /// The log a streamed (proxied) response's line goes to when it ends; `None`
    /// for a response HttpSend logs (a connection keeps no handle of the log: 16
    /// bytes on each idle one).
    pub(crate) to: Option<AccessLog>,
}

impl RequestRecord {
    /// The record of a parsed request whose head is `raw`.
    pub(crate) fn parsed(
        raw: &Bytes,
        head: &RequestHead,
        peer: SocketAddr,
        born: Instant,
        stage: Option<Arc<str>>,
    ) -> Self {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(raw.len());
        let field = |name: &[u8]| {
            head.fields(raw)
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| raw.slice_ref(v))
        };
        RequestRecord {
            peer,
            line: raw.slice(..line_end),
            referer: field(b"referer"),
            user_agent: field(b"user-agent"),
            born,
            stage,
            origin: Origin::Request,
            to: None,
        }
    }

    /// The record of a request that could not be parsed (`origin` `Parse`) or
    /// timed out (`Timeout`): `arrived` is what was received of it; its first line
    /// (at most 1 KiB) is logged.
    pub(crate) fn unparsed(
        arrived: &[u8],
        peer: SocketAddr,
        born: Instant,
        origin: Origin,
    ) -> Self {
        let end = arrived
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(arrived.len())
            .min(1024);
        RequestRecord {
            peer,
            line: Bytes::copy_from_slice(&arrived[..end]),
            referer: None,
            user_agent: None,
            born,
            stage: None,
            origin,
            to: None,
        }
    }
}

/// Where a request's slot came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Request,
    /// A request for a proxy route (whatever it is answered is the route's).
    Proxied,
    Parse,
    Timeout,
}

/// One finished response, for the log.
#[derive(Debug)]
pub(crate) struct AccessEntry {
    pub(crate) rec: Box<RequestRecord>,
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) at: SystemTime,
    pub(crate) took: Duration,
    pub(crate) by: Answerer,
}

impl AccessEntry {
    /// The line of a response finished now.
    pub(crate) fn now(rec: Box<RequestRecord>, status: u16, body_bytes: u64, by: Answerer) -> Self {
        let took = rec.born.elapsed();
        AccessEntry {
            rec,
            status,
            body_bytes,
            at: SystemTime::now(),
            took,
            by,
        }
    }
}

/// The status of a response head (`HTTP/1.1 NNN ...`), 0 if it has none.
pub(crate) fn status_of(head: &[u8]) -> u16 {
    head.get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// An event of the log stage.
#[derive(Debug)]
pub(super) enum LogEvent {
    Line(AccessEntry),
    /// Close the file and open this path (the same, or a new one on reload) with
    /// this format.
    Reopen(PathBuf, AccessLogFormat),
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) lines: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) write_errors: AtomicU64,
    pub(super) reopens: AtomicU64,
}

/// The running access log: its stage's sink and counters. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AccessLog {
    pub(super) sink: Sink<LogEvent>,
    pub(super) counters: Arc<Counters>,
}

impl AccessLog {
    /// Offers a line; drops (and counts) it if the queue is full. Never blocks.
    pub(crate) fn offer(&self, entry: AccessEntry) {
        if !self.sink.enqueue_lossy(LogEvent::Line(entry)) {
            self.counters.dropped.fetch_add(1, Relaxed);
        }
    }
}
