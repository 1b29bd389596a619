//! The 0.6 handshake as a servent sees it: headers, refusals, compression, bad input.

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use seda_gnutella::RouterConfig;
use support::*;

#[test]
fn an_ultrapeer_is_accepted_with_the_headers_a_servent_expects() {
    let r = TestRouter::start(RouterConfig::default());
    let mut p = Peer::connect(r.addr());
    let h = &p.head;
    assert_eq!(h.start, "GNUTELLA/0.6 200 OK");
    assert_eq!(h.get("X-Ultrapeer"), Some("True"));
    assert!(h.get("X-Degree").unwrap().parse::<u32>().unwrap() >= 16);
    assert_eq!(h.get("X-Max-TTL"), Some("4"));
    for name in [
        "User-Agent",
        "X-Dynamic-Querying",
        "X-Query-Routing",
        "GGEP",
        "Vendor-Message",
        "Bye-Packet",
        "Remote-IP",
    ] {
        assert!(h.get(name).is_some(), "missing {name}: {h:?}");
    }
    let listen: std::net::SocketAddr = h.get("Listen-IP").unwrap().parse().unwrap();
    assert_eq!(
        listen.port(),
        r.addr().port(),
        "Listen-IP must carry the real port"
    );
    // An ultrapeer of today: pong caching, last-hop QRP between ultrapeers, and
    // slots free for more ultrapeers.
    assert_eq!(h.get("Pong-Caching"), Some("0.1"));
    assert_eq!(h.get("X-Ultrapeer-Query-Routing"), Some("0.1"));
    assert_eq!(h.get("X-Ultrapeer-Needed"), Some("True"));
    assert!(h.get("Content-Encoding").is_none(), "compressed unasked");
    // Right after the handshake: "Messages Supported" (vendor, TTL 1, hops 0) and
    // a one-hop ping.
    let v = p.recv_kind(VENDOR, T).expect("messages supported");
    assert_eq!((v.ttl, v.hops), (1, 0));
    assert_eq!(&v.payload[..8], &[0, 0, 0, 0, 0, 0, 0, 0]);
    let ping = p.recv_kind(PING, T).expect("ping");
    assert_eq!((ping.ttl, ping.hops), (1, 0));
    r.wait("handshake counted", |s| s.event("handshake_ok") == 1);
}

fn refused(r: &TestRouter, o: &Opts) -> Head {
    let mut p = Peer::try_connect(r.addr(), o).expect("an answer");
    let (closed, _) = p.closed_within(T);
    assert!(closed, "a refusal closes the connection: {}", p.head.start);
    p.head
}

#[test]
fn normal_nodes_leaves_when_not_taken_and_old_protocols_are_refused_clearly() {
    let r = TestRouter::start(RouterConfig::default().with_max_leaves(0));
    let normal = Opts {
        headers: vec![("User-Agent".into(), "old/1".into())],
        ..Opts::default()
    };
    assert_eq!(refused(&r, &normal).code(), 403);
    let leaf = Opts {
        headers: vec![("X-Ultrapeer".into(), "False".into())],
        ..Opts::default()
    };
    assert_eq!(refused(&r, &leaf).code(), 503);
    // A 0.4 handshake gets a 0.6 status line and a close, not silence.
    let mut s = connect_raw(r.addr());
    s.write_all(b"GNUTELLA CONNECT/0.4\n\n").unwrap();
    let head = read_head(&mut s).unwrap();
    assert_eq!(head.code(), 505);
    r.wait("refusals counted", |s| {
        s.event("refused_normal_node") == 1
            && s.event("refused_leaf") == 1
            && s.event("handshake_legacy_0_4") == 1
    });
}

#[test]
fn a_full_router_answers_503_with_hosts_to_try() {
    let r = TestRouter::start(RouterConfig::default().with_max_peers(2));
    // Teach the router a host via a peer's X-Try-Ultrapeers.
    let mut o = Opts::default();
    o.headers
        .push(("X-Try-Ultrapeers".into(), "10.1.2.3:6346".into()));
    let _a = Peer::connect_with(r.addr(), &o);
    let _b = Peer::connect(r.addr());
    r.wait("two peers", |s| s.peers == 2 && s.known_hosts >= 1);
    let h = refused(&r, &Opts::default());
    assert_eq!(h.code(), 503);
    assert!(h.get("X-Try-Ultrapeers").unwrap().contains("10.1.2.3:6346"));
}

