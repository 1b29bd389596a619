//! The baseline of the throughput comparison: a plain forwarding loop.
//!
//! The same routing work as the staged router without stages: one thread, one epoll
//! loop, the same handshake answer, framing, payload rules and [`Routes`] (all from
//! `seda_gnutella`), writing each destination's copies straight to its socket.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use seda_gnutella::proto::framing::Framer;
use seda_gnutella::proto::handshake::Block;
use seda_gnutella::proto::message::{
    DEFAULT_MAX_PAYLOAD, HEADER_LEN, Header, MsgType, check, pong_payload,
};
use seda_gnutella::routing::{Action, Routed, Routes, RoutingConfig};
use seda_io::ConnId;

const LISTENER: Token = Token(usize::MAX);

/// The address both routers of a benchmark name in their pongs (TEST-NET-1, RFC
/// 5737): a routable-looking address, so that both answer every fresh ping.
pub const BENCH_ADVERTISE: (std::net::Ipv4Addr, u16) =
    (std::net::Ipv4Addr::new(192, 0, 2, 1), 6346);

struct PlainConn {
    stream: TcpStream,
    established: bool,
    hs: Vec<u8>,
    answered: bool,
    framer: Framer,
    out: Vec<u8>,
}

/// A running plain forwarding loop.
#[derive(Debug)]
pub struct PlainLoop {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    routed: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl PlainLoop {
    /// Starts the loop on an ephemeral loopback port.
    pub fn start() -> io::Result<PlainLoop> {
        let mut listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let routed = Arc::new(AtomicU64::new(0));
        let (s, r) = (Arc::clone(&stop), Arc::clone(&routed));
        let thread = std::thread::Builder::new()
            .name("plain-loop".into())
            .spawn(move || run_plain(poll, listener, &s, &r))?;
        Ok(PlainLoop {
            addr,
            stop,
            routed,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Messages routed (sent on to at least one connection) so far.
    pub fn routed(&self) -> u64 {
        self.routed.load(Relaxed)
    }
}

impl Drop for PlainLoop {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_plain(mut poll: Poll, listener: TcpListener, stop: &AtomicBool, routed: &AtomicU64) {
    let routes = Routes::new(RoutingConfig::default());
    let mut conns: HashMap<usize, PlainConn> = HashMap::new();
    let mut next = 1usize;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 16 * 1024];
    let mut ready: Vec<usize> = Vec::new();
    while !stop.load(Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(20))) {
            Ok(()) => {}
            // A signal (a debugger's or a profiler's attach) ends the wait, not the loop.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nodelay(true);
                    let id = next;
                    next += 1;
                    if poll
                        .registry()
                        .register(&mut s, Token(id), Interest::READABLE | Interest::WRITABLE)
                        .is_ok()
                    {
                        conns.insert(
                            id,
                            PlainConn {
                                stream: s,
                                established: false,
                                hs: Vec::new(),
                                answered: false,
                                framer: Framer::new(DEFAULT_MAX_PAYLOAD),
                                out: Vec::new(),
                            },
                        );
                    }
                }
            } else {
                ready.push(ev.token().0);
            }
        }
        let now = Instant::now();
        let mut n_routed = 0u64;
        for id in ready.drain(..) {
            while let Some(c) = conns.get_mut(&id) {
                let n = match c.stream.read(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(0) | Err(_) => {
                        if let Some(mut c) = conns.remove(&id) {
                            let _ = poll.registry().deregister(&mut c.stream);
                        }
                        break;
                    }
                    Ok(n) => n,
                };
                if !c.established {
                    c.hs.extend_from_slice(&buf[..n]);
                    if let Ok(Some((_, used))) = Block::parse(&c.hs) {
                        let rest = c.hs.split_off(used);
                        c.hs.clear();
                        if !c.answered {
                            c.answered = true;
                            let ok = Block::new("GNUTELLA/0.6 200 OK")
                                .header("User-Agent", "plain-loop")
                                .header("X-Ultrapeer", "True");
                            c.out.extend_from_slice(&ok.to_bytes());
                            c.hs = rest;
                        } else {
                            c.established = true;
                            if let Ok(chunk) = c.framer.feed(rest) {
                                n_routed += route_chunk(&routes, &mut conns, id, chunk, now);
                            }
                        }
                    }
                } else {
                    match c.framer.feed(buf[..n].to_vec()) {
                        Ok(chunk) => n_routed += route_chunk(&routes, &mut conns, id, chunk, now),
                        Err(_) => {
                            conns.remove(&id);
                            break;
                        }
                    }
                }
                if n < buf.len() {
                    break;
                }
            }
        }
        for c in conns.values_mut() {
            let mut pos = 0;
            while pos < c.out.len() {
                match c.stream.write(&c.out[pos..]) {
                    Ok(n) if n > 0 => pos += n,
                    _ => break,
                }
            }
            c.out.drain(..pos);
            // Unwritten output waits for the next turn (a short poll timeout).
        }
        routed.fetch_add(n_routed, Relaxed);
    }
}

fn route_chunk(
    routes: &Routes,
    conns: &mut HashMap<usize, PlainConn>,
    from: usize,
    chunk: seda_gnutella::proto::framing::Chunk,
    now: Instant,
) -> u64 {
    // Decided at once, as the staged router decides a read (one lock per table
    // shard for the chunk), then acted on in order.
    let mut items: Vec<Routed> = chunk
        .frames
        .iter()
        .filter(|f| check(&f.header, chunk.payload(f)).is_ok() && !f.header.kind.is_link_local())
        .map(|f| Routed::new(f.at, f.header))
        .collect();
    routes.route_many(ConnId(from as u64), &chunk.buf, &mut items, now);
    let mut n = 0;
    for it in &items {
        let h = it.header;
        let start = it.at + HEADER_LEN;
        let p = &chunk.buf[start..start + h.len as usize];
        match it.action {
            Action::Broadcast(next) => {
                if h.kind == MsgType::Ping {
                    pong(conns, from, &h);
                }
                let mut any = false;
                for (id, c) in conns.iter_mut() {
                    if *id != from && c.established {
                        c.out.extend_from_slice(&next.to_bytes());
                        c.out.extend_from_slice(p);
                        any = true;
                    }
                }
                n += u64::from(any);
            }
            Action::Absorb if h.kind == MsgType::Ping => pong(conns, from, &h),
            Action::Forward(to, next) => {
                if let Some(c) = conns.get_mut(&(to.0 as usize)) {
                    c.out.extend_from_slice(&next.to_bytes());
                    c.out.extend_from_slice(p);
                    n += 1;
                }
            }
            _ => {}
        }
    }
    n
}

fn pong(conns: &mut HashMap<usize, PlainConn>, to: usize, ping: &Header) {
    if let Some(c) = conns.get_mut(&to) {
        let p = pong_payload(BENCH_ADVERTISE.0, BENCH_ADVERTISE.1, 0, 0);
        let h = Header {
            guid: ping.guid,
            kind: MsgType::Pong,
            ttl: ping.hops + 1,
            hops: 0,
            len: p.len() as u32,
        };
        c.out.extend_from_slice(&h.to_bytes());
        c.out.extend_from_slice(&p);
    }
}
