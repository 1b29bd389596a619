//! HTTP status codes and their reason phrases: a leaf that the path, request and
//! response modules share.

use std::fmt;

/// An HTTP status code with its reason phrase.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(u16);

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.reason())
    }
}

impl Status {
    /// 100
    pub const CONTINUE: Status = Status(100);
    /// 200
    pub const OK: Status = Status(200);
    /// 206
    pub const PARTIAL_CONTENT: Status = Status(206);
    /// 301
    pub const MOVED_PERMANENTLY: Status = Status(301);
    /// 302
    pub const FOUND: Status = Status(302);
    /// 304
    pub const NOT_MODIFIED: Status = Status(304);
    /// 400
    pub const BAD_REQUEST: Status = Status(400);
    /// 403
    pub const FORBIDDEN: Status = Status(403);
    /// 404
    pub const NOT_FOUND: Status = Status(404);
    /// 405
    pub const METHOD_NOT_ALLOWED: Status = Status(405);
    /// 408
    pub const REQUEST_TIMEOUT: Status = Status(408);
    /// 413
    pub const PAYLOAD_TOO_LARGE: Status = Status(413);
    /// 414
    pub const URI_TOO_LONG: Status = Status(414);
    /// 416
    pub const RANGE_NOT_SATISFIABLE: Status = Status(416);
    /// 417
    pub const EXPECTATION_FAILED: Status = Status(417);
    /// 431
    pub const HEADERS_TOO_LARGE: Status = Status(431);
    /// 500
    pub const INTERNAL_SERVER_ERROR: Status = Status(500);
    /// 501
    pub const NOT_IMPLEMENTED: Status = Status(501);
    /// 503
    pub const SERVICE_UNAVAILABLE: Status = Status(503);
    /// 502
    pub const BAD_GATEWAY: Status = Status(502);
    /// 504
    pub const GATEWAY_TIMEOUT: Status = Status(504);
    /// 505
    pub const VERSION_NOT_SUPPORTED: Status = Status(505);

    /// A status from its code; `None` outside 100..=599.
    pub fn from_code(code: u16) -> Option<Status> {
        (100..=599).contains(&code).then_some(Status(code))
    }

    /// The numeric code.
    pub fn code(self) -> u16 {
        self.0
    }

    /// The standard reason phrase (empty for codes without one).
    pub fn reason(self) -> &'static str {
        match self.0 {
            100 => "Continue",
            200 => "OK",
            201 => "Created",
            202 => "Accepted",
            204 => "No Content",
            206 => "Partial Content",
            301 => "Moved Permanently",
            302 => "Found",
            303 => "See Other",
            304 => "Not Modified",
            307 => "Temporary Redirect",
            308 => "Permanent Redirect",
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            409 => "Conflict",
            411 => "Length Required",
            413 => "Content Too Large",
            414 => "URI Too Long",
            416 => "Range Not Satisfiable",
            417 => "Expectation Failed",
            429 => "Too Many Requests",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            501 => "Not Implemented",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            505 => "HTTP Version Not Supported",
            _ => "",
        }
    }

    /// Whether a response with this status never has a body (1xx, 204, 304).
    pub fn bodiless(self) -> bool {
        self.0 < 200 || self.0 == 204 || self.0 == 304
    }
}
