//! The web layer shared by the request stages: sessions from cookies, CSRF checks,
//! strict form and query decoding, responses with security headers, HTML rendering
//! with escaping ([`html`]) and the static assets ([`assets`]).
//!
//! # Security invariants
//! - Every byte of mail or user input reaches a page through [`html::escape`] (or
//!   [`html::snippet`], which escapes first); no page carries a script, and the
//!   `Content-Security-Policy` of every page forbids scripts outright, so even a
//!   missed escape cannot run one.
//! - The session cookie is `HttpOnly; SameSite=Lax; Path=/`; its value is 128 random
//!   bits. Every state-changing request is a POST whose form carries the session's
//!   CSRF token, compared in constant time.
//! - A request that does not parse (bad percent-encoding, non-UTF-8, a number that is
//!   not one, a missing field, a wrong content type) gets `400 Bad Request`.

pub mod assets;
pub mod html;

use std::sync::Arc;

use seda_http::proto::{Status, percent_decode};
use seda_http::{Request, Response};
use subtle::ConstantTimeEq;

use crate::store::{MailStore, Session, StoreError};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "arashi_session";

/// Largest form body accepted, bytes.
pub const MAX_FORM: usize = 256 * 1024;

/// Headers of every HTML page: no script may run, no framing, no caching of mail.
const PAGE_HEADERS: [(&str, &str); 5] = [
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
];

/// An HTML page with the security headers.
pub fn page(status: Status, body: String) -> Response {
    let mut r = Response::new(status)
        .with_header("Content-Type", "text/html; charset=utf-8")
        .with_body(body);
    for (n, v) in PAGE_HEADERS {
        r = r.with_header(n, v);
    }
    r
}

/// `303 See Other` to `location` (a path of this site).
pub fn see_other(location: &str) -> Response {
    let status = Status::from_code(303).unwrap_or(Status::FOUND);
    Response::new(status)
        .with_header("Location", location)
        .with_header("Cache-Control", "no-store")
}

/// An error page with a message (escaped).
pub fn error_page(status: Status, message: &str) -> Response {
    let title = format!("{} {}", status.code(), status.reason());
    page(
        status,
        html::bare_page(&title, &format!("<p>{}</p>", html::escape(message))),
    )
}

/// `400 Bad Request` with the reason.
pub fn bad_request(why: &str) -> Response {
    error_page(Status::BAD_REQUEST, why)
}

/// `405 Method Not Allowed` naming the allowed methods.
pub fn method_not_allowed(allow: &str) -> Response {
    error_page(
        Status::METHOD_NOT_ALLOWED,
        &format!("this page answers {allow} only"),
    )
    .with_header("Allow", allow)
}

/// The response to a failed store call: 404, 400 or 500.
pub fn store_error(e: &StoreError) -> Response {
    match e {
        StoreError::NotFound(what) => error_page(Status::NOT_FOUND, &format!("No such {what}.")),
        StoreError::Invalid(why) => bad_request(why),
        StoreError::Backend(_) => {
            tracing::error!("arashi: {e}");
            error_page(
                Status::INTERNAL_SERVER_ERROR,
                "The mail store failed; try again in a moment.",
            )
        }
    }
}

/// Decoded `name=value` pairs of a query string or form body. Strict: `+` is a space,
/// `%XX` must be valid, and the result must be UTF-8.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parses `a=1&b=x+y`.
    pub fn parse(s: &[u8]) -> Result<Params, ParamsError> {
        let mut out = Vec::new();
        for pair in s.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
            let (k, v) = match pair.iter().position(|b| *b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &[][..]),
            };
            out.push((decode(k)?, decode(v)?));
        }
        Ok(Params(out))
    }

    /// The query string of a request.
    pub fn query(req: &Request) -> Result<Params, Response> {
        Params::parse(req.query.as_bytes()).map_err(|e| bad_request(&e.to_string()))
    }

    /// The urlencoded form body of a POST.
    pub fn form(req: &Request) -> Result<Params, Response> {
        let ct = req.header("content-type").unwrap_or_default();
        let ct = String::from_utf8_lossy(ct).to_ascii_lowercase();
        if !ct.starts_with("application/x-www-form-urlencoded") {
            return Err(bad_request(
                "expected a form (Content-Type: application/x-www-form-urlencoded)",
            ));
        }
        if req.body.len() > MAX_FORM {
            return Err(error_page(
                Status::PAYLOAD_TOO_LARGE,
                "the form is too large",
            ));
        }
        Params::parse(&req.body).map_err(|e| bad_request(&e.to_string()))
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, which must be present.
    pub fn required(&self, name: &str) -> Result<&str, Response> {
        self.get(name)
            .ok_or_else(|| bad_request(&format!("missing field `{name}`")))
    }

    /// The value of `name` as a positive integer, if present; 400 if malformed.
    pub fn id(&self, name: &str) -> Result<Option<i64>, Response> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(bad_request(&format!("`{name}` must be a positive number"))),
            },
        }
    }

    /// As [`Params::id`], required.
    pub fn required_id(&self, name: &str) -> Result<i64, Response> {
        self.id(name)?
            .ok_or_else(|| bad_request(&format!("missing field `{name}`")))
    }
}

