//! The ultrapeer's rules over loopback, with simulated leaves and ultrapeers:
//! leaves and their slots, query routing tables (last-hop filtering to leaves and
//! between ultrapeers, our merged table), the pong cache, and the handshake rate
//! limit.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use seda_gnutella::{HandshakeLimit, PongCacheConfig, QrpConfig, RouterConfig};
use support::*;

/// Sends a leaf's table of `words` (2^16 slots, in `parts` PATCH messages) and
/// waits until the router holds it.
fn share(r: &TestRouter, leaf: &mut Peer, words: &[&str], parts: usize) {
    let before = r.router.stats().qrp.tables_received;
    for m in qrp_messages(&qrp_table(words, 16), parts) {
        leaf.send(&m);
    }
    r.wait("the leaf's table", |s| s.qrp.tables_received > before);
}

fn queries(p: &mut Peer) -> Vec<Msg> {
    p.drain(QUIET)
        .into_iter()
        .filter(|m| m.kind == QUERY)
        .collect()
}

#[test]
fn a_leaf_is_accepted_and_gets_no_ping_or_query_it_did_not_ask_for() {
    let r = TestRouter::start(RouterConfig::default().with_pong_cache(None));
    let mut l = Peer::connect_with(r.addr(), &leaf_opts());
    assert_eq!(l.head.get("X-Ultrapeer"), Some("True"));
    assert_eq!(l.head.get("X-Query-Routing"), Some("0.2"));
    l.recv_kind(PING, T).expect("our opening alive ping");
    let mut up = peers(&r, 1);
    r.wait("a leaf and an ultrapeer", |s| s.peers == 2 && s.leaves == 1);
    // Broadcast pings go to ultrapeers only; a leaf without a table gets no query.
    up[0].send(&Msg::new(PING, 3, 0, vec![]));
    up[0].send(&Msg::new(QUERY, 3, 0, query("anything at all")));
    let seen = l.drain(Duration::from_millis(500));
    assert!(
        seen.iter().all(|m| m.kind != PING && m.kind != QUERY),
        "{seen:?}"
    );
    r.wait("the query filtered for the leaf", |s| {
        s.qrp.leaf_filtered == 1
    });
    let s = r.router.stats();
    assert!(s.connections.iter().any(|c| c.leaf));
}

#[test]
fn a_leaf_gets_only_the_queries_its_table_matches() {
    let r = TestRouter::start(RouterConfig::default());
    let mut l = leaf(&r);
    share(&r, &mut l, &["seda", "interop", "sample"], 3);
    let mut up = peers(&r, 1);
    let want = Msg::new(QUERY, 3, 0, query("SEDA interop"));
    up[0].send(&want);
    up[0].send(&Msg::new(QUERY, 3, 0, query("seda opera")));
    up[0].send(&Msg::new(QUERY, 3, 0, query("sa")));
    // A query on its last hop still reaches the leaf, with TTL 1 (never 0).
    let last = Msg::new(QUERY, 1, 2, query("sample"));
    up[0].send(&last);
    // Counted once handed to the sockets: then read what the leaf got.
    r.wait("counted", |s| {
        s.qrp.leaf_copies == 2 && s.qrp.leaf_filtered == 2 && s.qrp.tables == 1
    });
    let got = queries(&mut l);
    let guids: Vec<[u8; 16]> = got.iter().map(|m| m.guid).collect();
    assert_eq!(guids, vec![want.guid, last.guid], "{got:?}");
    assert_eq!((got[0].ttl, got[0].hops), (2, 1));
    assert_eq!((got[1].ttl, got[1].hops), (1, 3));
}

