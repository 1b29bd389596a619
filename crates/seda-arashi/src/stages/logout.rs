//! The logout stage: `POST /logout` ends the session and clears its cookie.

use seda_http::{Handler, HandlerContext, Request, Response};

use crate::web::{App, cleared_cookie, see_other, store_error};

/// `handler:logout`.
pub struct Logout(pub App);

impl Handler for Logout {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        let (session, _) = match self.0.post_session(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        match self.0.store.end_session(&session.id) {
            Ok(()) => see_other("/login").with_header("Set-Cookie", &cleared_cookie()),
            Err(e) => store_error(&e),
        }
    }
}
