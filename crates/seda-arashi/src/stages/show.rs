//! The show stage: `GET /show?id=N`, one message of the user (marked seen), its text
//! escaped in a `<pre>`, with reply, delete and move actions.

use std::fmt::Write;

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::{either, is_get, render};
use crate::web::html::{csrf_field, date, escape};
use crate::web::{App, Params, method_not_allowed, store_error};

/// `handler:show`.
pub struct Show(pub App);

impl Handler for Show {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        if !is_get(req) {
            return method_not_allowed("GET");
        }
        let app = &self.0;
        either((|| {
            let session = app.session(req)?;
            let id = Params::query(req)?.required_id("id")?;
            let m = app
                .store
                .message(session.user.id, id)
                .map_err(|e| store_error(&e))?;
            let folders = app
                .store
                .folder_names(session.user.id)
                .map_err(|e| store_error(&e))?;
            let csrf = csrf_field(&session);
            let mut options = String::new();
            for (fid, name) in folders.iter().filter(|(fid, _)| *fid != m.folder) {
                let _ = write!(options, "<option value=\"{fid}\">{}</option>", escape(name));
            }
            let delete_label = if m.folder_name == "Trash" {
                "Delete for good"
            } else {
                "Delete"
            };
            let content = format!(
                "<div class=\"actions\"><a href=\"/list?folder={folder}\">← {folder_name}</a>\
<a class=\"button\" href=\"/compose?reply={id}\">Reply</a>\
<form method=\"post\" action=\"/delete\">{csrf}<input type=\"hidden\" name=\"id\" value=\"{id}\"><input type=\"hidden\" name=\"back\" value=\"{folder}\"><button type=\"submit\" class=\"secondary\">{delete_label}</button></form>\
<form method=\"post\" action=\"/move\">{csrf}<input type=\"hidden\" name=\"id\" value=\"{id}\"><input type=\"hidden\" name=\"back\" value=\"{folder}\"><label>Move to <select name=\"to\">{options}</select></label><button type=\"submit\" class=\"secondary\">Move</button></form></div>\
<article class=\"message\"><h1>{subject}</h1><dl><dt>From</dt><dd>{from}</dd><dt>To</dt><dd>{to}</dd><dt>Date</dt><dd>{date}</dd><dt>Folder</dt><dd>{folder_name}</dd></dl>\
<pre class=\"body\">{body}</pre></article>",
                folder = m.folder,
                folder_name = escape(&m.folder_name),
                subject = escape(&m.subject),
                from = escape(&m.sender),
                to = escape(&m.recipients),
                date = date(m.date),
                body = escape(&m.body),
            );
            Ok(render(
                app,
                &session,
                &m.subject,
                Some(m.folder),
                "",
                &content,
            ))
        })())
    }
}
