//! The fuzz corpus on the wire, against both socket backends at once (issue 24).
//!
//! `fuzz_crashes.rs` and `desync.rs` check the parser on bytes; this sends every
//! input of the `request_head` fuzz corpus (`fuzz/corpus/request_head`, the parser's
//! whole explored input space, valid requests and garbage alike) over a real
//! connection to two Haboobs serving the same files, one on epoll and one on
//! io_uring: one write, then a half-close, then everything the server sends until it
//! closes. Both must close by themselves (no input leaves a connection hanging), and
//! both must send the same bytes, `Date` fields aside: whatever the loop's system
//! interface, a client sees the same server. Afterwards both still serve.
//!
//! It runs both backends in one process whatever `SEDA_TEST_IO` says, so CI needs it
//! only once.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use seda_http::IoBackend;
use support::{TestServer, start};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_head");
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    inputs.sort();
    inputs
}

/// Sends `input` in one write, half-closes, and reads until the server closes.
/// `Err` names what went wrong (a read that timed out: the server never closed).
fn exchange(addr: SocketAddr, input: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // A server may answer and close before it has read all of a long input; the
    // rest of the write then fails, which is the server's right.
    let _ = s.write_all(input);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            // A reset after the server's last response: what came before it counts.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(out),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read after {} bytes: {e}", out.len())),
        }
    }
}

/// The bytes with every `Date:` field line taken out (the only field that depends
/// on when the response was made).
fn without_dates(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(rest.len(), |i| i + 2);
        let line = &rest[..end];
        if !line.to_ascii_lowercase().starts_with(b"date:") {
            out.extend_from_slice(line);
        }
        rest = &rest[end..];
    }
    out
}

fn on(io: IoBackend, root: Option<PathBuf>) -> TestServer {
    let s = start(|c| {
        c.io = io;
        if let Some(r) = root {
            c.root = r;
        }
    });
    assert_eq!(s.server().io_backend().0, io, "{io} runs");
    s
}

#[test]
fn every_corpus_input_gets_the_same_bytes_from_epoll_and_io_uring() {
    let inputs = corpus();
    assert!(inputs.len() >= 1000, "only {} inputs", inputs.len());
    let epoll = on(IoBackend::Epoll, None);
    let uring = on(IoBackend::Uring, Some(epoll.root()));
    let (ea, ua) = (epoll.addr, uring.addr);
    // Four clients at a time, each with its share of the corpus, in a fixed order.
    let shares: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                let inputs = &inputs;
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for (name, input) in inputs.iter().skip(k).step_by(4) {
                        let (e, u) = (exchange(ea, input), exchange(ua, input));
                        match (e, u) {
                            (Ok(e), Ok(u)) if without_dates(&e) == without_dates(&u) => {}
                            (Ok(e), Ok(u)) => failures.push(format!(
                                "{name}: epoll sent {:?}\n  io_uring sent {:?}",
                                String::from_utf8_lossy(&e),
                                String::from_utf8_lossy(&u)
                            )),
                            (e, u) => failures.push(format!(
                                "{name}: epoll {:?}, io_uring {:?}",
                                e.err(),
                                u.err()
                            )),
                        }
                    }
                    failures
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<String> = shares.into_iter().flatten().collect();
    assert!(
        failures.is_empty(),
        "{} of {} inputs differ:\n{}",
        failures.len(),
        inputs.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    for s in [&epoll, &uring] {
        let r = s.connect().get("/hello.txt");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello, world\n"[..]));
    }
}

#[test]
fn the_comparison_can_fail() {
    // Two different answers are told apart, and Date lines alone are not a difference.
    let a = b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 21:00:00 GMT\r\nContent-Length: 0\r\n\r\n";
    let b = b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 21:00:01 GMT\r\nContent-Length: 0\r\n\r\n";
    let c = b"HTTP/1.1 400 Bad Request\r\nDate: Thu, 26 Nov 2026 21:00:00 GMT\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(without_dates(a), without_dates(b));
    assert_ne!(without_dates(a), without_dates(c));
}
