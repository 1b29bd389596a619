//! What a stage answers, and the one place that frames it into bytes.
//!
//! Every stage that settles a request produces an [`Answer`] and hands it, with the
//! request's [`Exchange`](super::conn::Exchange), to HttpSend. [`Framer::frame`] then
//! decides, for every response the server sends:
//! - the status and its fields (304, 206 and 416 from the request's validators and
//!   range; `Allow` with a 405; `Retry-After` with an overload 503);
//! - whether a body goes out: never for a HEAD request, never for 1xx, 204 and 304
//!   (RFC 9110 6.4.1), with `Content-Length` always telling the length a GET would get;
//! - whether the connection closes after it: when the client asked (or spoke
//!   HTTP/1.0 without keep-alive), when the server is draining, or when the request
//!   could not be framed (the parse errors, whose exchange is created closing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use bytes::Bytes;

use super::conn::{Body, Reply, Slot};
use crate::cache::FileInfo;
use crate::handler::Response;
use crate::proto::{self, Conditional, DateCache, RangeRequest, Status};

/// Body of the server's own overload `503` (as [`Response::unavailable`]'s).
const OVERLOAD_BODY: &[u8] = b"503 Service Unavailable: the server is overloaded, retry later\n";

/// How a request was settled.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A static file: `200`, or `304`/`206`/`416` per `cond`. `page` is the cached
    /// body; `None` streams `info.stream` with `sendfile`.
    File {
        info: Arc<FileInfo>,
        page: Option<Bytes>,
        /// `None` when the request sent no validator and no range (boxed: an
        /// answer is moved at every hop, and four absent fields weigh 128 bytes).
        cond: Option<Box<Conditions>>,
    },
    /// `301` to a directory's slash form, with the request's query appended.
    Redirect(Box<Redirect>),
    /// An error status with a short text body (`405` adds `Allow`).
    Error(Status),
    /// A dynamic handler's response (or its overload action's).
    Dynamic(Box<Response>),
    /// A stage refused the request: `503` with the configured `Retry-After`.
    Overload,
}

impl Answer {
    /// Bytes this answer puts on the wire, roughly (for shortest-first ordering).
    pub(crate) fn wire_len(&self) -> u64 {
        match self {
            Answer::File { info, .. } => info.head_200.len() as u64 + info.key.len,
            Answer::Dynamic(r) => 128 + r.body.len() as u64,
            Answer::Redirect(_) | Answer::Error(_) | Answer::Overload => 160,
        }
    }
}

/// A `301` to a directory's slash form: the location and the request's query.
#[derive(Debug)]
pub(crate) struct Redirect {
    pub(crate) location: Bytes,
    pub(crate) query: Bytes,
}

/// The request's validators and range, for a file answer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Conditions {
    pub(crate) if_none_match: Option<Bytes>,
    pub(crate) if_modified_since: Option<Bytes>,
    pub(crate) range: Option<Bytes>,
    pub(crate) if_range: Option<Bytes>,
}

/// Frames answers. See the module docs.
#[derive(Debug)]
pub(crate) struct Framer {
    pub(crate) date: DateCache,
    /// `Retry-After` of the server's own overload answers, seconds.
    pub(crate) retry_after_secs: u32,
    /// The overload `503`'s head without its `Date` and `Connection` lines, built
    /// once: a refusal must cost almost nothing (USITS'03 6).
    overload_head: Bytes,
    /// The server is shutting down: every response closes its connection.
    pub(crate) draining: AtomicBool,
    /// Take a file's `200` head from its translation (Flash 5.3), or format it.
    pub(crate) header_cache: bool,
}

impl Framer {
    pub(crate) fn new(retry_after_secs: u32, header_cache: bool) -> Self {
        let head = format!(
            "HTTP/1.1 503 Service Unavailable\r\nServer: seda\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: {retry_after_secs}\r\nContent-Length: {}\r\n",
            OVERLOAD_BODY.len()
        );
        Framer {
            date: DateCache::new(),
            retry_after_secs,
            overload_head: Bytes::from(head),
            draining: AtomicBool::new(false),
            header_cache,
        }
    }

    /// The `503` of a request the shutdown grace ended before it started
    /// ([`Conn::cut`](super::conn::Conn::cut)): `Retry-After`, no body whatever the
    /// method (the request's method is not known there), `Connection: close`.
    pub(crate) fn shutdown_refusal(&self) -> Reply {
        Reply {
            head: Bytes::from(format!(
                "HTTP/1.1 503 Service Unavailable\r\nServer: seda\r\nRetry-After: {}\r\nContent-Length: 0\r\n",
                self.retry_after_secs
            )),
            date: Some(self.date.line()),
            body: Body::None,
            close: true,
        }
    }

