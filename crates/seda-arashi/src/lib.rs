//! # seda-arashi: the Arashi web mail service (USITS'03 section 4.1)
//!
//! A web mail application on Haboob's dynamic handlers (SEDA's HDAPI): log in, list
//! folders, list a folder sorted by date, sender or subject and paged, show, delete,
//! move, search (SQLite FTS5), compose and send to another local user, log out.
//! Pages are rendered on the server with a small stylesheet; sessions live in an
//! `HttpOnly; SameSite=Lax` cookie; every state-changing form carries a CSRF token;
//! all mail is escaped and the pages' Content-Security-Policy forbids scripts.
//!
//! - [`Arashi`] / [`ArashiConfig`]: the service, one stage per [`RequestType`]
//!   (USITS'03 Fig. 1), each with its own admission controller, pool and p90 target.
//! - [`store`]: the [`MailStore`] trait and its SQLite backend (WAL, FTS5).
//! - [`corpus`]: real mail (the SpamAssassin public corpus) and a synthetic corpus.
//! - [`seed`]: the demo accounts (`userK` / `userK-pw`) and folder sizes from 1 to
//!   thousands of messages.
//! - [`DataDir`]: the `--data` directory (database, static files), seeded on first use.
//!
//! The emulated mail readers that load it (`seda load arashi`) are in `seda-load`;
//! `seda experiment arashi` is in `seda-experiments`.
#![forbid(unsafe_code)]

pub mod corpus;
mod data;
mod error;
pub mod seed;
mod service;
mod setters;
mod stages;
pub mod store;
mod web;

pub use data::{DataDir, SYNTHETIC_MESSAGES};
pub use error::{ArashiError, CorpusError, UnknownScope};
pub use seed::{SeedPlan, SeedSummary};
pub use service::{Arashi, ArashiConfig, ControlScope, controller_config};
pub use stages::RequestType;
pub use store::{MailStore, SqliteStore, StoreError};
pub use web::SESSION_COOKIE;
