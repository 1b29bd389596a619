//! The access log: one line per response, written by a stage of its own, off the
//! hot path.
//!
//! HttpSend hands each finished response's [`AccessEntry`] to the `access-log`
//! stage with a *lossy* enqueue: when the log's queue is full (the disk is slow, the
//! file is on a stalled mount) the line is dropped and counted
//! ([`AccessLogStats::dropped`], and the stage's own `dropped` statistic); a request
//! never waits for its log line. The stage formats lines into a buffer and writes
//! them with one `write` per batch, flushed at the end of every batch, so a line is
//! in the file about as soon as its response is on the wire.
//!
//! What the requests and responses hand the log (the request's record, the line, the
//! stage's event, the [`AccessLog`] handle) is in the leaf module `events`, which
//! connection state imports without importing this stage.
//!
//! # Formats
//! - [`AccessLogFormat::Combined`]: nginx's `combined` format, then two fields
//!   nginx configurations often add, the request time in seconds (ms resolution,
//!   `$request_time`) and the stage that answered:
//!   `127.0.0.1 - - [26/Nov/2026:18:03:35 +0000] "GET /a.html HTTP/1.1" 200 1024 "-" "curl/8.14.1" 0.001 static`
//! - [`AccessLogFormat::Json`]: one JSON object per line with the same fields
//!   (`time` in RFC 3339, UTC).
//!
//! Times are UTC. The stage that answered is `static` (files, redirects, their
//! errors), `handler:NAME` (a dynamic handler), `proxy:NAME` (a route to upstreams,
//! its `502`/`504` included), `admission:STAGE` (a `503` or other
//! overload action because a stage's admission refused the request or its queue was
//! full), `parse` (a request that could not be parsed) or `timeout` (a `408`).
//!
//! # Reopening
//! [`AccessLog::reopen`] (SIGUSR1 in `seda serve`, logrotate's `postrotate`) makes
//! the stage close the file and open the path again (creating it), in order with the
//! lines queued before it: every line before the reopen goes to the old file, every
//! line after to the new one.
//!
//! # Invariants
//! - A line is written whole or not at all (lines are formatted into a buffer, and a
//!   failed write of a batch counts its lines as `write_errors`).
//! - `lines + dropped + write_errors` = responses offered to the log, once the queue
//!   is empty.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use seda::{Batch, Context, EventHandler, Runtime, ThreadModel};
use serde::{Deserialize, Serialize};

pub(crate) mod events;

use events::{AccessEntry, Answerer, Counters, LogEvent, Origin};
pub use events::{AccessLog, AccessLogFormat};

/// Where and how the access log is written. `#[non_exhaustive]`: built by
/// [`AccessLogConfig::new`] and the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccessLogConfig {
    /// The file; created if missing, appended to.
    pub path: PathBuf,
    /// Line format. Default [`AccessLogFormat::Combined`].
    pub format: AccessLogFormat,
    /// Lines the stage's queue holds; past it lines are dropped (and counted).
    /// Default 16,384. At least 1.
    pub queue: usize,
}

crate::setters::setters!(AccessLogConfig {
    with_path: path: PathBuf,
    with_format: format: AccessLogFormat,
    with_queue: queue: usize,
});

impl AccessLogConfig {
    /// The log at `path`, combined format, the default queue.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AccessLogConfig {
            path: path.into(),
            format: AccessLogFormat::Combined,
            queue: 16_384,
        }
    }
}

/// Counters of the access log since start.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct AccessLogStats {
    /// Lines written.
    pub lines: u64,
    /// Lines dropped because the log's queue was full.
    pub dropped: u64,
    /// Lines lost to failed writes (disk full, file gone).
    pub write_errors: u64,
    /// Times the file was reopened.
    pub reopens: u64,
}

/// The log stage's handler: the open file and the line buffer.
#[derive(Debug)]
struct Writer {
    out: Mutex<Output>,
    counters: Arc<Counters>,
}

#[derive(Debug)]
struct Output {
    file: File,
    format: AccessLogFormat,
    buf: String,
}

/// Name of the log stage.
pub const ACCESS_LOG_STAGE: &str = "access-log";

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("access log {}: {e}", path.display())))
}

