//! SEDA Fig. 11 on loopback: N clients each send bursts of 1,000 packets of 8 KB and
//! wait for the server's 32-byte answer after each burst. The server is either the
//! `seda-io` socket stages with a counting application stage, or a
//! thread-per-connection `std::net` server written for the comparison; both run in
//! this invocation and the ratio is printed per N.
//!
//! Throughput is what the server read during the measurement window (bytes and 8 KB
//! packets per second). The load generator is two mio threads, so it does not need
//! thousands of threads of its own.
//!
//! ```text
//! cargo run --release -p seda-io --example sockets_bench -- [--max-clients 4096] [--secs 3] [--warmup 1]
//! ```

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use parking_lot::Mutex;
use seda::{Batch, Context, Runtime};
use seda_io::{ConnId, Outgoing, SocketConfig, SocketEvent, Sockets, Writer};

const PACKET: usize = 8 * 1024;
const BURST_PACKETS: usize = 1000;
const BURST: u64 = (PACKET * BURST_PACKETS) as u64;
const ACK: usize = 32;
const CLIENT_THREADS: usize = 2;

struct Args {
    max_clients: usize,
    secs: f64,
    warmup: f64,
    min_clients: usize,
    only: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        max_clients: 4096,
        secs: 3.0,
        warmup: 1.0,
        min_clients: 1,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--max-clients" => {
                a.max_clients = value("--max-clients")?
                    .parse()
                    .map_err(|e| format!("--max-clients: {e}"))?
            }
            "--min-clients" => {
                a.min_clients = value("--min-clients")?
                    .parse()
                    .map_err(|e| format!("--min-clients: {e}"))?
            }
            "--only" => a.only = Some(value("--only")?),
            "--secs" => {
                a.secs = value("--secs")?
                    .parse()
                    .map_err(|e| format!("--secs: {e}"))?
            }
            "--warmup" => {
                a.warmup = value("--warmup")?
                    .parse()
                    .map_err(|e| format!("--warmup: {e}"))?
            }
            "-h" | "--help" => {
                println!(
                    "sockets_bench [--min-clients N] [--max-clients N] [--secs S] [--warmup S] [--only seda|tpc]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.min_clients == 0
        || a.max_clients < a.min_clients
        || a.secs.is_nan()
        || a.secs <= 0.0
        || !a.secs.is_finite()
        || a.warmup < 0.0
    {
        return Err("--min-clients must be at least 1 and at most --max-clients, --secs positive, --warmup not negative".into());
    }
    Ok(a)
}

/// A server under test: where it listens and how many bytes it has read.
trait Server {
    fn addr(&self) -> SocketAddr;
    fn bytes_read(&self) -> u64;
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

fn seda_server() -> io::Result<Box<dyn Server>> {
    let rt = Runtime::builder().name("bench").build();
    let writer: Arc<OnceLock<Writer>> = Arc::default();
    let counts = Arc::new(Counts {
        shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
    });
    let (w, c) = (writer.clone(), counts.clone());
    let ack = bytes::Bytes::from_static(&[b'k'; ACK]);
    let app = rt
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
        .fixed_threads(2)
        .build()
        .map_err(io::Error::other)?;
    let cfg = SocketConfig {
        max_connections: 1 << 20,
        listen_backlog: 4096,
        ..SocketConfig::default()
    };
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
}

fn threaded_server() -> io::Result<Box<dyn Server>> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let read = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (r, s) = (read.clone(), stop.clone());
    std::thread::Builder::new()
        .name("tpc-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if s.load(Relaxed) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let r = r.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
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
    Ok(Box::new(ThreadedServer { addr, read, stop }))
}

impl Server for ThreadedServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn bytes_read(&self) -> u64 {
        self.read.load(Relaxed)
    }
    fn stop(self: Box<Self>) {
        self.stop.store(true, Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

// ------------------------------------------------------------------ load generator

struct Client {
    stream: TcpStream,
    /// Bytes of the current burst still to send; 0 while waiting for the answer.
    left: u64,
    /// Bytes of the answer received so far.
    acked: usize,
    connected: bool,
}

impl Client {
    /// Sends until the burst is done or the socket is full.
    fn pump(&mut self, payload: &[u8]) -> io::Result<()> {
        while self.left > 0 {
            let n = (self.left as usize).min(payload.len());
            match self.stream.write(&payload[..n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => self.left -= k as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn drain(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut buf = [0u8; 256];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.acked += n;
                    while self.acked >= ACK {
                        self.acked -= ACK;
                        self.left += BURST;
                    }
                    self.pump(payload)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn client_thread(
    addr: SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicU64>,
) -> io::Result<()> {
    let payload = vec![b'p'; 64 * 1024];
    let mut poll = Poll::new()?;
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let mut stream = TcpStream::connect(addr)?;
        poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        clients.push(Client {
            stream,
            left: BURST,
            acked: 0,
            connected: false,
        });
    }
    let mut events = Events::with_capacity(1024);
    let mut errors = 0usize;
    while !stop.load(Relaxed) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))?;
        for ev in events.iter() {
            let Some(c) = clients.get_mut(ev.token().0) else {
                continue;
            };
            if !c.connected && ev.is_writable() {
                if c.stream.peer_addr().is_err() {
                    continue;
                }
                c.connected = true;
                let _ = c.stream.set_nodelay(true);
                ready.fetch_add(1, Relaxed);
            }
            let r = if ev.is_readable() {
                c.drain(&payload)
            } else {
                Ok(())
            };
            let r = r.and_then(|()| {
                if ev.is_writable() {
                    c.pump(&payload)
                } else {
                    Ok(())
                }
            });
            if r.is_err() {
                errors += 1;
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
    if errors > 0 {
        eprintln!("  client thread: {errors} connections failed");
    }
    Ok(())
}

struct Point {
    mb_per_s: f64,
    packets_per_s: f64,
}

impl Point {
    /// A server left out with `--only`.
    const NONE: Point = Point {
        mb_per_s: f64::NAN,
        packets_per_s: f64::NAN,
    };
}

fn measure(server: Box<dyn Server>, clients: usize, a: &Args) -> io::Result<Point> {
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicU64::new(0));
    let threads = CLIENT_THREADS.min(clients);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let n = clients / threads + usize::from(t < clients % threads);
            let (stop, ready) = (stop.clone(), ready.clone());
            std::thread::spawn(move || client_thread(addr, n, stop, ready))
        })
        .collect();
    let setup_deadline = Instant::now() + Duration::from_secs(30);
    while (ready.load(Relaxed) as usize) < clients && Instant::now() < setup_deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs_f64(a.warmup));
    let (t0, b0) = (Instant::now(), server.bytes_read());
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let (t1, b1) = (Instant::now(), server.bytes_read());
    stop.store(true, Relaxed);
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("  client thread failed: {e}"),
            Err(_) => eprintln!("  client thread panicked"),
        }
    }
    server.stop();
    let secs = (t1 - t0).as_secs_f64();
    let bytes = (b1 - b0) as f64;
    Ok(Point {
        mb_per_s: bytes / secs / 1e6,
        packets_per_s: bytes / PACKET as f64 / secs,
    })
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sockets_bench: {e}");
            std::process::exit(2);
        }
    };
    match seda_io::raise_fd_limit() {
        Ok(limit) if (limit as usize) < 2 * a.max_clients + 64 => {
            eprintln!(
                "sockets_bench: the open-files limit ({limit}) is too low for {} clients",
                a.max_clients
            );
            std::process::exit(2);
        }
        Ok(_) => {}
        Err(e) => eprintln!("sockets_bench: cannot raise the open-files limit: {e}"),
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# SEDA Fig. 11 on loopback: bursts of {BURST_PACKETS} x {PACKET} B packets, 32 B answer per burst; \
         {cores} cores shared by server and {CLIENT_THREADS} client threads; {:.1} s warm-up, {:.1} s measured",
        a.warmup, a.secs
    );
    println!(
        "{:>7} {:>12} {:>12} {:>14} {:>14} {:>7}",
        "clients", "seda MB/s", "tpc MB/s", "seda pkts/s", "tpc pkts/s", "ratio"
    );
    let mut n = a.min_clients;
    while n <= a.max_clients {
        let skip = |name: &str| a.only.as_deref().is_some_and(|o| o != name);
        let seda = if skip("seda") {
            Ok(Point::NONE)
        } else {
            seda_server().and_then(|s| measure(s, n, &a))
        };
        let tpc = if skip("tpc") {
            Ok(Point::NONE)
        } else {
            threaded_server().and_then(|s| measure(s, n, &a))
        };
        match (seda, tpc) {
            (Ok(s), Ok(t)) => println!(
                "{n:>7} {:>12.1} {:>12.1} {:>14.0} {:>14.0} {:>7.2}",
                s.mb_per_s,
                t.mb_per_s,
                s.packets_per_s,
                t.packets_per_s,
                s.mb_per_s / t.mb_per_s.max(f64::MIN_POSITIVE)
            ),
            (s, t) => println!(
                "{n:>7} seda: {} tpc: {}",
                s.map_or_else(
                    |e| format!("failed ({e})"),
                    |p| format!("{:.1} MB/s", p.mb_per_s)
                ),
                t.map_or_else(
                    |e| format!("failed ({e})"),
                    |p| format!("{:.1} MB/s", p.mb_per_s)
                ),
            ),
        }
        n *= 4;
    }
}
