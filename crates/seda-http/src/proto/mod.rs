//! The HTTP/1.x protocol layer, pure and free of the runtime: request parsing with
//! limits, chunked body decoding (the `seda-chunked` crate, re-exported here), path translation, MIME types, the cached `Date`
//! header, validators (ETag, Last-Modified), conditional GET, byte ranges, and
//! response heads.
//!
//! Everything here is a function of its inputs (and the clock, for `Date`; the file
//! system, for [`translate`]), so the stages of the server are thin and the protocol
//! is unit-tested, property-tested and fuzzed on its own.

mod date;
mod mime;
mod path;
mod request;
mod response;
mod status;

pub use date::{DateCache, http_date};
pub use mime::content_type;
pub use path::{
    Dotfiles, PathError, Translation, percent_decode, remove_dot_segments, slash_location,
    translate, url_to_relative,
};
pub use request::{
    BodyFraming, Limits, MAX_HEADERS, Method, ParseError, RequestHead, Version, parse_head,
    skip_leading_crlf,
};
pub use response::{
    ByteRange, Conditional, RangeRequest, Validators, etag_matches, evaluate_conditional,
    parse_range, write_head,
};
pub use seda_chunked::{ChunkLimits, ChunkedDecoder, ChunkedError, Fed};
pub use status::Status;
