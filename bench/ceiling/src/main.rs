//! The ceiling of `bench/vs-nginx`: the least a server can do per request on this
//! machine. One thread per core, each with its own `SO_REUSEPORT` listener and epoll
//! loop (mio, edge-triggered); every complete request head (`\r\n\r\n`) read from a
//! connection is answered with the same canned keep-alive response, written with one
//! `write` per read. No parsing, no files, no timers, no stages: whatever Haboob and
//! nginx spend beyond this is the cost of being a real server.
//!
//! With `uring` as a fourth argument, the loops are io_uring ones instead (`uring.rs`:
//! multishot accept and receive, a turn's sends submitted with its wait): the floor
//! of a completion-based server, beside the readiness one.
//!
//! Usage: `ceiling ADDR THREADS BODY_BYTES [epoll|uring]` (e.g. `ceiling 127.0.0.1:0 2
//! 1024`); prints `listening on http://ADDR` and serves until killed.
// Denied, not forbidden: the io_uring ceiling (`uring.rs`) allows it, SAFETY per block.
#![deny(unsafe_code)]

mod uring;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};

const LISTENER: Token = Token(usize::MAX);

fn listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, 4096)?;
    Ok(std::net::TcpListener::from(fd))
}

/// The canned response: what a static server sends for a file of `len` bytes.
fn canned(len: usize) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nServer: ceiling\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\nDate: Tue, 24 Nov 2026 00:00:00 GMT\r\nConnection: keep-alive\r\n\r\n"
    )
    .into_bytes();
    r.extend(std::iter::repeat_n(b'x', len));
    r
}

/// Counts complete request heads in `buf`, keeping a partial one (and the last
/// three bytes, which may start a `\r\n\r\n`) for the next read.
fn complete_heads(buf: &mut Vec<u8>) -> usize {
    let mut n = 0;
    let mut consumed = 0;
    let mut i = 0;
    while i + 4 <= buf.len() {
        if &buf[i..i + 4] == b"\r\n\r\n" {
            n += 1;
            i += 4;
            consumed = i;
        } else {
            i += 1;
        }
    }
    buf.drain(..consumed);
    n
}

struct Conn {
    stream: TcpStream,
    pending: Vec<u8>,
    out: Vec<u8>,
}

fn serve(l: std::net::TcpListener, reply: &[u8]) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::from_std(l);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next = 0usize;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = poll.poll(&mut events, None)
            && e.kind() != io::ErrorKind::Interrupted
        {
            return Err(e);
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut stream, _)) = listener.accept() {
                    let _ = stream.set_nodelay(true);
                    next += 1;
                    poll.registry().register(
                        &mut stream,
                        Token(next),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    conns.insert(
                        next,
                        Conn {
                            stream,
                            pending: Vec::new(),
                            out: Vec::new(),
                        },
                    );
                }
                continue;
            }
            let id = ev.token().0;
            let Some(c) = conns.get_mut(&id) else { continue };
            let mut closed = false;
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        c.pending.extend_from_slice(&buf[..n]);
                        for _ in 0..complete_heads(&mut c.pending) {
                            c.out.extend_from_slice(reply);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            while !closed && !c.out.is_empty() {
                match c.stream.write(&c.out) {
                    Ok(n) => {
                        c.out.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => closed = true,
                }
            }
            if closed && let Some(mut c) = conns.remove(&id) {
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "usage: ceiling ADDR THREADS BODY_BYTES [epoll|uring]",
        )
    };
    let addr: SocketAddr = args.get(1).and_then(|a| a.parse().ok()).ok_or_else(usage)?;
    let threads: usize = args.get(2).and_then(|a| a.parse().ok()).ok_or_else(usage)?;
    let len: usize = args.get(3).and_then(|a| a.parse().ok()).ok_or_else(usage)?;
    let use_uring = match args.get(4).map(String::as_str) {
        None | Some("epoll") => false,
        Some("uring") => true,
        Some(_) => return Err(usage()),
    };
    let first = listener(addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..threads.max(1) {
        listeners.push(listener(addr)?);
    }
    println!("listening on http://{addr}");
    io::stdout().flush()?;
    let reply: &'static [u8] = Box::leak(canned(len).into_boxed_slice());
    let handles: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            std::thread::spawn(move || {
                if use_uring {
                    uring::serve(l, reply)
                } else {
                    serve(l, reply)
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| io::Error::other("a loop panicked"))??;
    }
    Ok(())
}
