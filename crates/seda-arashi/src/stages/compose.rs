//! The compose stage: `GET /compose[?reply=ID][&to=NAME]` (the form, a reply quoted),
//! `POST /compose` (`to`, `subject`, `body`, `csrf`) sends to a local user: into their
//! Inbox and a copy into the sender's Sent. An unknown recipient gets the form back
//! with the error (400) and the text kept.

use seda_http::proto::Status;
use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::{either, is_get, render};
use crate::store::{FolderRole, Session, StoreError};
use crate::web::html::{csrf_field, escape};
use crate::web::{App, Params, bad_request, method_not_allowed, see_other, store_error};

/// `handler:compose`.
pub struct Compose(pub App);

/// Longest subject accepted, characters (RFC 5322's line limit).
pub const MAX_SUBJECT: usize = 998;

struct Draft<'a> {
    to: &'a str,
    subject: &'a str,
    body: &'a str,
}

impl Compose {
    fn form(&self, session: &Session, d: &Draft<'_>, error: Option<&str>) -> Response {
        let error = error.map_or(String::new(), |e| {
            format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e))
        });
        let content = format!(
            "<h1>New message</h1>{error}<form class=\"compose\" method=\"post\" action=\"/compose\">{}\
<label>To <input name=\"to\" value=\"{}\" placeholder=\"user2\" required></label>\
<label>Subject <input name=\"subject\" value=\"{}\" maxlength=\"{MAX_SUBJECT}\"></label>\
<textarea name=\"body\" aria-label=\"Message\">{}</textarea>\
<div><button type=\"submit\">Send</button></div></form>\
<p class=\"hint\">Mail goes to users of this Arashi (user1, user2, … or user2@arashi.local).</p>",
            csrf_field(session),
            escape(d.to),
            escape(d.subject),
            escape(d.body)
        );
        render(&self.0, session, "New message", None, "", &content)
    }
}

impl Handler for Compose {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        let app = &self.0;
        either((|| {
            if is_get(req) {
                let session = app.session(req)?;
                let p = Params::query(req)?;
                let (mut to, mut subject, mut body) = (
                    p.get("to").unwrap_or_default().to_owned(),
                    String::new(),
                    String::new(),
                );
                if let Some(id) = p.id("reply")? {
                    let m = app
                        .store
                        .message(session.user.id, id)
                        .map_err(|e| store_error(&e))?;
                    to = m.sender.clone();
                    subject = if m.subject.to_ascii_lowercase().starts_with("re:") {
                        m.subject.clone()
                    } else {
                        format!("Re: {}", m.subject)
                    };
                    body = format!(
                        "\n\nOn {}, {} wrote:\n",
                        crate::web::html::date(m.date),
                        m.sender
                    );
                    for line in m.body.lines().take(200) {
                        body.push_str("> ");
                        body.push_str(line);
                        body.push('\n');
                    }
                }
                let d = Draft {
                    to: &to,
                    subject: &subject,
                    body: &body,
                };
                return Ok(self.form(&session, &d, None));
            }
            if req.method != "POST" {
                return Err(method_not_allowed("GET, POST"));
            }
            let (session, form) = app.post_session(req)?;
            let to = form.required("to")?.trim();
            let subject = form.get("subject").unwrap_or_default().trim();
            let body = form.required("body")?;
            if subject.chars().count() > MAX_SUBJECT || subject.contains(['\r', '\n']) {
                return Err(bad_request(
                    "the subject must be one line of at most 998 characters",
                ));
            }
            let subject = if subject.is_empty() {
                "(no subject)"
            } else {
                subject
            };
            let d = Draft { to, subject, body };
            if to.is_empty() {
                let mut r = self.form(&session, &d, Some("Say whom the message is for."));
                r.status = Status::BAD_REQUEST;
                return Ok(r);
            }
            match app.store.send(&session.user, to, subject, body) {
                Ok(_) => {
                    let sent = app
                        .store
                        .folder_of_role(session.user.id, FolderRole::Sent)
                        .map_err(|e| store_error(&e))?;
                    Ok(see_other(&format!("/list?folder={sent}&notice=sent")))
                }
                Err(StoreError::Invalid(why)) => {
                    let mut r = self.form(&session, &d, Some(&why));
                    r.status = Status::BAD_REQUEST;
                    Ok(r)
                }
                Err(e) => Err(store_error(&e)),
            }
        })())
    }
}
