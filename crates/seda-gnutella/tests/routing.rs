//! Routing over loopback with several test peers: the rules a servent enforces on
//! what its neighbours forward.

mod support;

use std::time::Duration;

use seda_gnutella::RouterConfig;
use support::*;

#[test]
fn queries_are_broadcast_once_with_ttl_minus_one_and_hops_plus_one() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 3);
    let q = Msg::new(QUERY, 3, 0, query("free music"));
    v[0].send(&q);
    for p in &mut v[1..] {
        let got = p
            .recv_kind(QUERY, T)
            .expect("broadcast reaches every other peer");
        assert_eq!(got.guid, q.guid);
        assert_eq!((got.ttl, got.hops), (2, 1));
        assert_eq!(got.payload, q.payload);
    }
    // Not echoed to the sender; a duplicate from another peer goes nowhere.
    v[1].send(&q);
    assert!(
        v[0].recv_kind(QUERY, QUIET).is_none(),
        "echo or duplicate forwarded"
    );
    assert!(
        v[2].recv_kind(QUERY, QUIET).is_none(),
        "duplicate forwarded"
    );
    r.wait("duplicate counted", |s| s.drops("duplicate") == 1);
}

#[test]
fn ttl_rules_spent_trimmed_zero_and_ancient_queries() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 2);
    // TTL 1: spent here.
    v[0].send(&Msg::new(QUERY, 1, 0, query("ttl one")));
    // TTL 10 + hops 1 trimmed to the max TTL 4: forwarded with TTL 2, hops 2.
    let long = Msg::new(QUERY, 10, 1, query("long"));
    v[0].send(&long);
    // TTL 0 and the ancient min-speed format are dropped.
    v[0].send(&Msg::new(QUERY, 0, 2, query("ttl zero")));
    let mut ancient = query("ancient");
    ancient[0] = 0;
    v[0].send(&Msg::new(QUERY, 3, 0, ancient));
    let got = v[1].recv_kind(QUERY, T).unwrap();
    assert_eq!(got.guid, long.guid);
    assert_eq!((got.ttl, got.hops), (2, 2));
    assert!(
        v[1].recv_kind(QUERY, QUIET).is_none(),
        "a dropped query was forwarded"
    );
    r.wait("drops counted", |s| {
        s.drops("malformed_zero_ttl") == 1 && s.drops("malformed_ancient_query") == 1
    });
}

#[test]
fn query_hits_follow_the_reverse_path_and_pushes_the_servent() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 3);
    let q = Msg::new(QUERY, 3, 0, query("song"));
    v[0].send(&q);
    v[1].recv_kind(QUERY, T).unwrap();
    v[2].recv_kind(QUERY, T).unwrap();
    let servent = guid();
    let hit = Msg {
        guid: q.guid,
        ..Msg::new(QUERYHIT, 2, 0, queryhit(servent))
    };
    v[1].send(&hit);
    let got = v[0].recv_kind(QUERYHIT, T).expect("hit routed back");
    assert_eq!((got.ttl, got.hops), (1, 1));
    assert_eq!(&got.payload[got.payload.len() - 16..], &servent);
    assert!(v[2].recv_kind(QUERYHIT, QUIET).is_none(), "hit leaked");
    // The push for that servent goes to the peer that delivered its hit.
    let p = Msg::new(PUSH, 3, 0, push(servent));
    v[0].send(&p);
    let got = v[1].recv_kind(PUSH, T).expect("push routed to the servent");
    assert_eq!(got.guid, p.guid);
    assert_eq!((got.ttl, got.hops), (2, 1));
    assert!(v[2].recv_kind(PUSH, QUIET).is_none());
    // A hit for a query never seen, a push for an unknown servent: dropped.
    v[1].send(&Msg::new(QUERYHIT, 2, 0, queryhit(servent)));
    v[0].send(&Msg::new(PUSH, 3, 0, push(guid())));
    r.wait("no-route drops", |s| s.drops("no_route") == 2);
}

