//! Haboob's caches: the page cache (SEDA 5.1) and, beside it, Flash's
//! pathname-translation cache with its response-header cache (Flash 5.2-5.3).
//!
//! - [`PathCache`] maps a raw URL path to what it translates to: a file with its
//!   precomputed `200` header block, a redirect, or an error status. Hits skip
//!   decoding, `canonicalize`, `stat` and header formatting. Entries are trusted for a
//!   revalidation interval, after which the request takes the miss path once and the
//!   entry is refreshed.
//! - [`PageCache`] maps a file identity (device, inode, mtime, length) to its bytes,
//!   as a shared immutable [`Bytes`], bounded in bytes with exact LRU replacement.
//!   Because the key includes mtime and length, a changed file never hits a stale page.
//!
//! Both are bounded by bytes, not entries: a client that asks for 100,000 distinct
//! long URLs evicts older translations instead of growing the path cache.
//!
//! # Invariants
//! - `PageCache`: the sum of cached body lengths never exceeds the capacity; a body
//!   larger than the capacity is never inserted.
//! - `PathCache`: the sum of entry costs (URL + target bytes + a fixed overhead)
//!   never exceeds the capacity, and at most [`PathCache::OPEN_FILES`] entries hold
//!   an open file (a large file's stream): the descriptors the cache keeps are
//!   bounded, whatever the number of large files asked for (a translation past the
//!   bound is used once and not kept).

use std::fmt;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::proto::{Status, Validators};

/// Identity of one version of a file: a page is valid only for the same identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Length in bytes.
    pub len: u64,
}

/// A file the server may send: everything about it except its bytes.
#[derive(Debug)]
pub struct FileInfo {
    /// Canonical path under the root.
    pub path: PathBuf,
    /// Identity, the page-cache key.
    pub key: FileKey,
    /// Content-Type.
    pub content_type: &'static str,
    /// ETag and Last-Modified.
    pub validators: Validators,
    /// `Last-Modified` formatted once.
    pub last_modified: String,
    /// The response-header cache (Flash 5.3): the `200` head of this file without the
    /// `Date` and `Connection` lines and the blank line, which vary per response.
    pub head_200: Bytes,
    /// For a file too large for the page cache: the open file, streamed with
    /// `sendfile` (positioned reads, so one descriptor serves every request).
    pub stream: Option<Arc<std::fs::File>>,
}

impl FileInfo {
    /// Builds the info and its cached `200` head; `stream` is the open file when
    /// the file bypasses the page cache.
    pub fn new(
        path: PathBuf,
        key: FileKey,
        validators: Validators,
        content_type: &'static str,
        stream: Option<Arc<std::fs::File>>,
    ) -> Self {
        let last_modified = crate::proto::http_date(validators.last_modified);
        let head_200 = head_200(content_type, key.len, &last_modified, &validators.etag);
        FileInfo {
            path,
            key,
            content_type,
            validators,
            last_modified,
            head_200,
            stream,
        }
    }
}

impl FileInfo {
    /// The `200` head formatted afresh, date included: what every response costs
    /// without the response-header cache.
    pub fn format_head_200(&self) -> Bytes {
        let last_modified = crate::proto::http_date(self.validators.last_modified);
        head_200(
            self.content_type,
            self.key.len,
            &last_modified,
            &self.validators.etag,
        )
    }
}

/// A file's `200` head without `Date` and the connection fields.
fn head_200(content_type: &str, len: u64, last_modified: &str, etag: &str) -> Bytes {
    Bytes::from(format!(
        "HTTP/1.1 200 OK\r\nServer: seda\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nLast-Modified: {last_modified}\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n"
    ))
}

/// What a URL path translated to.
#[derive(Clone, Debug)]
pub enum Target {
    /// A file.
    File(Arc<FileInfo>),
    /// A directory without its trailing slash: 301 to this location.
    Redirect(Bytes),
    /// An error status (403, 404, 400).
    Error(Status),
}

struct PathEntry {
    target: Target,
    /// When the translation stops being trusted (checked + revalidate; `None`: a
    /// revalidate period past the clock's range). Stored as the deadline, so that a
    /// hit compares two instants instead of subtracting them (a `Timespec`
    /// subtraction is ~37 instructions under callgrind, on every request).
    fresh_until: Option<Instant>,
    /// What the entry counts toward the byte bound.
    cost: u64,
}

impl PathEntry {
    /// Whether the entry keeps a file open.
    fn holds_file(&self) -> bool {
        matches!(&self.target, Target::File(info) if info.stream.is_some())
    }
}

/// The path cache's map and the count of its entries that hold an open file.
struct PathLru {
    /// foldhash, randomly seeded per cache: SipHash took ~200 instructions of a
    /// 1 KiB request's ~9,000 for one lookup. Keys are client-chosen paths; a
    /// per-process random seed keeps collisions from being computed offline, and
    /// the map is bounded by the cache's capacity.
    lru: Lru<Box<[u8]>, PathEntry, foldhash::fast::RandomState>,
    open_files: usize,
}

