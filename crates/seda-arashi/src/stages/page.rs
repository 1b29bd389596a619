//! What every request stage does around its own work: tell a GET, render the page
//! with the sidebar, turn an early answer into the response. A leaf: every stage
//! imports it, it imports no stage.

use seda_http::{Request, Response};

use crate::store::{FolderId, Session};
use crate::web::html::{Chrome, app_page};
use crate::web::{App, page, store_error};

/// Whether the request is a GET (or HEAD, which the server answers without a body).
pub(super) fn is_get(req: &Request) -> bool {
    req.method == "GET" || req.method == "HEAD"
}

/// A page of the application around `content`, with the user's folders in the
/// sidebar.
pub(super) fn render(
    app: &App,
    session: &Session,
    title: &str,
    current: Option<FolderId>,
    query: &str,
    content: &str,
) -> Response {
    match app.store.folder_names(session.user.id) {
        Ok(folders) => {
            let chrome = Chrome {
                session,
                folders: &folders,
                current,
                query,
            };
            page(
                seda_http::proto::Status::OK,
                app_page(title, &chrome, content),
            )
        }
        Err(e) => store_error(&e),
    }
}

/// Turns a `Result<Response, Response>` into the response.
pub(super) fn either(r: Result<Response, Response>) -> Response {
    r.unwrap_or_else(|e| e)
}
