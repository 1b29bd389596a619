//! One emulated mail reader: what it remembers between requests, which request it
//! makes next, and how it reads the answer.
//!
//! # Choices within a step
//! - The next type comes from the [`MarkovModel`]; a step the user cannot make yet
//!   is replaced: any step without a session is a login; show, delete and move
//!   without a known message (or move without the Archive's id), and logout or
//!   compose without a CSRF token, become a list of the Inbox.
//! - list: the working folder, at first the Inbox; sorted by date (70%), sender
//!   (15%) or subject (15%); page 1 (70%) or a page drawn uniformly from the folder's
//!   pages. A working folder found empty passes the work on to the next folder
//!   (Inbox, Archive, Sent, Trash, Inbox, ...).
//! - show, delete, move: a message drawn uniformly from the last list page read.
//!   Move refiles it from the Inbox to the Archive, or from another folder back to
//!   the Inbox. Delete moves it to Trash; in Trash the user restores it (a move)
//!   rather than deleting it for good. So an emulated user's mail is conserved and
//!   its folders never run dry in a long run; only sent mail adds to it.
//! - search: one word drawn from [`SEARCH_WORDS`], everywhere.
//! - compose: a short message to a user drawn uniformly from the accounts.
//!
//! # Outcomes
//! 2xx and 3xx answers complete; so does a 404 for a message another emulated user
//! of the same account removed meanwhile. `503` is a rejection. Anything else (other
//! statuses, connection errors, timeouts) is an error. After a rejection or an error
//! the user waits (5 s in the paper) and logs in again.

use std::time::{Duration, Instant};

use super::http::{HttpClient, HttpResponse};
use super::markov::MarkovModel;
use super::request::{RequestType, password, user_name};

/// Words a user searches for (frequent in both the real and the synthetic corpus).
pub const SEARCH_WORDS: [&str; 10] = [
    "money", "linux", "free", "meeting", "python", "please", "offer", "list", "update", "time",
];

/// Index of the Inbox, Archive and Trash in the sidebar's folders.
const INBOX: usize = 0;
const ARCHIVE: usize = 1;
const TRASH: usize = 3;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served (2xx, 3xx, or a 404 for a message gone meanwhile).
    Completed,
    /// `503 Service Unavailable`.
    Rejected,
    /// Anything else; the kind names it.
    Error(&'static str),
}

/// One request made.
#[derive(Clone, Copy, Debug)]
pub struct Done {
    /// Its type.
    pub kind: RequestType,
    /// How it ended.
    pub outcome: Outcome,
    /// From the first byte sent to the last byte read.
    pub rt: Duration,
}

/// An emulated user's memory.
#[derive(Debug)]
pub struct User {
    account: String,
    client: HttpClient,
    logged_in: bool,
    csrf: Option<String>,
    /// Folder ids from the sidebar: Inbox, Archive, Sent, Trash.
    folders: Vec<i64>,
    /// Index of the working folder in `folders`.
    work: usize,
    ids: Vec<i64>,
    pages: u32,
    last: RequestType,
}

