//! Server-rendered HTML: escaping, the page layout, and small formatting helpers.
//! No page carries a script (see the security invariants of the parent module).

use std::fmt::Write;

use crate::store::{FolderId, MATCH_END, MATCH_START, Session};

/// Escapes text for HTML element content and quoted attribute values (the
/// workspace's one escaper, [`seda_http::html::escape`]).
pub use seda_http::html::escape;

/// A search snippet: escaped, with the store's match markers as `<mark>`.
pub fn snippet(s: &str) -> String {
    escape(s)
        .replace(MATCH_START, "<mark>")
        .replace(MATCH_END, "</mark>")
}

/// `YYYY-MM-DD HH:MM` (UTC) of a Unix time.
pub fn date(ts: i64) -> String {
    let d = mail_parser::DateTime::from_timestamp(ts);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        d.year, d.month, d.day, d.hour, d.minute
    )
}

/// A size in bytes as `1.2 KB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{:.1} MB", b as f64 / (1024.0 * 1024.0)),
    }
}

const HEAD: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/arashi.css"><link rel="icon" href="/static/arashi.svg">
"#;

/// A page without the mail chrome (login, errors).
pub fn bare_page(title: &str, content: &str) -> String {
    format!(
        "{HEAD}<title>{} · Arashi</title></head>\n<body class=\"bare\"><div class=\"card\">\
<a class=\"brand\" href=\"/folders\"><img src=\"/static/arashi.svg\" alt=\"\" width=\"40\" height=\"40\"> Arashi</a>\
<h1>{}</h1>{content}</div></body></html>\n",
        escape(title),
        escape(title)
    )
}

/// What the layout needs besides the content.
#[derive(Debug)]
pub struct Chrome<'a> {
    /// The session (user name, CSRF token of the logout form).
    pub session: &'a Session,
    /// The user's folders for the sidebar.
    pub folders: &'a [(FolderId, String)],
    /// The folder being shown, highlighted in the sidebar.
    pub current: Option<FolderId>,
    /// The search box's text.
    pub query: &'a str,
}

/// A page of the mail application: top bar (logo, search, user, logout), folder
/// sidebar, content.
pub fn app_page(title: &str, chrome: &Chrome<'_>, content: &str) -> String {
    let mut nav = String::new();
    for (id, name) in chrome.folders {
        let cls = if Some(*id) == chrome.current {
            " class=\"current\""
        } else {
            ""
        };
        let _ = write!(
            nav,
            "<li><a{cls} href=\"/list?folder={id}\">{}</a></li>",
            escape(name)
        );
    }
    format!(
        "{HEAD}<title>{title} · Arashi</title></head>\n<body>\n<header class=\"top\">\
<a class=\"brand\" href=\"/folders\"><img src=\"/static/arashi.svg\" alt=\"\" width=\"32\" height=\"32\"> Arashi</a>\
<form class=\"search\" action=\"/search\" method=\"get\" role=\"search\">\
<input type=\"search\" name=\"q\" value=\"{q}\" placeholder=\"Search mail\" aria-label=\"Search mail\">\
<button type=\"submit\">Search</button></form>\
<span class=\"user\">{user}</span>\
<form class=\"logout\" action=\"/logout\" method=\"post\">{csrf}<button type=\"submit\">Log out</button></form>\
</header>\n<div class=\"main\"><nav class=\"folders\" aria-label=\"Folders\">\
<a class=\"button compose\" href=\"/compose\">Compose</a><ul>{nav}</ul>\
<a class=\"all\" href=\"/folders\">All folders</a></nav>\n<main>{content}</main></div>\n</body></html>\n",
        title = escape(title),
        q = escape(chrome.query),
        user = escape(&chrome.session.user.name),
        csrf = csrf_field(chrome.session),
    )
}

/// The hidden CSRF field of a form.
pub fn csrf_field(s: &Session) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(&s.csrf)
    )
}

/// A notice shown above the content for a fixed set of `notice=` values.
pub fn notice(code: Option<&str>) -> &'static str {
    match code {
        Some("sent") => "<p class=\"notice\">Message sent.</p>",
        Some("deleted") => "<p class=\"notice\">Message moved to Trash.</p>",
        Some("removed") => "<p class=\"notice\">Message deleted for good.</p>",
        Some("moved") => "<p class=\"notice\">Message moved.</p>",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_snippets() {
        assert_eq!(
            escape(r#"<script>alert("x&y")</script>'"#),
            "&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;&#39;"
        );
        let s = format!("a {MATCH_START}<b>{MATCH_END} c");
        assert_eq!(snippet(&s), "a <mark>&lt;b&gt;</mark> c");
        assert_eq!(date(1_030_016_183), "2002-08-22 11:36");
        assert_eq!(size(2048), "2.0 KB");
    }
}
