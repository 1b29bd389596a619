//! The behaviour of the one owned request type that travels through Haboob's stages
//! ([`HttpRequest`], defined with the other events in `events.rs`): stages read what
//! they need through accessors; a dynamic handler gets the decoded, owned
//! [`Request`] built from it.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::answer::Conditions;
use super::events::{HttpRequest, Route};
use crate::handler::Request;
#[cfg(test)]
use crate::proto::Version;
use crate::proto::{self, Method, RequestHead};

impl HttpRequest {
    pub(crate) fn new(
        raw: Bytes,
        head: RequestHead,
        body: Bytes,
        peer: SocketAddr,
        route: Option<Arc<Route>>,
    ) -> Self {
        HttpRequest {
            raw,
            head,
            body,
            peer,
            route,
        }
    }

    pub(crate) fn method(&self) -> Method {
        self.head.method
    }

    /// The head's bytes and its parse (a proxy forwards them).
    pub(crate) fn head(&self) -> (&Bytes, &RequestHead) {
        (&self.raw, &self.head)
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The path, still percent-encoded.
    pub(crate) fn path(&self) -> &[u8] {
        self.head.path(&self.raw)
    }

    /// The query, still percent-encoded (empty if none).
    pub(crate) fn query(&self) -> Bytes {
        self.slice(Some(&self.head.query)).unwrap_or_default()
    }

    fn slice(&self, r: Option<&std::ops::Range<usize>>) -> Option<Bytes> {
        let r = r?;
        (r.end <= self.raw.len()).then(|| self.raw.slice(r.clone()))
    }

    /// The validators and range a static answer depends on; `None` (no
    /// allocation) for the common request that sends none of them.
    pub(crate) fn conditions(&self) -> Option<Box<Conditions>> {
        let h = &self.head;
        if h.if_none_match.is_none()
            && h.if_modified_since.is_none()
            && h.range.is_none()
            && h.if_range.is_none()
        {
            return None;
        }
        Some(Box::new(Conditions {
            if_none_match: self.slice(h.if_none_match.as_ref()),
            if_modified_since: self.slice(h.if_modified_since.as_ref()),
            range: self.slice(h.range.as_ref()),
            if_range: self.slice(h.if_range.as_ref()),
        }))
    }

    /// The decoded, owned request a dynamic handler gets.
    pub(crate) fn to_handler_request(&self) -> Request {
        let raw_path = self.path();
        let decoded = proto::percent_decode(raw_path).unwrap_or_else(|| raw_path.to_vec());
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Request {
            method: text(self.head.get(&self.raw, &self.head.method_token)),
            path: text(&decoded),
            query: text(self.head.get(&self.raw, &self.head.query)),
            version: self.head.version,
            headers: self
                .head
                .fields(&self.raw)
                .map(|(n, v)| (text(n), v.to_vec()))
                .collect(),
            body: self.body.clone(),
            peer: Some(self.peer),
        }
    }

    #[cfg(test)]
    pub(crate) fn version(&self) -> Version {
        self.head.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Limits, parse_head};

    #[test]
    fn handler_view_is_decoded_and_complete() {
        let raw = Bytes::from_static(
            b"POST /a%20b?q=1 HTTP/1.1\r\nHost: h\r\nX-T:  v \r\nContent-Length: 2\r\n\r\n",
        );
        let head = parse_head(&raw, &Limits::default()).unwrap().unwrap();
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let req = HttpRequest::new(raw, head, Bytes::from_static(b"hi"), peer, None);
        assert_eq!(req.version(), Version::Http11);
        assert_eq!(req.path(), b"/a%20b");
        let r = req.to_handler_request();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/a b", "q=1")
        );
        assert_eq!(r.header("x-t"), Some(&b"v"[..]));
        assert_eq!(r.headers.len(), 3);
        assert_eq!(&r.body[..], b"hi");
    }
}
