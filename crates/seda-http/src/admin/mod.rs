//! The admin listener: a runtime's statistics, stage graph and metrics on an address
//! of their own, never on the service port (as Envoy's admin interface and nginx's
//! `stub_status` are deployed). Haboob, the Gnutella router and the Arashi mail
//! service all mount it.
//!
//! | path | what |
//! |---|---|
//! | `/_seda/` | the live dashboard (stage graph, per-stage charts; see [`dashboard`]) |
//! | `/_seda/stats` | [`StatsDoc`] as JSON: every stage, the graph, the application's sections |
//! | `/_seda/graph` | the stage graph observed at run time, Graphviz DOT |
//! | `/_seda/graph.json` | the same graph as JSON |
//! | `/_seda/metrics` | Prometheus text exposition |
//!
//! More pages are mounted with [`AdminBuilder::endpoint`].
//!
//! # Serving
//! The admin listener runs outside the runtime on threads of its own, so it answers
//! while the service's stages are saturated. One thread accepts; each connection is
//! served on a short-lived thread (keep-alive, GET and HEAD only, 5 s read timeout),
//! at most [`MAX_CLIENTS`] at once: more get a `503` and are closed.

mod acceptor;
mod agent;
mod dashboard;
mod doc;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::time::Duration;

use seda::Runtime;
use serde::Serialize;

use acceptor::Acceptor;
pub use agent::{AgentConfig, AgentConfigError, AgentReply, AgentServer, DrainReason};
pub use doc::{AdmissionView, ClassCount, ClassTarget, Latency, StageStats, StatsDoc};

use crate::handler::{Request, Response};
use crate::proto::{self, Limits, Method, Status};

/// Most admin connections served at once.
pub const MAX_CLIENTS: usize = 8;
/// Longest wait for a request on an admin connection.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

type Section = Box<dyn Fn() -> serde_json::Value + Send + Sync>;
type Qualities = Box<dyn Fn() -> Vec<(String, Option<f64>)> + Send + Sync>;
type Metrics = Box<dyn Fn(&mut String) + Send + Sync>;
type Endpoint = Box<dyn Fn(&Request) -> Response + Send + Sync>;

/// What the admin server shows, and of which runtime.
pub struct AdminBuilder {
    rt: Runtime,
    sections: Vec<(String, Section)>,
    qualities: Option<Qualities>,
    metrics: Vec<Metrics>,
    endpoints: Vec<(String, Endpoint)>,
}

impl fmt::Debug for AdminBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.sections.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("AdminBuilder")
            .field("sections", &names)
            .finish_non_exhaustive()
    }
}

