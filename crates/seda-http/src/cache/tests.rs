//! The caches' tests: replacement, bounds, the page reference of path entries.

use super::*;

fn key(ino: u64, len: u64) -> FileKey {
    FileKey {
        dev: 1,
        ino,
        mtime_ns: 0,
        len,
    }
}

#[test]
fn lru_evicts_least_recently_used_within_byte_bound() {
    let c = PageCache::new(30);
    assert!(c.insert(key(1, 10), Bytes::from(vec![1; 10])));
    assert!(c.insert(key(2, 10), Bytes::from(vec![2; 10])));
    assert!(c.insert(key(3, 10), Bytes::from(vec![3; 10])));
    assert!(c.get(&key(1, 10)).is_some(), "touch 1: now 2 is the oldest");
    assert!(c.insert(key(4, 10), Bytes::from(vec![4; 10])));
    assert!(c.get(&key(2, 10)).is_none());
    assert_eq!(c.get(&key(1, 10)).unwrap()[0], 1);
    assert!(c.get(&key(3, 10)).is_some());
    assert!(c.get(&key(4, 10)).is_some());
    let s = c.stats();
    assert_eq!((s.bytes, s.entries, s.evictions), (30, 3, 1));
    assert!(
        c.insert(key(5, 25), Bytes::from(vec![5; 25])),
        "evicts several"
    );
    assert_eq!(c.stats().entries, 1);
    assert!(
        !c.insert(key(6, 31), Bytes::from(vec![6; 31])),
        "larger than the cache"
    );
    assert!(c.stats().bytes <= 30);
}

#[test]
fn reinserting_a_key_replaces_it() {
    let c = PageCache::new(100);
    c.insert(key(1, 3), Bytes::from_static(b"abc"));
    c.insert(key(1, 3), Bytes::from_static(b"xyz"));
    assert_eq!(c.stats().bytes, 3);
    assert_eq!(&c.get(&key(1, 3)).unwrap()[..], b"xyz");
}

#[test]
fn path_cache_expires_and_stays_bounded_in_bytes() {
    let c = PageCache::with_paths(1 << 20, 64 * 1024, Duration::from_secs(1));
    let t0 = Instant::now();
    c.insert_translation(b"/a", Target::Error(Status::NOT_FOUND), t0);
    assert!(c.translation(b"/a", t0).is_some());
    assert!(c.translation(b"/a", t0 + Duration::from_secs(2)).is_none());
    // 1,000 distinct 8 KB URLs: the cache keeps the newest that fit.
    for i in 0..1000 {
        let url = format!("/{i}/{}", "x".repeat(8000));
        c.insert_translation(url.as_bytes(), Target::Error(Status::NOT_FOUND), t0);
        assert!(c.path_bytes() <= 64 * 1024);
    }
    assert!(
        c.path_len() <= 8 && c.path_len() >= 6,
        "{} entries",
        c.path_len()
    );
    let newest = format!("/999/{}", "x".repeat(8000));
    assert!(c.translation(newest.as_bytes(), t0).is_some());
    let huge = vec![b'y'; 100 * 1024];
    c.insert_translation(&huge, Target::Error(Status::NOT_FOUND), t0);
    assert!(
        c.translation(&huge, t0).is_none(),
        "larger than the cache: not cached"
    );
}

/// Issue 29.4: every large file the path cache translated kept its descriptor
/// open for as long as its entry lived (tens of thousands in 16 MiB).
#[test]
fn path_cache_keeps_a_bounded_number_of_files_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    std::fs::write(&path, b"x").unwrap();
    let streamed = || {
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let key = FileKey {
            dev: 0,
            ino: 0,
            mtime_ns: 0,
            len: 1,
        };
        let v = Validators::of(1, std::time::SystemTime::UNIX_EPOCH, 0);
        Target::File(Arc::new(FileInfo::new(
            path.clone(),
            key,
            v,
            "text/plain",
            Some(file),
        )))
    };
    let c = PageCache::with_paths(1 << 20, 16 << 20, Duration::from_secs(60));
    let t0 = Instant::now();
    let n = PageCache::OPEN_FILES + 20;
    for i in 0..n {
        c.insert_translation(format!("/f{i}").as_bytes(), streamed(), t0);
    }
    assert_eq!(c.open_files(), PageCache::OPEN_FILES);
    assert_eq!(
        c.path_len(),
        PageCache::OPEN_FILES,
        "the rest were not kept"
    );
    assert!(
        c.translation(format!("/f{}", n - 1).as_bytes(), t0)
            .is_none()
    );
    // Replacing an entry that holds a file, or evicting one, frees its place.
    c.insert_translation(b"/f0", streamed(), t0);
    c.insert_translation(b"/f1", Target::Error(Status::NOT_FOUND), t0);
    assert_eq!(c.open_files(), PageCache::OPEN_FILES - 1);
    c.insert_translation(b"/new", streamed(), t0);
    assert!(c.translation(b"/new", t0).is_some());
    assert_eq!(c.open_files(), PageCache::OPEN_FILES);
    // Entries without a file are not limited by it.
    c.insert_translation(b"/other", Target::Error(Status::NOT_FOUND), t0);
    assert!(c.translation(b"/other", t0).is_some());
    let tiny = PageCache::with_paths(1 << 20, 3 * (ENTRY_OVERHEAD + 200), Duration::from_secs(60));
    for i in 0..10 {
        tiny.insert_translation(format!("/f{i}").as_bytes(), streamed(), t0);
    }
    assert!(tiny.open_files() <= 3 && tiny.open_files() == tiny.path_len());
}

