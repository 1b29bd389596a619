//! Dynamic handlers: Haboob's HDAPI (SEDA 5.1; the Arashi request stages of USITS'03).
//!
//! An application registers a [`Handler`] for a URL prefix with a
//! [`HandlerRegistration`]. Each registration becomes a stage of its own, named
//! `handler:<name>`, with its own thread pool, queue capacity and optional admission
//! policy, so overload control and thread sizing act per request type.
//!
//! # Call order and overload
//! HttpRecv matches the request's decoded path against the registered prefixes
//! (longest first), computes the class with the registration's classifier (default 0)
//! and enqueues the request to the handler's stage with that class. Then either:
//! - the stage admits it: [`Handler::handle`] runs later on the stage's pool and its
//!   [`Response`] is sent in request order on the connection; or
//! - the stage refuses it (admission `Rejected` or queue `Full`): the registration's
//!   [`OverloadAction`] answers at once on the parsing thread: a `503` with
//!   `Retry-After`, a `302` redirect, or [`Handler::degrade`]. The connection stays
//!   usable in every case.
//!
//! A panic inside `handle` is caught by the stage; the client gets a `500`.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use seda::Class;
use seda::admission::AdmissionPolicy;
use seda::control::ThreadPoolConfig;

use crate::proto::{Status, Version};

/// A request as a dynamic handler sees it: owned, decoded, with its body.
#[derive(Clone, Debug)]
pub struct Request {
    /// Method token, e.g. `GET`.
    pub method: String,
    /// Percent-decoded path (lossy UTF-8).
    pub path: String,
    /// Raw query string after `?`, still encoded (empty if none).
    pub query: String,
    /// Protocol version.
    pub version: Version,
    /// Header fields in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body (`Content-Length` bytes; empty for none).
    pub body: Bytes,
    /// Address of the client.
    pub peer: Option<SocketAddr>,
}

impl Request {
    /// A GET request for `path_and_query` (useful in tests of handlers).
    pub fn get(path_and_query: &str) -> Request {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Request {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            version: Version::Http11,
            headers: Vec::new(),
            body: Bytes::new(),
            peer: None,
        }
    }

    /// The first header field named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The decoded value of query parameter `name` (`+` read as space).
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = crate::proto::percent_decode(k.replace('+', " ").as_bytes())?;
            (k == name.as_bytes()).then(|| {
                let v = crate::proto::percent_decode(v.replace('+', " ").as_bytes())
                    .unwrap_or_default();
                String::from_utf8_lossy(&v).into_owned()
            })
        })
    }
}

/// A response from a dynamic handler. `Content-Length`, `Date`, `Server` and
/// `Connection` are added by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status.
    pub status: Status,
    /// Extra header fields.
    pub headers: Vec<(String, String)>,
    /// Body (ignored for HEAD and bodiless statuses).
    pub body: Bytes,
}

impl Response {
    /// A response with a status, no fields and an empty body.
    pub fn new(status: Status) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// `200 OK` with a content type and a body.
    pub fn ok(content_type: &str, body: impl Into<Bytes>) -> Self {
        Response::new(Status::OK)
            .with_header("Content-Type", content_type)
            .with_body(body)
    }

    /// A `text/plain` response.
    pub fn text(status: Status, body: impl Into<Bytes>) -> Self {
        Response::new(status)
            .with_header("Content-Type", "text/plain; charset=utf-8")
            .with_body(body)
    }

    /// The overload answer: `503 Service Unavailable`, `Retry-After` in seconds, a
    /// short body.
    pub fn unavailable(retry_after_secs: u32) -> Self {
        Response::text(
            Status::SERVICE_UNAVAILABLE,
            "503 Service Unavailable: the server is overloaded, retry later\n",
        )
        .with_header("Retry-After", &retry_after_secs.to_string())
    }

    /// A `302 Found` redirect.
    pub fn redirect(location: &str) -> Self {
        Response::text(Status::FOUND, "302 Found\n").with_header("Location", location)
    }

    /// The same response with one more header field.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same response with another body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }
}

/// What a handler can see of its stage: the hooks service degradation needs
/// (USITS'03 3.4).
pub struct HandlerContext<'a> {
    pub(crate) cx: &'a seda::Context<'a>,
}

