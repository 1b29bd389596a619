//! Haboob's cache: the page cache (SEDA 5.1) and, in it, Flash's pathname-translation
//! cache with its response-header cache (Flash 5.2-5.3), behind one lock.
//!
//! - The path cache maps a raw URL path to what it translates to: a file with its
//!   precomputed `200` header block, a redirect, or an error status. Hits skip
//!   decoding, `canonicalize`, `stat` and header formatting. Entries are trusted for a
//!   revalidation interval, after which the request takes the miss path once and the
//!   entry is refreshed.
//! - The page store maps a file identity (device, inode, mtime, length) to its bytes,
//!   as a shared immutable [`Bytes`], bounded in bytes with exact LRU replacement.
//!   Because the key includes mtime and length, a changed file never hits a stale page.
//! - [`PageCache::lookup`] is the hit path: one lock, one hashed map (the URL's). A
//!   path entry of a page-cached file keeps where it last found its page (the
//!   page's slot and the slot's occupancy number), so a hit follows that instead of
//!   hashing the file identity into the page map; the map is used only when the
//!   reference no longer holds.
//!
//! Both are bounded by bytes, not entries: a client that asks for 100,000 distinct
//! long URLs evicts older translations instead of growing the path cache.
//!
//! # Invariants
//! - Pages: the sum of cached body lengths never exceeds the capacity; a body
//!   larger than the capacity is never inserted. Path entries hold no page, only a
//!   reference to a slot: an evicted page's bytes are freed whatever the path
//!   entries that found it, so the bound is on memory, not only on the count.
//! - Every page hit, through a path entry's reference or the map, marks the page
//!   most recently used: the replacement is exact LRU over all lookups.
//! - A path entry's reference is followed only if the slot's occupancy number (fresh
//!   at every fill, never reused) and the slot's file identity are those the entry
//!   translates to: a changed file (new identity, after the entry's revalidation) or
//!   a slot refilled with another page never answers from the old page.
//! - Path cache: the sum of entry costs (URL + target bytes + a fixed overhead)
//!   never exceeds its capacity, and at most [`PageCache::OPEN_FILES`] entries hold
//!   an open file (a large file's stream): the descriptors the cache keeps are
//!   bounded, whatever the number of large files asked for (a translation past the
//!   bound is used once and not kept).
//! - [`PageCacheStats`] counts one hit or miss per lookup that reached a cached
//!   file's page, as when the two caches were looked up one after the other.

use std::fmt;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Arc;
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

/// Where a path entry last found its page: a slot of the page store and the
/// occupancy of that slot (a slot reused for another page has another `fill`).
#[derive(Clone, Copy, Debug)]
struct PageRef {
    slot: u32,
    fill: u64,
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
    /// The page of the file this entry translates to, as last found: a hit follows
    /// it instead of hashing the file's identity into the page map. Only a
    /// reference: the page itself stays in (and leaves with) the page store.
    page: Option<PageRef>,
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

/// A byte-bounded LRU map (the path cache's).
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
    /// total fits `capacity`. `cost_of(v)` is called with every entry that leaves
    /// (the one `k` had, and the evicted) and must give its cost back.
    fn insert(&mut self, k: K, v: V, cost: u64, capacity: u64, mut cost_of: impl FnMut(&V) -> u64) {
        if let Some(old) = self.map.pop(&k) {
            self.bytes -= cost_of(&old);
        }
        while self.bytes + cost > capacity {
            let Some((_, old)) = self.map.pop_lru() else {
                break;
            };
            self.bytes -= cost_of(&old);
        }
        self.map.put(k, v);
        self.bytes += cost;
    }
}

/// No slot (the end of the page list).
const NIL: u32 = u32::MAX;

/// One slot of the page store: a page and its links in the recency list.
struct Slot {
    key: FileKey,
    /// `None` while the slot is free.
    body: Option<Bytes>,
    /// The occupancy: a fresh number at every fill (never reused), 0 while free.
    fill: u64,
    /// Toward the most recently used.
    prev: u32,
    /// Toward the least recently used.
    next: u32,
}

/// The page store: pages in slots linked in recency order (exact LRU), found by file
/// identity through `index` or, from a path entry, by slot and occupancy directly.
struct Pages {
    /// Keys are file identities (four integers): foldhash hashes them in a few
    /// multiplications, where FNV went byte by byte over 40 bytes.
    index: std::collections::HashMap<FileKey, u32, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    bytes: u64,
    last_fill: u64,
}

