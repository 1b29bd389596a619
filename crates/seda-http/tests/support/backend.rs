//! A scripted upstream for the proxy tests: it records exactly the bytes each of
//! its connections received, and answers each request it can frame by a script.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// How the backend answers a request.
#[derive(Clone)]
pub enum Script {
    /// `200` with this body (`Content-Length`), keep-alive.
    Ok(&'static str),
    /// Echo the request's body back in a `200` (read by its `Content-Length` or
    /// chunks).
    Echo,
    /// Write these bytes and close.
    Raw(&'static [u8]),
    /// Accept, read the request, never answer.
    Stall,
    /// A `200` with a `Content-Length` body of this many bytes, written in 64 KiB
    /// blocks (the count written is recorded).
    Big(usize),
    /// Sleep, then `200`.
    Slow(Duration, &'static str),
    /// Write the first bytes, then the second over and over until the write fails
    /// (the count written is recorded): an upstream that never stops talking.
    Flood(&'static [u8], &'static [u8]),
}

/// The recording backend.
pub struct Backend {
    pub addr: SocketAddr,
    /// What each connection received, in order of accept.
    pub received: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Requests (heads) seen, over all connections.
    pub requests: Arc<AtomicUsize>,
    /// Bytes of `Big` bodies written so far.
    pub written: Arc<AtomicUsize>,
}

impl Backend {
    pub fn start(script: Script) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let requests = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(AtomicUsize::new(0));
        let (r, q, w) = (received.clone(), requests.clone(), written.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                let idx = {
                    let mut r = r.lock();
                    r.push(Vec::new());
                    r.len() - 1
                };
                let (r, q, w, script) = (r.clone(), q.clone(), w.clone(), script.clone());
                std::thread::spawn(move || serve(s, idx, &r, &q, &w, &script));
            }
        });
        Backend {
            addr,
            received,
            requests,
            written,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything every connection received, concatenated.
    pub fn all_received(&self) -> String {
        let r = self.received.lock();
        String::from_utf8_lossy(&r.concat()).into_owned()
    }

    pub fn connections(&self) -> usize {
        self.received.lock().len()
    }
}

/// The end of a request at the front of `buf` (head and body), if complete.
fn request_end(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if let Some(l) = head.lines().find_map(|l| l.strip_prefix("content-length:")) {
        let n: usize = l.trim().parse().ok()?;
        if buf.len() < head_end + n {
            return None;
        }
        return Some((head_end + n, buf[head_end..head_end + n].to_vec()));
    }
    if head.contains("transfer-encoding: chunked") {
        let mut at = head_end;
        let mut body = Vec::new();
        loop {
            let line_end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&buf[at..line_end])
                    .split(';')
                    .next()?
                    .trim(),
                16,
            )
            .ok()?;
            at = line_end + 2;
            if size == 0 {
                if buf.len() < at + 2 {
                    return None;
                }
                return Some((at + 2, body));
            }
            if buf.len() < at + size + 2 {
                return None;
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
        }
    }
    Some((head_end, Vec::new()))
}

fn serve(
    mut s: TcpStream,
    idx: usize,
    received: &Mutex<Vec<Vec<u8>>>,
    requests: &AtomicUsize,
    written: &AtomicUsize,
    script: &Script,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while let Some((end, body)) = request_end(&buf) {
            buf.drain(..end);
            requests.fetch_add(1, Ordering::SeqCst);
            let answer: Vec<u8> = match script {
                Script::Ok(b) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: yes\r\nConnection: X-Secret\r\nX-Secret: hop\r\n\r\n{b}",
                    b.len()
                )
                .into_bytes(),
                Script::Echo => {
                    let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                        .into_bytes();
                    a.extend_from_slice(&body);
                    a
                }
                Script::Raw(bytes) => {
                    let _ = s.write_all(bytes);
                    return;
                }
                Script::Stall => {
                    std::thread::sleep(Duration::from_secs(30));
                    return;
                }
                Script::Big(n) => {
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
                    if s.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let block = vec![b'x'; 64 * 1024];
                    let mut left = *n;
                    while left > 0 {
                        let k = left.min(block.len());
                        if s.write_all(&block[..k]).is_err() {
                            return;
                        }
                        written.fetch_add(k, Ordering::SeqCst);
                        left -= k;
                    }
                    continue;
                }
                Script::Flood(first, unit) => {
                    if s.write_all(first).is_err() {
                        return;
                    }
                    while s.write_all(unit).is_ok() {
                        written.fetch_add(unit.len(), Ordering::SeqCst);
                    }
                    return;
                }
                Script::Slow(d, b) => {
                    std::thread::sleep(*d);
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{b}", b.len())
                        .into_bytes()
                }
            };
            if s.write_all(&answer).is_err() {
                return;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                received.lock()[idx].extend_from_slice(&chunk[..n]);
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}