/// The numbers after each `marker` in `page`.
fn numbers_after(page: &str, marker: &str) -> Vec<i64> {
    page.split(marker)
        .skip(1)
        .filter_map(|s| {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

fn text_after(page: &str, marker: &str) -> Option<String> {
    let rest = page.split_once(marker)?.1;
    Some(rest.chars().take_while(|c| *c != '"').collect())
}

impl User {
    /// A user logging in as account `account` (1-based) through `client`.
    pub fn new(account: u32, client: HttpClient) -> User {
        User {
            account: user_name(account),
            client,
            logged_in: false,
            csrf: None,
            folders: Vec::new(),
            work: 0,
            ids: Vec::new(),
            pages: 1,
            last: RequestType::Logout,
        }
    }

    /// TCP connections this user opened.
    pub fn connections(&self) -> u64 {
        self.client.connections
    }

    /// Forgets the session (after a rejection or error, or when idle).
    pub fn drop_session(&mut self) {
        self.logged_in = false;
        self.csrf = None;
        self.client.reset();
        self.last = RequestType::Logout;
    }

    /// The next request type: the model's draw, replaced when the user cannot make it.
    pub fn choose(&self, model: &MarkovModel, rng: &mut fastrand::Rng) -> RequestType {
        if !self.logged_in {
            return RequestType::Login;
        }
        let mut want = model.next(self.last, rng);
        if want == RequestType::Delete && self.work == TRASH {
            want = RequestType::Move;
        }
        let can = match want {
            RequestType::Login => true,
            RequestType::Show => !self.ids.is_empty(),
            RequestType::Delete | RequestType::Move => {
                !self.ids.is_empty() && self.csrf.is_some() && self.folders.len() == 4
            }
            RequestType::Logout | RequestType::Compose => self.csrf.is_some(),
            RequestType::Folders | RequestType::List | RequestType::Search => true,
        };
        if can { want } else { RequestType::List }
    }

    /// Makes one request of type `kind`; `accounts` is the number of seeded users.
    pub fn perform(&mut self, kind: RequestType, accounts: u32, rng: &mut fastrand::Rng) -> Done {
        let t0 = Instant::now();
        let result = self.send(kind, accounts, rng);
        let rt = t0.elapsed();
        let outcome = match result {
            Err(e) => Outcome::Error(match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timeout",
                std::io::ErrorKind::ConnectionRefused => "refused",
                std::io::ErrorKind::Interrupted => "unfinished",
                _ => "connection",
            }),
            Ok(r) => self.read(kind, &r),
        };
        match outcome {
            Outcome::Completed => self.last = kind,
            Outcome::Rejected | Outcome::Error(_) => self.drop_session(),
        }
        Done { kind, outcome, rt }
    }

    fn send(
        &mut self,
        kind: RequestType,
        accounts: u32,
        rng: &mut fastrand::Rng,
    ) -> std::io::Result<HttpResponse> {
        let csrf = self.csrf.clone().unwrap_or_default();
        match kind {
            RequestType::Login => {
                self.client.reset();
                let pw = password(&self.account);
                self.client
                    .post_form("/login", &[("user", &self.account), ("password", &pw)])
            }
            RequestType::Logout => self.client.post_form("/logout", &[("csrf", &csrf)]),
            RequestType::Folders => self.client.get("/folders"),
            RequestType::List => {
                let sort = match rng.u8(..20) {
                    0..=13 => "date",
                    14..=16 => "from",
                    _ => "subject",
                };
                let page = if rng.u8(..10) < 7 {
                    1
                } else {
                    rng.u32(1..=self.pages.max(1))
                };
                let folder = self
                    .folders
                    .get(self.work)
                    .map_or(String::new(), |f| format!("folder={f}&"));
                self.client
                    .get(&format!("/list?{folder}sort={sort}&page={page}"))
            }
            RequestType::Show => {
                // `choose` only picks show with a known message; id 0 answers 400.
                let id = match self.ids.len() {
                    0 => 0,
                    n => self.ids[rng.usize(..n)],
                };
                self.client.get(&format!("/show?id={id}"))
            }
            RequestType::Delete | RequestType::Move => {
                let id = match self.ids.len() {
                    0 => "0".to_owned(),
                    n => self.ids.swap_remove(rng.usize(..n)).to_string(),
                };
                let folder = |i: usize| {
                    self.folders
                        .get(i)
                        .map(|f| f.to_string())
                        .unwrap_or_default()
                };
                let back = folder(self.work);
                if kind == RequestType::Delete {
                    self.client
                        .post_form("/delete", &[("id", &id), ("back", &back), ("csrf", &csrf)])
                } else {
                    let to = folder(if self.work == INBOX { ARCHIVE } else { INBOX });
                    self.client.post_form(
                        "/move",
                        &[("id", &id), ("to", &to), ("back", &back), ("csrf", &csrf)],
                    )
                }
            }
            RequestType::Search => {
                let word = SEARCH_WORDS[rng.usize(..SEARCH_WORDS.len())];
                self.client.get(&format!("/search?q={word}"))
            }
            RequestType::Compose => {
                let to = user_name(rng.u32(1..=accounts.max(1)));
                let n = rng.u32(..1000);
                let subject = format!("lunch plans #{n}");
                let body = format!(
                    "Hi {to},\n\nare we still on for lunch on day {}? I can book a table.\n\n-- {}\n",
                    rng.u8(1..29),
                    self.account
                );
                self.client.post_form(
                    "/compose",
                    &[
                        ("to", &to),
                        ("subject", &subject),
                        ("body", &body),
                        ("csrf", &csrf),
                    ],
                )
            }
        }
    }

    /// Reads an answer: its outcome, and what the user learns from the page.
    fn read(&mut self, kind: RequestType, r: &HttpResponse) -> Outcome {
        match r.status {
            503 => return Outcome::Rejected,
            303 if kind != RequestType::Login
                && kind != RequestType::Logout
                && r.header("location") == Some("/login") =>
            {
                return Outcome::Error("session-lost");
            }
            200..=399 => {}
            404 if matches!(
                kind,
                RequestType::Show | RequestType::Delete | RequestType::Move
            ) =>
            {
                return Outcome::Completed;
            }
            401 => return Outcome::Error("login-refused"),
            400..=499 => return Outcome::Error("status-4xx"),
            _ => return Outcome::Error("status-5xx"),
        }
        match kind {
            RequestType::Login => {
                self.logged_in = r.status == 303;
                if !self.logged_in {
                    return Outcome::Error("login-refused");
                }
            }
            RequestType::Logout => {
                self.logged_in = false;
                self.csrf = None;
            }
            _ => {}
        }
        if r.status == 200 {
            let page = r.text();
            if let Some(t) = text_after(&page, "name=\"csrf\" value=\"") {
                self.csrf = Some(t);
            }
            if let Some((_, nav)) = page.split_once("<nav class=\"folders\"") {
                let ids = numbers_after(nav.split("</nav>").next().unwrap_or(""), "folder=");
                if ids.len() == 4 {
                    self.folders = ids;
                }
            }
            if kind == RequestType::List {
                self.ids = numbers_after(&page, "href=\"/show?id=");
                self.pages = text_after(&page, "data-pages=\"")
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(1);
                if self.ids.is_empty() && self.pages <= 1 && !self.folders.is_empty() {
                    self.work = (self.work + 1) % self.folders.len();
                }
            }
        }
        Outcome::Completed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_pages_folders_and_token() {
        let page = "<nav class=\"folders\"><a href=\"/list?folder=5\">Inbox</a><a href=\"/list?folder=6\">Archive</a><a href=\"/list?folder=7\">Sent</a><a href=\"/list?folder=8\">Trash</a></nav>\
<input type=\"hidden\" name=\"csrf\" value=\"abc\"><a href=\"/show?id=17\">x</a><a href=\"/show?id=23\">y</a><nav class=\"pager\" data-page=\"1\" data-pages=\"4\">";
        let mut u = User::new(
            3,
            HttpClient::new("127.0.0.1:9".parse().unwrap(), Duration::from_secs(1)),
        );
        assert_eq!(u.account, "user3");
        let r = HttpResponse {
            status: 200,
            headers: vec![],
            body: page.as_bytes().to_vec(),
        };
        u.logged_in = true;
        assert_eq!(u.read(RequestType::List, &r), Outcome::Completed);
        assert_eq!(
            (u.ids.clone(), u.pages, u.folders.clone()),
            (vec![17, 23], 4, vec![5, 6, 7, 8])
        );
        // An empty working folder passes the work on.
        let empty = HttpResponse {
            status: 200,
            headers: vec![],
            body: page.split("<input").next().unwrap().as_bytes().to_vec(),
        };
        u.read(RequestType::List, &empty);
        assert_eq!(u.work, ARCHIVE);
        assert_eq!(u.csrf.as_deref(), Some("abc"));
        let busy = HttpResponse {
            status: 503,
            headers: vec![],
            body: vec![],
        };
        assert_eq!(u.read(RequestType::Show, &busy), Outcome::Rejected);
        // Without a session every choice is a login; without messages, a list.
        let m = MarkovModel::default();
        let mut rng = fastrand::Rng::with_seed(1);
        u.logged_in = false;
        assert_eq!(u.choose(&m, &mut rng), RequestType::Login);
        u.logged_in = true;
        u.ids.clear();
        u.last = RequestType::Show;
        for _ in 0..200 {
            let c = u.choose(&m, &mut rng);
            assert!(
                !matches!(
                    c,
                    RequestType::Show | RequestType::Delete | RequestType::Move
                ),
                "{c}"
            );
        }
    }
}
