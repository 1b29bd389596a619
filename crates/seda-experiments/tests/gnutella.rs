//! The simulated Gnutella peers, the plain-loop baseline and a tiny Fig. 14 run.

use std::net::SocketAddr;
use std::time::Duration;

use seda::Runtime;
use seda_experiments::gnutella::plain::PlainLoop;
use seda_gnutella::{Gnutella, RouterConfig};
use seda_load::gnutella::{LoadConfig, Mix, run};

/// A router on an ephemeral loopback port, stopped when dropped.
struct TestRouter {
    rt: Runtime,
    router: Gnutella,
}

impl TestRouter {
    fn start(cfg: RouterConfig) -> TestRouter {
        let rt = Runtime::builder().build();
        let router = Gnutella::start(&rt, cfg.with_event_loops(Some(1))).expect("router starts");
        rt.start().expect("runtime starts");
        TestRouter { rt, router }
    }

    fn addr(&self) -> SocketAddr {
        self.router.local_addr()
    }
}

impl Drop for TestRouter {
    fn drop(&mut self) {
        self.router.stop();
        self.rt.shutdown(Duration::from_secs(2));
    }
}

#[test]
fn simulated_peers_get_every_broadcast_and_time_it() {
    let r = TestRouter::start(
        RouterConfig::default()
            .with_advertise(Some("192.0.2.1:6346".parse().unwrap()))
            // The generator's traffic model (SEDA 5.2.3) times broadcast pings.
            .with_pong_cache(None),
    );
    let report = run(&LoadConfig::default()
        .with_router(r.addr())
        .with_peers(3)
        .with_rate(Some(300.0))
        .with_duration(Duration::from_millis(1500))
        .with_hit_fraction(1.0))
    .unwrap();
    let q = &report.kinds["query"];
    let p = &report.kinds["ping"];
    assert!(p.sent > 100 && q.sent > 10, "{report:?}");
    // Every broadcast reaches the two other peers, except those still in flight at
    // the end of the run (the generator stops reading at the end; on a loaded machine
    // a tenth of a second's traffic can be in flight; a lost peer would be half).
    assert!(
        p.received + 20 + p.sent / 5 >= p.sent * 2,
        "{}",
        report.text()
    );
    assert!(p.mean_ms > 0.0 && q.p90_ms > 0.0);
    // Our pings were answered by the router's own pong; queries by the peers' hits.
    assert!(report.kinds["pong"].received + 10 >= p.sent);
    assert!(report.kinds["queryhit"].received > 0);
    assert!(report.fairness.unwrap() > 0.9);
    assert_eq!(report.closed_by_router, 0);
    assert_eq!(report.series.len(), 1);
    let stats = r.router.stats();
    assert!(seda_gnutella::GnutellaStats::total(&stats.routed) > 0);
}

#[test]
fn the_generator_refuses_bad_settings() {
    let bad = LoadConfig::default().with_peers(1);
    assert!(run(&bad).is_err());
    let remote = LoadConfig::default().with_router("10.0.0.1:6346".parse().unwrap());
    let e = run(&remote).unwrap_err();
    assert!(matches!(e, seda_load::LoadError::Config(_)), "{e:?}");
    assert!(e.to_string().contains("loopback"), "{e}");
    assert!(Mix::parse("ping=1,pong=2").is_err());
    assert!(Mix::parse("ping=0,query=0").is_err());
    assert_eq!(Mix::parse("ping=3,query=1").unwrap().query, 0.25);
}

#[test]
fn the_plain_loop_routes_the_same_traffic() {
    let plain = PlainLoop::start().unwrap();
    let report = run(&LoadConfig::default()
        .with_router(plain.addr())
        .with_peers(3)
        .with_rate(Some(300.0))
        .with_duration(Duration::from_millis(1000)))
    .unwrap();
    assert!(plain.routed() > 200, "{}", plain.routed());
    let ping = &report.kinds["ping"];
    assert!(
        ping.received + 20 + ping.sent / 5 >= ping.sent * 2,
        "{}",
        report.text()
    );
}

#[test]
fn a_tiny_fig14_run_measures_latency_and_samples_the_stage() {
    use seda_experiments::gnutella::fig14::{Fig14Config, run_one};
    let cfg = Fig14Config {
        duration: Duration::from_millis(1500),
        warmup: Duration::ZERO,
        query_delay: Duration::from_millis(2),
        ..Fig14Config::default()
    };
    let r = run_one(&cfg, true, 200.0).unwrap();
    assert!(r.ping.received > 0 && r.query.received > 0);
    assert!(!r.samples.is_empty());
    assert!(r.max_threads >= 1);
}

