//! Helpers of the integration tests: a server on an ephemeral loopback port over a
//! temporary root, and a minimal HTTP/1.1 client over a raw socket.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use seda_http::{Server, ServerConfig};

/// A server and the temporary directory it serves (root at `dir/root`, with
/// `dir/secret.txt` outside it).
pub struct TestServer {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    /// The admin listener (on a loopback port of its own), if configured.
    pub admin: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server running")
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.expect("an admin listener")
    }

    /// A client of the admin listener.
    pub fn admin(&self) -> Client {
        Client::connect(self.admin_addr())
    }

    /// The admin stats document.
    pub fn stats(&self) -> seda_http::StatsDoc {
        let r = self.admin().get("/_seda/stats");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("stats are a StatsDoc")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(2));
        }
    }
}

/// Bytes of a deterministic pseudo-random file.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761) >> 7) as u8 ^ seed)
        .collect()
}

/// Writes the standard test tree under `root`.
pub fn populate(dir: &Path) {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(root.join("nodex")).unwrap();
    std::fs::write(root.join("index.html"), b"<p>home</p>\n").unwrap();
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    std::fs::write(root.join("one_k.bin"), pattern(1024, 1)).unwrap();
    std::fs::write(root.join("mid.bin"), pattern(300 * 1024, 2)).unwrap();
    std::fs::write(root.join("big.bin"), pattern(3 * 1024 * 1024 + 17, 3)).unwrap();
    std::fs::write(root.join("sub/index.html"), b"<p>sub</p>\n").unwrap();
    std::fs::write(root.join("with space.txt"), b"spaced\n").unwrap();
    std::fs::write(dir.join("secret.txt"), b"TOP-SECRET\n").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("escape")).unwrap();
    std::os::unix::fs::symlink(dir, root.join("up")).unwrap();
}

/// The socket backend under test: `SEDA_TEST_IO=epoll|uring` (CI runs the suites
/// once with each); unset, the default's choice.
pub fn test_io() -> seda_http::IoBackend {
    match std::env::var("SEDA_TEST_IO") {
        Ok(v) if !v.is_empty() => v.parse().expect("SEDA_TEST_IO is auto, epoll or uring"),
        _ => seda_http::IoBackend::Auto,
    }
}

/// Starts a server with `tweak` applied to a test configuration (ephemeral port,
/// small cache limits so that `big.bin` streams).
pub fn start(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let mut cfg = ServerConfig::default()
        .with_listen("127.0.0.1:0".parse().unwrap())
        .with_root(dir.path().join("root"))
        .with_max_cached_file(1 << 20)
        .with_event_loops(1)
        .with_io(test_io())
        .with_admin_listen(Some("127.0.0.1:0".parse().unwrap()))
        // Enough for any test; the default 10,000 plus an upstream connection per
        // proxied request would not fit the open-files limit of every machine.
        .with_max_connections(1024);
    tweak(&mut cfg);
    // The backend asked for (SEDA_TEST_IO's, or the test's own choice) is the one
    // that runs: a suite never passes on the other one by a silent fallback.
    let want = cfg.io;
    let server = Server::start(cfg).expect("server starts");
    if want != seda_http::IoBackend::Auto {
        assert_eq!(server.io_backend().0, want, "the backend under test runs");
    }
    let addr = server.local_addr();
    let admin = server.admin_addr();
    TestServer {
        server: Some(server),
        addr,
        admin,
        dir,
    }
}

/// One parsed response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.1 client on one connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// A client over a stream the test set up itself.
    pub fn from_stream(stream: TcpStream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).unwrap();
    }

    /// `GET path` with keep-alive.
    pub fn get(&mut self, path: &str) -> Resp {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        self.read_response(false).expect("a response")
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Reads one response; `head_only` for responses to HEAD. `None` on EOF.
    pub fn read_response(&mut self, head_only: bool) -> Option<Resp> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if !self.fill() {
                return None;
            }
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Response::new(&mut headers);
        r.parse(&self.buf[..head_end])
            .expect("a well-formed response head");
        let status = r.code.unwrap();
        let headers: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.trim().parse().unwrap());
        let len = if head_only || status == 304 { 0 } else { len };
        while self.buf.len() < head_end + len {
            if !self.fill() {
                panic!(
                    "connection closed mid-body ({} of {len} bytes)",
                    self.buf.len() - head_end
                );
            }
        }
        let body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// Whether the server closed the connection (EOF with nothing left to read).
    pub fn is_closed(&mut self) -> bool {
        self.buf.is_empty() && !self.fill()
    }
}

/// One request on a fresh connection; the whole raw request is given.
pub fn raw_request(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut c = Client::connect(addr);
    c.send(raw);
    c.read_response(raw.starts_with(b"HEAD"))
        .expect("a response")
}
