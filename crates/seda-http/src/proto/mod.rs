//! The HTTP/1.x protocol layer, pure and free of the runtime: request parsing with
//! limits, path translation, MIME types, the cached `Date` header, validators
//! (ETag, Last-Modified), conditional GET, byte ranges, and response heads.
//!
//! Everything here is a function of its inputs (and the clock, for `Date`), so the
//! stages of the server are thin and the protocol is unit-tested on its own.

mod date;
mod mime;
mod path;
mod request;
mod response;

pub use date::{DateCache, http_date};
pub use mime::content_type;
pub use path::{PathError, Translation, percent_decode, translate, url_to_relative};
pub use request::{
    HeaderScratch, Limits, MAX_HEADERS, Method, ParseError, RequestHead, Version, parse_head,
    skip_leading_crlf,
};
pub use response::{
    ByteRange, Conditional, RangeRequest, Status, Validators, etag_matches, evaluate_conditional,
    parse_range, write_head,
};
