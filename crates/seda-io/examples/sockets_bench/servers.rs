//! The servers under test: the `seda-io` socket stages (queued or inline) and a
//! thread-per-connection `std::net` server.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use seda::{Batch, Context, Runtime};
use seda_io::{ConnId, IoBackend, Outgoing, SocketConfig, SocketEvent, Sockets, Writer};

use super::{ACK, BURST, LISTEN_BACKLOG};

/// A server under test: where it listens and how many bytes it has read.
pub(crate) trait Server {
    fn addr(&self) -> SocketAddr;
    fn bytes_read(&self) -> u64;
    /// Connections the server closed at once (it could serve no more).
    fn refused(&self) -> u64 {
        0
    }
    fn stop(self: Box<Self>);
}

// ---------------------------------------------------------------- seda-io server

struct SedaServer {
    rt: Runtime,
    sockets: seda_io::SocketHandle,
}

/// Per-connection byte counts, sharded by connection.
struct Counts {
    shards: Vec<Mutex<HashMap<ConnId, u64>>>,
}

/// The seda-io server on socket backend `io`; with `inline`, the loops and the
/// application stage form one domain (reads handed over by a direct call when the
/// stage is idle).
pub(crate) fn seda_server(inline: bool, io: IoBackend) -> io::Result<Box<dyn Server>> {
    let rt = Runtime::builder().name("bench").build();
    let domain = inline.then(|| rt.domain("bench"));
    let writer: Arc<OnceLock<Writer>> = Arc::default();
    let counts = Arc::new(Counts {
        shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
    });
    let (w, c) = (writer.clone(), counts.clone());
    let ack = bytes::Bytes::from_static(&[b'k'; ACK]);
    let mut app = rt
        .stage(
            "bench-app",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                for ev in batch {
                    let conn = ev.conn();
                    let shard = &c.shards[(conn.0 % 64) as usize];
                    match ev {
                        SocketEvent::Accepted { .. } => {
                            shard.lock().insert(conn, 0);
                        }
                        SocketEvent::Data { bytes, .. } => {
                            let crossed = {
                                let mut m = shard.lock();
                                let n = m.entry(conn).or_insert(0);
                                let before = *n / BURST;
                                *n += bytes.len() as u64;
                                *n / BURST - before
                            };
                            if let Some(w) = w.get() {
                                for _ in 0..crossed {
                                    let _ = w.send(conn, Outgoing::Bytes(ack.clone()));
                                }
                            }
                        }
                        SocketEvent::Closed { .. } => {
                            shard.lock().remove(&conn);
                        }
                        _ => {}
                    }
                }
            },
        )
        .capacity(8192)
        .fixed_threads(2);
    if let Some(d) = &domain {
        app = app.domain(d);
    }
    let app = app.build().map_err(io::Error::other)?;
    let cfg = SocketConfig::default()
        .with_max_connections(1 << 20)
        .with_listen_backlog(LISTEN_BACKLOG)
        .with_backend(io)
        .with_domain(domain);
    let sockets = Sockets::start(&rt, cfg, app)?;
    let _ = writer.set(sockets.writer());
    rt.start().map_err(io::Error::other)?;
    Ok(Box::new(SedaServer { rt, sockets }))
}

impl Server for SedaServer {
    fn addr(&self) -> SocketAddr {
        self.sockets.local_addr()
    }
    fn bytes_read(&self) -> u64 {
        self.sockets.stats().bytes_read
    }
    fn stop(self: Box<Self>) {
        self.sockets.stop();
        self.rt.shutdown(Duration::from_secs(5));
    }
}

// ------------------------------------------------- thread-per-connection server

struct ThreadedServer {
    addr: SocketAddr,
    read: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Connections closed at once because another thread would pass
    /// `vm.max_map_count`.
    refused: Arc<AtomicU64>,
}

/// A listener on a free loopback port with the same `listen(2)` backlog as the
/// seda server's (std's `bind` uses 128, which drops SYNs at thousands of clients).
fn tpc_listener() -> io::Result<std::net::TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&fd, &SocketAddr::from(([127, 0, 0, 1], 0)))?;
    rustix::net::listen(&fd, LISTEN_BACKLOG)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Memory mappings each thread costs: its stack and guard page, and std's signal
/// stack and its guard page.
const MAPS_PER_THREAD: usize = 4;

/// How many more threads this process may start before it runs into
/// `vm.max_map_count` (a thread whose signal stack cannot be mapped aborts the
/// process), keeping 1,024 mappings spare.
fn thread_budget() -> usize {
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(65_530);
    let now = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count());
    max.saturating_sub(now + 1024) / MAPS_PER_THREAD
}

/// Decrements the live-thread count when a connection's thread ends.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

pub(crate) fn threaded_server() -> io::Result<Box<dyn Server>> {
    let listener = tpc_listener()?;
    let addr = listener.local_addr()?;
    let read = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let live = Arc::new(AtomicUsize::new(0));
    let budget = thread_budget();
    let (r, s, no) = (read.clone(), stop.clone(), refused.clone());
    std::thread::Builder::new()
        .name("tpc-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if s.load(Relaxed) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                if live.load(Relaxed) >= budget {
                    // At the map-count limit: refuse (close) rather than abort.
                    no.fetch_add(1, Relaxed);
                    continue;
                }
                live.fetch_add(1, Relaxed);
                let (r, guard) = (r.clone(), Live(live.clone()));
                let spawned = std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let _guard = guard;
                        let _ = conn.set_nodelay(true);
                        let mut buf = vec![0u8; 16 * 1024];
                        let mut total = 0u64;
                        loop {
                            match conn.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    r.fetch_add(n as u64, Relaxed);
                                    let before = total / BURST;
                                    total += n as u64;
                                    for _ in before..total / BURST {
                                        if conn.write_all(&[b'k'; ACK]).is_err() {
                                            return;
                                        }
                                    }
                                }
                            }
                        }
                    });
                if let Err(e) = spawned {
                    eprintln!("thread-per-connection server: cannot spawn: {e}");
                }
            }
        })?;
    Ok(Box::new(ThreadedServer {
        addr,
        read,
        stop,
        refused,
    }))
}

impl Server for ThreadedServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn bytes_read(&self) -> u64 {
        self.read.load(Relaxed)
    }
    fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }
    fn stop(self: Box<Self>) {
        self.stop.store(true, Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}