impl fmt::Debug for HandlerContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerContext")
            .field("stage", &self.cx.stage_name())
            .finish()
    }
}

impl HandlerContext<'_> {
    /// Name of the handler's stage.
    pub fn stage_name(&self) -> &str {
        self.cx.stage_name()
    }

    /// The request's metadata: `born` (when its bytes arrived), class.
    pub fn meta(&self) -> seda::Meta {
        self.cx.meta()
    }

    /// The stage's current 90th-percentile response time estimate.
    pub fn p90(&self) -> Option<std::time::Duration> {
        self.cx.p90()
    }

    /// The stage's response-time target, if its admission policy has one.
    pub fn rt_target(&self) -> Option<std::time::Duration> {
        self.cx.rt_target()
    }

    /// Whether the stage's admission control is on.
    pub fn admission_enabled(&self) -> bool {
        self.cx.admission_enabled()
    }

    /// Switches the stage's admission control on or off.
    pub fn set_admission_enabled(&self, on: bool) {
        self.cx.set_admission_enabled(on);
    }

    /// Requests waiting in the stage's queue.
    pub fn queue_len(&self) -> usize {
        self.cx.queue_len()
    }

    /// Requests the stage's admission control has refused since it started.
    pub fn rejected(&self) -> u64 {
        self.cx.rejected()
    }
}

/// A dynamic request handler. Called concurrently from the stage's pool; see the
/// module docs for the call order.
pub trait Handler: Send + Sync + 'static {
    /// Called once when the handler's stage starts, before the first request (e.g.
    /// to switch admission control off until degradation has run its course).
    fn init(&self, _cx: &HandlerContext<'_>) {}

    /// Produces the response to one request.
    fn handle(&self, req: &Request, cx: &HandlerContext<'_>) -> Response;

    /// A cheap response used when the stage is overloaded and the registration's
    /// action is [`OverloadAction::Degrade`]. Runs on the parsing thread: it must be
    /// fast and must not block. The default is the 503 answer.
    fn degrade(&self, _req: &Request) -> Response {
        Response::unavailable(1)
    }

    /// The handler's current automatic service quality in `[0, 1]` (USITS'03 3.4), if
    /// it degrades service; shown as `quality` in `/_seda/stats`.
    fn quality(&self) -> Option<f64> {
        None
    }
}

impl<F> Handler for F
where
    F: Fn(&Request, &HandlerContext<'_>) -> Response + Send + Sync + 'static,
{
    fn handle(&self, req: &Request, cx: &HandlerContext<'_>) -> Response {
        self(req, cx)
    }
}

/// What the client gets when a handler's stage refuses a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OverloadAction {
    /// `503 Service Unavailable` with `Retry-After: secs` and a short body.
    Reject503 {
        /// Value of `Retry-After`, seconds.
        retry_after_secs: u32,
    },
    /// `302 Found` to another URL (another server, a static "busy" page).
    Redirect(String),
    /// The handler's [`Handler::degrade`] response.
    Degrade,
}

impl Default for OverloadAction {
    fn default() -> Self {
        OverloadAction::Reject503 {
            retry_after_secs: 1,
        }
    }
}

/// Maps a request to its priority class (0 lowest).
pub type Classifier = Arc<dyn Fn(&Request) -> Class + Send + Sync>;

/// One handler mounted at a URL prefix, with the settings of its stage.
#[derive(Clone)]
pub struct HandlerRegistration {
    pub(crate) name: String,
    pub(crate) prefix: String,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) admission: Option<Arc<dyn AdmissionPolicy>>,
    pub(crate) classifier: Option<Classifier>,
    pub(crate) pool: ThreadPoolConfig,
    pub(crate) capacity: usize,
    pub(crate) on_overload: OverloadAction,
}

impl fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("admission", &self.admission.as_ref().map(|a| a.name()))
            .field("capacity", &self.capacity)
            .field("on_overload", &self.on_overload)
            .finish_non_exhaustive()
    }
}

impl HandlerRegistration {
    /// Mounts `handler` at `prefix` (a decoded path prefix such as `/app`, matching
    /// `/app` and `/app/...` but not `/apple`). The stage is named `handler:<name>`,
    /// with `name` the prefix without its leading slash. Defaults: queue of 1024, one
    /// to eight threads sized by the thread-pool controller, no admission policy, class
    /// 0, `Reject503` with `Retry-After: 1`.
    pub fn new(prefix: &str, handler: impl Handler) -> Self {
        Self::shared(prefix, Arc::new(handler))
    }

