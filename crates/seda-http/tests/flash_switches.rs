//! The switches Flash's comparisons need (USENIX'99 sections 3 and 5): blocking
//! reads inline in the event loop (SPED) and each cache turned off. Each must serve
//! exactly what the default server serves; the stats show which path ran.

mod support;

use std::time::{Duration, Instant};

use seda_http::{FileIo, HaboobStats};
use support::{TestServer, start};

/// The stats once `stage` has processed at least `n` events (a stage counts a
/// batch when it ends, which may be after the response), or after 5 s.
fn stats_after(s: &TestServer, stage: &str, n: u64) -> seda_http::StatsDoc {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let doc = s.server().stats();
        if doc.stage(stage).is_some_and(|st| st.processed >= n) || Instant::now() > deadline {
            return doc;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Requests every kind of static answer and checks each.
fn serve_the_tree(s: &TestServer) {
    let mut c = s.connect();
    for _ in 0..2 {
        assert_eq!(c.get("/mid.bin").body, support::pattern(300 * 1024, 2));
        assert_eq!(c.get("/hello.txt").body, b"hello, world\n");
        assert_eq!(c.get("/big.bin").body.len(), 3 * 1024 * 1024 + 17);
        assert_eq!(c.get("/missing").status, 404);
        assert_eq!(c.get("/sub").status, 301);
        assert_eq!(c.get("/escape").status, 403);
    }
}

#[test]
fn inline_file_io_reads_on_the_event_loop_and_never_uses_the_helpers() {
    let s = start(|c| {
        c.file_io = FileIo::Inline;
        c.residency_check = false;
    });
    serve_the_tree(&s);
    let stats = stats_after(&s, "PageCache", 12);
    assert_eq!(stats.stage("CacheMiss").unwrap().processed, 0);
    assert_eq!(stats.stage("file-helper").unwrap().processed, 0);
    assert!(
        !stats.has_edge("PageCache", "CacheMiss"),
        "{:?}",
        stats.edges
    );
    let hb: HaboobStats = stats.section("haboob").unwrap();
    // First round: every path misses; second: the translations and pages hit.
    assert_eq!(hb.cache_misses, 6, "{hb:?}");
    assert_eq!(hb.page_cache.entries, 2, "{hb:?}");
}

#[test]
fn helper_file_io_sends_the_same_misses_through_cache_miss() {
    let s = start(|c| c.residency_check = false);
    serve_the_tree(&s);
    let stats = stats_after(&s, "CacheMiss", 6);
    assert_eq!(stats.stage("CacheMiss").unwrap().processed, 6);
    let hb: HaboobStats = stats.section("haboob").unwrap();
    assert_eq!(hb.cache_misses, 6, "{hb:?}");
}

#[test]
fn without_the_path_cache_every_request_is_translated_but_pages_still_hit() {
    let s = start(|c| {
        c.path_cache_bytes = 0;
        c.residency_check = false;
    });
    serve_the_tree(&s);
    let stats = stats_after(&s, "CacheMiss", 12);
    let hb: HaboobStats = stats.section("haboob").unwrap();
    assert_eq!(hb.path_cache.entries, 0, "{hb:?}");
    assert_eq!(hb.cache_misses, 12, "{hb:?}");
    // Each page was read once: the second translation found it in the page cache.
    assert_eq!(stats.stage("file-helper").unwrap().processed, 2);
    assert_eq!(hb.page_cache.hits, 2, "{hb:?}");
}

#[test]
fn without_the_header_cache_responses_are_the_same() {
    let with = start(|_| {});
    let without = start(|c| c.header_cache = false);
    for path in ["/hello.txt", "/mid.bin", "/big.bin"] {
        let a = with.connect().get(path);
        let b = without.connect().get(path);
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b.body);
        let names = |r: &support::Resp| {
            let mut v: Vec<(String, String)> = r
                .headers
                .iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case("date"))
                .cloned()
                .collect();
            v.sort();
            v
        };
        // Same tree contents, mtimes to the second and inode-based ETags differ
        // between the two temp trees: compare the fields, not their values.
        let fields = |v: Vec<(String, String)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(fields(names(&a)), fields(names(&b)), "{path}");
        assert_eq!(a.header("content-length"), b.header("content-length"));
        // Twice from the server without the cache: formatted alike each time.
        let b2 = without.connect().get(path);
        assert_eq!(names(&b), names(&b2), "{path}");
    }
}
