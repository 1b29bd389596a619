//! The memory a server may use: a cgroup v1 memory controller group, and the file
//! set's pages taken out of the OS page cache between runs.
//!
//! Page cache is charged to the cgroup of the process that first reads a page, so a
//! server in a group with `memory.limit_in_bytes = L` keeps at most `L` bytes of the
//! file set (less its own memory) in RAM and reads the rest from the disk. Pages read
//! before the server joined are charged elsewhere and would be free hits: [`evict`]
//! drops the set's pages before every run.
//!
//! # Invariants
//! - A [`MemoryCgroup`] is removed when dropped (after its processes are gone; the
//!   kernel moves the remaining page-cache charges to the parent).

use crate::ExperimentError;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where cgroup v1's memory controller is mounted.
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// A memory cgroup of our own.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
}

/// Memory figures of a group, bytes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct MemoryUse {
    /// `memory.max_usage_in_bytes`: the peak.
    pub max_usage: u64,
    /// `cache` of `memory.stat`: page cache charged now.
    pub cache: u64,
    /// `rss` of `memory.stat`: anonymous memory now (Haboob's page cache lives here).
    pub rss: u64,
    /// `memory.failcnt`: times the limit was hit (reclaim ran).
    pub failcnt: u64,
}

impl MemoryCgroup {
    /// Whether this process may create memory cgroups (cgroup v1 mounted, root).
    pub fn available() -> bool {
        rustix::process::geteuid().is_root()
            && Path::new(MEMORY_ROOT)
                .join("memory.limit_in_bytes")
                .exists()
    }

    /// Creates `MEMORY_ROOT/name` limited to `limit` bytes.
    pub fn create(name: &str, limit: u64) -> Result<MemoryCgroup, ExperimentError> {
        let path = Path::new(MEMORY_ROOT).join(name);
        if path.exists() {
            // Left by a killed run: empty, so removable.
            let _ = fs::remove_dir(&path);
        }
        fs::create_dir(&path)
            .map_err(|e| ExperimentError::step(format!("cannot create {}", path.display()), e))?;
        let g = MemoryCgroup { path };
        g.write("memory.limit_in_bytes", &limit.to_string())?;
        // No swap here, but say so: the limit covers memory alone.
        let _ = g.write("memory.swappiness", "0");
        Ok(g)
    }

    /// The group's directory (for [`ServerProcess::start_in`]).
    ///
    /// [`ServerProcess::start_in`]: crate::harness::server::ServerProcess::start_in
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The group's memory figures now.
    pub fn usage(&self) -> MemoryUse {
        let num = |f: &str| {
            fs::read_to_string(self.path.join(f))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0)
        };
        let stat = fs::read_to_string(self.path.join("memory.stat")).unwrap_or_default();
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        MemoryUse {
            max_usage: num("memory.max_usage_in_bytes"),
            cache: field("cache"),
            rss: field("rss"),
            failcnt: num("memory.failcnt"),
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<(), ExperimentError> {
        let p = self.path.join(file);
        fs::write(&p, value).map_err(|e| {
            ExperimentError::step(format!("cannot write {value} to {}", p.display()), e)
        })
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The server's processes may take a moment to be reaped.
        let t0 = Instant::now();
        while fs::remove_dir(&self.path).is_err() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Drops the pages of every file under `root` from the OS page cache
/// (`posix_fadvise(DONTNEED)`; the set is written and synced, so none is dirty).
/// Returns the number of files.
pub fn evict(root: &Path) -> Result<usize, ExperimentError> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir)
            .map_err(|e| ExperimentError::step(format!("cannot list {}", dir.display()), e))?;
        for entry in entries.flatten() {
            let p = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => {
                    let f = fs::File::open(&p).map_err(|e| {
                        ExperimentError::step(format!("cannot open {}", p.display()), e)
                    })?;
                    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).map_err(
                        |e| ExperimentError::step(format!("fadvise {}", p.display()), e),
                    )?;
                    n += 1;
                }
                _ => {}
            }
        }
    }
    Ok(n)
}