/// Bytes an entry is charged beyond its key and target's own bytes: the map's and
/// list's bookkeeping, and the `FileInfo` struct.
const ENTRY_OVERHEAD: u64 = 192;

impl Target {
    /// Heap bytes the target holds (path, cached head, location).
    fn bytes(&self) -> u64 {
        match self {
            Target::File(info) => {
                (info.path.as_os_str().len()
                    + info.head_200.len()
                    + info.last_modified.len()
                    + info.validators.etag.len()) as u64
            }
            Target::Redirect(loc) => loc.len() as u64,
            Target::Error(_) => 0,
        }
    }
}

/// A byte-bounded LRU map: the bookkeeping both caches share.
struct Lru<K: std::hash::Hash + Eq, V, S: BuildHasher> {
    map: lru::LruCache<K, V, S>,
    bytes: u64,
}

impl<K: std::hash::Hash + Eq, V, S: BuildHasher> Lru<K, V, S> {
    fn new(hasher: S) -> Self {
        Lru {
            map: lru::LruCache::unbounded_with_hasher(hasher),
            bytes: 0,
        }
    }

    /// Inserts `v` costing `cost`, evicting least recently used entries until the
    /// total fits `capacity`; returns how many were evicted. `removed(v)` is called
    /// with every entry that leaves (the one `k` had, and the evicted) and must give
    /// its cost back.
    fn insert(
        &mut self,
        k: K,
        v: V,
        cost: u64,
        capacity: u64,
        mut cost_of: impl FnMut(&V) -> u64,
    ) -> u64 {
        if let Some(old) = self.map.pop(&k) {
            self.bytes -= cost_of(&old);
        }
        let mut evicted = 0;
        while self.bytes + cost > capacity {
            let Some((_, old)) = self.map.pop_lru() else {
                break;
            };
            self.bytes -= cost_of(&old);
            evicted += 1;
        }
        self.map.put(k, v);
        self.bytes += cost;
        evicted
    }
}

/// The pathname-translation cache (Flash 5.2). See the module docs.
pub struct PathCache {
    /// Keys are chosen by clients (URLs that are not there are cached too), so the
    /// map uses std's keyed SipHash, not FNV.
    lru: Mutex<PathLru>,
    capacity: u64,
    revalidate: Duration,
}