    /// As [`HandlerRegistration::new`] with a handler shared with the caller.
    pub fn shared(prefix: &str, handler: Arc<dyn Handler>) -> Self {
        let prefix = format!("/{}", prefix.trim_matches('/'));
        let name = match prefix.trim_start_matches('/') {
            "" => "root".to_owned(),
            p => p.replace('/', "_"),
        };
        HandlerRegistration {
            name,
            prefix,
            handler,
            admission: None,
            classifier: None,
            pool: ThreadPoolConfig::default()
                .with_min_threads(1)
                .with_max_threads(8)
                .with_queue_threshold(10),
            capacity: 1024,
            on_overload: OverloadAction::default(),
        }
    }

    /// Name of the handler (its stage is `handler:<name>`).
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Admission policy of the handler's stage (e.g. the response-time controller).
    #[must_use]
    pub fn admission(mut self, policy: Arc<dyn AdmissionPolicy>) -> Self {
        self.admission = Some(policy);
        self
    }

    /// Classifier of requests into priority classes for the admission policy.
    #[must_use]
    pub fn classify(mut self, f: impl Fn(&Request) -> Class + Send + Sync + 'static) -> Self {
        self.classifier = Some(Arc::new(f));
        self
    }

    /// Thread-pool bounds and controller settings of the stage.
    #[must_use]
    pub fn thread_pool(mut self, pool: ThreadPoolConfig) -> Self {
        self.pool = pool;
        self
    }

    /// Queue capacity of the stage (at least 1).
    #[must_use]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// What an overloaded stage answers.
    #[must_use]
    pub fn on_overload(mut self, action: OverloadAction) -> Self {
        self.on_overload = action;
        self
    }

    /// Stage name of this registration.
    pub fn stage_name(&self) -> String {
        format!("handler:{}", self.name)
    }

    /// The mount prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn matches(&self, path: &str) -> bool {
        self.prefix == "/"
            || path
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    pub(crate) fn overload_response(&self, req: &Request) -> Response {
        match &self.on_overload {
            OverloadAction::Reject503 { retry_after_secs } => {
                Response::unavailable(*retry_after_secs)
            }
            OverloadAction::Redirect(url) => Response::redirect(url),
            OverloadAction::Degrade => self.handler.degrade(req),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matching() {
        let r = HandlerRegistration::new("/app/", |_: &Request, _: &HandlerContext<'_>| {
            Response::new(Status::OK)
        });
        assert_eq!(r.prefix(), "/app");
        assert_eq!(r.stage_name(), "handler:app");
        assert!(
            r.matches("/app") && r.matches("/app/x") && !r.matches("/apple") && !r.matches("/")
        );
    }

    #[test]
    fn query_params_and_headers() {
        let mut req = Request::get("/x?a=1&b=hello+w%6Frld&c");
        req.headers.push(("X-Class".into(), b"2".to_vec()));
        assert_eq!(req.query_param("b").as_deref(), Some("hello world"));
        assert_eq!(req.query_param("c").as_deref(), Some(""));
        assert_eq!(req.query_param("d"), None);
        assert_eq!(req.header("x-class"), Some(&b"2"[..]));
    }

    #[test]
    fn overload_actions() {
        struct H;
        impl Handler for H {
            fn handle(&self, _: &Request, _: &HandlerContext<'_>) -> Response {
                Response::new(Status::OK)
            }
            fn degrade(&self, _: &Request) -> Response {
                Response::text(Status::OK, "cheap")
            }
        }
        let req = Request::get("/h");
        let r = HandlerRegistration::new("/h", H);
        let resp = r.overload_response(&req);
        assert_eq!(resp.status, Status::SERVICE_UNAVAILABLE);
        assert!(
            resp.headers
                .iter()
                .any(|(n, v)| n == "Retry-After" && v == "1")
        );
        let r = r.on_overload(OverloadAction::Redirect("http://elsewhere/".into()));
        assert_eq!(r.overload_response(&req).status, Status::FOUND);
        let r = r.on_overload(OverloadAction::Degrade);
        assert_eq!(&r.overload_response(&req).body[..], b"cheap");
    }
}
