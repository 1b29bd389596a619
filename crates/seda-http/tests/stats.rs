//! Every request passes through the stages that count it (SEDA Fig. 5): after a mix
//! of hits, misses, dynamic requests, 404s and pipelined requests, HttpSend counted
//! every response, PageCache every static lookup and fill, and the stage graph has
//! the edges of the paper's figure.

mod support;

use std::time::{Duration, Instant};

use seda_http::proto::Status;
use seda_http::{
    HaboobStats, HandlerContext, HandlerRegistration, Handoff, Request, Response, StatsDoc,
};
use support::{TestServer, start};

const N: u64 = 12;

fn processed(doc: &StatsDoc, stage: &str) -> u64 {
    doc.stage(stage)
        .unwrap_or_else(|| panic!("no stage {stage}"))
        .processed
}

/// The stats once HttpSend has counted `want` responses in all and every stage's
/// count has stopped moving (a stage adds a batch's events when the batch ends,
/// which may be after the responses it led to went out).
fn settled(s: &TestServer, want: u64) -> StatsDoc {
    let deadline = Instant::now() + Duration::from_secs(10);
    let counts = |d: &StatsDoc| -> Vec<u64> { d.stages.iter().map(|st| st.processed).collect() };
    let mut last = s.stats();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let doc = s.stats();
        let done = processed(&doc, "HttpSend") >= want && counts(&doc) == counts(&last);
        if done || Instant::now() > deadline {
            return doc;
        }
        last = doc;
    }
}

#[test]
fn every_response_is_counted_at_the_send_stage_and_the_graph_is_fig5() {
    every_response_counted(Handoff::Inline);
}

#[test]
fn the_counts_and_the_graph_are_the_same_with_queued_handoff() {
    every_response_counted(Handoff::Queued);
}

fn every_response_counted(handoff: Handoff) {
    let s = start(|c| {
        c.handoff = handoff;
        // Misses read through the file helper (no residency shortcut).
        c.residency_check = false;
        // Translations stay trusted for the whole test (no revalidation misses).
        c.revalidate = Duration::from_secs(600);
        c.handlers.push(HandlerRegistration::new(
            "/dyn",
            |r: &Request, _: &HandlerContext<'_>| Response::text(Status::OK, r.path.clone()),
        ));
    });
    for i in 0..N {
        std::fs::write(s.root().join(format!("f{i}.txt")), format!("file {i}")).unwrap();
    }
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").status, 200, "warm the hit path");
    let before = settled(&s, 1);
    let h0: HaboobStats = before.section("haboob").unwrap();

    for i in 0..N {
        assert_eq!(c.get("/hello.txt").status, 200);
        assert_eq!(c.get(&format!("/f{i}.txt")).text(), format!("file {i}"));
        assert_eq!(c.get(&format!("/dyn/{i}")).text(), format!("/dyn/{i}"));
        assert_eq!(c.get(&format!("/missing-{i}")).status, 404);
    }
    let mut piped = s.connect();
    let one = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    piped.send(&one.repeat(N as usize));
    for _ in 0..N {
        assert_eq!(piped.read_response(false).unwrap().status, 200);
    }

    let after = settled(&s, 1 + 5 * N);
    let d = |stage: &str| processed(&after, stage) - processed(&before, stage);
    assert_eq!(
        d("HttpSend"),
        5 * N,
        "one response each, all counted at HttpSend"
    );
    assert_eq!(
        d("HttpRecv"),
        4 * N,
        "every static request routed by HttpRecv (HttpParse hands dynamic ones to their stage)"
    );
    assert_eq!(d("handler:dyn"), N);
    assert_eq!(d("CacheMiss"), 2 * N, "misses and first 404s");
    assert_eq!(d("file-helper"), N, "each missed file read once");
    // PageCache: a lookup for every static request, a fill for every miss path.
    assert_eq!(d("PageCache"), 4 * N + 2 * N);
    assert_eq!(d("HttpRecv"), d("PageCache") - d("CacheMiss"));

    let h1: HaboobStats = after.section("haboob").unwrap();
    assert_eq!(h1.responses - h0.responses, 5 * N);
    assert_eq!(h1.requests - h0.requests, 5 * N);
    let lookups =
        (h1.page_cache.hits + h1.page_cache.misses) - (h0.page_cache.hits + h0.page_cache.misses);
    // The 2N hits look pages up; so does CacheMiss once for each of the N new files
    // after translating it (a page cached under a stale translation is not read
    // again), and misses.
    assert_eq!(
        lookups,
        3 * N,
        "page lookups are the hits (plain and pipelined) and the fresh translations"
    );
    assert_eq!(h1.page_cache.hits - h0.page_cache.hits, 2 * N);
    assert_eq!(
        h1.page_cache.entries - h0.page_cache.entries,
        N as usize,
        "misses filled"
    );

    for (from, to) in [
        ("sock-io", "HttpParse"),
        ("HttpParse", "HttpRecv"),
        ("HttpRecv", "PageCache"),
        ("PageCache", "HttpSend"),
        ("PageCache", "CacheMiss"),
        ("CacheMiss", "file-helper"),
        ("file-helper", "PageCache"),
        ("CacheMiss", "PageCache"),
        ("HttpParse", "handler:dyn"),
        ("handler:dyn", "HttpSend"),
    ] {
        assert!(
            after.has_edge(from, to),
            "edge {from} -> {to} missing: {:?}",
            after.edges
        );
    }
    assert!(
        !after.has_edge("HttpParse", "HttpSend"),
        "no request skipped its stages"
    );
    // Inline handoff is the runtime's: the same counts, some events run inline.
    let inlined = |stage: &str| after.stage(stage).unwrap().inlined;
    match handoff {
        Handoff::Inline => assert!(
            inlined("HttpSend") > 0,
            "nothing ran inline: {:?}",
            after
                .stages
                .iter()
                .map(|s| (&s.name, s.inlined, s.processed))
                .collect::<Vec<_>>()
        ),
        Handoff::Queued => assert_eq!(inlined("HttpSend") + inlined("PageCache"), 0),
        other => panic!("no check for the handoff {other:?}"),
    }
}