/// Two router threads route a connection's reads one at a time, in order: a PATCH
/// read while the read holding its RESET is still being routed waits for it. The
/// first read is a query (the router sleeps on each, as Fig. 14 does) and the
/// RESET; the PATCH comes in a second read once the server has framed the first,
/// while the other router thread is idle. Routed out of order, the PATCH would
/// come before any RESET and drop the leaf (Bye 413).
#[test]
fn two_router_threads_keep_a_connections_order() {
    let r = TestRouter::start(
        RouterConfig::default()
            .with_router_threads((2, 2))
            .with_query_delay(Some(Duration::from_millis(300))),
    );
    let mut l = leaf(&r);
    let msgs = qrp_messages(&qrp_table(&["ordered"], 16), 1);
    let mut first = Msg::new(QUERY, 1, 0, query("nothing here")).encode();
    first.extend_from_slice(&msgs[0].encode());
    l.send_bytes(&first);
    r.wait("the first read framed", |s| {
        s.received.get("query") == Some(&1)
    });
    l.send(&msgs[1]);
    r.wait("the leaf's table", |s| {
        s.qrp.tables_received == 1 || s.qrp.malformed > 0
    });
    assert_eq!(
        r.router.stats().qrp.malformed,
        0,
        "PATCH routed before RESET"
    );
    let mut up = peers(&r, 1);
    let q = Msg::new(QUERY, 3, 0, query("ordered"));
    up[0].send(&q);
    let got = l
        .recv_kind(QUERY, T)
        .expect("the leaf still gets its queries");
    assert_eq!(got.guid, q.guid);
}

#[test]
fn a_leafs_queries_hits_and_pushes_are_routed_as_any_peers() {
    let r = TestRouter::start(RouterConfig::default());
    let mut l = leaf(&r);
    share(&r, &mut l, &["song"], 1);
    let mut up = peers(&r, 2);
    // The leaf searches: its query reaches both ultrapeers.
    let q = Msg::new(QUERY, 3, 0, query("free music"));
    l.send(&q);
    for p in &mut up {
        assert_eq!(p.recv_kind(QUERY, T).expect("leaf's query").guid, q.guid);
    }
    // An ultrapeer's query the leaf matches: the leaf's hit goes back to it, and
    // a push for the leaf's servent id reaches the leaf.
    let q = Msg::new(QUERY, 3, 0, query("song"));
    up[0].send(&q);
    assert_eq!(l.recv_kind(QUERY, T).expect("matching query").guid, q.guid);
    let servent = [0x5e; 16];
    l.send(&Msg {
        guid: q.guid,
        ..Msg::new(QUERYHIT, 2, 0, queryhit(servent))
    });
    assert_eq!(
        up[0].recv_kind(QUERYHIT, T).expect("hit routed back").guid,
        q.guid
    );
    up[0].send(&Msg::new(PUSH, 3, 0, push(servent)));
    assert!(l.recv_kind(PUSH, T).is_some(), "push routed to the leaf");
}

#[test]
fn a_malformed_patch_or_an_oversized_table_drops_that_leaf_only() {
    let r = TestRouter::start(
        RouterConfig::default().with_qrp(QrpConfig::default().with_memory(64 << 10)),
    );
    let mut good = leaf(&r);
    share(&r, &mut good, &["keep"], 1);
    // A PATCH whose zlib data is garbage.
    let mut bad = leaf(&r);
    let mut msgs = qrp_messages(&qrp_table(&["x"], 10), 1);
    msgs[1].payload.truncate(5);
    msgs[1].payload.extend_from_slice(b"definitely not zlib");
    for m in &msgs {
        bad.send(m);
    }
    let (closed, seen) = bad.closed_within(T);
    assert!(closed, "the malformed patch ends that leaf's connection");
    let bye = seen.iter().find(|m| m.kind == BYE).expect("a Bye first");
    assert_eq!(u16::from_le_bytes([bye.payload[0], bye.payload[1]]), 413);
    // A table of 2^20 slots (128 KiB) is over a 64 KiB budget.
    let mut big = leaf(&r);
    let mut reset = vec![0u8];
    reset.extend_from_slice(&(1u32 << 20).to_le_bytes());
    reset.push(7);
    big.send(&Msg::new(QRP, 1, 0, reset));
    let (closed, _) = big.closed_within(T);
    assert!(closed, "the oversized table ends that leaf's connection");
    r.wait("both counted, one leaf left", |s| {
        s.qrp.malformed == 1 && s.qrp.over_memory == 1 && s.leaves == 1
    });
    // The good leaf still gets its queries.
    let mut up = peers(&r, 1);
    let q = Msg::new(QUERY, 3, 0, query("keep"));
    up[0].send(&q);
    assert_eq!(good.recv_kind(QUERY, T).expect("still served").guid, q.guid);
    assert!(r.router.stats().qrp.table_bytes <= 64 << 10);
}

