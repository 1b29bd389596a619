//! A fixed-delay HTTP/1.1 server for validating the load generator: one thread per
//! connection, keep-alive, every response after exactly `delay` (plus scheduling
//! noise), optionally chunked, optionally answering every n-th request with 503.
//! Loopback only; stops when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the test server answers. `#[non_exhaustive]`: start from `Default` and use
/// the `with_*` setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TestServerConfig {
    /// Delay before each response.
    pub delay: Duration,
    /// Body bytes of each 200 response.
    pub body_len: usize,
    /// Use chunked transfer coding instead of Content-Length.
    pub chunked: bool,
    /// Answer every n-th request (counted over the server) with 503.
    pub reject_every: Option<u64>,
    /// Close each connection right after its n-th response, without a `Connection:
    /// close` header, the way Apache's event MPM drops idle keep-alive connections
    /// under load: shut down the write side and linger, reading and discarding what
    /// the client still sends, for `linger`.
    pub close_after: Option<u64>,
    /// How long a closing connection lingers (see `close_after`).
    pub linger: Duration,
}

crate::setters::setters!(TestServerConfig {
    with_delay: delay: Duration,
    with_body_len: body_len: usize,
    with_chunked: chunked: bool,
    with_reject_every: reject_every: Option<u64>,
    with_close_after: close_after: Option<u64>,
    with_linger: linger: Duration,
});

impl Default for TestServerConfig {
    fn default() -> Self {
        TestServerConfig {
            delay: Duration::ZERO,
            body_len: 100,
            chunked: false,
            reject_every: None,
            close_after: None,
            linger: Duration::from_secs(2),
        }
    }
}

/// Counters of a running test server.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct TestServerStats {
    /// Requests answered (any status).
    pub requests: AtomicU64,
    /// Requests answered 503.
    pub rejected: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
}

/// A running test server.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<TestServerStats>,
    accept: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Start on 127.0.0.1 with an ephemeral port.
    pub fn start(cfg: TestServerConfig) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TestServerStats::default());
        let (stop2, stats2) = (Arc::clone(&stop), Arc::clone(&stats));
        let cfg = Arc::new(cfg);
        let accept = std::thread::Builder::new()
            .name("testserver-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    stats2.connections.fetch_add(1, Ordering::Relaxed);
                    let (cfg, stats, stop) =
                        (Arc::clone(&cfg), Arc::clone(&stats2), Arc::clone(&stop2));
                    let _ = std::thread::Builder::new()
                        .name("testserver-conn".into())
                        .spawn(move || serve(conn, &cfg, &stats, &stop));
                }
            })?;
        Ok(TestServer {
            addr,
            stop,
            stats,
            accept: Some(accept),
        })
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Live counters.
    pub fn stats(&self) -> &TestServerStats {
        &self.stats
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(mut conn: TcpStream, cfg: &TestServerConfig, stats: &TestServerStats, stop: &AtomicBool) {
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let body = vec![b'x'; cfg.body_len];
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut served_here = 0u64;
    loop {
        // Read one request head (requests from the load generator have no body).
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            match conn.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                }
                Err(_) => return,
            }
        };
        buf.drain(..end);
        if !cfg.delay.is_zero() {
            std::thread::sleep(cfg.delay);
        }
        let n = stats.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let reject = cfg.reject_every.is_some_and(|k| k > 0 && n % k == 0);
        let mut out = Vec::with_capacity(body.len() + 128);
        if reject {
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            out.extend_from_slice(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 4\r\n\r\nbusy");
        } else if cfg.chunked {
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            for piece in body.chunks(1000) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            out.extend_from_slice(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
            );
            out.extend_from_slice(&body);
        }
        if conn.write_all(&out).is_err() {
            return;
        }
        served_here += 1;
        if cfg.close_after == Some(served_here) {
            // FIN right behind the response, then a lingering close.
            let _ = conn.shutdown(std::net::Shutdown::Write);
            let until = std::time::Instant::now() + cfg.linger;
            while std::time::Instant::now() < until && !stop.load(Ordering::Acquire) {
                match conn.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => return,
                }
            }
            return;
        }
    }
}