impl Pages {
    fn new() -> Self {
        Pages {
            index: std::collections::HashMap::with_hasher(Default::default()),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            last_fill: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        match old {
            NIL => self.tail = i,
            h => self.slots[h as usize].prev = i,
        }
        self.head = i;
    }

    /// Marks slot `i` most recently used and returns its page.
    fn touch(&mut self, i: u32) -> Option<Bytes> {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.slots[i as usize].body.clone()
    }

    /// The page of `key`, with where it is.
    fn get(&mut self, key: &FileKey) -> Option<(PageRef, Bytes)> {
        let slot = *self.index.get(key)?;
        let fill = self.slots[slot as usize].fill;
        Some((PageRef { slot, fill }, self.touch(slot)?))
    }

    /// The page `r` found, if its slot still holds it (same occupancy, same file).
    fn follow(&mut self, r: PageRef, key: &FileKey) -> Option<Bytes> {
        let s = self.slots.get(r.slot as usize)?;
        if s.fill != r.fill || s.key != *key || s.body.is_none() {
            return None;
        }
        self.touch(r.slot)
    }

    /// Frees slot `i`.
    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let s = &mut self.slots[i as usize];
        let body = s.body.take();
        s.fill = 0;
        self.index.remove(&s.key);
        self.bytes -= body.map_or(0, |b| b.len() as u64);
        self.free.push(i);
    }

    /// Inserts a page, evicting least recently used pages until the total fits
    /// `capacity` (the caller checked that the page alone does); returns how many
    /// were evicted.
    fn insert(&mut self, key: FileKey, body: Bytes, capacity: u64) -> u64 {
        if let Some(&old) = self.index.get(&key) {
            self.remove(old);
        }
        let len = body.len() as u64;
        let mut evicted = 0;
        while self.bytes + len > capacity && self.tail != NIL {
            self.remove(self.tail);
            evicted += 1;
        }
        self.last_fill += 1;
        let slot = Slot {
            key,
            body: Some(body),
            fill: self.last_fill,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.push_front(i);
        self.index.insert(key, i);
        self.bytes += len;
        evicted
    }
}

/// Everything behind the cache's one lock.
struct Inner {
    paths: PathLru,
    pages: Pages,
    hits: u64,
    misses: u64,
    evictions: u64,
}

/// What [`PageCache::lookup`] found for a URL path.
#[derive(Debug)]
pub enum Lookup {
    /// No fresh translation: the miss path translates the path.
    Miss,
    /// A fresh translation to a file whose page is not cached: the miss path reads it.
    PageMiss(Arc<FileInfo>),
    /// An answer: a translation, with the page if it is a cached file.
    Hit(Target, Option<Bytes>),
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

/// Haboob's cache: the page cache and the path cache behind one lock. See the module
/// docs.
pub struct PageCache {
    inner: Mutex<Inner>,
    capacity: u64,
    path_capacity: u64,
    revalidate: Duration,
}

impl fmt::Debug for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCache")
            .field("stats", &self.stats())
            .field("path_entries", &self.path_len())
            .finish()
    }
}

impl PageCache {
    /// Most path entries that keep a file open (see the module invariants); a server
    /// counts them in the descriptors it keeps free beside its connections.
    pub const OPEN_FILES: usize = 32;