#[test]
fn leaves_past_the_limit_are_refused_and_the_headers_say_so() {
    let r = TestRouter::start(RouterConfig::default().with_max_peers(1).with_max_leaves(2));
    let _a = leaf(&r);
    let _b = leaf(&r);
    let mut third = Peer::try_connect(r.addr(), &leaf_opts()).expect("an answer");
    assert_eq!(third.head.code(), 503);
    assert!(third.closed_within(T).0);
    // The one ultrapeer slot is taken: the next ultrapeer hears it is not needed.
    let up = Peer::connect(r.addr());
    assert_eq!(up.head.get("X-Ultrapeer-Needed"), Some("True"));
    let late = Peer::try_connect(r.addr(), &Opts::default()).expect("an answer");
    assert_eq!(late.head.code(), 503);
    r.wait("refusals counted", |s| {
        s.event("refused_leaves_full") == 1 && s.event("refused_full") == 1 && s.leaves == 2
    });
}

/// The default (`--max-leaves 32`) takes 32 leaves; while only leaf slots are
/// free our answers say `X-Ultrapeer-Needed: False` (be our leaf), and `X-Degree`
/// carries our ultrapeer degree (at least 16), as gtk-gnutella's do.
#[test]
fn the_default_takes_32_leaves_and_the_headers_say_which_slots_are_free() {
    let r = TestRouter::start(RouterConfig::default().with_max_peers(1));
    let up = Peer::connect(r.addr());
    assert_eq!(up.head.get("X-Ultrapeer-Needed"), Some("True"));
    assert_eq!(up.head.get("X-Degree"), Some("16"));
    let leaves: Vec<Peer> = (0..32)
        .map(|i| {
            let l = Peer::connect_with(r.addr(), &leaf_opts());
            assert_eq!(l.head.get("X-Ultrapeer-Needed"), Some("False"), "leaf {i}");
            l
        })
        .collect();
    let mut full = Peer::try_connect(r.addr(), &leaf_opts()).expect("an answer");
    assert_eq!(full.head.code(), 503, "{}", full.head.start);
    assert!(full.closed_within(T).0);
    r.wait("32 leaves, the 33rd refused", |s| {
        s.leaves == 32 && s.peers == 33 && s.event("refused_leaves_full") == 1
    });
    drop(leaves);
}

/// With the pong cache (the default) a ping is answered, and the cache refilled
/// by pinging our ultrapeers: never our leaves, who did not ask.
#[test]
fn a_leaf_gets_no_cache_refill_ping() {
    let r = TestRouter::start(
        RouterConfig::default().with_advertise(Some("10.0.0.1:6346".parse().unwrap())),
    );
    let mut l = leaf(&r);
    let mut up = peers(&r, 2);
    r.wait("a leaf and two ultrapeers", |s| {
        s.peers == 3 && s.leaves == 1
    });
    up[0].send(&Msg::new(PING, 3, 0, vec![]));
    let refill = up[1].recv_kind(PING, T).expect("the refill ping");
    assert_eq!(refill.hops, 0);
    assert!(refill.ttl > 1, "{refill:?}");
    r.wait("the refill counted", |s| s.pong_cache.refreshes == 1);
    let seen = l.drain(QUIET);
    assert!(seen.iter().all(|m| m.kind != PING), "{seen:?}");
}

