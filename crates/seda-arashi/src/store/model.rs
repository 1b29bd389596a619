//! The store's value types, its error and the [`MailStore`] trait. A leaf: the
//! backend and the stages import it.

/// Row id of a user.
pub type UserId = i64;
/// Row id of a folder.
pub type FolderId = i64;
/// Row id of a message.
pub type MessageId = i64;

/// A user account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Row id.
    pub id: UserId,
    /// Login name (also the local part of the address `name@arashi.local`).
    pub name: String,
}

/// A logged-in session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The random session id (the cookie's value), 32 hex digits.
    pub id: String,
    /// The user.
    pub user: User,
    /// The CSRF token every state-changing form of this session must carry.
    pub csrf: String,
}

/// The role of a folder: the special folders every user has, or one of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FolderRole {
    /// Incoming mail.
    Inbox,
    /// Refiled mail (the emulated users' "move" target).
    Archive,
    /// Copies of sent mail.
    Sent,
    /// Deleted mail; deleting here removes for good.
    Trash,
}

impl FolderRole {
    /// Every role, in display order.
    pub const ALL: [FolderRole; 4] = [
        FolderRole::Inbox,
        FolderRole::Archive,
        FolderRole::Sent,
        FolderRole::Trash,
    ];

    /// The folder's name.
    pub fn name(self) -> &'static str {
        match self {
            FolderRole::Inbox => "Inbox",
            FolderRole::Archive => "Archive",
            FolderRole::Sent => "Sent",
            FolderRole::Trash => "Trash",
        }
    }
}

/// A folder with its counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolderInfo {
    /// Row id.
    pub id: FolderId,
    /// Display name.
    pub name: String,
    /// Messages in the folder.
    pub messages: u64,
    /// Of those, not yet shown.
    pub unseen: u64,
}

/// Sort key of a message list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Date (the default, newest first).
    #[default]
    Date,
    /// Sender, case-insensitive.
    Sender,
    /// Subject, case-insensitive.
    Subject,
}

impl SortKey {
    /// Name in URLs: `date`, `from`, `subject`.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Date => "date",
            SortKey::Sender => "from",
            SortKey::Subject => "subject",
        }
    }

    /// The key named `s` in a URL.
    pub fn parse(s: &str) -> Option<SortKey> {
        [SortKey::Date, SortKey::Sender, SortKey::Subject]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// One page of a folder, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    /// Sort key.
    pub sort: SortKey,
    /// Ascending (true) or descending.
    pub ascending: bool,
    /// Page number, from 1.
    pub page: u32,
    /// Messages per page (1..=200).
    pub per_page: u32,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            sort: SortKey::Date,
            ascending: false,
            page: 1,
            per_page: 25,
        }
    }
}

/// A message as a list shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageSummary {
    /// Row id.
    pub id: MessageId,
    /// `From`, as written (display name and address).
    pub sender: String,
    /// `Subject`.
    pub subject: String,
    /// Date, seconds since the epoch (UTC).
    pub date: i64,
    /// Shown already.
    pub seen: bool,
    /// Body length in bytes.
    pub size: u64,
}

/// A page of a folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePage {
    /// The folder.
    pub folder: FolderInfo,
    /// Its messages on this page, in order.
    pub messages: Vec<MessageSummary>,
    /// The page shown (clamped to `1..=pages`).
    pub page: u32,
    /// Number of pages (at least 1).
    pub pages: u32,
}

/// A whole message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Row id.
    pub id: MessageId,
    /// The folder it is in.
    pub folder: FolderId,
    /// Name of that folder.
    pub folder_name: String,
    /// `From`.
    pub sender: String,
    /// `To`.
    pub recipients: String,
    /// `Subject`.
    pub subject: String,
    /// Date, seconds since the epoch.
    pub date: i64,
    /// The text body.
    pub body: String,
}

/// Where a search looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SearchField {
    /// Sender, subject and body.
    #[default]
    All,
    /// Sender only.
    Sender,
    /// Subject only.
    Subject,
    /// Body only.
    Body,
}

