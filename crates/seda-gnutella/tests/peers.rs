//! Slow peers (SEDA 5.2.2), the catcher's outgoing connections and backoff, and a
//! chain of two routers.

mod support;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use seda_gnutella::RouterConfig;
use support::*;

#[test]
fn a_peer_that_stops_reading_costs_bounded_memory_and_is_closed() {
    const OUT_QUEUE: usize = 128 * 1024;
    const QUERIES: u64 = 1000;
    let r = TestRouter::start(
        RouterConfig::default()
            .with_out_queue_bytes(OUT_QUEUE)
            .with_socket_budget(16 * 1024)
            .with_send_buffer(Some(16 * 1024))
            .with_slow_grace(Duration::from_millis(800)),
    );
    let mut v = peers(&r, 3);
    let slow = v.pop().unwrap(); // never reads again
    let mut fast = v.pop().unwrap();
    let mut sender = v.pop().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&got);
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while counted.load(Ordering::Relaxed) < QUERIES && Instant::now() < deadline {
            if let Some(m) = fast.recv_kind(QUERY, Duration::from_millis(200)) {
                assert_eq!((m.ttl, m.hops), (2, 1));
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
        fast
    });
    // 1,000 queries of 2 KB: 2 MB, far more than the slow peer's socket buffers,
    // paced by the reading peer: at most 32 queries (64 KB) ahead of what it read,
    // well under what its path holds (16 KB socket buffer, 16 KB socket budget,
    // 128 KB queue), however slowly a loaded machine runs its thread.
    let text = "x".repeat(2048);
    let mut max_queued = 0;
    let pace = Instant::now() + Duration::from_secs(20);
    for i in 0..QUERIES {
        while got.load(Ordering::Relaxed) + 32 < i && Instant::now() < pace {
            thread::sleep(Duration::from_millis(1));
        }
        sender.send(&Msg::new(QUERY, 3, 0, query(&format!("{i} {text}"))));
        if i % 20 == 0 {
            let s = r.router.stats();
            for c in &s.connections {
                max_queued = max_queued.max(c.queued_bytes);
            }
        }
    }
    let _fast = reader.join().unwrap();
    r.wait("slow peer closed", |s| {
        s.event("slow_peer_closed") == 1 && s.peers == 2
    });
    assert_eq!(
        got.load(Ordering::Relaxed),
        QUERIES,
        "the reading peer lost queries because of the slow one: {:#?}",
        r.router.stats().connections
    );
    assert!(max_queued <= OUT_QUEUE, "queue grew to {max_queued}");
    let s = r.router.stats();
    assert!(
        s.slow_peer_drops.get("query").copied().unwrap_or(0) > 0,
        "{:?}",
        s.slow_peer_drops
    );
    // The slow peer's socket sees a close once it reads again.
    let mut slow = slow;
    let (closed, _) = slow.closed_within(Duration::from_secs(10));
    assert!(closed);
}

#[test]
fn two_routers_chain_and_route_both_ways() {
    let r1 = TestRouter::start(RouterConfig::default());
    let r2 = TestRouter::start(
        RouterConfig::default()
            .with_seeds(vec![r1.addr()])
            .with_min_outgoing(1),
    );
    r2.wait("outgoing connection up", |s| {
        s.peers == 1 && s.connections[0].outgoing && s.event("outgoing_connected") == 1
    });
    r1.wait("incoming from r2", |s| {
        s.peers == 1 && s.connections[0].user_agent.starts_with("seda-gnutella/")
    });
    // Both routers offer deflate: the link is compressed both ways.
    assert_eq!(r2.router.stats().connections[0].deflate, (true, true));
    let mut a = peers(&r1, 1).pop().unwrap();
    let mut b = peers(&r2, 1).pop().unwrap();
    let q = Msg::new(QUERY, 4, 0, query("across two routers"));
    a.send(&q);
    let got = b.recv_kind(QUERY, T).expect("query crosses both routers");
    assert_eq!((got.guid, got.ttl, got.hops), (q.guid, 2, 2));
    let servent = guid();
    b.send(&Msg {
        guid: q.guid,
        ..Msg::new(QUERYHIT, 3, 0, queryhit(servent))
    });
    let hit = a.recv_kind(QUERYHIT, T).expect("hit comes back");
    assert_eq!((hit.ttl, hit.hops), (1, 2));
    let p = Msg::new(PUSH, 4, 0, push(servent));
    a.send(&p);
    assert_eq!(b.recv_kind(PUSH, T).expect("push crosses").guid, p.guid);
    // The routers' one-hop pings were answered, so each learned the other.
    r2.wait("pong answered", |s| s.event("own_pong_sent") >= 1);
}

