//! SPECweb99-style file sets: directories of 36 files in four size classes.
//!
//! Layout: `DIR/dir00000/class{c}_{i}` for class c in 0..4 and file i in 0..9, of size
//! `(i + 1) * unit(c)` with units 102.4 B, 1 KiB, 10 KiB and 100 KiB (so 102 B to
//! 900 KiB, 4.88 MiB per directory), plus `DIR/manifest.json`. File contents are
//! pseudo-random bytes from the seed, so a seed always yields the same bytes.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dist::{FILES_PER_CLASS, FilePick, SpecWebPopularity};
use crate::error::LoadError;

/// Name of the manifest inside a file-set directory.
pub const MANIFEST: &str = "manifest.json";

/// Size in bytes of file `index` (0..9) of `class` (0..4).
pub fn file_size(class: usize, index: usize) -> u64 {
    let k = (index + 1) as u64;
    match class {
        0 => (k * 1024 + 5) / 10, // 102.4 B steps, rounded: 102 .. 922
        1 => k * 1024,
        2 => k * 10 * 1024,
        _ => k * 100 * 1024,
    }
}

/// Bytes in one directory (36 files).
pub fn dir_bytes() -> u64 {
    (0..4)
        .flat_map(|c| (0..FILES_PER_CLASS).map(move |i| file_size(c, i)))
        .sum()
}

/// URL path (relative to the server root) of a picked file.
pub fn file_path(pick: FilePick) -> String {
    format!("/dir{:05}/class{}_{}", pick.dir, pick.class, pick.file)
}

/// The manifest written beside a file set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// Format marker.
    pub format: String,
    /// Seed of the contents.
    pub seed: u64,
    /// Requested size in MiB.
    pub size_mb: u64,
    /// Number of directories.
    pub dirs: usize,
    /// Number of files.
    pub files: usize,
    /// Total bytes of all files.
    pub total_bytes: u64,
    /// File sizes per class: `class_sizes[c][i]` bytes.
    pub class_sizes: Vec<Vec<u64>>,
}

impl Manifest {
    /// Read `DIR/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, LoadError> {
        let p = dir.join(MANIFEST);
        let text = fs::read_to_string(&p)
            .map_err(LoadError::io(format!("cannot read {}", p.display())))?;
        serde_json::from_str(&text)
            .map_err(LoadError::json(format!("bad manifest {}", p.display())))
    }

    /// The popularity model over this set's directories.
    pub fn popularity(&self) -> Result<SpecWebPopularity, LoadError> {
        SpecWebPopularity::new(self.dirs)
            .ok_or_else(|| LoadError::config("the file set has no directories"))
    }
}

/// Number of directories for a set of `size_mb` MiB (at least one).
pub fn dirs_for(size_mb: u64) -> usize {
    let want = size_mb.saturating_mul(1 << 20);
    (want.div_ceil(dir_bytes()).max(1)) as usize
}

/// Write a file set of about `size_mb` MiB under `dir` (created if missing) and
/// return its manifest. Existing files of the same name are overwritten. Directories
/// get mode 0755 and files 0644, so that servers running as another user can read them.
pub fn generate(dir: &Path, size_mb: u64, seed: u64) -> Result<Manifest, LoadError> {
    if size_mb == 0 {
        return Err(LoadError::config("--size-mb must be at least 1"));
    }
    let dirs = dirs_for(size_mb);
    mkdir(dir)?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut buf = vec![0u8; 64 * 1024];
    for d in 0..dirs {
        let sub: PathBuf = dir.join(format!("dir{d:05}"));
        mkdir(&sub)?;
        for class in 0..4 {
            for i in 0..FILES_PER_CLASS {
                let path = sub.join(format!("class{class}_{i}"));
                write_file(&path, file_size(class, i), &mut rng, &mut buf)?;
            }
        }
    }
    let manifest = Manifest {
        format: "seda-fileset-specweb99/1".into(),
        seed,
        size_mb,
        dirs,
        files: dirs * 4 * FILES_PER_CLASS,
        total_bytes: dirs as u64 * dir_bytes(),
        class_sizes: (0..4)
            .map(|c| (0..FILES_PER_CLASS).map(|i| file_size(c, i)).collect())
            .collect(),
    };
    let text = serde_json::to_string_pretty(&manifest).map_err(LoadError::json("manifest"))?;
    fs::write(dir.join(MANIFEST), text).map_err(LoadError::io("cannot write manifest"))?;
    Ok(manifest)
}

fn mkdir(dir: &Path) -> Result<(), LoadError> {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(dir).map_err(LoadError::io(format!("cannot create {}", dir.display())))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .map_err(LoadError::io(format!("cannot chmod {}", dir.display())))
}

fn write_file(
    path: &Path,
    size: u64,
    rng: &mut fastrand::Rng,
    buf: &mut [u8],
) -> Result<(), LoadError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |e: std::io::Error| LoadError::io(format!("cannot write {}", path.display()))(e);
    let f = fs::File::create(path).map_err(err)?;
    f.set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(err)?;
    let mut w = BufWriter::new(f);
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        w.write_all(&buf[..n]).map_err(err)?;
        left -= n as u64;
    }
    w.flush().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_span_102_bytes_to_900_kib() {
        assert_eq!(file_size(0, 0), 102);
        assert_eq!(file_size(0, 8), 922);
        assert_eq!(file_size(1, 0), 1024);
        assert_eq!(file_size(3, 8), 921_600);
        // 4.88 MiB per directory, as SPECweb99 says ("roughly 5 MB").
        assert_eq!(dir_bytes(), 5_119_488);
        assert_eq!(dirs_for(1), 1);
        assert_eq!(dirs_for(100), 21);
    }

    #[test]
    fn same_seed_same_bytes_and_manifest_round_trips() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let ma = generate(a.path(), 1, 42).unwrap();
        let mb = generate(b.path(), 1, 42).unwrap();
        assert_eq!(ma, mb);
        assert_eq!(ma.files, 36);
        let fa = fs::read(a.path().join("dir00000/class2_3")).unwrap();
        let fb = fs::read(b.path().join("dir00000/class2_3")).unwrap();
        assert_eq!(fa.len(), 40 * 1024);
        assert_eq!(fa, fb);
        let on_disk: u64 = (0..4)
            .flat_map(|c| (0..9).map(move |i| (c, i)))
            .map(|(c, i)| {
                fs::metadata(a.path().join(format!("dir00000/class{c}_{i}")))
                    .unwrap()
                    .len()
            })
            .sum();
        assert_eq!(on_disk, ma.total_bytes);
        assert_eq!(Manifest::load(a.path()).unwrap(), ma);

        let c = tempfile::tempdir().unwrap();
        generate(c.path(), 1, 43).unwrap();
        assert_ne!(fs::read(c.path().join("dir00000/class2_3")).unwrap(), fa);
    }

    #[test]
    fn zero_size_is_an_error() {
        let a = tempfile::tempdir().unwrap();
        assert!(generate(a.path(), 0, 1).is_err());
    }
}