#[test]
fn without_pong_caching_pings_are_broadcast_and_pongs_go_back_usable_only() {
    let r = TestRouter::start(
        RouterConfig::default()
            .with_advertise(Some("10.0.0.1:6346".parse().unwrap()))
            .with_pong_cache(None),
    );
    let mut v = peers(&r, 2);
    let ping = Msg::new(PING, 2, 0, vec![]);
    v[0].send(&ping);
    let ours = v[0].recv_kind(PONG, T).expect("our pong");
    assert_eq!(ours.guid, ping.guid);
    assert_eq!((ours.ttl, ours.hops), (1, 0));
    assert_eq!(&ours.payload[..6], &[0xca, 0x18, 10, 0, 0, 1]);
    let fwd = v[1].recv_kind(PING, T).expect("ping broadcast");
    assert_eq!((fwd.guid, fwd.ttl, fwd.hops), (ping.guid, 1, 1));
    // v[1] answers for a host behind it and for itself on loopback (unusable).
    let good = Msg {
        guid: ping.guid,
        ..Msg::new(PONG, 2, 1, pong([10, 0, 0, 5], 6346))
    };
    let bad = Msg {
        guid: ping.guid,
        ..Msg::new(PONG, 2, 1, pong([127, 0, 0, 1], 6346))
    };
    // The same unusable pong straight from its host (hops 0) passes the payload
    // rules but is not forwarded either: one hop on, it would be unusable.
    let bad_direct = Msg {
        guid: ping.guid,
        ..Msg::new(PONG, 2, 0, pong([127, 0, 0, 1], 6347))
    };
    v[1].send(&bad);
    v[1].send(&bad_direct);
    v[1].send(&good);
    let got = v[0].recv_kind(PONG, T).expect("pong routed back");
    assert_eq!(&got.payload[2..6], &[10, 0, 0, 5]);
    assert_eq!((got.ttl, got.hops), (1, 2));
    assert!(
        v[0].recv_kind(PONG, QUIET).is_none(),
        "unusable pong forwarded"
    );
    r.wait("unusable pongs counted", |s| {
        s.drops("malformed_unusable_address") == 2
    });
}

#[test]
fn a_loopback_router_answers_only_alive_pings() {
    let r = TestRouter::start(RouterConfig::default().with_pong_cache(None));
    let mut v = peers(&r, 1);
    // A neighbour's alive ping (TTL 1, hops 0): answered; servents match the pong by
    // GUID before they look at its address.
    v[0].send(&Msg::new(PING, 1, 0, vec![]));
    assert!(v[0].recv_kind(PONG, T).is_some());
    // Any other ping: a pong naming 127.0.0.1 would count as an unusable pong.
    v[0].send(&Msg::new(PING, 2, 0, vec![]));
    v[0].send(&Msg::new(PING, 2, 1, vec![]));
    assert!(v[0].recv_kind(PONG, QUIET).is_none());
    r.wait("suppressed", |s| s.event("own_pong_suppressed") == 2);
}

#[test]
fn link_messages_are_consumed_never_forwarded() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 2);
    // Messages Supported with TTL 1: answered once (the router sent its own after
    // the handshake already), never forwarded. With TTL 2: improper, dropped.
    let mut ms = vec![0, 0, 0, 0, 0, 0, 0, 0];
    ms.extend_from_slice(&0u16.to_le_bytes());
    v[0].send(&Msg::new(VENDOR, 1, 0, ms.clone()));
    v[0].send(&Msg::new(VENDOR, 2, 0, ms));
    // QRP reset, an unknown type with a payload, then a query: only the query passes.
    v[0].send(&Msg::new(QRP, 1, 0, vec![0, 0, 0, 1, 0, 1]));
    v[0].send(&Msg::new(0x99, 3, 0, vec![1; 100]));
    let q = Msg::new(QUERY, 3, 0, query("after the junk"));
    v[0].send(&q);
    let seen = v[1].drain(Duration::from_millis(500));
    let kinds: Vec<u8> = seen.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, vec![QUERY], "{seen:?}");
    r.wait("counted", |s| {
        s.drops("malformed_improper_hops_ttl") == 1
            && s.drops("not_routed") == 1
            && s.qrp.messages == 1
    });
}

#[test]
fn hops_flow_stops_queries_to_a_peer() {
    let r = TestRouter::start(RouterConfig::default().with_pong_cache(None));
    let mut v = peers(&r, 2);
    // BEAR/4 v1 "Hops Flow" 0: send me no queries.
    let mut hf = b"BEAR".to_vec();
    hf.extend_from_slice(&4u16.to_le_bytes());
    hf.extend_from_slice(&1u16.to_le_bytes());
    hf.push(0);
    v[1].send(&Msg::new(VENDOR, 1, 0, hf));
    std::thread::sleep(Duration::from_millis(200));
    v[0].send(&Msg::new(QUERY, 3, 0, query("not for you")));
    let p = Msg::new(PING, 2, 0, vec![]);
    v[0].send(&p);
    assert_eq!(v[1].recv_kind(PING, T).unwrap().guid, p.guid);
    assert!(v[1].recv_kind(QUERY, QUIET).is_none());
}

