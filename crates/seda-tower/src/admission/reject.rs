//! What a refused request becomes: a `503 Service Unavailable` with `Retry-After` for
//! HTTP services, the service's own error type for the others.

use http::{HeaderValue, StatusCode, header};

use super::error::Overloaded;

/// Turns a refusal into the inner service's result type.
///
/// Implemented by [`RejectWithError`] (the default), [`ServiceUnavailable`] and closures
/// `Fn(Overloaded) -> Result<T, E>` (a custom response, a redirect, a degraded page).
/// It runs in `call`, on the request path, so it must not block.
pub trait Reject<T, E> {
    /// The result the caller gets instead of the inner service's.
    fn reject(&self, overloaded: Overloaded) -> Result<T, E>;
}

impl<T, E, F> Reject<T, E> for F
where
    F: Fn(Overloaded) -> Result<T, E>,
{
    fn reject(&self, overloaded: Overloaded) -> Result<T, E> {
        self(overloaded)
    }
}

/// Fails a refused request with [`Overloaded`] converted into the service's error type
/// (`E: From<Overloaded>`, e.g. `tower::BoxError`), like `tower::load_shed` does.
#[derive(Clone, Copy, Debug, Default)]
pub struct RejectWithError;

impl<T, E: From<Overloaded>> Reject<T, E> for RejectWithError {
    fn reject(&self, overloaded: Overloaded) -> Result<T, E> {
        Err(E::from(overloaded))
    }
}

/// Answers a refused request with [`service_unavailable`]: the overload answer SEDA's
/// Haboob gives (USITS'03 4.2), so a client or a load balancer (`retry-on 503`) can
/// try again later or elsewhere. Works for any `http::Response<B>` whose body can be
/// made from a `&'static str` (axum's `Body`, hyper's `Full<Bytes>`, `String`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceUnavailable;

impl<B, E> Reject<http::Response<B>, E> for ServiceUnavailable
where
    B: From<&'static str>,
{
    fn reject(&self, overloaded: Overloaded) -> Result<http::Response<B>, E> {
        Ok(service_unavailable(&overloaded))
    }
}

/// Body of the overload answer.
const BODY: &str = "503 Service Unavailable: the server is overloaded, retry later\n";

/// The overload answer: `503 Service Unavailable`, `Retry-After` in whole seconds
/// (rounded up, [`Overloaded::retry_after_secs`]), `Cache-Control: no-store` (a shed
/// request must not be cached as the page), and a short plain-text body.
pub fn service_unavailable<B: From<&'static str>>(overloaded: &Overloaded) -> http::Response<B> {
    let mut res = http::Response::new(B::from(BODY));
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = res.headers_mut();
    h.insert(
        header::RETRY_AFTER,
        HeaderValue::from(overloaded.retry_after_secs()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}