impl SearchField {
    /// Name in URLs: `all`, `from`, `subject`, `body`.
    pub fn name(self) -> &'static str {
        match self {
            SearchField::All => "all",
            SearchField::Sender => "from",
            SearchField::Subject => "subject",
            SearchField::Body => "body",
        }
    }

    /// The field named `s` in a URL.
    pub fn parse(s: &str) -> Option<SearchField> {
        [
            SearchField::All,
            SearchField::Sender,
            SearchField::Subject,
            SearchField::Body,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// One search result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    /// The message.
    pub summary: MessageSummary,
    /// Name of its folder.
    pub folder_name: String,
    /// A snippet of the matching text; matches are wrapped in [`MATCH_START`] and
    /// [`MATCH_END`] (control characters, never in stored text).
    pub snippet: String,
}

/// Marks the start of a match in [`SearchHit::snippet`].
pub const MATCH_START: char = '\u{2}';
/// Marks the end of a match in [`SearchHit::snippet`].
pub const MATCH_END: char = '\u{3}';

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Moved to the user's Trash.
    ToTrash,
    /// Removed for good (it was in Trash).
    Removed,
}

/// A message to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMessage {
    /// `From`.
    pub sender: String,
    /// `To`.
    pub recipients: String,
    /// `Subject`.
    pub subject: String,
    /// Date, seconds since the epoch.
    pub date: i64,
    /// Text body.
    pub body: String,
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No such user, folder or message (or not the caller's).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// The input is not acceptable (e.g. an empty search, an unknown recipient).
    #[error("{0}")]
    Invalid(String),
    /// The database failed.
    #[error("mail store: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether the failure is the caller's (404/400) rather than the store's.
    pub fn is_client_error(&self) -> bool {
        !matches!(self, StoreError::Backend(_))
    }
}

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// The mail store of Arashi. See the module docs for the contract.
pub trait MailStore: Send + Sync + 'static {
    /// The user with this name and password, if both match.
    fn authenticate(&self, name: &str, password: &str) -> StoreResult<Option<User>>;
    /// Opens a session for `user` with fresh random id and CSRF token.
    fn create_session(&self, user: &User) -> StoreResult<Session>;
    /// The live session with this id.
    fn session(&self, id: &str) -> StoreResult<Option<Session>>;
    /// Ends a session (no error if it is already gone).
    fn end_session(&self, id: &str) -> StoreResult<()>;

    /// The user's folders in display order, with counts.
    fn folders(&self, user: UserId) -> StoreResult<Vec<FolderInfo>>;
    /// The user's folders' ids and names in display order (no counts: cheap).
    fn folder_names(&self, user: UserId) -> StoreResult<Vec<(FolderId, String)>>;
    /// The user's folder of this role.
    fn folder_of_role(&self, user: UserId, role: FolderRole) -> StoreResult<FolderId>;
    /// One sorted page of a folder.
    fn list(&self, user: UserId, folder: FolderId, q: &ListQuery) -> StoreResult<MessagePage>;
    /// A message, marked seen.
    fn message(&self, user: UserId, id: MessageId) -> StoreResult<Message>;
    /// Deletes a message: to Trash, or for good from Trash.
    fn delete(&self, user: UserId, id: MessageId) -> StoreResult<Deleted>;
    /// Moves a message to another of the user's folders.
    fn move_to(&self, user: UserId, id: MessageId, folder: FolderId) -> StoreResult<()>;
    /// Full-text search of the user's mail, best matches first, at most `limit`.
    fn search(
        &self,
        user: UserId,
        words: &str,
        field: SearchField,
        limit: u32,
    ) -> StoreResult<Vec<SearchHit>>;
    /// Delivers a message from `from` to the local user named `to`: into their
    /// Inbox, and a copy into the sender's Sent. Returns the recipient.
    fn send(&self, from: &User, to: &str, subject: &str, body: &str) -> StoreResult<User>;

    /// Creates a user with its four folders; `password_hash` from
    /// [`hash_password`].
    fn add_user(&self, name: &str, password_hash: &str) -> StoreResult<User>;
    /// Stores many messages in one transaction: `(user, folder role, message)`.
    fn deliver_batch(&self, batch: &[(UserId, FolderRole, NewMessage)]) -> StoreResult<()>;
    /// Number of users.
    fn user_count(&self) -> StoreResult<u64>;
    /// Sets a value of the store's metadata (e.g. where its mail came from).
    fn set_meta(&self, key: &str, value: &str) -> StoreResult<()>;
    /// A value of the store's metadata.
    fn meta(&self, key: &str) -> StoreResult<Option<String>>;
}
