//! The request stages: one Haboob dynamic handler, and so one SEDA stage with its own
//! queue, admission controller and thread pool, per request type (USITS'03 4.1:
//! "one stage assigned to each request type ... This design allows the admission
//! control parameters for each request type to be tuned independently").
//!
//! | type | stage | path | method | store calls |
//! |---|---|---|---|---|
//! | login | `handler:login` | `/login` | GET form, POST log in | user lookup + password hash, new session |
//! | logout | `handler:logout` | `/logout` | POST | end session |
//! | folders | `handler:folders` | `/folders` | GET | every folder with counts (scans the user's mail) |
//! | list | `handler:list` | `/list?folder&sort&order&page` | GET | folder count + one sorted page |
//! | show | `handler:show` | `/show?id` | GET | one message (marked seen) |
//! | delete | `handler:delete` | `/delete` | POST | move to Trash / remove |
//! | move | `handler:move` | `/move` | POST | refile to another folder |
//! | search | `handler:search` | `/search?q&in` | GET | FTS5 query over the user's mail |
//! | compose | `handler:compose` | `/compose` | GET form, POST send | deliver to a local user + Sent copy |
//!
//! Every stage runs on a pool of its own (Haboob gives each handler stage the
//! per-stage thread model): the store's calls block, and never on a shared worker.

mod compose;
mod delete;
mod folders;
mod list;
mod login;
mod logout;
mod move_;
mod page;
mod search;
mod show;

use std::sync::Arc;

use seda_http::Handler;

use crate::web::App;

/// The request types of Arashi, one stage each. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestType {
    /// Log in (and the login form).
    Login,
    /// Log out.
    Logout,
    /// List folders with counts.
    Folders,
    /// List a folder's messages.
    List,
    /// Show a message.
    Show,
    /// Delete a message.
    Delete,
    /// Move (refile) a message.
    Move,
    /// Search.
    Search,
    /// Compose and send.
    Compose,
}

impl RequestType {
    /// Every type, in the order of tables.
    pub const ALL: [RequestType; 9] = [
        RequestType::Login,
        RequestType::Logout,
        RequestType::Folders,
        RequestType::List,
        RequestType::Show,
        RequestType::Delete,
        RequestType::Move,
        RequestType::Search,
        RequestType::Compose,
    ];

    /// Name (also the handler's name and the path without its slash).
    pub fn name(self) -> &'static str {
        match self {
            RequestType::Login => "login",
            RequestType::Logout => "logout",
            RequestType::Folders => "folders",
            RequestType::List => "list",
            RequestType::Show => "show",
            RequestType::Delete => "delete",
            RequestType::Move => "move",
            RequestType::Search => "search",
            RequestType::Compose => "compose",
        }
    }

    /// The type named `s`.
    pub fn parse(s: &str) -> Option<RequestType> {
        RequestType::ALL.into_iter().find(|t| t.name() == s)
    }

    /// URL path of the type's stage.
    pub fn path(self) -> String {
        format!("/{}", self.name())
    }

    /// The stage's name in `/_seda/stats`.
    pub fn stage_name(self) -> String {
        format!("handler:{}", self.name())
    }

    /// The handler of this type's stage.
    pub fn handler(self, app: App) -> Arc<dyn Handler> {
        match self {
            RequestType::Login => Arc::new(login::Login(app)),
            RequestType::Logout => Arc::new(logout::Logout(app)),
            RequestType::Folders => Arc::new(folders::Folders(app)),
            RequestType::List => Arc::new(list::List(app)),
            RequestType::Show => Arc::new(show::Show(app)),
            RequestType::Delete => Arc::new(delete::Delete(app)),
            RequestType::Move => Arc::new(move_::Move(app)),
            RequestType::Search => Arc::new(search::Search(app)),
            RequestType::Compose => Arc::new(compose::Compose(app)),
        }
    }
}

impl std::fmt::Display for RequestType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