/// Watches a count of connection attempts for up to 20 s, from `start` (taken before
/// the router started): it must reach 3, and at every sample it must not exceed what a
/// backoff doubling from `backoff` allows by then (attempt k + 1 comes at least
/// `backoff * 2^(k-1)` after attempt k). A loaded machine only delays attempts, so
/// both bounds hold however slow the test runs.
fn assert_backs_off(what: &str, start: Instant, backoff: Duration, count: impl Fn() -> u64) {
    let allowed = |t: Duration| 1 + (t.as_secs_f64() / backoff.as_secs_f64() + 1.0).log2() as u64;
    let deadline = start + Duration::from_secs(20);
    loop {
        let n = count();
        let t = start.elapsed();
        assert!(
            n <= allowed(t),
            "{n} {what} after {t:?}: more than a {backoff:?} backoff allows"
        );
        if n >= 3 {
            return;
        }
        assert!(Instant::now() < deadline, "only {n} {what} in 20 s");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_catcher_backs_off_between_failed_connects() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let backoff = Duration::from_millis(500);
    let start = Instant::now();
    let r = TestRouter::start(
        RouterConfig::default()
            .with_seeds(vec![dead])
            .with_backoff(backoff),
    );
    // Tries at about 0, 0.5, 1.5 s (then 3.5 s).
    assert_backs_off("connect attempts", start, backoff, || {
        r.router.stats().event("connect_failed")
    });
}

#[test]
fn the_catcher_backs_off_after_a_refused_handshake() {
    // A router that refuses everyone (max 1 peer, taken).
    let full = TestRouter::start(RouterConfig::default().with_max_peers(1));
    let _taken = peers(&full, 1);
    let backoff = Duration::from_millis(400);
    let start = Instant::now();
    let r = TestRouter::start(
        RouterConfig::default()
            .with_seeds(vec![full.addr()])
            .with_backoff(backoff),
    );
    assert_backs_off("refused handshakes", start, backoff, || {
        full.router.stats().event("refused_full")
    });
    assert_eq!(r.router.stats().peers, 0);
    assert!(r.router.stats().event("refused_by_peer") >= 2);
}

#[test]
fn admission_on_the_router_queue_drops_and_counts_while_pings_still_flow() {
    // 50 ms per query and a queue threshold of 2: a burst of queries overflows it.
    let r = TestRouter::start(
        RouterConfig::default()
            .with_query_delay(Some(Duration::from_millis(50)))
            .with_router_admission(seda_gnutella::RouterAdmission::QueueThreshold(2))
            .with_pong_cache(None),
    );
    let mut v = peers(&r, 2);
    for i in 0..30 {
        v[0].send(&Msg::new(QUERY, 3, 0, query(&format!("burst {i}"))));
        thread::sleep(Duration::from_millis(2));
    }
    r.wait("refused reads counted", |s| s.drops("router_overload") > 0);
    let got = v[1]
        .drain(Duration::from_secs(2))
        .iter()
        .filter(|m| m.kind == QUERY)
        .count();
    assert!(got < 30, "every query passed a threshold of 2");
    // Once the burst is gone the router routes again.
    thread::sleep(Duration::from_millis(500));
    let p = Msg::new(PING, 2, 0, vec![]);
    v[0].send(&p);
    assert_eq!(
        v[1].recv_kind(PING, T).expect("ping after the burst").guid,
        p.guid
    );
}

/// The router's queue bound in time: while reads stand in its queue, the pings of
/// a read that waited past the bound are dropped unrouted and counted
/// (`router_late`); once the queue is gone, reads are routed again. The standing
/// queue is made by a query the router sleeps 3 s on (one thread), behind which a
/// peer sends 120 pings, one read each.
#[test]
fn a_standing_queue_sheds_late_pings_and_routing_resumes() {
    const PINGS: u64 = 120;
    let r = TestRouter::start(
        RouterConfig::default()
            .with_query_delay(Some(Duration::from_secs(3)))
            .with_router_threads((1, 1))
            .with_pong_cache(None)
            // The delay bound alone (the read pause would keep the queue short).
            .with_pause_reads_at(0),
    );
    let mut v = peers(&r, 3);
    v[0].send(&Msg::new(QUERY, 3, 0, query("hold the router")));
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 1..=PINGS {
        v[1].send(&Msg::new(PING, 2, 0, vec![]));
        // One read per ping: the next is sent once the server framed this one.
        while r.router.stats().received.get("ping").copied().unwrap_or(0) < i {
            assert!(Instant::now() < deadline, "ping {i} never framed");
            thread::sleep(Duration::from_millis(1));
        }
    }
    r.wait("every ping decided", |s| {
        s.drops("router_late") + s.routed.get("ping").copied().unwrap_or(0) == PINGS
    });
    let s = r.router.stats();
    assert!(s.drops("router_late") > 0, "no late ping shed: {s:#?}");
    let got = v[2]
        .drain(Duration::from_millis(500))
        .iter()
        .filter(|m| m.kind == PING && m.hops == 1)
        .count() as u64;
    assert_eq!(got, PINGS - s.drops("router_late"), "{s:#?}");
    // No queue: a ping is routed at once.
    let p = Msg::new(PING, 2, 0, vec![]);
    v[1].send(&p);
    assert_eq!(v[2].recv_kind(PING, T).expect("routed again").guid, p.guid);
}

/// Back-pressure (the `flow` module): while the router's queue stands, a read
/// pauses its connection, so the peer's further bytes wait in the kernel instead of
/// queueing at the router to be shed late; once the queue drains, reading resumes
/// and every ping is routed. The standing queue is made as above (a query the
/// router sleeps 2 s on, one thread); the pings go one read each until the pause
/// comes, the rest at once. Without the pause, reads queue past the standing mark
/// and the late ones are shed (the test above).
#[test]
fn a_standing_queue_pauses_the_sender_and_sheds_nothing() {
    const PINGS: u64 = 120;
    let r = TestRouter::start(
        RouterConfig::default()
            .with_query_delay(Some(Duration::from_secs(2)))
            .with_router_threads((1, 1))
            .with_pong_cache(None)
            .with_pause_reads_at(8),
    );
    let mut v = peers(&r, 3);
    v[0].send(&Msg::new(QUERY, 3, 0, query("hold the router")));
    r.wait("the query at the router", |s| {
        s.received.get("query").copied().unwrap_or(0) == 1
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    while sent < PINGS {
        v[1].send(&Msg::new(PING, 2, 0, vec![]));
        sent += 1;
        // One read per ping: the next is sent once the server framed this one, or
        // once reading is paused (the rest then waits in the kernel).
        loop {
            let s = r.router.stats();
            if s.event("read_paused") > 0 {
                break;
            }
            if s.received.get("ping").copied().unwrap_or(0) >= sent {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ping {sent} never framed: {s:#?}"
            );
            thread::sleep(Duration::from_millis(1));
        }
        if r.router.stats().event("read_paused") > 0 {
            break;
        }
    }
    while sent < PINGS {
        v[1].send(&Msg::new(PING, 2, 0, vec![]));
        sent += 1;
    }
    let got = v[2]
        .drain_until(Duration::from_secs(60), |got| {
            got.iter().filter(|m| m.kind == PING && m.hops == 1).count() as u64 >= PINGS
        })
        .iter()
        .filter(|m| m.kind == PING && m.hops == 1)
        .count() as u64;
    let s = r.router.stats();
    assert_eq!(got, PINGS, "pings lost: {s:#?}");
    assert_eq!(s.drops("router_late"), 0, "{s:#?}");
    assert!(s.event("read_paused") > 0, "{s:#?}");
    // Reading resumed: a ping now is routed at once.
    let p = Msg::new(PING, 2, 0, vec![]);
    v[1].send(&p);
    assert_eq!(v[2].recv_kind(PING, T).expect("routed again").guid, p.guid);
}