impl AdminBuilder {
    /// Adds a section `name` to the stats document, made by `f` at each request.
    #[must_use]
    pub fn section<T: Serialize>(
        mut self,
        name: &str,
        f: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self {
        let f = move || serde_json::to_value(f()).unwrap_or(serde_json::Value::Null);
        self.sections.push((name.to_owned(), Box::new(f)));
        self
    }

    /// Where the stages' service quality comes from: `(stage name, quality)` pairs.
    #[must_use]
    pub fn qualities(
        mut self,
        f: impl Fn() -> Vec<(String, Option<f64>)> + Send + Sync + 'static,
    ) -> Self {
        self.qualities = Some(Box::new(f));
        self
    }

    /// Appends lines of Prometheus text to `/_seda/metrics`.
    #[must_use]
    pub fn metrics(mut self, f: impl Fn(&mut String) + Send + Sync + 'static) -> Self {
        self.metrics.push(Box::new(f));
        self
    }

    /// Serves `GET path` (under `/_seda/`) with `f`.
    #[must_use]
    pub fn endpoint(
        mut self,
        path: &str,
        f: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> Self {
        self.endpoints.push((path.to_owned(), Box::new(f)));
        self
    }

    /// The stats document now (what `/_seda/stats` serves).
    pub fn stats(&self) -> StatsDoc {
        let mut doc = StatsDoc::from_snapshot(&self.rt.snapshot());
        if let Some(q) = &self.qualities {
            for (name, quality) in q() {
                if let Some(s) = doc.stages.iter_mut().find(|s| s.name == name) {
                    s.quality = quality;
                }
            }
        }
        for (name, f) in &self.sections {
            doc.sections.insert(name.clone(), f());
        }
        doc
    }

    /// Binds `addr` and starts serving. The error names the address.
    pub fn start(self, addr: SocketAddr) -> io::Result<AdminServer> {
        let pages = Arc::new(self);
        let p = Arc::clone(&pages);
        let busy = Arc::new(AtomicUsize::new(0));
        let acceptor =
            Acceptor::start(addr, "seda-admin", move |stream| accept(stream, &p, &busy))?;
        Ok(AdminServer { acceptor, pages })
    }

    fn respond(&self, path: &[u8], req: &Request) -> Response {
        let resp = match path {
            b"/_seda" | b"/_seda/" => dashboard::page(self.links()),
            b"/_seda/stats" => Response::ok(
                "application/json",
                serde_json::to_string(&self.stats()).unwrap_or_default(),
            ),
            b"/_seda/graph" => Response::ok(
                "text/vnd.graphviz; charset=utf-8",
                self.rt.snapshot().to_dot(),
            ),
            b"/_seda/graph.json" => {
                Response::ok("application/json", self.rt.snapshot().graph_json())
            }
            b"/_seda/metrics" => {
                let mut text = self.rt.snapshot().to_prometheus();
                for f in &self.metrics {
                    f(&mut text);
                }
                Response::ok("text/plain; version=0.0.4; charset=utf-8", text)
            }
            _ => match self.endpoints.iter().find(|(p, _)| p.as_bytes() == path) {
                Some((_, f)) => f(req),
                None => dashboard::asset(path)
                    .unwrap_or_else(|| Response::text(Status::NOT_FOUND, "404 Not Found\n")),
            },
        };
        resp.with_header("Cache-Control", "no-store")
    }

    /// The endpoints the dashboard links to.
    fn links(&self) -> impl Iterator<Item = &str> {
        [
            "/_seda/stats",
            "/_seda/graph",
            "/_seda/graph.json",
            "/_seda/metrics",
        ]
        .into_iter()
        .chain(self.endpoints.iter().map(|(p, _)| p.as_str()))
    }
}

/// A running admin listener. Dropping it stops it.
pub struct AdminServer {
    acceptor: Acceptor,
    pages: Arc<AdminBuilder>,
}

impl fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminServer")
            .field("local_addr", &self.acceptor.local_addr())
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// What to show of `rt`; add sections, then [`AdminBuilder::start`].
    pub fn builder(rt: &Runtime) -> AdminBuilder {
        AdminBuilder {
            rt: rt.clone(),
            sections: Vec::new(),
            qualities: None,
            metrics: Vec::new(),
            endpoints: Vec::new(),
        }
    }

    /// Serves `rt`'s statistics, graph and metrics on `addr`.
    pub fn start(addr: SocketAddr, rt: &Runtime) -> io::Result<AdminServer> {
        AdminServer::builder(rt).start(addr)
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.acceptor.local_addr()
    }

    /// The stats document now.
    pub fn stats(&self) -> StatsDoc {
        self.pages.stats()
    }

    /// Stops accepting; connections being served finish their request.
    pub fn stop(self) {
        self.acceptor.stop();
    }
}

/// Serves `stream` on a thread of its own, or refuses it with a 503 when
/// [`MAX_CLIENTS`] are being served.
fn accept(mut stream: TcpStream, pages: &Arc<AdminBuilder>, busy: &Arc<AtomicUsize>) {
    if busy.fetch_add(1, SeqCst) >= MAX_CLIENTS {
        busy.fetch_sub(1, SeqCst);
        let _ = stream.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    let (pages, b) = (Arc::clone(pages), Arc::clone(busy));
    let spawned = std::thread::Builder::new()
        .name("seda-admin-conn".into())
        .spawn(move || {
            let _ = serve(stream, &pages);
            b.fetch_sub(1, SeqCst);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, SeqCst);
    }
}

/// Serves one connection until the client closes, asks to, or idles.
fn serve(mut stream: TcpStream, pages: &AdminBuilder) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let peer = stream.peer_addr().ok();
    let limits = Limits {
        max_body: 0,
        ..Limits::default()
    };
    let date = proto::DateCache::new();
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let skip = proto::skip_leading_crlf(&buf);
        buf.drain(..skip);
        let head = match proto::parse_head(&buf, &limits) {
            Ok(Some(h)) => h,
            Ok(None) => {
                let n = stream.read(&mut chunk)?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
                continue;
            }
            Err(e) => {
                let status = e.status();
                write_response(
                    &mut stream,
                    &date,
                    Response::text(status, format!("{status:?}\n")),
                    false,
                    true,
                )?;
                return Ok(());
            }
        };
        let head_only = head.method == Method::Head;
        let close = !head.keep_alive;
        let resp = if matches!(head.method, Method::Get | Method::Head) {
            let path = head.path(&buf).to_vec();
            let mut req = Request::get(&String::from_utf8_lossy(&path));
            req.query = String::from_utf8_lossy(head.get(&buf, &head.query)).into_owned();
            req.peer = peer;
            pages.respond(&path, &req)
        } else {
            Response::text(Status::METHOD_NOT_ALLOWED, "405 Method Not Allowed\n")
                .with_header("Allow", "GET, HEAD")
        };
        buf.drain(..head.head_len);
        write_response(&mut stream, &date, resp, head_only, close)?;
        if close {
            return Ok(());
        }
    }
}

fn write_response(
    stream: &mut TcpStream,
    date: &proto::DateCache,
    resp: Response,
    head_only: bool,
    close: bool,
) -> io::Result<()> {
    let fields: Vec<(&str, &str)> = resp
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let mut out = Vec::with_capacity(256 + resp.body.len());
    proto::write_head(
        &mut out,
        resp.status,
        &fields,
        Some(resp.body.len() as u64),
        !close,
        &date.line(),
    );
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    stream.write_all(&out)
}