    /// The one decision of every response's framing (module docs).
    pub(crate) fn frame(&self, slot: &Slot, answer: Answer) -> Reply {
        let close = !slot.keep_alive || self.draining.load(Relaxed);
        let head_only = slot.head_only;
        match answer {
            Answer::File { info, page, cond } => {
                let none = Conditions::default();
                self.file(
                    &info,
                    page,
                    cond.as_deref().unwrap_or(&none),
                    head_only,
                    close,
                )
            }
            Answer::Redirect(r) => {
                let Redirect { location, query } = *r;
                let mut loc = String::from_utf8_lossy(&location).into_owned();
                if !query.is_empty() {
                    loc.push('?');
                    loc.push_str(&String::from_utf8_lossy(&query));
                }
                let resp = Response::text(Status::MOVED_PERMANENTLY, "301 Moved Permanently\n")
                    .with_header("Location", &loc);
                self.response(resp, head_only, close)
            }
            Answer::Error(status) => self.error(status, &[], head_only, close),
            Answer::Dynamic(resp) => self.response(*resp, head_only, close),
            Answer::Overload => Reply {
                head: self.overload_head.clone(),
                date: Some(self.date.line()),
                body: if head_only {
                    Body::None
                } else {
                    Body::Bytes(Bytes::from_static(OVERLOAD_BODY))
                },
                close,
            },
        }
    }

    fn file(
        &self,
        info: &FileInfo,
        page: Option<Bytes>,
        cond: &Conditions,
        head_only: bool,
        close: bool,
    ) -> Reply {
        let len = info.key.len;
        if proto::evaluate_conditional(
            cond.if_none_match.as_deref(),
            cond.if_modified_since.as_deref(),
            &info.validators,
        ) == Conditional::NotModified
        {
            let fields = [
                ("ETag", info.validators.etag.as_str()),
                ("Last-Modified", info.last_modified.as_str()),
            ];
            return self.head(Status::NOT_MODIFIED, &fields, None, close, Body::None);
        }
        let range = cond
            .range
            .as_deref()
            .filter(|_| if_range_holds(cond.if_range.as_deref(), info))
            .map_or(RangeRequest::Full, |r| proto::parse_range(r, len));
        let (offset, body_len) = match range {
            RangeRequest::Full => (0, len),
            RangeRequest::Partial(r) => (r.start, r.len()),
            RangeRequest::Unsatisfiable => {
                let content_range = format!("bytes */{len}");
                return self.error(
                    Status::RANGE_NOT_SATISFIABLE,
                    &[("Content-Range", &content_range)],
                    head_only,
                    close,
                );
            }
        };
        let body = if head_only {
            Body::None
        } else {
            match (page, &info.stream) {
                (Some(b), _) => {
                    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(b.len());
                    let end = usize::try_from(offset + body_len)
                        .unwrap_or(usize::MAX)
                        .min(b.len());
                    Body::Bytes(b.slice(start..end))
                }
                (None, Some(f)) => Body::File {
                    file: Arc::clone(f),
                    offset,
                    len: body_len,
                },
                (None, None) => Body::None,
            }
        };
        if let RangeRequest::Partial(r) = range {
            let content_range = format!("bytes {}-{}/{len}", r.start, r.end);
            let fields = [
                ("Content-Type", info.content_type),
                ("Content-Range", content_range.as_str()),
                ("ETag", info.validators.etag.as_str()),
                ("Last-Modified", info.last_modified.as_str()),
            ];
            return self.head(Status::PARTIAL_CONTENT, &fields, Some(r.len()), close, body);
        }
        let head = if self.header_cache {
            info.head_200.clone()
        } else {
            info.format_head_200()
        };
        Reply {
            head,
            date: Some(self.date.line()),
            body,
            close,
        }
    }

    fn head(
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

    /// A short `text/plain` error response.
    fn error(&self, status: Status, extra: &[(&str, &str)], head_only: bool, close: bool) -> Reply {
        let text = Bytes::from(format!("{} {}\n", status.code(), status.reason()));
        let mut fields: Vec<(&str, &str)> = vec![("Content-Type", "text/plain; charset=utf-8")];
        if status == Status::METHOD_NOT_ALLOWED {
            fields.push(("Allow", "GET, HEAD"));
        }
        fields.extend_from_slice(extra);
        let body = if head_only {
            Body::None
        } else {
            Body::Bytes(text.clone())
        };
        self.head(status, &fields, Some(text.len() as u64), close, body)
    }

    /// A handler's response.
    fn response(&self, resp: Response, head_only: bool, close: bool) -> Reply {
        let fields: Vec<(&str, &str)> = resp
            .headers
            .iter()
            .filter(|(n, _)| !is_framing_field(n))
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let bodiless = resp.status.bodiless();
        let len = (!bodiless).then_some(resp.body.len() as u64);
        let body = if head_only || bodiless {
            Body::None
        } else {
            Body::Bytes(resp.body)
        };
        self.head(resp.status, &fields, len, close, body)
    }
}

/// Fields the server sets itself; a handler's copy would contradict the framing.
fn is_framing_field(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "connection",
        "date",
        "server",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

fn if_range_holds(if_range: Option<&[u8]>, info: &FileInfo) -> bool {
    let Some(v) = if_range else { return true };
    let v = std::str::from_utf8(v).unwrap_or("").trim();
    if v.starts_with('"') {
        return v == info.validators.etag;
    }
    httpdate::parse_http_date(v).is_ok_and(|t| t == info.validators.last_modified)
}
