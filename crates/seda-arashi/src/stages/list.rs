//! The list stage: `GET /list?folder=ID&sort=date|from|subject&order=asc|desc&page=N`,
//! one page of a folder (the Inbox without `folder`), sortable by each column.

use std::fmt::Write;

use seda_http::{Handler, HandlerContext, Request, Response};

use super::page::{either, is_get, render};
use crate::store::{FolderRole, ListQuery, MessagePage, SortKey};
use crate::web::html::{date, escape, notice, size};
use crate::web::{App, Params, bad_request, method_not_allowed, store_error};

/// `handler:list`.
pub struct List(pub App);

/// Messages per page.
pub const PER_PAGE: u32 = 25;

fn query_of(p: &Params) -> Result<ListQuery, Response> {
    let sort = match p.get("sort") {
        None | Some("") => SortKey::Date,
        Some(s) => {
            SortKey::parse(s).ok_or_else(|| bad_request("`sort` must be date, from or subject"))?
        }
    };
    let ascending = match p.get("order") {
        None | Some("") => sort != SortKey::Date,
        Some("asc") => true,
        Some("desc") => false,
        Some(_) => return Err(bad_request("`order` must be asc or desc")),
    };
    let page = p.id("page")?.unwrap_or(1).min(i64::from(u32::MAX)) as u32;
    Ok(ListQuery {
        sort,
        ascending,
        page,
        per_page: PER_PAGE,
    })
}

fn href(folder: i64, sort: SortKey, ascending: bool, page: u32) -> String {
    let order = if ascending { "asc" } else { "desc" };
    format!(
        "/list?folder={folder}&amp;sort={}&amp;order={order}&amp;page={page}",
        sort.name()
    )
}

fn table(p: &MessagePage, q: &ListQuery) -> String {
    let f = p.folder.id;
    let head = |key: SortKey, label: &str| {
        let (asc, mark) = if q.sort == key {
            (!q.ascending, if q.ascending { " ▲" } else { " ▼" })
        } else {
            (key != SortKey::Date, "")
        };
        format!(
            "<th><a href=\"{}\">{label}{mark}</a></th>",
            href(f, key, asc, 1)
        )
    };
    let mut rows = String::new();
    for m in &p.messages {
        let cls = if m.seen { "" } else { " class=\"unseen\"" };
        let _ = write!(
            rows,
            "<tr{cls}><td class=\"from\">{}</td><td class=\"subject\"><a href=\"/show?id={}\">{}</a></td><td class=\"date\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&m.sender),
            m.id,
            escape(&m.subject),
            date(m.date),
            size(m.size)
        );
    }
    if p.messages.is_empty() {
        rows.push_str("<tr><td colspan=\"4\">This folder is empty.</td></tr>");
    }
    let mut pager = format!(
        "<nav class=\"pager\" data-page=\"{}\" data-pages=\"{}\">",
        p.page, p.pages
    );
    if p.page > 1 {
        let _ = write!(
            pager,
            "<a rel=\"prev\" href=\"{}\">← Newer</a>",
            href(f, q.sort, q.ascending, p.page - 1)
        );
    }
    let _ = write!(pager, "<span>Page {} of {}</span>", p.page, p.pages);
    if p.page < p.pages {
        let _ = write!(
            pager,
            "<a rel=\"next\" href=\"{}\">Older →</a>",
            href(f, q.sort, q.ascending, p.page + 1)
        );
    }
    pager.push_str("</nav>");
    format!(
        "<table class=\"mail list\"><thead><tr>{}{}{}<th>Size</th></tr></thead><tbody>{rows}</tbody></table>{pager}",
        head(SortKey::Sender, "From"),
        head(SortKey::Subject, "Subject"),
        head(SortKey::Date, "Date"),
    )
}

impl Handler for List {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        if !is_get(req) {
            return method_not_allowed("GET");
        }
        let app = &self.0;
        either((|| {
            let session = app.session(req)?;
            let params = Params::query(req)?;
            let q = query_of(&params)?;
            let user = session.user.id;
            let folder = match params.id("folder")? {
                Some(f) => f,
                None => app
                    .store
                    .folder_of_role(user, FolderRole::Inbox)
                    .map_err(|e| store_error(&e))?,
            };
            let p = app
                .store
                .list(user, folder, &q)
                .map_err(|e| store_error(&e))?;
            let content = format!(
                "{}<h1>{} <small class=\"hint\">{} messages, {} unread</small></h1>{}",
                notice(params.get("notice")),
                escape(&p.folder.name),
                p.folder.messages,
                p.folder.unseen,
                table(&p, &q)
            );
            Ok(render(
                app,
                &session,
                &p.folder.name,
                Some(folder),
                "",
                &content,
            ))
        })())
    }
}
