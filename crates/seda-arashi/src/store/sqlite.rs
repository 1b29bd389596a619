//! The SQLite backend: one database file in WAL mode (readers never wait for the
//! writer), an FTS5 index over sender, subject and body kept in step by triggers,
//! and a pool of connections (one per concurrently calling thread; SQLite
//! connections are not shared between threads).
//!
//! # Invariants
//! - Every message row has `user_id` equal to its folder's `user_id`; every query
//!   that takes a message or folder id from a request also filters by `user_id`.
//! - `messages_fts` holds exactly the rows of `messages` (external content table,
//!   insert/delete/update triggers). Its `user_id` column makes the owner a term of
//!   the index, so a search intersects the user's short posting list with the
//!   words' lists and ranks only the user's matches (not every user's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

use super::model::{
    Deleted, FolderId, FolderInfo, FolderRole, ListQuery, MATCH_END, MATCH_START, MailStore,
    Message, MessageId, MessagePage, MessageSummary, NewMessage, SearchField, SearchHit, Session,
    SortKey, StoreError, StoreResult, User, UserId,
};
use super::password::{hex, random_bytes, verify_password};

/// Sessions end this long after login.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Domain of local addresses (`user1@arashi.local`).
pub const LOCAL_DOMAIN: &str = "arashi.local";

/// Most words a search uses.
const MAX_SEARCH_WORDS: usize = 8;

/// Connections kept open when idle.
const MAX_IDLE: usize = 64;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS users (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    password TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS folders (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    position INTEGER NOT NULL,
    UNIQUE (user_id, name)
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    folder_id INTEGER NOT NULL REFERENCES folders(id),
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    subject TEXT NOT NULL,
    date INTEGER NOT NULL,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    seen INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_by_folder_date ON messages (folder_id, date);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5 (
    sender, subject, body, user_id, content = 'messages', content_rowid = 'id'
);
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, sender, subject, body, user_id)
    VALUES (new.id, new.sender, new.subject, new.body, new.user_id);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, sender, subject, body, user_id)
    VALUES ('delete', old.id, old.sender, old.subject, old.body, old.user_id);
END;
CREATE TRIGGER IF NOT EXISTS messages_au AFTER UPDATE OF sender, subject, body ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, sender, subject, body, user_id)
    VALUES ('delete', old.id, old.sender, old.subject, old.body, old.user_id);
    INSERT INTO messages_fts (rowid, sender, subject, body, user_id)
    VALUES (new.id, new.sender, new.subject, new.body, new.user_id);
END;
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    csrf TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The SQLite mail store. See the module docs.
pub struct SqliteStore {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn role_name(role: FolderRole) -> &'static str {
    match role {
        FolderRole::Inbox => "inbox",
        FolderRole::Archive => "archive",
        FolderRole::Sent => "sent",
        FolderRole::Trash => "trash",
    }
}

