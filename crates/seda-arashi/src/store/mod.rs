//! Mail storage: the [`MailStore`] trait the request stages call, its value types, and
//! the SQLite backend ([`SqliteStore`]).
//!
//! # Contract
//! - Every call is blocking and may take milliseconds (disk, locks): call it only from
//!   a stage with a thread pool of its own (Arashi's request stages are such stages;
//!   USITS'03 4.1: "each stage ... accesses e-mail data from a ... database").
//! - Every call that names a message or folder also names the user; a message or
//!   folder of another user is reported as absent ([`StoreError::NotFound`] or `None`),
//!   never returned or changed.
//! - Text handed in is stored as given; text handed out is raw user data (mail is
//!   hostile input): callers escape it for the page.

mod model;
mod password;
mod sqlite;

pub use model::{
    Deleted, FolderId, FolderInfo, FolderRole, ListQuery, MATCH_END, MATCH_START, MailStore,
    Message, MessageId, MessagePage, MessageSummary, NewMessage, SearchField, SearchHit, Session,
    SortKey, StoreError, StoreResult, User, UserId,
};
pub use password::{DEMO_ITERATIONS, hash_password, verify_password};
pub use sqlite::{LOCAL_DOMAIN, SESSION_LIFETIME, SqliteStore};
