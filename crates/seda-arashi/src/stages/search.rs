//! The search stage: `GET /search?q=WORDS&in=all|from|subject|body`, full-text
//! search (SQLite FTS5) of the user's mail, best matches first, with snippets.

use std::fmt::Write;

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::{either, is_get, render};
use crate::store::{SearchField, StoreError};
use crate::web::html::{date, escape, snippet};
use crate::web::{App, Params, bad_request, method_not_allowed, store_error};

/// `handler:search`.
pub struct Search(pub App);

/// Most results shown.
pub const MAX_RESULTS: u32 = 50;

impl Handler for Search {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        if !is_get(req) {
            return method_not_allowed("GET");
        }
        let app = &self.0;
        either((|| {
            let session = app.session(req)?;
            let p = Params::query(req)?;
            let q = p.get("q").unwrap_or_default().trim().to_owned();
            let field = match p.get("in") {
                None | Some("") => SearchField::All,
                Some(f) => SearchField::parse(f)
                    .ok_or_else(|| bad_request("`in` must be all, from, subject or body"))?,
            };
            let mut options = String::new();
            for f in [
                SearchField::All,
                SearchField::Sender,
                SearchField::Subject,
                SearchField::Body,
            ] {
                let sel = if f == field { " selected" } else { "" };
                let label = match f {
                    SearchField::All => "everywhere",
                    SearchField::Sender => "sender",
                    SearchField::Subject => "subject",
                    SearchField::Body => "text",
                };
                let _ = write!(
                    options,
                    "<option value=\"{}\"{sel}>{label}</option>",
                    f.name()
                );
            }
            let mut content = format!(
                "<h1>Search</h1><form class=\"actions\" action=\"/search\" method=\"get\">\
<input type=\"search\" name=\"q\" value=\"{}\" aria-label=\"Words\"><label>in <select name=\"in\">{options}</select></label><button type=\"submit\">Search</button></form>",
                escape(&q)
            );
            if !q.is_empty() {
                match app.store.search(session.user.id, &q, field, MAX_RESULTS) {
                    Ok(hits) => {
                        let _ = write!(
                            content,
                            "<p class=\"hint\">{} result{} for “{}”{}</p>",
                            hits.len(),
                            if hits.len() == 1 { "" } else { "s" },
                            escape(&q),
                            if hits.len() as u32 == MAX_RESULTS {
                                " (best matches first; refine to see others)"
                            } else {
                                ""
                            }
                        );
                        if !hits.is_empty() {
                            content.push_str("<table class=\"mail results\"><thead><tr><th>Folder</th><th>From</th><th>Subject</th><th>Date</th></tr></thead><tbody>");
                            for h in &hits {
                                let m = &h.summary;
                                let _ = write!(
                                    content,
                                    "<tr><td>{}</td><td class=\"from\">{}</td><td class=\"subject\"><a href=\"/show?id={}\">{}</a><div class=\"snippet\">{}</div></td><td class=\"date\">{}</td></tr>",
                                    escape(&h.folder_name),
                                    escape(&m.sender),
                                    m.id,
                                    escape(&m.subject),
                                    snippet(&h.snippet),
                                    date(m.date)
                                );
                            }
                            content.push_str("</tbody></table>");
                        }
                    }
                    Err(StoreError::Invalid(why)) => {
                        let _ = write!(content, "<p class=\"error\">{}</p>", escape(&why));
                    }
                    Err(e) => return Err(store_error(&e)),
                }
            }
            Ok(render(app, &session, "Search", None, &q, &content))
        })())
    }
}