impl AccessLog {
    /// Opens the file (an error names it) and registers the log stage in `rt`: one
    /// thread of its own, never in a domain, so that no write runs on a thread that
    /// serves requests.
    pub fn start(rt: &Runtime, cfg: &AccessLogConfig) -> io::Result<AccessLog> {
        if cfg.queue == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "access log queue must hold at least 1 line",
            ));
        }
        let file = open(&cfg.path)?;
        let counters = Arc::new(Counters::default());
        let writer = Writer {
            out: Mutex::new(Output {
                file,
                format: cfg.format,
                buf: String::with_capacity(64 << 10),
            }),
            counters: Arc::clone(&counters),
        };
        let sink = rt
            .stage(ACCESS_LOG_STAGE, writer)
            .capacity(cfg.queue)
            .thread_model(ThreadModel::PerStage)
            .fixed_threads(1)
            .batch(1024)
            .build()
            .map_err(io::Error::other)?;
        Ok(AccessLog { sink, counters })
    }

    /// Reopens the file at `path` with `format` once the lines queued before are
    /// written (see the module docs). Waits up to a second for room in the queue.
    pub fn reopen(&self, path: &Path, format: AccessLogFormat) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(1);
        self.sink
            .enqueue_until(LogEvent::Reopen(path.to_owned(), format), deadline)
            .map_err(|e| io::Error::other(format!("cannot reopen the access log: {e}")))
    }

    /// Counters since start.
    pub fn stats(&self) -> AccessLogStats {
        let c = &self.counters;
        AccessLogStats {
            lines: c.lines.load(Relaxed),
            dropped: c.dropped.load(Relaxed),
            write_errors: c.write_errors.load(Relaxed),
            reopens: c.reopens.load(Relaxed),
        }
    }
}

impl EventHandler<LogEvent> for Writer {
    fn handle_events(&self, batch: Batch<'_, LogEvent>, _cx: &Context<'_>) {
        let mut out = self.out.lock();
        let mut pending = 0u64;
        for ev in batch {
            match ev {
                LogEvent::Line(entry) => {
                    let Output { format, buf, .. } = &mut *out;
                    format_line(buf, *format, &entry);
                    pending += 1;
                    if buf.len() >= 60 << 10 {
                        self.flush(&mut out, &mut pending);
                    }
                }
                LogEvent::Reopen(path, format) => {
                    self.flush(&mut out, &mut pending);
                    match open(&path) {
                        Ok(f) => {
                            out.file = f;
                            out.format = format;
                            self.counters.reopens.fetch_add(1, Relaxed);
                        }
                        // Keep writing to the file that is open.
                        Err(e) => tracing::error!("{e}; still writing to the old file"),
                    }
                }
            }
        }
        self.flush(&mut out, &mut pending);
    }
}

impl Writer {
    fn flush(&self, out: &mut Output, pending: &mut u64) {
        if out.buf.is_empty() {
            return;
        }
        match out.file.write_all(out.buf.as_bytes()) {
            Ok(()) => self.counters.lines.fetch_add(*pending, Relaxed),
            Err(e) => {
                tracing::warn!("access log write failed: {e}");
                self.counters.write_errors.fetch_add(*pending, Relaxed)
            }
        };
        out.buf.clear();
        *pending = 0;
    }
}

/// Appends one line (with its newline) to `buf`.
fn format_line(buf: &mut String, format: AccessLogFormat, e: &AccessEntry) {
    let ts = jiff::Timestamp::try_from(e.at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let took = e.took.as_secs_f64();
    let by = answerer(&e.by);
    let r = &e.rec;
    match format {
        AccessLogFormat::Combined => {
            let _ = writeln!(
                buf,
                "{} - - [{}] \"{}\" {} {} \"{}\" \"{}\" {:.3} {}",
                r.peer.ip(),
                ts.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                Escaped(&r.line),
                e.status,
                e.body_bytes,
                Escaped(r.referer.as_deref().unwrap_or(b"-")),
                Escaped(r.user_agent.as_deref().unwrap_or(b"-")),
                took,
                by,
            );
        }
        AccessLogFormat::Json => {
            let line = String::from_utf8_lossy(&r.line);
            let parsed = matches!(r.origin, Origin::Request | Origin::Proxied);
            let mut parts = line.splitn(3, ' ');
            let (method, uri, protocol) = (parts.next(), parts.next(), parts.next());
            fn lossy(b: &Option<Bytes>) -> Option<std::borrow::Cow<'_, str>> {
                b.as_deref().map(String::from_utf8_lossy)
            }
            let obj = JsonLine {
                time: ts.round(jiff::Unit::Millisecond).unwrap_or(ts).to_string(),
                remote_addr: r.peer.ip().to_string(),
                request: &line,
                method: if parsed { method } else { None },
                uri: if parsed { uri } else { None },
                protocol: if parsed { protocol } else { None },
                status: e.status,
                body_bytes_sent: e.body_bytes,
                referer: lossy(&r.referer),
                user_agent: lossy(&r.user_agent),
                request_time: (took * 1000.0).round() / 1000.0,
                stage: &by,
            };
            if let Ok(s) = serde_json::to_string(&obj) {
                buf.push_str(&s);
                buf.push('\n');
            }
        }
    }
}

