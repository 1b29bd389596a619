//! The `--data DIR` directory: the database `arashi.db` (with SQLite's `-wal` and
//! `-shm` files beside it) and `www/`, the static files (logo, stylesheet) that the
//! service writes at every start.
//!
//! A database is seeded into `arashi.db.partial` and renamed into place only when
//! complete, so an interrupted seed or import never leaves a half-filled service.

use std::path::{Path, PathBuf};

use crate::corpus::{load_spamassassin, synthetic};
use crate::error::ArashiError;
use crate::seed::{SeedPlan, SeedSummary, seed};
use crate::store::{MailStore, SqliteStore};

/// Messages of the synthetic corpus used when no real corpus was imported.
pub const SYNTHETIC_MESSAGES: usize = 6000;

/// A data directory.
#[derive(Clone, Debug)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The directory at `root` (created when first seeded).
    pub fn new(root: &Path) -> DataDir {
        DataDir {
            root: root.to_owned(),
        }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The database file.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("arashi.db")
    }

    /// The static files' directory.
    pub fn www(&self) -> PathBuf {
        self.root.join("www")
    }

    /// Whether a seeded database is there.
    pub fn is_seeded(&self) -> bool {
        self.db_path().is_file()
    }

    /// Opens the database, seeding it first with the synthetic corpus if there is
    /// none. The summary is `Some` when it seeded.
    pub fn open_or_seed(
        &self,
        plan: &SeedPlan,
        log: &mut dyn FnMut(&str),
    ) -> Result<(SqliteStore, Option<SeedSummary>), ArashiError> {
        let summary = if self.is_seeded() {
            None
        } else {
            log(&format!(
                "{}: no database yet; seeding {} users with the synthetic corpus ({} messages; `seda arashi import` loads real mail instead)",
                self.root.display(),
                plan.users,
                SYNTHETIC_MESSAGES
            ));
            let corpus = synthetic(SYNTHETIC_MESSAGES, plan.seed);
            Some(self.seed_with(&corpus, "synthetic", plan, log)?)
        };
        let store = SqliteStore::open(&self.db_path())?;
        Ok((store, summary))
    }

    /// Seeds a new database from the SpamAssassin corpus at `corpus` (the `.tgz` from
    /// `npm pack`, or its unpacked directory). Refuses to touch an existing database
    /// unless `replace`.
    pub fn import(
        &self,
        corpus: &Path,
        plan: &SeedPlan,
        replace: bool,
        log: &mut dyn FnMut(&str),
    ) -> Result<SeedSummary, ArashiError> {
        if self.is_seeded() && !replace {
            return Err(ArashiError::Exists(self.db_path()));
        }
        log(&format!("reading {}", corpus.display()));
        let mail = load_spamassassin(corpus)?;
        log(&format!("parsed {} messages", mail.len()));
        self.seed_with(&mail, "spamassassin", plan, log)
    }

    fn seed_with(
        &self,
        corpus: &[crate::store::NewMessage],
        source: &str,
        plan: &SeedPlan,
        log: &mut dyn FnMut(&str),
    ) -> Result<SeedSummary, ArashiError> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| ArashiError::io(format!("cannot create {}", self.root.display()), e))?;
        let partial = self.root.join("arashi.db.partial");
        remove_db(&partial);
        let summary = {
            let store = SqliteStore::open(&partial)?;
            let s = seed(&store, corpus, source, plan, log)?;
            store.checkpoint()?;
            s
        };
        remove_db(&self.db_path());
        std::fs::rename(&partial, self.db_path())
            .map_err(|e| ArashiError::io("cannot move the new database into place", e))?;
        remove_db(&partial);
        Ok(summary)
    }

    /// The store's description for the start-up line: users and corpus.
    pub fn describe(store: &SqliteStore) -> String {
        let users = store.user_count().unwrap_or(0);
        let corpus = store
            .meta(crate::seed::META_CORPUS)
            .ok()
            .flatten()
            .unwrap_or_else(|| "unknown".into());
        format!("{users} users, {corpus} corpus")
    }
}

/// Removes a database file and its WAL companions (missing files are fine).
fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_an_empty_dir_once_and_import_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(&dir.path().join("d"));
        let plan = SeedPlan {
            users: 5,
            largest_folder: 40,
            hash_iterations: 1,
            seed: 2,
        };
        let (store, seeded) = data.open_or_seed(&plan, &mut |_| {}).unwrap();
        let s = seeded.unwrap();
        assert_eq!((s.users, s.inbox_range), (5, (1, 40)));
        assert_eq!(DataDir::describe(&store), "5 users, synthetic corpus");
        assert!(store.authenticate("user3", "user3-pw").unwrap().is_some());
        drop(store);
        let (_, again) = data.open_or_seed(&plan, &mut |_| {}).unwrap();
        assert!(again.is_none(), "an existing database is kept");
        let e = data
            .import(dir.path(), &plan, false, &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(&e, ArashiError::Exists(p) if *p == data.db_path()),
            "{e:?}"
        );
        assert!(e.to_string().contains("--replace"), "{e}");
        assert!(!dir.path().join("d/arashi.db.partial").exists());
    }
}