impl fmt::Debug for PathCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PathCache")
            .field("entries", &self.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PathCache {
    /// Most entries that keep a file open (see the module invariants); a server
    /// counts them in the descriptors it keeps free beside its connections.
    pub const OPEN_FILES: usize = 32;

    /// A cache holding translations worth at most `capacity_bytes` (URL, target and
    /// bookkeeping counted), each trusted for `revalidate`.
    pub fn new(capacity_bytes: u64, revalidate: Duration) -> Self {
        PathCache {
            lru: Mutex::new(PathLru {
                lru: Lru::new(foldhash::fast::RandomState::default()),
                open_files: 0,
            }),
            capacity: capacity_bytes,
            revalidate,
        }
    }

    /// The translation of `url`, if cached and still fresh at `now`.
    pub fn get(&self, url: &[u8], now: Instant) -> Option<Target> {
        let mut inner = self.lru.lock();
        let e = inner.lru.map.get(url)?;
        // `now` may be an earlier turn's clock than the insert's (another loop's):
        // such an entry is fresh, as `now - checked` saturating at 0 made it, unless
        // nothing is ever trusted (`revalidate` 0).
        (!self.revalidate.is_zero() && e.fresh_until.is_none_or(|until| now < until))
            .then(|| e.target.clone())
    }

    /// Caches a translation checked at `now`, evicting the least recently used
    /// translations to stay within the byte bound. A translation larger than the
    /// whole cache is not cached, nor one holding an open file while
    /// [`OPEN_FILES`](Self::OPEN_FILES) entries do.
    pub fn insert(&self, url: &[u8], target: Target, now: Instant) {
        let cost = url.len() as u64 + target.bytes() + ENTRY_OVERHEAD;
        if cost > self.capacity {
            return;
        }
        let entry = PathEntry {
            target,
            fresh_until: now.checked_add(self.revalidate),
            cost,
        };
        let opens = entry.holds_file();
        let mut inner = self.lru.lock();
        let PathLru { lru, open_files } = &mut *inner;
        if opens
            && *open_files >= Self::OPEN_FILES
            && !lru.map.peek(url).is_some_and(PathEntry::holds_file)
        {
            return;
        }
        lru.insert(url.into(), entry, cost, self.capacity, |e| {
            if e.holds_file() {
                *open_files -= 1;
            }
            e.cost
        });
        if opens {
            *open_files += 1;
        }
        debug_assert!(lru.bytes <= self.capacity);
        debug_assert!(*open_files <= Self::OPEN_FILES);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lru.lock().lru.map.len()
    }

    /// Entries that keep a file open (at most [`OPEN_FILES`](Self::OPEN_FILES)).
    pub fn open_files(&self) -> usize {
        self.lru.lock().open_files
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the entries are charged (at most the capacity).
    pub fn bytes(&self) -> u64 {
        self.lru.lock().lru.bytes
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// Counters of the page cache.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct PageCacheStats {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Bytes cached now.
    pub bytes: u64,
    /// Pages cached now.
    pub entries: usize,
    /// Lookups that found their page.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
}

/// The page cache: file bytes bounded in total size, exact LRU. See the module docs.
pub struct PageCache {
    /// Keys are file identities (four integers): foldhash hashes them in a few
    /// multiplications, where FNV went byte by byte over 40 bytes.
    lru: Mutex<Lru<FileKey, Bytes, foldhash::fast::RandomState>>,
    capacity: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl fmt::Debug for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PageCache {
    /// A cache holding at most `capacity_bytes` of file bodies.
    pub fn new(capacity_bytes: u64) -> Self {
        PageCache {
            lru: Mutex::new(Lru::new(foldhash::fast::RandomState::default())),
            capacity: capacity_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether a body of `len` bytes may enter the cache at all.
    pub fn admits(&self, len: u64) -> bool {
        len <= self.capacity
    }

    /// The page of `key`, marking it most recently used.
    pub fn get(&self, key: &FileKey) -> Option<Bytes> {
        let found = self.lru.lock().map.get(key).cloned();
        match &found {
            Some(_) => self.hits.fetch_add(1, Relaxed),
            None => self.misses.fetch_add(1, Relaxed),
        };
        found
    }

    /// Inserts a page, evicting least recently used pages until it fits. Returns false
    /// (and caches nothing) when the body is larger than the whole cache.
    pub fn insert(&self, key: FileKey, body: Bytes) -> bool {
        let len = body.len() as u64;
        if len > self.capacity {
            return false;
        }
        let mut lru = self.lru.lock();
        let evicted = lru.insert(key, body, len, self.capacity, |b| b.len() as u64);
        debug_assert!(lru.bytes <= self.capacity);
        drop(lru);
        self.evictions.fetch_add(evicted, Relaxed);
        true
    }

    /// Counters now.
    pub fn stats(&self) -> PageCacheStats {
        let lru = self.lru.lock();
        PageCacheStats {
            capacity_bytes: self.capacity,
            bytes: lru.bytes,
            entries: lru.map.len(),
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
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
        let c = PathCache::new(64 * 1024, Duration::from_secs(1));
        let t0 = Instant::now();
        c.insert(b"/a", Target::Error(Status::NOT_FOUND), t0);
        assert!(c.get(b"/a", t0).is_some());
        assert!(c.get(b"/a", t0 + Duration::from_secs(2)).is_none());
        // 1,000 distinct 8 KB URLs: the cache keeps the newest that fit.
        for i in 0..1000 {
            let url = format!("/{i}/{}", "x".repeat(8000));
            c.insert(url.as_bytes(), Target::Error(Status::NOT_FOUND), t0);
            assert!(c.bytes() <= 64 * 1024);
        }
        assert!(c.len() <= 8 && c.len() >= 6, "{} entries", c.len());
        let newest = format!("/999/{}", "x".repeat(8000));
        assert!(c.get(newest.as_bytes(), t0).is_some());
        let huge = vec![b'y'; 100 * 1024];
        c.insert(&huge, Target::Error(Status::NOT_FOUND), t0);
        assert!(
            c.get(&huge, t0).is_none(),
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
        let c = PathCache::new(16 << 20, Duration::from_secs(60));
        let t0 = Instant::now();
        let n = PathCache::OPEN_FILES + 20;
        for i in 0..n {
            c.insert(format!("/f{i}").as_bytes(), streamed(), t0);
        }
        assert_eq!(c.open_files(), PathCache::OPEN_FILES);
        assert_eq!(c.len(), PathCache::OPEN_FILES, "the rest were not kept");
        assert!(c.get(format!("/f{}", n - 1).as_bytes(), t0).is_none());
        // Replacing an entry that holds a file, or evicting one, frees its place.
        c.insert(b"/f0", streamed(), t0);
        c.insert(b"/f1", Target::Error(Status::NOT_FOUND), t0);
        assert_eq!(c.open_files(), PathCache::OPEN_FILES - 1);
        c.insert(b"/new", streamed(), t0);
        assert!(c.get(b"/new", t0).is_some());
        assert_eq!(c.open_files(), PathCache::OPEN_FILES);
        // Entries without a file are not limited by it.
        c.insert(b"/other", Target::Error(Status::NOT_FOUND), t0);
        assert!(c.get(b"/other", t0).is_some());
        let tiny = PathCache::new(3 * (ENTRY_OVERHEAD + 200), Duration::from_secs(60));
        for i in 0..10 {
            tiny.insert(format!("/f{i}").as_bytes(), streamed(), t0);
        }
        assert!(tiny.open_files() <= 3 && tiny.open_files() == tiny.len());
    }
}
