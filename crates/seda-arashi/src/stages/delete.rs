//! The delete stage: `POST /delete` (`id`, `back`, `csrf`) moves a message to Trash,
//! or removes it for good when it is in Trash, then returns to folder `back`.

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::either;
use crate::store::{Deleted, FolderRole};
use crate::web::{App, see_other, store_error};

/// `handler:delete`.
pub struct Delete(pub App);

impl Handler for Delete {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        let app = &self.0;
        either((|| {
            let (session, form) = app.post_session(req)?;
            let id = form.required_id("id")?;
            let back = form.id("back")?;
            let user = session.user.id;
            let done = app.store.delete(user, id).map_err(|e| store_error(&e))?;
            let back = match back {
                Some(b) => b,
                None => app
                    .store
                    .folder_of_role(user, FolderRole::Inbox)
                    .map_err(|e| store_error(&e))?,
            };
            let notice = if done == Deleted::Removed {
                "removed"
            } else {
                "deleted"
            };
            Ok(see_other(&format!("/list?folder={back}&notice={notice}")))
        })())
    }
}
