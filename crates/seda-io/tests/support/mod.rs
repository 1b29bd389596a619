//! Helpers for the socket tests: a recording echo application on top of `Sockets`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::{Batch, Context, Runtime, Sink};
use seda_io::{
    CloseReason, ConnId, IoBackend, Outgoing, SocketConfig, SocketEvent, SocketHandle, Sockets,
    WriteError, Writer,
};

/// What the application saw of one connection.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub accepted: usize,
    pub adopted: usize,
    pub bytes: usize,
    pub closed: Vec<CloseReason>,
    /// Events after `Closed` (must stay 0).
    pub after_close: usize,
    pub backlog_notices: usize,
    pub resumed: usize,
    pub flood_result: Option<WriteError>,
}

#[derive(Default)]
pub struct Log {
    pub conns: Mutex<HashMap<ConnId, Seen>>,
}

impl Log {
    pub fn closed_total(&self) -> usize {
        self.conns.lock().values().map(|s| s.closed.len()).sum()
    }

    pub fn snapshot(&self) -> HashMap<ConnId, Seen> {
        self.conns.lock().clone()
    }
}

/// An echo server: echoes every `Data`; a packet `FLOOD <n>` makes it send up to `n`
/// blocks of 64 KiB, stopping at the first failed `send` (the slow-reader tests); a
/// packet `ABORT <text>` makes it send `<text>` and abort the connection at once.
pub struct Echo {
    pub rt: Runtime,
    pub sockets: SocketHandle,
    pub log: Arc<Log>,
    pub app: Sink<SocketEvent>,
}

pub fn echo(cfg: SocketConfig, app_capacity: usize, per_event_delay: Duration) -> Echo {
    echo_with(cfg, app_capacity, per_event_delay, false)
}

/// As [`echo`], with the application in the loops' domain when `inline`: its handler
/// then runs on the loop threads whenever its queue is empty, so its output comes
/// from the loop's own thread (the path Haboob takes; under io_uring it is queued
/// and submitted at the end of the loop's turn).
pub fn echo_with(
    mut cfg: SocketConfig,
    app_capacity: usize,
    per_event_delay: Duration,
    inline: bool,
) -> Echo {
    let rt = Runtime::builder().build();
    let domain = inline.then(|| rt.domain("io"));
    cfg.domain = domain.clone();
    let log = Arc::new(Log::default());
    let writer: Arc<OnceLock<Writer>> = Arc::default();
    let (l, w) = (log.clone(), writer.clone());
    let mut app = rt
        .stage(
            "app",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                let Some(w) = w.get() else { return };
                for ev in batch {
                    if !per_event_delay.is_zero() {
                        std::thread::sleep(per_event_delay);
                    }
                    let conn = ev.conn();
                    let mut conns = l.conns.lock();
                    let seen = conns.entry(conn).or_default();
                    if !seen.closed.is_empty() {
                        seen.after_close += 1;
                    }
                    match ev {
                        SocketEvent::Accepted { .. } => seen.accepted += 1,
                        SocketEvent::Adopted { .. } => seen.adopted += 1,
                        SocketEvent::Data { bytes, .. } => {
                            seen.bytes += bytes.len();
                            if let Some(n) = flood_blocks(&bytes) {
                                drop(conns);
                                let block = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
                                let mut res = None;
                                for _ in 0..n {
                                    if let Err(e) = w.send(conn, Outgoing::Bytes(block.clone())) {
                                        res = Some(e);
                                        break;
                                    }
                                }
                                l.conns.lock().entry(conn).or_default().flood_result = res;
                            } else if let Some(last) = bytes.strip_prefix(b"ABORT ") {
                                drop(conns);
                                let _ = w.send(conn, Outgoing::from(last.to_vec()));
                                w.abort(conn);
                            } else {
                                drop(conns);
                                let _ = w.send(conn, Outgoing::from(bytes));
                            }
                        }
                        SocketEvent::WriteBacklog { .. } => seen.backlog_notices += 1,
                        SocketEvent::Closed { reason, .. } => seen.closed.push(reason),
                        SocketEvent::Resumed { .. } => seen.resumed += 1,
                        _ => {}
                    }
                }
            },
        )
        .capacity(app_capacity)
        .fixed_threads(2);
    if let Some(d) = &domain {
        app = app.domain(d);
    }
    let app = app.build().unwrap();
    let want = cfg.backend;
    let sockets = Sockets::start(&rt, cfg, app.clone()).unwrap();
    if want != IoBackend::Auto {
        assert_eq!(sockets.backend(), want, "the backend under test runs");
    }
    assert!(writer.set(sockets.writer()).is_ok());
    rt.start().unwrap();
    Echo {
        rt,
        sockets,
        log,
        app,
    }
}

fn flood_blocks(bytes: &[u8]) -> Option<usize> {
    std::str::from_utf8(bytes.strip_prefix(b"FLOOD ")?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The backend under test: `SEDA_TEST_IO=epoll|uring` (CI runs the suites once
/// with each); unset, the default's choice.
pub fn test_backend() -> IoBackend {
    match std::env::var("SEDA_TEST_IO") {
        Ok(v) if !v.is_empty() => v.parse().expect("SEDA_TEST_IO is auto, epoll or uring"),
        _ => IoBackend::Auto,
    }
}

pub fn test_config() -> SocketConfig {
    SocketConfig::default()
        .with_event_loops(2)
        .with_backend(test_backend())
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `msg` and reads back exactly as many bytes.
pub fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).unwrap();
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back).unwrap();
    back
}

/// Waits until `cond` holds or `limit` passes; returns whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}
