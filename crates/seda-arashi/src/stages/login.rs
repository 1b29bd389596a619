//! The login stage: `GET /login` (the form), `POST /login` (check the password, open
//! a session, set its cookie). A failed login answers `401` with the form again.

use seda_http::proto::Status;
use seda_http::{Handler, HandlerContext, Request, Response};

use crate::seed::{META_USERS, password, user_name};
use crate::web::html::{bare_page, escape};
use crate::web::{
    App, Params, SESSION_COOKIE, cookie, method_not_allowed, page, see_other, session_cookie,
    store_error,
};

/// `handler:login`.
pub struct Login(pub App);

impl Login {
    fn form(&self, status: Status, error: Option<&str>, name: &str) -> Response {
        let users = self.0.store.meta(META_USERS).ok().flatten();
        let hint = match users {
            Some(n) => format!(
                "<p class=\"hint\">Demo accounts: {} … user{}, password: the user name followed by <code>-pw</code> (e.g. {} / {}).</p>",
                user_name(1),
                escape(&n),
                user_name(1),
                password(&user_name(1))
            ),
            None => String::new(),
        };
        let error = error.map_or(String::new(), |e| {
            format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e))
        });
        let body = format!(
            "{error}<form method=\"post\" action=\"/login\">\
<label>User name <input name=\"user\" value=\"{}\" autocomplete=\"username\" required autofocus></label>\
<label>Password <input name=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
<button type=\"submit\">Log in</button></form>{hint}",
            escape(name)
        );
        page(status, bare_page("Log in", &body))
    }
}

impl Handler for Login {
    fn handle(&self, req: &Request, _cx: &HandlerContext<'_>) -> Response {
        let app = &self.0;
        if super::page::is_get(req) {
            // Already logged in: straight on to the mail.
            let live = cookie(req, SESSION_COOKIE)
                .is_some_and(|id| matches!(app.store.session(id), Ok(Some(_))));
            if live {
                return see_other("/folders");
            }
            return self.form(Status::OK, None, "");
        }
        if req.method != "POST" {
            return method_not_allowed("GET, POST");
        }
        let form = match Params::form(req) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let (Some(name), Some(pw)) = (form.get("user"), form.get("password")) else {
            return crate::web::bad_request("the login form needs `user` and `password`");
        };
        match app.store.authenticate(name.trim(), pw) {
            Ok(Some(user)) => match app.store.create_session(&user) {
                Ok(s) => see_other("/folders").with_header("Set-Cookie", &session_cookie(&s.id)),
                Err(e) => store_error(&e),
            },
            Ok(None) => {
                let status = Status::from_code(401).unwrap_or(Status::FORBIDDEN);
                self.form(status, Some("Wrong user name or password."), name)
            }
            Err(e) => store_error(&e),
        }
    }
}