/// Why a query string or form body is refused (a 400 whose text is this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// A `%` not followed by two hex digits.
    #[error("bad percent-encoding")]
    PercentEncoding,
    /// A name or value that is not UTF-8 once decoded.
    #[error("not UTF-8")]
    NotUtf8,
}

fn decode(s: &[u8]) -> Result<String, ParamsError> {
    let plus: Vec<u8> = s
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    let bytes = percent_decode(&plus).ok_or(ParamsError::PercentEncoding)?;
    String::from_utf8(bytes).map_err(|_| ParamsError::NotUtf8)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// `Set-Cookie` value of a new session.
pub fn session_cookie(id: &str) -> String {
    let max_age = crate::store::SESSION_LIFETIME.as_secs();
    format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}")
}

/// `Set-Cookie` value that removes the session cookie.
pub fn cleared_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0")
}

/// What every request stage holds: the store.
#[derive(Clone)]
pub struct App {
    /// The mail store.
    pub store: Arc<dyn MailStore>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl App {
    /// The request's live session; otherwise a redirect to the login page (or 500).
    pub fn session(&self, req: &Request) -> Result<Session, Response> {
        let Some(id) = cookie(req, SESSION_COOKIE)
            .filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            return Err(see_other("/login"));
        };
        match self.store.session(id) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(see_other("/login").with_header("Set-Cookie", &cleared_cookie())),
            Err(e) => Err(store_error(&e)),
        }
    }

    /// The session of a state-changing POST: a live session and the form's CSRF
    /// token matching it (403 otherwise).
    pub fn post_session(&self, req: &Request) -> Result<(Session, Params), Response> {
        if req.method != "POST" {
            return Err(method_not_allowed("POST"));
        }
        let session = self.session(req)?;
        let form = Params::form(req)?;
        let token = form.get("csrf").unwrap_or_default();
        if !bool::from(token.as_bytes().ct_eq(session.csrf.as_bytes())) {
            return Err(error_page(
                Status::FORBIDDEN,
                "This form has expired or did not come from this site (CSRF check failed). Go back, reload the page and try again.",
            ));
        }
        Ok((session, form))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_strict() {
        let p = Params::parse(b"a=1&b=x+y%21&c&d=").unwrap();
        assert_eq!(p.get("b"), Some("x y!"));
        assert_eq!(p.get("c"), Some(""));
        assert_eq!(p.id("a").unwrap(), Some(1));
        assert_eq!(p.id("d").unwrap(), None);
        assert!(p.id("b").is_err());
        assert!(p.required("zz").is_err());
        assert_eq!(Params::parse(b"a=%zz"), Err(ParamsError::PercentEncoding));
        assert_eq!(Params::parse(b"a=%ff"), Err(ParamsError::NotUtf8));
        assert_eq!(
            Params::parse(b"a%20b%26c%3D%C3%A9=1").unwrap().0[0].0,
            "a b&c=é"
        );
    }

    #[test]
    fn cookies() {
        let mut req = Request::get("/");
        req.headers
            .push(("Cookie".into(), b"x=1; arashi_session=abc ; y=2".to_vec()));
        assert_eq!(cookie(&req, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&req, "z"), None);
        let c = session_cookie("abc");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax"));
    }
}
