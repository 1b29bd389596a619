//! # seda-arashi: the Arashi web mail service (USITS'03 section 4.1)
//!
//! - [`store`]: the [`MailStore`] trait and its SQLite backend (WAL, FTS5).
//! - [`corpus`]: real mail (the SpamAssassin public corpus) and a synthetic corpus.
//! - [`seed`]: the demo accounts (`userK` / `userK-pw`) and folder sizes from 1 to
//!   thousands of messages.
//! - [`DataDir`]: the `--data` directory (database, static files), seeded on first use.
#![forbid(unsafe_code)]

pub mod corpus;
mod data;
pub mod seed;
pub mod store;
mod web;

pub use data::{DataDir, SYNTHETIC_MESSAGES};
pub use seed::{SeedPlan, SeedSummary};
pub use store::{MailStore, SqliteStore, StoreError};