#[test]
fn ultrapeers_that_ask_get_the_union_of_our_leaves_tables() {
    let r = TestRouter::start(
        RouterConfig::default()
            .with_qrp(QrpConfig::default().with_update_every(Duration::from_millis(100))),
    );
    let mut o = Opts::default();
    o.headers
        .push(("X-Ultrapeer-Query-Routing".into(), "0.1".into()));
    let mut asks = Peer::connect_with(r.addr(), &o);
    let mut silent = Peer::connect(r.addr());
    // With no leaves, our table is empty: last-hop queries to us would be wasted.
    let first: Vec<Msg> = asks
        .drain(Duration::from_millis(800))
        .into_iter()
        .filter(|m| m.kind == QRP)
        .collect();
    assert!(
        qrp_decode(&first).iter().all(|p| !p),
        "an empty table first"
    );
    let mut a = leaf(&r);
    share(&r, &mut a, &["alpha"], 1);
    let mut b = leaf(&r);
    share(&r, &mut b, &["bravo"], 1);
    // An update follows (a PATCH sequence without RESET); read it whole: the
    // union holds both leaves' keywords.
    let deadline = std::time::Instant::now() + T;
    let mut table = qrp_decode(&first);
    while std::time::Instant::now() < deadline
        && !(table[qrp_hash("alpha", 16)] && table[qrp_hash("bravo", 16)])
    {
        let upd: Vec<Msg> = asks
            .drain(Duration::from_millis(300))
            .into_iter()
            .filter(|m| m.kind == QRP)
            .collect();
        if upd.is_empty() {
            continue;
        }
        // Each update is a PATCH sequence (no RESET) of 4-bit signed deltas;
        // apply them in turn as a servent would.
        for m in &upd {
            assert_eq!(m.payload[0], 1, "an update is a PATCH");
        }
        let mut seqs: Vec<Vec<Msg>> = Vec::new();
        for m in upd {
            if m.payload[1] == 1 {
                seqs.push(Vec::new());
            }
            seqs.last_mut().expect("a sequence starts at 1").push(m);
        }
        for seq in seqs {
            let mut reset = vec![0u8];
            reset.extend_from_slice(&(table.len() as u32).to_le_bytes());
            reset.push(7);
            let mut fake = vec![Msg::new(QRP, 1, 0, reset)];
            fake.extend(seq);
            for (slot, e) in table.iter_mut().zip(qrp_decode_entries(&fake)) {
                if e & 0x8 != 0 {
                    *slot = true;
                } else if e != 0 {
                    *slot = false;
                }
            }
        }
    }
    assert!(table[qrp_hash("alpha", 16)] && table[qrp_hash("bravo", 16)]);
    assert_eq!(table.iter().filter(|p| **p).count(), 2);
    assert!(
        silent.drain(QUIET).iter().all(|m| m.kind != QRP),
        "an ultrapeer that did not ask gets no table"
    );
    r.wait("tables sent", |s| s.qrp.tables_sent >= 2);
}

#[test]
fn last_hop_queries_reach_an_ultrapeer_only_if_its_table_matches() {
    let r = TestRouter::start(RouterConfig::default());
    let mut v = peers(&r, 2);
    // v[1] tells us what it (and its leaves) can answer.
    for m in qrp_messages(&qrp_table(&["alpha"], 14), 2) {
        v[1].send(&m);
    }
    // The router counts tables at its tick: wait for it.
    r.wait("the ultrapeer's table", |s| s.qrp.tables == 1);
    std::thread::sleep(Duration::from_millis(100));
    let hit = Msg::new(QUERY, 2, 0, query("alpha"));
    let miss = Msg::new(QUERY, 2, 0, query("beta"));
    let far = Msg::new(QUERY, 3, 0, query("beta"));
    v[0].send(&hit);
    v[0].send(&miss);
    v[0].send(&far);
    r.wait("counted", |s| {
        s.qrp.ultrapeer_filtered == 1 && s.routed.get("query") == Some(&2)
    });
    let got: Vec<[u8; 16]> = queries(&mut v[1]).iter().map(|m| m.guid).collect();
    assert_eq!(got, vec![hit.guid, far.guid], "only the matching last hop");
}