/// A translation to the file of `key` (page-cached, no stream).
fn to_file(key: FileKey) -> Target {
    let v = Validators::of(key.len, std::time::SystemTime::UNIX_EPOCH, key.ino);
    Target::File(Arc::new(FileInfo::new(
        PathBuf::from(format!("/f{}", key.ino)),
        key,
        v,
        "text/plain",
        None,
    )))
}

fn page_of(l: Lookup) -> Option<Bytes> {
    match l {
        Lookup::Hit(_, page) => page,
        Lookup::PageMiss(_) | Lookup::Miss => None,
    }
}

/// The path entry's reference to its page: a slot refilled with another file's
/// page, or a changed file (a new identity), never answers from the old page.
#[test]
fn a_path_entry_never_answers_from_a_page_that_is_not_its_files() {
    let c = PageCache::with_paths(10, 1 << 20, Duration::from_secs(60));
    let t0 = Instant::now();
    c.insert_translation(b"/a", to_file(key(1, 10)), t0);
    assert!(matches!(c.lookup(b"/a", t0), Lookup::PageMiss(_)));
    c.insert(key(1, 10), Bytes::from(vec![1; 10]));
    assert_eq!(page_of(c.lookup(b"/a", t0)).unwrap()[0], 1, "via the map");
    assert_eq!(page_of(c.lookup(b"/a", t0)).unwrap()[0], 1, "via the slot");
    // Another file's page takes the slot of /a's page (evicted).
    c.insert(key(2, 10), Bytes::from(vec![2; 10]));
    assert!(matches!(c.lookup(b"/a", t0), Lookup::PageMiss(_)));
    // The same file again, in a new fill: found, with the new bytes.
    c.insert(key(1, 10), Bytes::from(vec![3; 10]));
    assert_eq!(page_of(c.lookup(b"/a", t0)).unwrap()[0], 3);
    // The file changes (new mtime): its refreshed translation misses the page,
    // although the old page is still cached.
    let changed = FileKey {
        mtime_ns: 1,
        ..key(1, 10)
    };
    c.insert_translation(b"/a", to_file(changed), t0);
    assert!(matches!(c.lookup(b"/a", t0), Lookup::PageMiss(_)));
    assert_eq!(c.stats().entries, 1, "the old page is still there");
    c.insert(changed, Bytes::from(vec![4; 10]));
    assert_eq!(page_of(c.lookup(b"/a", t0)).unwrap()[0], 4);
    let s = c.stats();
    assert_eq!((s.hits, s.misses), (4, 3));
}

/// Hits through path entries keep the replacement exact LRU, and the pages the
/// entries found are freed when evicted (the entries hold no page).
#[test]
fn lookups_keep_exact_lru_and_the_byte_bound_over_memory() {
    let c = PageCache::with_paths(30, 1 << 20, Duration::from_secs(60));
    let t0 = Instant::now();
    for i in 1..=3 {
        c.insert_translation(format!("/{i}").as_bytes(), to_file(key(i, 10)), t0);
        c.insert(key(i, 10), Bytes::from(vec![i as u8; 10]));
        assert!(page_of(c.lookup(format!("/{i}").as_bytes(), t0)).is_some());
    }
    // Touch 1 (through its entry's slot reference): 2 is now the oldest.
    assert!(page_of(c.lookup(b"/1", t0)).is_some());
    c.insert(key(4, 10), Bytes::from(vec![4; 10]));
    assert!(matches!(c.lookup(b"/2", t0), Lookup::PageMiss(_)));
    assert!(page_of(c.lookup(b"/1", t0)).is_some());
    assert!(page_of(c.lookup(b"/3", t0)).is_some());
    // Many files, each looked up through its entry: the bound holds, and an
    // evicted page's bytes are held by nobody but the caller.
    let mut kept = Vec::new();
    for i in 10..60 {
        let url = format!("/{i}");
        c.insert_translation(url.as_bytes(), to_file(key(i, 10)), t0);
        c.insert(key(i, 10), Bytes::from(vec![0; 10]));
        kept.push(page_of(c.lookup(url.as_bytes(), t0)).unwrap());
        assert!(c.stats().bytes <= 30);
    }
    assert_eq!(c.stats().entries, 3);
    assert!(
        kept[..47].iter().all(Bytes::is_unique),
        "evicted pages are freed"
    );
    assert!(
        kept[47..].iter().all(|b| !b.is_unique()),
        "cached pages are shared"
    );
}