/// A connection borrowed from the pool, returned on drop.
struct Pooled<'a> {
    store: &'a SqliteStore,
    conn: Option<Connection>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("present until drop")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let mut idle = self.store.idle.lock();
            if idle.len() < MAX_IDLE {
                idle.push(c);
            }
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, in WAL mode, with the
    /// schema in place.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        let store = SqliteStore {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
        };
        let c = store.conn()?;
        let mode: String = c
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(backend)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Backend(format!(
                "{}: journal mode {mode}, WAL refused",
                path.display()
            )));
        }
        c.execute_batch(SCHEMA).map_err(backend)?;
        drop(c);
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the WAL into the database file (after seeding, before a copy).
    pub fn checkpoint(&self) -> StoreResult<()> {
        self.conn()?
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .map_err(backend)
    }

    fn conn(&self) -> StoreResult<Pooled<'_>> {
        if let Some(c) = self.idle.lock().pop() {
            return Ok(Pooled {
                store: self,
                conn: Some(c),
            });
        }
        let c = Connection::open(&self.path).map_err(backend)?;
        c.busy_timeout(Duration::from_secs(10)).map_err(backend)?;
        c.execute_batch(
            "PRAGMA foreign_keys = ON;
             PRAGMA synchronous = NORMAL;
             PRAGMA cache_size = -4000;
             PRAGMA mmap_size = 268435456;
             PRAGMA temp_store = MEMORY;",
        )
        .map_err(backend)?;
        c.set_prepared_statement_cache_capacity(32);
        Ok(Pooled {
            store: self,
            conn: Some(c),
        })
    }

    fn folder_info(c: &Connection, user: UserId, folder: FolderId) -> StoreResult<FolderInfo> {
        let name: String = c
            .prepare_cached("SELECT name FROM folders WHERE id = ?1 AND user_id = ?2")
            .and_then(|mut s| s.query_row(params![folder, user], |r| r.get(0)).optional())
            .map_err(backend)?
            .ok_or(StoreError::NotFound("folder"))?;
        let (messages, unseen): (i64, i64) = c
            .prepare_cached(
                "SELECT count(*), coalesce(sum(seen = 0), 0) FROM messages WHERE folder_id = ?1",
            )
            .and_then(|mut s| s.query_row([folder], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(backend)?;
        Ok(FolderInfo {
            id: folder,
            name,
            messages: messages as u64,
            unseen: unseen as u64,
        })
    }

    fn role_folder(c: &Connection, user: UserId, role: FolderRole) -> StoreResult<FolderId> {
        c.prepare_cached("SELECT id FROM folders WHERE user_id = ?1 AND role = ?2")
            .and_then(|mut s| {
                s.query_row(params![user, role_name(role)], |r| r.get(0))
                    .optional()
            })
            .map_err(backend)?
            .ok_or(StoreError::NotFound("folder"))
    }

    fn user_by_name(c: &Connection, name: &str) -> StoreResult<Option<(User, String)>> {
        c.prepare_cached("SELECT id, name, password FROM users WHERE name = ?1")
            .and_then(|mut s| {
                s.query_row([name], |r| {
                    Ok((
                        User {
                            id: r.get(0)?,
                            name: r.get(1)?,
                        },
                        r.get(2)?,
                    ))
                })
                .optional()
            })
            .map_err(backend)
    }
}

/// The FTS5 query for `words`: each word a quoted string (so no FTS5 syntax gets
/// through), all required, optionally limited to one column.
fn fts_query(user: UserId, words: &str, field: SearchField) -> StoreResult<String> {
    let terms: Vec<String> = words
        .split(|c: char| !c.is_alphanumeric() && c != '@' && c != '.' && c != '-' && c != '_')
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .take(MAX_SEARCH_WORDS)
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    if terms.is_empty() {
        return Err(StoreError::Invalid(
            "type a word to search for (letters or digits)".into(),
        ));
    }
    let all = terms.join(" ");
    let words = match field {
        SearchField::All => format!("{{sender subject body}} : ({all})"),
        SearchField::Sender => format!("sender : ({all})"),
        SearchField::Subject => format!("subject : ({all})"),
        SearchField::Body => format!("body : ({all})"),
    };
    Ok(format!("user_id : \"{user}\" AND {words}"))
}

fn summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageSummary> {
    Ok(MessageSummary {
        id: r.get(0)?,
        sender: r.get(1)?,
        subject: r.get(2)?,
        date: r.get(3)?,
        seen: r.get::<_, i64>(4)? != 0,
        size: r.get::<_, i64>(5)? as u64,
    })
}

impl MailStore for SqliteStore {
    fn authenticate(&self, name: &str, password: &str) -> StoreResult<Option<User>> {
        let c = self.conn()?;
        let found = Self::user_by_name(&c, name)?;
        Ok(found.and_then(|(user, hash)| verify_password(password, &hash).then_some(user)))
    }

    fn create_session(&self, user: &User) -> StoreResult<Session> {
        let id = hex(&random_bytes::<16>());
        let csrf = hex(&random_bytes::<16>());
        let now = now_secs();
        let c = self.conn()?;
        c.prepare_cached("DELETE FROM sessions WHERE created < ?1")
            .and_then(|mut s| s.execute([now - SESSION_LIFETIME.as_secs() as i64]))
            .map_err(backend)?;
        c.prepare_cached(
            "INSERT INTO sessions (id, user_id, csrf, created) VALUES (?1, ?2, ?3, ?4)",
        )
        .and_then(|mut s| s.execute(params![id, user.id, csrf, now]))
        .map_err(backend)?;
        Ok(Session {
            id,
            user: user.clone(),
            csrf,
        })
    }

    fn session(&self, id: &str) -> StoreResult<Option<Session>> {
        let cutoff = now_secs() - SESSION_LIFETIME.as_secs() as i64;
        self.conn()?
            .prepare_cached(
                "SELECT s.id, u.id, u.name, s.csrf FROM sessions s JOIN users u ON u.id = s.user_id
                 WHERE s.id = ?1 AND s.created >= ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![id, cutoff], |r| {
                    Ok(Session {
                        id: r.get(0)?,
                        user: User {
                            id: r.get(1)?,
                            name: r.get(2)?,
                        },
                        csrf: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(backend)
    }

    fn end_session(&self, id: &str) -> StoreResult<()> {
        self.conn()?
            .prepare_cached("DELETE FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map(|_| ())
            .map_err(backend)
    }

    fn folders(&self, user: UserId) -> StoreResult<Vec<FolderInfo>> {
        self.conn()?
            .prepare_cached(
                "SELECT f.id, f.name, count(m.id), coalesce(sum(m.seen = 0), 0)
                 FROM folders f LEFT JOIN messages m ON m.folder_id = f.id
                 WHERE f.user_id = ?1 GROUP BY f.id ORDER BY f.position, f.name",
            )
            .and_then(|mut s| {
                s.query_map([user], |r| {
                    Ok(FolderInfo {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        messages: r.get::<_, i64>(2)? as u64,
                        unseen: r.get::<_, i64>(3)? as u64,
                    })
                })?
                .collect()
            })
            .map_err(backend)
    }

    fn folder_names(&self, user: UserId) -> StoreResult<Vec<(FolderId, String)>> {
        self.conn()?
            .prepare_cached(
                "SELECT id, name FROM folders WHERE user_id = ?1 ORDER BY position, name",
            )
            .and_then(|mut s| {
                s.query_map([user], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(backend)
    }

    fn folder_of_role(&self, user: UserId, role: FolderRole) -> StoreResult<FolderId> {
        let c = self.conn()?;
        Self::role_folder(&c, user, role)
    }

    fn list(&self, user: UserId, folder: FolderId, q: &ListQuery) -> StoreResult<MessagePage> {
        let c = self.conn()?;
        let info = Self::folder_info(&c, user, folder)?;
        let per_page = q.per_page.clamp(1, 200);
        let pages = (info.messages.div_ceil(u64::from(per_page))).max(1) as u32;
        let page = q.page.clamp(1, pages);
        let dir = if q.ascending { "ASC" } else { "DESC" };
        let order = match q.sort {
            SortKey::Date => format!("date {dir}, id {dir}"),
            SortKey::Sender => format!("sender COLLATE NOCASE {dir}, date DESC, id DESC"),
            SortKey::Subject => format!("subject COLLATE NOCASE {dir}, date DESC, id DESC"),
        };
        let sql = format!(
            "SELECT id, sender, subject, date, seen, size FROM messages
             WHERE folder_id = ?1 ORDER BY {order} LIMIT ?2 OFFSET ?3"
        );
        let offset = i64::from(page - 1) * i64::from(per_page);
        let messages = c
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_map(params![folder, per_page, offset], summary)?
                    .collect()
            })
            .map_err(backend)?;
        Ok(MessagePage {
            folder: info,
            messages,
            page,
            pages,
        })
    }

    fn message(&self, user: UserId, id: MessageId) -> StoreResult<Message> {
        let c = self.conn()?;
        let (msg, seen) = c
            .prepare_cached(
                "SELECT m.id, m.folder_id, f.name, m.sender, m.recipients, m.subject, m.date,
                        m.body, m.seen
                 FROM messages m JOIN folders f ON f.id = m.folder_id
                 WHERE m.id = ?1 AND m.user_id = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![id, user], |r| {
                    Ok((
                        Message {
                            id: r.get(0)?,
                            folder: r.get(1)?,
                            folder_name: r.get(2)?,
                            sender: r.get(3)?,
                            recipients: r.get(4)?,
                            subject: r.get(5)?,
                            date: r.get(6)?,
                            body: r.get(7)?,
                        },
                        r.get::<_, i64>(8)? != 0,
                    ))
                })
                .optional()
            })
            .map_err(backend)?
            .ok_or(StoreError::NotFound("message"))?;
        if !seen {
            c.prepare_cached("UPDATE messages SET seen = 1 WHERE id = ?1")
                .and_then(|mut s| s.execute([id]))
                .map_err(backend)?;
        }
        Ok(msg)
    }

    fn delete(&self, user: UserId, id: MessageId) -> StoreResult<Deleted> {
        let mut c = self.conn()?;
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(backend)?;
        let folder: FolderId = tx
            .prepare_cached("SELECT folder_id FROM messages WHERE id = ?1 AND user_id = ?2")
            .and_then(|mut s| s.query_row(params![id, user], |r| r.get(0)).optional())
            .map_err(backend)?
            .ok_or(StoreError::NotFound("message"))?;
        let trash = Self::role_folder(&tx, user, FolderRole::Trash)?;
        let done = if folder == trash {
            tx.prepare_cached("DELETE FROM messages WHERE id = ?1")
                .and_then(|mut s| s.execute([id]))
                .map_err(backend)?;
            Deleted::Removed
        } else {
            tx.prepare_cached("UPDATE messages SET folder_id = ?1 WHERE id = ?2")
                .and_then(|mut s| s.execute(params![trash, id]))
                .map_err(backend)?;
            Deleted::ToTrash
        };
        tx.commit().map_err(backend)?;
        Ok(done)
    }

    fn move_to(&self, user: UserId, id: MessageId, folder: FolderId) -> StoreResult<()> {
        let mut c = self.conn()?;
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(backend)?;
        let owns: Option<i64> = tx
            .prepare_cached("SELECT id FROM folders WHERE id = ?1 AND user_id = ?2")
            .and_then(|mut s| s.query_row(params![folder, user], |r| r.get(0)).optional())
            .map_err(backend)?;
        if owns.is_none() {
            return Err(StoreError::NotFound("folder"));
        }
        let n = tx
            .prepare_cached("UPDATE messages SET folder_id = ?1 WHERE id = ?2 AND user_id = ?3")
            .and_then(|mut s| s.execute(params![folder, id, user]))
            .map_err(backend)?;
        if n == 0 {
            return Err(StoreError::NotFound("message"));
        }
        tx.commit().map_err(backend)
    }

    fn search(
        &self,
        user: UserId,
        words: &str,
        field: SearchField,
        limit: u32,
    ) -> StoreResult<Vec<SearchHit>> {
        let query = fts_query(user, words, field)?;
        // The snippet comes from the field searched; for all fields, from the body.
        let column = match field {
            SearchField::Sender => 0,
            SearchField::Subject => 1,
            SearchField::All | SearchField::Body => 2,
        };
        let snippet = format!(
            "snippet(messages_fts, {column}, char({}), char({}), '…', 12)",
            MATCH_START as u32, MATCH_END as u32
        );
        let sql = format!(
            "SELECT m.id, m.sender, m.subject, m.date, m.seen, m.size, f.name, {snippet}
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                  JOIN folders f ON f.id = m.folder_id
             WHERE messages_fts MATCH ?1 AND m.user_id = ?2
             ORDER BY rank LIMIT ?3"
        );
        self.conn()?
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_map(params![query, user, limit.clamp(1, 500)], |r| {
                    Ok(SearchHit {
                        summary: summary(r)?,
                        folder_name: r.get(6)?,
                        snippet: r.get(7)?,
                    })
                })?
                .collect()
            })
            .map_err(backend)
    }

    fn send(&self, from: &User, to: &str, subject: &str, body: &str) -> StoreResult<User> {
        let name = to
            .trim()
            .strip_suffix(&format!("@{LOCAL_DOMAIN}"))
            .unwrap_or(to.trim());
        let mut c = self.conn()?;
        let (rcpt, _) = Self::user_by_name(&c, name)?.ok_or_else(|| {
            StoreError::Invalid(format!(
                "no local user `{name}` (write a user name, e.g. user2, or user2@{LOCAL_DOMAIN})"
            ))
        })?;
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(backend)?;
        let inbox = Self::role_folder(&tx, rcpt.id, FolderRole::Inbox)?;
        let sent = Self::role_folder(&tx, from.id, FolderRole::Sent)?;
        let sender = format!("{0} <{0}@{LOCAL_DOMAIN}>", from.name);
        let recipients = format!("{0} <{0}@{LOCAL_DOMAIN}>", rcpt.name);
        let now = now_secs();
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO messages (user_id, folder_id, sender, recipients, subject, date, body, size, seen)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(backend)?;
            let size = body.len() as i64;
            ins.execute(params![
                rcpt.id, inbox, sender, recipients, subject, now, body, size, 0
            ])
            .map_err(backend)?;
            ins.execute(params![
                from.id, sent, sender, recipients, subject, now, body, size, 1
            ])
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(rcpt)
    }

    fn add_user(&self, name: &str, password_hash: &str) -> StoreResult<User> {
        let mut c = self.conn()?;
        let tx = c.transaction().map_err(backend)?;
        tx.execute(
            "INSERT INTO users (name, password) VALUES (?1, ?2)",
            params![name, password_hash],
        )
        .map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                StoreError::Invalid(format!("user `{name}` exists already"))
            }
            e => backend(e),
        })?;
        let id = tx.last_insert_rowid();
        for (pos, role) in FolderRole::ALL.into_iter().enumerate() {
            tx.execute(
                "INSERT INTO folders (user_id, name, role, position) VALUES (?1, ?2, ?3, ?4)",
                params![id, role.name(), role_name(role), pos as i64],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(User {
            id,
            name: name.to_owned(),
        })
    }

    fn deliver_batch(&self, batch: &[(UserId, FolderRole, NewMessage)]) -> StoreResult<()> {
        let mut c = self.conn()?;
        let tx = c.transaction().map_err(backend)?;
        let mut folders: HashMap<(UserId, FolderRole), FolderId> = HashMap::new();
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO messages (user_id, folder_id, sender, recipients, subject, date, body, size)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(backend)?;
            for (user, role, m) in batch {
                let folder = match folders.get(&(*user, *role)) {
                    Some(f) => *f,
                    None => {
                        let f = Self::role_folder(&tx, *user, *role)?;
                        folders.insert((*user, *role), f);
                        f
                    }
                };
                ins.execute(params![
                    user,
                    folder,
                    m.sender,
                    m.recipients,
                    m.subject,
                    m.date,
                    m.body,
                    m.body.len() as i64
                ])
                .map_err(backend)?;
            }
        }
        tx.commit().map_err(backend)
    }

    fn user_count(&self) -> StoreResult<u64> {
        self.conn()?
            .query_row("SELECT count(*) FROM users", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(backend)
    }

    fn set_meta(&self, key: &str, value: &str) -> StoreResult<()> {
        self.conn()?
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map(|_| ())
            .map_err(backend)
    }

    fn meta(&self, key: &str) -> StoreResult<Option<String>> {
        self.conn()?
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(backend)
    }
}

#[cfg(test)]
mod tests;
