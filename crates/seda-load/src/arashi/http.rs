//! A small blocking HTTP/1.1 client for one emulated user (and for tests): one
//! keep-alive connection, a cookie jar for the session cookie, whole bodies kept
//! (the user reads message ids and the CSRF token from its pages). Responses are
//! read by the crate's one reader (`crate::http`, keeping fields and body): bodies
//! framed by Content-Length, chunked transfer coding or the connection's end.
//!
//! `seda-load`'s event-driven client counts and drops bodies; a mail reader must read
//! them, so each user has this client on a thread of its own. The response time of a
//! request runs from its first byte written (connection set-up included) to its last
//! byte read. A request on a reused connection that the server closed before
//! answering is retried once on a fresh connection (as browsers do).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::http::{Feed, ResponseReader};

/// Longest a blocked read waits before looking at the stop flag and the deadline.
const POLL: Duration = Duration::from_millis(200);

/// Largest response body kept, bytes.
const MAX_BODY: usize = 16 << 20;

/// A response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header fields in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Percent-encodes a form or query value (`application/x-www-form-urlencoded`).
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One user's connection and cookies.
#[derive(Debug)]
pub struct HttpClient {
    addr: SocketAddr,
    timeout: Duration,
    stream: Option<TcpStream>,
    cookies: Vec<(String, String)>,
    /// Extra header fields sent with every request (e.g. the class header).
    pub extra_headers: Vec<(String, String)>,
    reader: ResponseReader,
    /// TCP connections opened so far.
    pub connections: u64,
    stop: Option<Arc<AtomicBool>>,
}

impl HttpClient {
    /// A client of the server at `addr`; a request taking longer than `timeout`
    /// fails.
    pub fn new(addr: SocketAddr, timeout: Duration) -> HttpClient {
        HttpClient {
            addr,
            timeout,
            stream: None,
            cookies: Vec::new(),
            extra_headers: Vec::new(),
            reader: ResponseReader::keeping(MAX_BODY),
            connections: 0,
            stop: None,
        }
    }

    /// A request in progress gives up (`Interrupted`) soon after `stop` is set.
    pub fn stop_on(&mut self, stop: Arc<AtomicBool>) {
        self.stop = Some(stop);
    }

    /// One read, waiting at most until `deadline`, giving up if stopped.
    fn read_some(&mut self, chunk: &mut [u8], deadline: Instant) -> io::Result<usize> {
        loop {
            let stream = self.stream.as_mut().expect("connected");
            match stream.read(chunk) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self
                        .stop
                        .as_ref()
                        .is_some_and(|s| s.load(Ordering::Relaxed))
                    {
                        return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                    }
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "request timed out"));
                    }
                }
                r => return r,
            }
        }
    }

    /// The value of cookie `name` in the jar.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Forgets every cookie and closes the connection.
    pub fn reset(&mut self) {
        self.cookies.clear();
        self.stream = None;
    }

    /// `GET path`.
    pub fn get(&mut self, path: &str) -> io::Result<HttpResponse> {
        self.request("GET", path, None, &[])
    }

    /// `POST path` with a urlencoded form.
    pub fn post_form(&mut self, path: &str, form: &[(&str, &str)]) -> io::Result<HttpResponse> {
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect();
        self.request(
            "POST",
            path,
            Some("application/x-www-form-urlencoded"),
            body.join("&").as_bytes(),
        )
    }

    /// Any request; `content_type` with a body.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> io::Result<HttpResponse> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            head.push_str(&format!("Cookie: {}\r\n", jar.join("; ")));
        }
        for (k, v) in &self.extra_headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(ct) = content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut wire = head.into_bytes();
        wire.extend_from_slice(body);
        let reused = self.stream.is_some();
        let head_request = method == "HEAD";
        match self.exchange(&wire, head_request) {
            Err(e) if reused && is_stale(&e) => {
                self.stream = None;
                self.exchange(&wire, head_request)
            }
            r => r,
        }
    }

    fn exchange(&mut self, wire: &[u8], head_request: bool) -> io::Result<HttpResponse> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, self.timeout)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(self.timeout.min(POLL)))?;
            s.set_write_timeout(Some(self.timeout))?;
            self.connections += 1;
            self.stream = Some(s);
        }
        let result = self.exchange_on_stream(wire, head_request);
        if result.as_ref().map_or(true, |(_, close)| *close) {
            self.stream = None;
        }
        result.map(|(r, _)| r)
    }

    fn exchange_on_stream(
        &mut self,
        wire: &[u8],
        head_request: bool,
    ) -> io::Result<(HttpResponse, bool)> {
        let deadline = Instant::now() + self.timeout;
        self.stream
            .as_mut()
            .expect("connected above")
            .write_all(wire)?;
        self.reader.start(head_request);
        let mut chunk = [0u8; 16 * 1024];
        let response = loop {
            let n = self.read_some(&mut chunk, deadline)?;
            if n == 0 {
                if self.reader.is_fresh() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed before answering",
                    ));
                }
                match self.reader.eof() {
                    Ok(r) => break r,
                    Err(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "closed mid-response",
                        ));
                    }
                }
            }
            match self.reader.feed(&chunk[..n]) {
                Ok(Feed::More) => {}
                Ok(Feed::Done { response, .. }) => break response,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
        };
        let headers = self.reader.headers().to_vec();
        for (n, v) in &headers {
            if n.eq_ignore_ascii_case("set-cookie") {
                self.store_cookie(v);
            }
        }
        Ok((
            HttpResponse {
                status: response.status,
                headers,
                body: self.reader.take_body(),
            },
            response.close,
        ))
    }

    fn store_cookie(&mut self, set_cookie: &str) {
        let mut parts = set_cookie.split(';');
        let Some((name, value)) = parts.next().and_then(|p| p.trim().split_once('=')) else {
            return;
        };
        let expired = parts.any(|p| p.trim().eq_ignore_ascii_case("max-age=0"));
        self.cookies.retain(|(n, _)| n != name);
        if !expired && !value.is_empty() {
            self.cookies.push((name.to_owned(), value.to_owned()));
        }
    }
}

/// Whether a failure on a reused connection means the server had closed it before
/// reading the request (so sending again on a new connection is safe).
fn is_stale(e: &io::Error) -> bool {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => e.to_string().contains("before answering"),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_forms_and_keeps_cookies() {
        assert_eq!(form_encode("a b&c=é"), "a+b%26c%3D%C3%A9");
        let mut c = HttpClient::new(
            SocketAddr::from(([127, 0, 0, 1], 9)),
            Duration::from_secs(1),
        );
        c.store_cookie("s=abc; Path=/; HttpOnly");
        assert_eq!(c.cookie("s"), Some("abc"));
        c.store_cookie("s=; Path=/; Max-Age=0");
        assert_eq!(c.cookie("s"), None);
    }
}
