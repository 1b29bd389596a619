//! The folders stage: `GET /folders`, every folder of the user with its message and
//! unread counts (USITS'03's "list folders").

use std::fmt::Write;

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::{either, is_get, render};
use crate::web::html::escape;
use crate::web::{App, method_not_allowed, store_error};

/// `handler:folders`.
pub struct Folders(pub App);

impl Handler for Folders {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        if !is_get(req) {
            return method_not_allowed("GET");
        }
        let app = &self.0;
        either((|| {
            let session = app.session(req)?;
            let folders = app
                .store
                .folders(session.user.id)
                .map_err(|e| store_error(&e))?;
            let mut rows = String::new();
            for f in &folders {
                let _ = write!(
                    rows,
                    "<tr><td><a href=\"/list?folder={}\">{}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    f.id,
                    escape(&f.name),
                    f.messages,
                    f.unseen
                );
            }
            let content = format!(
                "<h1>Folders</h1><table class=\"mail folders\"><thead><tr><th>Folder</th><th>Messages</th><th>Unread</th></tr></thead><tbody>{rows}</tbody></table>"
            );
            Ok(render(app, &session, "Folders", None, "", &content))
        })())
    }
}
