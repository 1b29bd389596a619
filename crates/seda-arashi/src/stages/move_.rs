//! The move stage: `POST /move` (`id`, `to`, `back`, `csrf`) refiles a message into
//! another of the user's folders, then returns to folder `back`.

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::either;
use crate::web::{App, see_other, store_error};

/// `handler:move`.
pub struct Move(pub App);

impl Handler for Move {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        let app = &self.0;
        either((|| {
            let (session, form) = app.post_session(req)?;
            let id = form.required_id("id")?;
            let to = form.required_id("to")?;
            let back = form.id("back")?.unwrap_or(to);
            app.store
                .move_to(session.user.id, id, to)
                .map_err(|e| store_error(&e))?;
            Ok(see_other(&format!("/list?folder={back}&notice=moved")))
        })())
    }
}
