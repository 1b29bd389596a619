//! Seeding: the demo accounts and how the corpus is spread over their folders.
//!
//! # Accounts (the scheme `seda load arashi` relies on)
//! Users are `user1` .. `userN`; the password of `userK` is `userK-pw`
//! ([`user_name`], [`password`]). Emulated user `i` (0-based) of a load run logs in as
//! `user{(i mod N) + 1}`.
//!
//! # Folder sizes (USITS'03 4.1: folders "of between 1 and 12794 messages")
//! Inbox sizes are heavy-tailed: the user of rank `r` (1..=N) gets
//! `round(L^(1 - sqrt(x)))` messages with `x = (r-1)/(N-1)`, so the largest Inbox has
//! `L` messages, the smallest one, the median about `L^0.29` (9 for the default
//! `L` = 2,000) and the mean about `2 (L-1) / ln(L)^2` (69). Ranks are dealt to
//! users by a seeded shuffle, so any prefix `user1..userK` (a light load) sees sizes
//! from the whole range. Archive, Sent and Trash start empty. A mailbox is a run of
//! consecutive corpus messages from a random starting point (the corpus is ordered by
//! group, so a mailbox reads like a real one: list traffic, then spam); with more
//! mail than the corpus has, it wraps.

use std::time::Instant;

use crate::store::{FolderRole, MailStore, NewMessage, StoreError, hash_password};

/// Login name of user `k` (1-based).
pub fn user_name(k: u32) -> String {
    format!("user{k}")
}

/// Password of the user named `name`.
pub fn password(name: &str) -> String {
    format!("{name}-pw")
}

/// Metadata key: where the seeded mail came from (`spamassassin` or `synthetic`).
pub const META_CORPUS: &str = "corpus";
/// Metadata key: number of seeded users.
pub const META_USERS: &str = "users";

/// How to seed. `#[non_exhaustive]`: build it from [`SeedPlan::default`] and the
/// `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeedPlan {
    /// Number of users `N` (>= 1).
    pub users: u32,
    /// Largest Inbox `L` (>= 1).
    pub largest_folder: u32,
    /// PBKDF2 iterations of the password hashes.
    pub hash_iterations: u32,
    /// Seed of the shuffles.
    pub seed: u64,
}

crate::setters::setters!(SeedPlan {
    with_users: users: u32,
    with_largest_folder: largest_folder: u32,
    with_hash_iterations: hash_iterations: u32,
    with_seed: seed: u64,
});

impl Default for SeedPlan {
    /// 1,024 users (the paper's largest load), largest Inbox 2,000 messages (about
    /// 70,000 messages in all).
    fn default() -> Self {
        SeedPlan {
            users: 1024,
            largest_folder: 2000,
            hash_iterations: crate::store::DEMO_ITERATIONS,
            seed: 1,
        }
    }
}

/// Inbox size of each user (index 0 is `user1`); see the module docs.
pub fn inbox_sizes(plan: &SeedPlan) -> Vec<u32> {
    let n = plan.users.max(1);
    let l = f64::from(plan.largest_folder.max(1));
    let mut sizes: Vec<u32> = (0..n)
        .map(|i| {
            let x = if n > 1 {
                f64::from(i) / f64::from(n - 1)
            } else {
                0.0
            };
            l.powf(1.0 - x.sqrt()).round().max(1.0) as u32
        })
        .collect();
    fastrand::Rng::with_seed(plan.seed).shuffle(&mut sizes);
    sizes
}

/// What seeding did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeedSummary {
    /// Users created.
    pub users: u32,
    /// Messages stored.
    pub messages: u64,
    /// Smallest and largest Inbox.
    pub inbox_range: (u32, u32),
    /// Seconds it took.
    pub seconds: u64,
}

/// Creates the plan's users and fills their folders from `corpus` (named `source`
/// in the store's metadata). The store must have no users yet.
pub fn seed(
    store: &dyn MailStore,
    corpus: &[NewMessage],
    source: &str,
    plan: &SeedPlan,
    log: &mut dyn FnMut(&str),
) -> Result<SeedSummary, StoreError> {
    if corpus.is_empty() {
        return Err(StoreError::Invalid("the corpus is empty".into()));
    }
    if store.user_count()? > 0 {
        return Err(StoreError::Invalid(
            "the store has users already; seed an empty one".into(),
        ));
    }
    let t0 = Instant::now();
    let sizes = inbox_sizes(plan);
    let mut rng = fastrand::Rng::with_seed(plan.seed ^ 0x5eed);
    let mut batch = Vec::with_capacity(4096);
    let mut messages = 0u64;
    for (i, &inbox) in sizes.iter().enumerate() {
        let name = user_name(i as u32 + 1);
        let user = store.add_user(
            &name,
            &hash_password(&password(&name), plan.hash_iterations),
        )?;
        let start = rng.usize(..corpus.len());
        for k in 0..inbox as usize {
            let m = corpus[(start + k) % corpus.len()].clone();
            batch.push((user.id, FolderRole::Inbox, m));
        }
        if batch.len() >= 4000 {
            messages += batch.len() as u64;
            store.deliver_batch(&batch)?;
            batch.clear();
            log(&format!(
                "seeded {} of {} users, {messages} messages",
                i + 1,
                sizes.len()
            ));
        }
    }
    messages += batch.len() as u64;
    store.deliver_batch(&batch)?;
    store.set_meta(META_CORPUS, source)?;
    store.set_meta(META_USERS, &sizes.len().to_string())?;
    Ok(SeedSummary {
        users: sizes.len() as u32,
        messages,
        inbox_range: (
            sizes.iter().copied().min().unwrap_or(0),
            sizes.iter().copied().max().unwrap_or(0),
        ),
        seconds: t0.elapsed().as_secs(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_sizes_span_one_to_the_largest() {
        let plan = SeedPlan::default();
        let sizes = inbox_sizes(&plan);
        assert_eq!(sizes.len(), 1024);
        assert_eq!(*sizes.iter().max().unwrap(), 2000);
        assert_eq!(*sizes.iter().min().unwrap(), 1);
        let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
        assert!((60_000..80_000).contains(&total), "{total}");
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        assert!((6..=14).contains(&sorted[512]), "median {}", sorted[512]);
        // A light load (the first 16 users) still sees small and large folders.
        let first: Vec<u32> = sizes[..16].to_vec();
        assert!(
            first.iter().any(|&s| s <= 5) && first.iter().any(|&s| s >= 50),
            "{first:?}"
        );
        assert_eq!(inbox_sizes(&SeedPlan { users: 1, ..plan }), [2000]);
    }

    #[test]
    fn names_and_passwords_follow_the_scheme() {
        assert_eq!(user_name(7), "user7");
        assert_eq!(password("user7"), "user7-pw");
    }
}
