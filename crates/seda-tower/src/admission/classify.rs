//! Classifiers: from a request to its class (USITS'03 3.3) and, when known, the instant
//! it entered the service.
//!
//! Classes are `seda::Class` values, 0 the lowest priority: a multiclass policy cuts
//! lower classes first. Classes come from whatever the application trusts: a header
//! set by a proxy, an extension set by an authentication middleware, a closure over
//! the request.

use std::time::Instant;

use http::HeaderName;
use seda::Class;

/// Assigns a request its class, and optionally the instant it entered the service.
///
/// Implemented for closures `Fn(&Req) -> Class` (which report no `born`), for
/// [`SingleClass`], and for the HTTP classifiers [`ClassHeader`] and
/// [`ClassExtension`], which read `born` from the [`Born`] extension.
pub trait Classify<Req> {
    /// The request's class; 0 is the lowest priority.
    fn class(&self, req: &Req) -> Class;

    /// When the request entered the service, if something earlier than this layer saw
    /// it (the accept loop, an outer middleware, a proxy's timestamp). Response times
    /// are then measured from there, as USITS'03 3.2 measures them from the request's
    /// arrival; `None` measures from the moment the layer sees the request.
    fn born(&self, _req: &Req) -> Option<Instant> {
        None
    }
}

impl<Req, F> Classify<Req> for F
where
    F: Fn(&Req) -> Class,
{
    fn class(&self, req: &Req) -> Class {
        self(req)
    }
}

/// Every request is class 0 (the single-class controller of USITS'03 3.2).
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleClass;

impl<Req> Classify<Req> for SingleClass {
    fn class(&self, _req: &Req) -> Class {
        0
    }
}

/// A request's class, put into the request's extensions by a middleware that knows the
/// user (authentication, a session cookie); read by [`ClassExtension`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestClass(pub Class);

/// When a request entered the service, put into the request's extensions by whoever
/// saw it first; read by [`ClassExtension`] and [`ClassHeader`]. An instant later than
/// the moment the layer sees the request is taken as that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Born(pub Instant);

fn born_of<B>(req: &http::Request<B>) -> Option<Instant> {
    req.extensions().get::<Born>().map(|b| b.0)
}

/// Class from the [`RequestClass`] extension (a default class when it is absent);
/// `born` from the [`Born`] extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassExtension {
    default: Class,
}

impl ClassExtension {
    /// Requests without a [`RequestClass`] extension get class `default`.
    pub fn or(default: Class) -> Self {
        Self { default }
    }
}

impl<B> Classify<http::Request<B>> for ClassExtension {
    fn class(&self, req: &http::Request<B>) -> Class {
        req.extensions()
            .get::<RequestClass>()
            .map_or(self.default, |c| c.0)
    }

    fn born(&self, req: &http::Request<B>) -> Option<Instant> {
        born_of(req)
    }
}

/// Class from a request header holding a decimal class number (`x-class: 1`); `born`
/// from the [`Born`] extension.
///
/// A missing or malformed header gives the default class (0 unless set), a number above
/// [`max_class`](Self::max_class) gives that maximum. A header the client can set is a
/// header the client can lie in: let a trusted proxy set it (and strip the client's),
/// or cap it with `max_class`.
#[derive(Clone, Debug)]
pub struct ClassHeader {
    name: HeaderName,
    default: Class,
    max: Class,
}

impl ClassHeader {
    /// Reads the class from header `name`.
    ///
    /// # Panics
    /// If `name` is not a valid header name (use
    /// [`from_header`](Self::from_header) for names known only at run time).
    pub fn new(name: &'static str) -> Self {
        Self::from_header(HeaderName::from_static(name))
    }

    /// Reads the class from this header.
    pub fn from_header(name: HeaderName) -> Self {
        Self {
            name,
            default: 0,
            max: Class::MAX,
        }
    }

    /// Class of requests without the header, or with a value that is not a number.
    #[must_use]
    pub fn default_class(mut self, class: Class) -> Self {
        self.default = class;
        self
    }

    /// Highest class a request can claim; higher values are lowered to it.
    #[must_use]
    pub fn max_class(mut self, class: Class) -> Self {
        self.max = class;
        self
    }
}

impl<B> Classify<http::Request<B>> for ClassHeader {
    fn class(&self, req: &http::Request<B>) -> Class {
        let parsed = req
            .headers()
            .get(&self.name)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
            .and_then(|s| s.trim().parse::<u64>().ok());
        match parsed {
            Some(n) => Class::try_from(n).unwrap_or(Class::MAX).min(self.max),
            None => self.default.min(self.max),
        }
    }

    fn born(&self, req: &http::Request<B>) -> Option<Instant> {
        born_of(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(header: Option<&str>) -> http::Request<()> {
        let mut b = http::Request::builder();
        if let Some(v) = header {
            b = b.header("x-class", v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn header_values_parse_clamp_and_default() {
        let k = ClassHeader::new("x-class").default_class(1).max_class(2);
        assert_eq!(k.class(&req(Some("0"))), 0);
        assert_eq!(k.class(&req(Some(" 2 "))), 2);
        assert_eq!(k.class(&req(Some("7"))), 2, "clamped to max_class");
        assert_eq!(
            k.class(&req(Some("99999999999"))),
            2,
            "huge numbers clamp too"
        );
        assert_eq!(k.class(&req(Some("gold"))), 1, "malformed: default");
        assert_eq!(k.class(&req(Some("-1"))), 1, "negative: default");
        assert_eq!(k.class(&req(None)), 1, "missing: default");
    }

    #[test]
    fn extension_class_and_born() {
        let t = Instant::now();
        let mut r = req(None);
        assert_eq!(ClassExtension::or(4).class(&r), 4);
        assert_eq!(ClassExtension::default().born(&r), None);
        r.extensions_mut().insert(RequestClass(9));
        r.extensions_mut().insert(Born(t));
        assert_eq!(ClassExtension::or(4).class(&r), 9);
        assert_eq!(ClassExtension::default().born(&r), Some(t));
        assert_eq!(ClassHeader::new("x-class").born(&r), Some(t));
    }

    #[test]
    fn closures_classify() {
        let k = |r: &String| -> Class { u8::from(r.starts_with("vip")) };
        assert_eq!(k.class(&"vip-1".to_owned()), 1);
        assert_eq!(Classify::<String>::born(&k, &"x".to_owned()), None);
        assert_eq!(Classify::<u32>::class(&SingleClass, &5), 0);
    }
}