    /// A cache holding at most `capacity_bytes` of file bodies, without a path cache.
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_paths(capacity_bytes, 0, Duration::ZERO)
    }

    /// A cache holding at most `capacity_bytes` of file bodies, and translations
    /// worth at most `path_bytes` (URL, target and bookkeeping counted), each trusted
    /// for `revalidate`.
    pub fn with_paths(capacity_bytes: u64, path_bytes: u64, revalidate: Duration) -> Self {
        PageCache {
            inner: Mutex::new(Inner {
                paths: PathLru {
                    lru: Lru::new(foldhash::fast::RandomState::default()),
                    open_files: 0,
                },
                pages: Pages::new(),
                hits: 0,
                misses: 0,
                evictions: 0,
            }),
            capacity: capacity_bytes,
            path_capacity: path_bytes,
            revalidate,
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

    /// The hit path, under one lock: the translation of `url` if cached and still
    /// fresh at `now` and, for a cached file, its page (marked most recently used,
    /// and counted as a page-cache hit or miss). The path entry keeps where it found
    /// the page, so that the next hit follows it instead of a second map lookup.
    pub fn lookup(&self, url: &[u8], now: Instant) -> Lookup {
        let mut inner = self.inner.lock();
        let Inner {
            paths,
            pages,
            hits,
            misses,
            ..
        } = &mut *inner;
        let Some(e) = paths.lru.map.get_mut(url) else {
            return Lookup::Miss;
        };
        if !self.fresh(e, now) {
            return Lookup::Miss;
        }
        let info = match &e.target {
            Target::File(info) if info.stream.is_none() => info,
            other => return Lookup::Hit(other.clone(), None),
        };
        let page = match e.page.and_then(|r| pages.follow(r, &info.key)) {
            Some(page) => page,
            None => match pages.get(&info.key) {
                Some((r, page)) => {
                    e.page = Some(r);
                    page
                }
                None => {
                    *misses += 1;
                    return Lookup::PageMiss(Arc::clone(info));
                }
            },
        };
        *hits += 1;
        Lookup::Hit(e.target.clone(), Some(page))
    }

    /// `now` may be an earlier turn's clock than the insert's (another loop's): such
    /// an entry is fresh, as `now - checked` saturating at 0 made it, unless nothing
    /// is ever trusted (`revalidate` 0).
    fn fresh(&self, e: &PathEntry, now: Instant) -> bool {
        !self.revalidate.is_zero() && e.fresh_until.is_none_or(|until| now < until)
    }

    /// The translation of `url`, if cached and still fresh at `now` (no page looked
    /// up, nothing counted).
    pub fn translation(&self, url: &[u8], now: Instant) -> Option<Target> {
        let mut inner = self.inner.lock();
        let e = inner.paths.lru.map.get(url)?;
        self.fresh(e, now).then(|| e.target.clone())
    }

    /// Caches a translation checked at `now`, evicting the least recently used
    /// translations to stay within the path cache's byte bound. A translation larger
    /// than the whole path cache is not cached, nor one holding an open file while
    /// [`OPEN_FILES`](Self::OPEN_FILES) entries do.
    pub fn insert_translation(&self, url: &[u8], target: Target, now: Instant) {
        let cost = url.len() as u64 + target.bytes() + ENTRY_OVERHEAD;
        if cost > self.path_capacity {
            return;
        }
        let entry = PathEntry {
            target,
            fresh_until: now.checked_add(self.revalidate),
            cost,
            page: None,
        };
        let opens = entry.holds_file();
        let mut inner = self.inner.lock();
        let PathLru { lru, open_files } = &mut inner.paths;
        if opens
            && *open_files >= Self::OPEN_FILES
            && !lru.map.peek(url).is_some_and(PathEntry::holds_file)
        {
            return;
        }
        lru.insert(url.into(), entry, cost, self.path_capacity, |e| {
            if e.holds_file() {
                *open_files -= 1;
            }
            e.cost
        });
        if opens {
            *open_files += 1;
        }
        debug_assert!(lru.bytes <= self.path_capacity);
        debug_assert!(*open_files <= Self::OPEN_FILES);
    }

    /// The page of `key`, marking it most recently used.
    pub fn get(&self, key: &FileKey) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        let found = inner.pages.get(key).map(|(_, page)| page);
        match &found {
            Some(_) => inner.hits += 1,
            None => inner.misses += 1,
        };
        found
    }

    /// Inserts a page, evicting least recently used pages until it fits. Returns false
    /// (and caches nothing) when the body is larger than the whole cache.
    pub fn insert(&self, key: FileKey, body: Bytes) -> bool {
        if body.len() as u64 > self.capacity {
            return false;
        }
        let mut inner = self.inner.lock();
        let evicted = inner.pages.insert(key, body, self.capacity);
        inner.evictions += evicted;
        debug_assert!(inner.pages.bytes <= self.capacity);
        true
    }

    /// Counters now.
    pub fn stats(&self) -> PageCacheStats {
        let inner = self.inner.lock();
        PageCacheStats {
            capacity_bytes: self.capacity,
            bytes: inner.pages.bytes,
            entries: inner.pages.index.len(),
            hits: inner.hits,
            misses: inner.misses,
            evictions: inner.evictions,
        }
    }

    /// Translations held.
    pub fn path_len(&self) -> usize {
        self.inner.lock().paths.lru.map.len()
    }

    /// Bytes the translations are charged (at most the path capacity).
    pub fn path_bytes(&self) -> u64 {
        self.inner.lock().paths.lru.bytes
    }

    /// The path cache's capacity in bytes.
    pub fn path_capacity(&self) -> u64 {
        self.path_capacity
    }

    /// Translations that keep a file open (at most [`OPEN_FILES`](Self::OPEN_FILES)).
    pub fn open_files(&self) -> usize {
        self.inner.lock().paths.open_files
    }
}

#[cfg(test)]
mod tests;