#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    remote_addr: String,
    request: &'a str,
    method: Option<&'a str>,
    uri: Option<&'a str>,
    protocol: Option<&'a str>,
    status: u16,
    body_bytes_sent: u64,
    referer: Option<std::borrow::Cow<'a, str>>,
    user_agent: Option<std::borrow::Cow<'a, str>>,
    request_time: f64,
    stage: &'a str,
}

fn answerer(by: &Answerer) -> String {
    match by {
        Answerer::Static => "static".into(),
        Answerer::Stage(name) => name.to_string(),
        Answerer::Admission(stage) => format!("admission:{stage}"),
        Answerer::Parse => "parse".into(),
        Answerer::Timeout => "timeout".into(),
    }
}

/// Bytes as nginx escapes them in a log line: `"`, `\` and bytes outside printable
/// ASCII as `\xHH`, so a line is always one line and its quotes always balance.
struct Escaped<'a>(&'a [u8]);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for &b in self.0 {
            if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
                write!(f, "\\x{b:02X}")?;
            } else {
                f.write_char(b as char)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::events::RequestRecord;
    use super::*;

    fn entry(line: &[u8], ua: Option<&[u8]>, by: Answerer) -> AccessEntry {
        AccessEntry {
            rec: Box::new(RequestRecord {
                peer: "127.0.0.1:5000".parse().unwrap(),
                line: Bytes::copy_from_slice(line),
                referer: None,
                user_agent: ua.map(Bytes::copy_from_slice),
                born: Instant::now(),
                stage: None,
                origin: Origin::Request,
                to: None,
            }),
            status: 200,
            body_bytes: 1024,
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            took: Duration::from_micros(2600),
            by,
        }
    }

    #[test]
    fn combined_is_nginx_combined_plus_time_and_stage() {
        let mut buf = String::new();
        format_line(
            &mut buf,
            AccessLogFormat::Combined,
            &entry(b"GET /a.html HTTP/1.1", Some(b"curl/8"), Answerer::Static),
        );
        assert_eq!(
            buf,
            "127.0.0.1 - - [18/Nov/2026:11:06:40 +0000] \"GET /a.html HTTP/1.1\" 200 1024 \"-\" \"curl/8\" 0.003 static\n"
        );
    }

    #[test]
    fn hostile_bytes_cannot_break_a_line() {
        let mut buf = String::new();
        format_line(
            &mut buf,
            AccessLogFormat::Combined,
            &entry(
                b"GET /\"x\n HTTP/1.1",
                Some(b"a\"b\\\xff"),
                Answerer::Admission("handler:b".into()),
            ),
        );
        assert_eq!(buf.matches('\n').count(), 1, "{buf}");
        assert!(buf.contains(r#""GET /\x22x\x0A HTTP/1.1""#), "{buf}");
        assert!(buf.contains(r#""a\x22b\x5C\xFF""#), "{buf}");
        assert!(buf.ends_with(" admission:handler:b\n"), "{buf}");
    }

    #[test]
    fn json_lines_parse_back() {
        let mut buf = String::new();
        format_line(
            &mut buf,
            AccessLogFormat::Json,
            &entry(
                b"GET /hello?x=1 HTTP/1.1",
                None,
                Answerer::Stage("handler:hello".into()),
            ),
        );
        let v: serde_json::Value = serde_json::from_str(buf.trim_end()).unwrap();
        assert_eq!(v["method"], "GET");
        assert_eq!(v["uri"], "/hello?x=1");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["body_bytes_sent"], 1024);
        assert_eq!(v["user_agent"], serde_json::Value::Null);
        assert_eq!(v["request_time"], 0.003);
        assert_eq!(v["stage"], "handler:hello");
        assert_eq!(v["time"], "2026-11-18T11:06:40Z");
    }

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse(), Ok(AccessLogFormat::Json));
        assert_eq!("combined".parse(), Ok(AccessLogFormat::Combined));
        assert!("apache".parse::<AccessLogFormat>().is_err());
    }
}
