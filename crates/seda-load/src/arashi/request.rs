//! What a mail reader asks Arashi for: the request types, their paths, and the
//! seeded accounts it logs in as.
//!
//! These are Arashi's (`seda_arashi::RequestType`, `seda_arashi::seed`) as seen from
//! the wire: the load generator shares no code with the service it measures, and a
//! test in `seda-experiments` (`tests/arashi.rs`) checks that both sides agree.

use std::fmt;

/// A request type of Arashi (USITS'03 Fig. 1), one stage each on the server.
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

    /// Name (the server's handler name and the path without its slash).
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
}

impl fmt::Display for RequestType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Accounts a seeded Arashi has by default (`seda arashi` seeds 1,024 users).
pub const DEFAULT_ACCOUNTS: u32 = 1024;

/// Name of seeded user `k` (1-based).
pub fn user_name(k: u32) -> String {
    format!("user{k}")
}

/// Password of the seeded user named `name`.
pub fn password(name: &str) -> String {
    format!("{name}-pw")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in RequestType::ALL {
            assert_eq!(RequestType::parse(t.name()), Some(t));
            assert_eq!(t.path(), format!("/{t}"));
        }
        assert_eq!(RequestType::parse("nope"), None);
        assert_eq!(password(&user_name(3)), "user3-pw");
    }
}