#[test]
fn garbage_and_oversized_handshakes_get_a_status_and_a_close() {
    let r = TestRouter::start(RouterConfig::default());
    let mut s = connect_raw(r.addr());
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_head(&mut s).unwrap().code(), 400);
    let mut s = connect_raw(r.addr());
    s.write_all(b"GNUTELLA CONNECT/0.6\r\n").unwrap();
    let filler = format!("X-Filler: {}\r\n", "a".repeat(200));
    for _ in 0..60 {
        if s.write_all(filler.as_bytes()).is_err() {
            break;
        }
    }
    assert_eq!(read_head(&mut s).unwrap().code(), 413);
    let mut s = connect_raw(r.addr());
    s.write_all(b"GNUTELLA CONNECT/0.6\r\nno colon here\r\n\r\n")
        .unwrap();
    assert_eq!(read_head(&mut s).unwrap().code(), 400);
    // Random bytes from several connections: each gets closed; a good peer still
    // connects and routes.
    for seed in 0..8u64 {
        let mut s = connect_raw(r.addr());
        let mut rng = fastrand::Rng::with_seed(seed);
        let junk: Vec<u8> = (0..2000).map(|_| rng.u8(..)).collect();
        let _ = s.write_all(&junk);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    r.wait("bad handshakes counted", |s| {
        s.event("handshake_malformed") >= 2 && s.event("handshake_oversized") == 1
    });
    let mut v = peers(&r, 2);
    let q = Msg::new(QUERY, 3, 0, query("still works"));
    v[0].send(&q);
    assert_eq!(v[1].recv_kind(QUERY, T).unwrap().guid, q.guid);
}

#[test]
fn a_silent_connection_is_closed_after_the_handshake_timeout() {
    let r = TestRouter::start(
        RouterConfig::default().with_handshake_timeout(Duration::from_millis(300)),
    );
    let mut s = connect_raw(r.addr());
    // The router closes us: read returns 0 (or a reset), not our own read timeout
    // (60 s, 200 times the handshake timeout: a loaded machine cannot reach it).
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the router did not close a silent connection: {other:?}"),
    }
    r.wait("timeout counted", |s| s.event("handshake_timeout") == 1);
}

#[test]
fn deflate_is_negotiated_per_direction_and_both_ways_work() {
    let r = TestRouter::start(RouterConfig::default());
    let both = Opts {
        accept_deflate: true,
        send_deflate: true,
        ..Opts::default()
    };
    let mut a = Peer::connect_with(r.addr(), &both);
    assert_eq!(a.head.get("Content-Encoding"), Some("deflate"));
    assert_eq!(a.head.get("Accept-Encoding"), Some("deflate"));
    let mut plain = Peer::connect(r.addr());
    r.wait("two peers", |s| s.peers == 2);
    let stats = r.router.stats();
    assert!(stats.connections.iter().any(|c| c.deflate == (true, true)));
    assert!(
        stats
            .connections
            .iter()
            .any(|c| c.deflate == (false, false))
    );
    // Compressed in, plain out, and back.
    for i in 0..50 {
        let q = Msg::new(QUERY, 3, 0, query(&format!("compressed {i}")));
        a.send(&q);
        assert_eq!(plain.recv_kind(QUERY, T).unwrap().guid, q.guid);
        let q = Msg::new(QUERY, 3, 0, query(&format!("plain {i}")));
        plain.send(&q);
        assert_eq!(a.recv_kind(QUERY, T).unwrap().guid, q.guid);
    }
    // A corrupt compressed stream: Bye 400 and close; the other peer is unaffected.
    let mut c = Peer::connect_with(r.addr(), &both);
    c.stream.write_all(&[0xff; 64]).unwrap();
    let (closed, seen) = c.closed_within(T);
    assert!(closed);
    assert!(seen.iter().any(|m| m.kind == BYE));
    r.wait("inflate error counted", |s| s.event("inflate_error") == 1);
    let q = Msg::new(QUERY, 3, 0, query("after"));
    plain.send(&q);
    assert_eq!(a.recv_kind(QUERY, T).unwrap().guid, q.guid);
}

#[test]
fn an_ultrapeer_that_dials_in_teaches_the_host_cache_its_node_address() {
    // gtk-gnutella names its listening address only in `Node:` (several of them).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let node = closed.local_addr().unwrap();
    drop(closed);
    let r = TestRouter::start(RouterConfig::default().with_min_outgoing(0));
    let mut o = Opts::default();
    o.headers
        .push(("Node".into(), format!("{node}, [fd00::2]:59565")));
    let _p = Peer::connect_with(r.addr(), &o);
    r.wait("the Node: address in the host cache", |s| {
        s.known_hosts == 1 && s.peers == 1
    });
}