#[test]
fn oversized_messages_and_garbage_framing_get_a_bye_without_stalling_others() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 3);
    // A header announcing 1 MiB: Bye 413 and close.
    let mut big = Msg::new(QUERY, 3, 0, vec![]).encode();
    big[19..23].copy_from_slice(&(1u32 << 20).to_le_bytes());
    v[2].send_bytes(&big);
    let (closed, seen) = v[2].closed_within(T);
    assert!(closed);
    let bye = seen
        .iter()
        .find(|m| m.kind == BYE)
        .expect("a Bye before the close");
    assert_eq!((bye.ttl, bye.hops), (1, 0));
    assert_eq!(u16::from_le_bytes([bye.payload[0], bye.payload[1]]), 413);
    // Garbage framing: random bytes almost surely announce a giant length.
    let mut g = Peer::connect(r.addr());
    let junk: Vec<u8> = (0..64).map(|i| (i * 37 + 11) as u8 | 0x80).collect();
    g.send_bytes(&junk);
    let (closed, _) = g.closed_within(T);
    assert!(closed);
    r.wait("too large counted", |s| s.event("payload_too_large") == 2);
    let q = Msg::new(QUERY, 3, 0, query("others fine"));
    v[0].send(&q);
    assert_eq!(v[1].recv_kind(QUERY, T).unwrap().guid, q.guid);
}

#[test]
fn a_peer_that_says_bye_is_closed() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 1);
    let mut p = 200u16.to_le_bytes().to_vec();
    p.extend_from_slice(b"Shutting down\0");
    v[0].send(&Msg::new(BYE, 1, 0, p));
    let (closed, _) = v[0].closed_within(T);
    assert!(closed);
    r.wait("bye counted", |s| {
        s.event("bye_received") == 1 && s.peers == 0
    });
}

#[test]
fn a_quiet_link_gets_keepalive_pings_and_their_pongs_count_as_ours() {
    let r = TestRouter::start(RouterConfig::default().with_keepalive(Duration::from_millis(300)));
    let mut v = peers(&r, 1);
    // Silence from the router for longer than the keep-alive: a one-hop ping.
    let ping = v[0].recv_kind(PING, T).expect("keep-alive ping");
    assert_eq!((ping.ttl, ping.hops, ping.payload.len()), (1, 0, 0));
    // Our answer is a reply to the router itself: consumed, not routed.
    v[0].send(&Msg {
        guid: ping.guid,
        ..Msg::new(PONG, 1, 0, pong([10, 0, 0, 3], 6346))
    });
    r.wait("host learned from the pong", |s| s.known_hosts >= 1);
    // The opening ping and the keep-alive, both ours, in the per-type counter.
    r.wait("the keep-alive counted as sent", |s| {
        s.sent.get("ping").copied().unwrap_or(0) >= 2
    });
}

#[test]
fn our_own_keepalive_pings_and_vendor_messages_count_as_sent() {
    let r = TestRouter::start(RouterConfig::default());
    let _v = peers(&r, 2);
    // Each peer got "Messages Supported" and a one-hop ping of ours: the per-type
    // counters carry them as the per-connection totals do.
    r.wait("own messages counted by type", |s| {
        s.sent.get("ping").copied().unwrap_or(0) >= 2
            && s.sent.get("vendor").copied().unwrap_or(0) >= 2
            && s.connections.iter().all(|c| c.sent >= 2)
    });
}

#[test]
fn stopping_the_router_says_bye_to_every_peer() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 2);
    r.router.stop();
    for p in &mut v {
        let (closed, seen) = p.closed_within(T);
        assert!(closed, "the router closes the link after its Bye");
        let bye = seen
            .iter()
            .find(|m| m.kind == BYE)
            .expect("a Bye before the close (Bye-Packet: 0.1)");
        assert_eq!((bye.ttl, bye.hops), (1, 0));
        assert_eq!(u16::from_le_bytes([bye.payload[0], bye.payload[1]]), 200);
    }
    r.wait("byes counted", |s| s.event("bye_sent") == 2);
}