#[test]
fn pings_are_answered_from_the_pong_cache_not_broadcast() {
    let r = TestRouter::start(
        RouterConfig::default()
            .with_advertise(Some("10.0.0.1:6346".parse().unwrap()))
            .with_pong_cache(Some(
                PongCacheConfig::default()
                    .with_throttle((Duration::from_millis(300), Duration::from_secs(60))),
            )),
    );
    let mut v = peers(&r, 2);
    let ping = Msg::new(PING, 3, 0, vec![]);
    v[0].send(&ping);
    let ours = v[0].recv_kind(PONG, T).expect("our own pong");
    assert_eq!(ours.guid, ping.guid);
    // v[1] never sees v[0]'s ping: the router refills its cache with a ping of its
    // own, which v[1] answers for itself and for a host behind it.
    let refill = v[1].recv_kind(PING, T).expect("the cache refill ping");
    assert_ne!(refill.guid, ping.guid);
    assert_eq!(refill.hops, 0);
    for (ip, hops) in [([10, 1, 1, 1], 0), ([10, 2, 2, 2], 1)] {
        v[1].send(&Msg {
            guid: refill.guid,
            ..Msg::new(PONG, 1, hops, pong(ip, 6346))
        });
    }
    r.wait("pongs cached", |s| s.pong_cache.cached == 2);
    // Pinging again within the throttle period: dropped.
    v[0].send(&Msg::new(PING, 3, 0, vec![]));
    r.wait("throttled", |s| s.pong_cache.throttled == 1);
    std::thread::sleep(Duration::from_millis(350));
    let again = Msg::new(PING, 3, 0, vec![]);
    v[0].send(&again);
    r.wait("answered from the cache", |s| s.pong_cache.pongs_sent == 2);
    let mut answers: Vec<Msg> = v[0]
        .drain(Duration::from_millis(500))
        .into_iter()
        .filter(|m| m.kind == PONG && m.guid == again.guid)
        .collect();
    answers.sort_by_key(|m| m.hops);
    let seen: Vec<(u8, [u8; 4])> = answers
        .iter()
        .map(|m| (m.hops, m.payload[2..6].try_into().unwrap()))
        .collect();
    assert_eq!(
        seen,
        vec![(0, [10, 0, 0, 1]), (1, [10, 1, 1, 1]), (2, [10, 2, 2, 2])],
        "ours, then the cached ones one hop further"
    );
    assert!(
        v[1].drain(QUIET).iter().all(|m| m.kind != PING),
        "no ping broadcast, no second refill within the lifespan"
    );
    // v[1]'s own pongs are never handed back to it.
    let p1 = Msg::new(PING, 3, 0, vec![]);
    v[1].send(&p1);
    r.wait("answered", |s| s.pong_cache.pings_answered == 3);
    let back: Vec<[u8; 4]> = v[1]
        .drain(Duration::from_millis(500))
        .into_iter()
        .filter(|m| m.kind == PONG && m.guid == p1.guid)
        .map(|m| m.payload[2..6].try_into().unwrap())
        .collect();
    assert_eq!(back, vec![[10, 0, 0, 1]]);
    let s = r.router.stats();
    assert_eq!(s.pong_cache.pings_answered, 3);
    assert_eq!(s.pong_cache.pongs_sent, 2);
    assert_eq!(s.pong_cache.refreshes, 1);
    assert_eq!(
        s.pong_cache.copies_saved, 3,
        "each ping would have gone to one other"
    );
    assert_eq!(s.drops("ping_throttled"), 1);
}

#[test]
fn a_hammering_address_gets_429_with_retry_after() {
    let r = TestRouter::start(
        RouterConfig::default().with_handshake_limit(
            HandshakeLimit::default()
                .with_exempt_loopback(false)
                .with_per_net(0),
        ),
    );
    let _a = Peer::connect(r.addr());
    let _b = Peer::connect(r.addr());
    let mut third = Peer::try_connect(r.addr(), &Opts::default()).expect("an answer");
    assert_eq!(third.head.code(), 429);
    assert_eq!(third.head.get("Retry-After"), Some("300"));
    assert!(third.closed_within(T).0);
    // Still banned: the next attempt is refused too, with less time left.
    let fourth = Peer::try_connect(r.addr(), &Opts::default()).expect("an answer");
    assert_eq!(fourth.head.code(), 429);
    let left: u64 = fourth.head.get("Retry-After").unwrap().parse().unwrap();
    assert!((1..=300).contains(&left));
    r.wait("counted", |s| {
        s.event("refused_rate_limit") == 2 && s.peers == 2
    });
}

/// Hosts of one /24, each under its own limit: the network's limit bans them
/// together, and a host of another network is not held back.
#[test]
fn a_hammering_network_gets_429_too() {
    let r = TestRouter::start(
        RouterConfig::default().with_handshake_limit(
            HandshakeLimit::default()
                .with_exempt_loopback(false)
                .with_per_addr(2)
                .with_per_net(3),
        ),
    );
    let from = |ip: [u8; 4]| {
        Peer::try_connect_from(IpAddr::from(ip), r.addr(), &Opts::default()).expect("an answer")
    };
    let _v: Vec<Peer> = (2..5)
        .map(|host| {
            let p = from([127, 0, 0, host]);
            assert_eq!(p.head.code(), 200, "127.0.0.{host}: {}", p.head.start);
            p
        })
        .collect();
    let mut late = from([127, 0, 0, 5]);
    assert_eq!(late.head.code(), 429);
    let secs: u64 = late.head.get("Retry-After").unwrap().parse().unwrap();
    assert!((1..=300).contains(&secs), "{secs}");
    assert!(late.closed_within(T).0);
    let other = from([127, 0, 1, 2]);
    assert_eq!(
        other.head.code(),
        200,
        "another network: {}",
        other.head.start
    );
    r.wait("counted", |s| {
        s.event("refused_rate_limit_net") == 1 && s.event("refused_rate_limit") == 0 && s.peers == 4
    });
}