/// The simulated peers speak through their own codec (`seda_load::gnutella::wire`);
/// this holds it to the router's (`seda_gnutella::proto`) in both directions.
#[test]
fn the_peers_codec_agrees_with_the_routers() {
    use seda_gnutella::proto::handshake::Block;
    use seda_gnutella::proto::message::{self, Guid, MsgType};
    use seda_load::gnutella::wire;

    for (ours, theirs) in [
        (wire::PING, MsgType::Ping),
        (wire::PONG, MsgType::Pong),
        (wire::QUERY, MsgType::Query),
        (wire::QUERY_HIT, MsgType::QueryHit),
    ] {
        assert_eq!(ours, theirs.byte());
    }
    assert_eq!(wire::HEADER_LEN, message::HEADER_LEN);

    // A message the peers write, read by the router's codec.
    let guid = [0x5a; 16];
    let payload = b"\x80\x00qqq\x00";
    let mut out = Vec::new();
    wire::write_message(&mut out, guid, wire::QUERY, 2, 1, payload);
    let h = message::Header::parse(&out);
    assert_eq!(
        (h.guid, h.kind, h.ttl, h.hops, h.len),
        (Guid(guid), MsgType::Query, 2, 1, payload.len() as u32)
    );
    assert_eq!(&out[message::HEADER_LEN..], payload);

    // A message the router writes, read by the peers' codec.
    let mut out = Vec::new();
    message::write_message(&mut out, Guid(guid), MsgType::Pong, 1, 3, &[9; 14]);
    let h = wire::Header::parse(&out).unwrap();
    assert_eq!(
        (h.guid, h.kind, h.ttl, h.hops, h.len),
        (guid, wire::PONG, 1, 3, 14)
    );

    // The handshake: the peers' first block as the router reads it...
    let hello = wire::connect_block(&[
        ("User-Agent", "seda-load-gnutella/0"),
        ("X-Ultrapeer", "True"),
    ]);
    let (block, used) = Block::parse(&hello).unwrap().unwrap();
    assert_eq!(used, hello.len());
    assert_eq!(block.start, "GNUTELLA CONNECT/0.6");
    assert_eq!(block.get("user-agent"), Some("seda-load-gnutella/0"));
    assert!(block.is_true("X-Ultrapeer"));
    // ...the router's answers as the peers read them...
    for (start, code) in [("GNUTELLA/0.6 200 OK", 200), ("GNUTELLA/0.6 503 Full", 503)] {
        let answer = Block::new(start).header("X-Ultrapeer", "True").to_bytes();
        assert_eq!(wire::answer_status(&answer), Some((code, start.to_owned())));
    }
    // ...and the peers' acceptance as the router reads it.
    let (accept, _) = Block::parse(wire::ACCEPT_BLOCK).unwrap().unwrap();
    assert_eq!(accept.status(), Some(200));
}

#[test]
fn simulated_leaves_get_only_the_queries_their_tables_match() {
    // The router as an ultrapeer (pong cache, QRP); two of four peers are leaves
    // sharing 5 words of 20; one-word queries: a leaf's table matches a quarter.
    let r = TestRouter::start(
        RouterConfig::default().with_advertise(Some("192.0.2.1:6346".parse().unwrap())),
    );
    let report = run(&LoadConfig::default()
        .with_router(r.addr())
        .with_peers(4)
        .with_leaves(2)
        .with_vocabulary(20)
        .with_leaf_words(5)
        .with_rate(Some(400.0))
        .with_duration(Duration::from_millis(1500))
        .with_mix(seda_load::gnutella::Mix::parse("ping=10,query=90").unwrap())
        .with_hit_fraction(0.0))
    .unwrap();
    let s = r.router.stats();
    // Counted over the run: the peers' links close as the run ends, so the router
    // may already hold fewer leaves and tables when it is asked.
    assert_eq!(
        (s.event("handshake_ok"), s.qrp.tables_received),
        (4, 2),
        "{s:?}"
    );
    let (sent, filtered) = (s.qrp.leaf_copies, s.qrp.leaf_filtered);
    assert!(sent > 0 && filtered > 0, "{:?}", s.qrp);
    // Each leaf matches 5 of 20 words: about a quarter of the copies pass.
    let share = sent as f64 / (sent + filtered) as f64;
    assert!((0.1..0.45).contains(&share), "share {share}: {:?}", s.qrp);
    // What the router sent the leaves, they received (but what was in flight).
    assert!(report.leaf_query_copies <= sent);
    assert!(
        report.leaf_query_copies + 20 + sent / 5 >= sent,
        "{}",
        report.text()
    );
    // Pings are answered from the pong cache, never broadcast.
    assert!(s.pong_cache.pings_answered + s.pong_cache.throttled > 0);
    assert_eq!(s.routed.get("ping"), None);
    assert_eq!(report.closed_by_router, 0);
}
