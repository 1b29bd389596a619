//! Incremental HTTP/1.x request-head parser over `httparse`, with limits and the
//! framing rules of RFC 9112.
//!
//! The HttpParse stage (SEDA 5.1) keeps one buffer per connection and calls
//! [`parse_head`] each time bytes arrive. A call either finds a complete request head
//! at the front of the buffer, says more bytes are needed, or fails with the status the
//! client must get. The head it returns holds no borrow: every piece is a byte range
//! of the buffer it was parsed from, so the server can keep the bytes in a shared
//! buffer and the parser stays a pure function of its input (fuzzed as such).
//!
//! # Framing rules (RFC 9112 2.2, 3, 6; RFC 9110 7.2, 10.1.1)
//! - Header lines end with CRLF only: a bare LF anywhere in the head is a 400, so a
//!   field hidden behind one cannot mean one thing here and another to a CRLF-only
//!   parser in front of us.
//! - `Transfer-Encoding: chunked` (as the final and only coding) frames the body;
//!   another coding is a 501; `Transfer-Encoding` together with `Content-Length`,
//!   or in an HTTP/1.0 request, is a 400 (a smuggling vector), as are conflicting
//!   `Content-Length` values. A field whose name spells one of the two in its letters
//!   without being it (`Transfer_Encoding`, `Content--Length`) is a 400 too: a peer
//!   that folds `_` into `-` would frame the body by it.
//! - `HTTP/1.x` with `x > 1` is handled as HTTP/1.1 (RFC 9110 2.5); other versions
//!   are a 505.
//! - An HTTP/1.1 request needs exactly one valid `Host` (a `uri-host [":" port]`);
//!   missing, repeated or invalid is a 400.
//! - `Expect: 100-continue` is reported to the caller (an HTTP/1.0 request's is
//!   ignored); any other expectation is a 417.
//! - The path's dot segments are removed here (RFC 3986 5.2.4, [`RequestHead::path`]),
//!   before anything keys on it; a path that climbs above the root is a 400.
//!
//! # Invariants
//! - Never panics, whatever the bytes (proptests and the fuzz target check this).
//! - A head that is still incomplete is bounded: once the request line passes
//!   `max_request_line` bytes without its end the answer is 414, once the head passes
//!   `max_head_bytes` it is 431, so a connection cannot grow its buffer without bound.
//! - The answer does not depend on how the bytes arrived: for every prefix of a
//!   buffer the answer is "incomplete" or the answer for the whole buffer (the
//!   `request_head` fuzz target checks this).
//! - Every range of a parsed head lies inside `..head_len`, and `head_len` is at most
//!   `max_head_bytes`.

use std::borrow::Cow;
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Range;

use super::Status;
use super::path::remove_dot_segments;

/// Limits on one request head and body. Every size is in bytes.
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Longest request line (method, target, version); longer is 414. Default 8 KiB.
    pub max_request_line: usize,
    /// Longest head (request line and headers); longer is 431. Default 16 KiB.
    pub max_head_bytes: usize,
    /// Most header fields; more is 431. Default 64, at most [`MAX_HEADERS`].
    pub max_headers: usize,
    /// Largest request body accepted (`Content-Length`, or the decoded chunked
    /// body); larger is 413. Default 1 MiB.
    pub max_body: u64,
}

crate::setters::setters!(Limits {
    with_max_request_line: max_request_line: usize,
    with_max_head_bytes: max_head_bytes: usize,
    with_max_headers: max_headers: usize,
    with_max_body: max_body: u64,
});

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_body: 1024 * 1024,
        }
    }
}

/// Hard upper bound of [`Limits::max_headers`] (the parser's stack scratch).
pub const MAX_HEADERS: usize = 128;

/// HTTP version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0
    Http10,
    /// HTTP/1.1 (and later 1.x minor versions, handled as 1.1)
    Http11,
}

impl Version {
    /// `"HTTP/1.0"` or `"HTTP/1.1"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// Request method. The registered methods of RFC 9110 9.3 (and PATCH) are known;
/// any other token is `Other`, which the static server answers with 501.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
    /// OPTIONS
    Options,
    /// TRACE
    Trace,
    /// CONNECT
    Connect,
    /// PATCH (RFC 5789)
    Patch,
    /// Any other token.
    Other,
}

impl Method {
    /// The method of a token (case-sensitive, RFC 9110 9.1).
    pub fn from_token(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
}

/// How a request's body is delimited (RFC 9112 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// `Content-Length` bytes (more than zero).
    Length(u64),
    /// `Transfer-Encoding: chunked`; decode with [`super::ChunkedDecoder`].
    Chunked,
}

/// Why a request head could not be parsed; each maps to the status the client must
/// get. After any of these the connection is closed, since the stream can no longer
/// be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Malformed request: 400.
    Malformed,
    /// Request line or target too long: 414.
    UriTooLong,
    /// Head too large or too many header fields: 431.
    HeadersTooLarge,
    /// HTTP/2 or another major version than 1: 505.
    VersionNotSupported,
    /// Body larger than [`Limits::max_body`]: 413.
    BodyTooLarge,
    /// A transfer coding other than `chunked`: 501.
    TransferEncoding,
    /// An expectation other than `100-continue`: 417.
    Expectation,
}

impl ParseError {
    /// The status to answer with.
    pub fn status(self) -> Status {
        match self {
            ParseError::Malformed => Status::BAD_REQUEST,
            ParseError::UriTooLong => Status::URI_TOO_LONG,
            ParseError::HeadersTooLarge => Status::HEADERS_TOO_LARGE,
            ParseError::VersionNotSupported => Status::VERSION_NOT_SUPPORTED,
            ParseError::BodyTooLarge => Status::PAYLOAD_TOO_LARGE,
            ParseError::TransferEncoding => Status::NOT_IMPLEMENTED,
            ParseError::Expectation => Status::EXPECTATION_FAILED,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.status();
        write!(f, "{} {}", s.code(), s.reason())
    }
}

impl std::error::Error for ParseError {}

/// A parsed request head: every piece is a range of the buffer given to
/// [`parse_head`] (read them with [`RequestHead::get`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Classified method.
    pub method: Method,
    /// The method token.
    pub method_token: Range<usize>,
    /// Path part of the target as sent, still percent-encoded: starts with `/`, or
    /// is `*` for `OPTIONS *`, or is empty for an absolute-form target without a
    /// path (which means `/`). Read the path the server acts on with
    /// [`RequestHead::path`], which has its dot segments removed.
    pub path: Range<usize>,
    /// The path with its dot segments removed ([`remove_dot_segments`]), when that
    /// changed it (rare: `None` for a path without `.` or `..` segments).
    pub normalized_path: Option<Box<[u8]>>,
    /// Query string after `?`, still encoded (empty if none).
    pub query: Range<usize>,
    /// Protocol version.
    pub version: Version,
    /// Whether the connection stays open after the response (HTTP/1.1 default yes,
    /// HTTP/1.0 default no; the `Connection` header overrides).
    pub keep_alive: bool,
    /// How the body is delimited.
    pub body: BodyFraming,
    /// The client sent `Expect: 100-continue` (HTTP/1.1 only) and waits for an
    /// interim `100 Continue` before it sends the body.
    pub expect_continue: bool,
    /// Bytes of the head, including the blank line; the body starts here.
    pub head_len: usize,
    /// `Host` value.
    pub host: Option<Range<usize>>,
    /// `If-None-Match` value.
    pub if_none_match: Option<Range<usize>>,
    /// `If-Modified-Since` value.
    pub if_modified_since: Option<Range<usize>>,
    /// `Range` value.
    pub range: Option<Range<usize>>,
    /// `If-Range` value.
    pub if_range: Option<Range<usize>>,
}

impl RequestHead {
    /// The bytes of `r` in `buf`, the buffer this head was parsed from (empty if
    /// `buf` is shorter, never a panic).
    pub fn get<'b>(&self, buf: &'b [u8], r: &Range<usize>) -> &'b [u8] {
        buf.get(r.clone()).unwrap_or_default()
    }

    /// The path of the head in `buf`, still percent-encoded, with its dot segments
    /// removed (RFC 3986 5.2.4: `/sub/../a.txt` is `/a.txt`), `/` for an
    /// absolute-form target without one: the one spelling every cache key, route
    /// and handler sees.
    pub fn path<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        if let Some(p) = &self.normalized_path {
            return p;
        }
        match self.get(buf, &self.path) {
            b"" => b"/",
            p => p,
        }
    }

    /// Every header field of the head in `buf`, in order, as (name, value) with the
    /// value's surrounding whitespace trimmed.
    pub fn fields<'b>(&self, buf: &'b [u8]) -> impl Iterator<Item = (&'b [u8], &'b [u8])> {
        let head = buf.get(..self.head_len).unwrap_or_default();
        // The head was validated: lines end with CRLF, fields are `name: value`.
        head.split(|&c| c == b'\n').skip(1).filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&c| c == b':')?;
            Some((&line[..colon], trim(&line[colon + 1..])))
        })
    }
}

/// Parses the request head at the front of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete and within limits. Empty lines
/// before a request line (allowed by RFC 9112 2.2) must be stripped by the caller with
/// [`skip_leading_crlf`].
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, ParseError> {
    // The request line limit is checked before httparse sees the bytes, so a huge
    // target is a 414 however it ends.
    let window = &buf[..buf.len().min(limits.max_request_line.saturating_add(1))];
    let Some(line_end) = memchr(b'\n', window) else {
        // Garbage is a 400 however long it is (checked first, so that its answer does
        // not depend on how much of it arrived).
        return if !looks_like_request_start(buf) {
            Err(ParseError::Malformed)
        } else if buf.len() > limits.max_request_line {
            Err(ParseError::UriTooLong)
        } else {
            Ok(None)
        };
    };
    // The same test as for a line still arriving, so that a method token too long to
    // be one is a 400 whether or not its line end came with it.
    if !looks_like_request_start(&buf[..line_end]) {
        return Err(ParseError::Malformed);
    }
    match later_minor_version(&buf[..line_end]) {
        // `HTTP/1.2` and later: parse a copy that says 1.1 (same length, so every
        // range found in the copy is valid in `buf`). Rare, so the copy is fine.
        Some(at) => {
            let mut copy = buf[..buf.len().min(limits.max_head_bytes.saturating_add(1))].to_vec();
            copy[at] = b'1';
            parse_validated(&copy, limits)
        }
        None => parse_validated(buf, limits),
    }
}

fn parse_validated(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, ParseError> {
    let max_headers = limits.max_headers.clamp(1, MAX_HEADERS);
    let mut scratch = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    // Only the bytes a head may occupy are parsed: whatever lies past the limit (the
    // rest of an over-long head, and any error in it) is a 431 however the bytes
    // arrive, as it is when they arrive in pieces.
    let window = &buf[..buf.len().min(limits.max_head_bytes)];
    let status = match req.parse_with_uninit_headers(window, &mut scratch[..max_headers]) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(_) => return Err(ParseError::Malformed),
    };
    let head_len = match status {
        httparse::Status::Partial => {
            return if buf.len() > limits.max_head_bytes {
                Err(ParseError::HeadersTooLarge)
            } else {
                Ok(None)
            };
        }
        httparse::Status::Complete(n) => n,
    };
    if has_bare_lf(&buf[..head_len]) {
        return Err(ParseError::Malformed);
    }
    let (Some(method_str), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(ParseError::Malformed);
    };
    let at = |s: &[u8]| -> Range<usize> {
        let start = (s.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        start..start + s.len()
    };
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let method = Method::from_token(method_str.as_bytes());
    let (path, query) = split_target(target.as_bytes())?;
    if path == b"*" && method != Method::Options {
        return Err(ParseError::Malformed);
    }
    // Before anything keys on the path (RFC 3986 5.2.4; above the root: 400).
    let normalized_path = match remove_dot_segments(path).map_err(|_| ParseError::Malformed)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(p) => Some(p.into_boxed_slice()),
    };
    let mut head = RequestHead {
        method,
        method_token: at(method_str.as_bytes()),
        path: at(path),
        normalized_path,
        query: at(query),
        version,
        keep_alive: version == Version::Http11,
        body: BodyFraming::None,
        expect_continue: false,
        head_len,
        host: None,
        if_none_match: None,
        if_modified_since: None,
        range: None,
        if_range: None,
    };
    let mut length: Option<u64> = None;
    let mut chunked: Option<bool> = None;
    let mut other_coding = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&c| c == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    head.keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && version == Version::Http10 {
                    head.keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(ParseError::Malformed)?;
            if length.is_some_and(|m| m != n) {
                return Err(ParseError::Malformed);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if version == Version::Http10 {
                return Err(ParseError::Malformed);
            }
            // Codings listed over several fields concatenate (RFC 9110 5.3): the
            // body is chunked if and only if chunked is the last one, and once.
            for coding in value.split(|&c| c == b',').map(trim) {
                if chunked == Some(true) || coding.is_empty() {
                    // Anything after chunked: the message cannot be framed.
                    return Err(ParseError::Malformed);
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked = Some(true);
                } else {
                    other_coding = true;
                    chunked = Some(false);
                }
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            if head.host.is_some() || !valid_host(value) {
                return Err(ParseError::Malformed);
            }
            head.host = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"expect") {
            if version == Version::Http11 {
                if value.eq_ignore_ascii_case(b"100-continue") {
                    head.expect_continue = true;
                } else {
                    return Err(ParseError::Expectation);
                }
            }
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            head.if_none_match = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            head.if_modified_since = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"range") {
            head.range = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"if-range") {
            head.if_range = Some(at(value));
        } else if framing_near_miss(name) {
            return Err(ParseError::Malformed);
        }
    }
    // RFC 9112 3.2: an HTTP/1.1 request without Host is a 400.
    if version == Version::Http11 && head.host.is_none() {
        return Err(ParseError::Malformed);
    }
    head.body = match (chunked, length) {
        (Some(_), Some(_)) => return Err(ParseError::Malformed),
        (Some(true), None) if !other_coding => BodyFraming::Chunked,
        (Some(_), None) => return Err(ParseError::TransferEncoding),
        (None, Some(n)) if n > limits.max_body => return Err(ParseError::BodyTooLarge),
        (None, Some(0) | None) => BodyFraming::None,
        (None, Some(n)) => BodyFraming::Length(n),
    };
    if head.body == BodyFraming::None {
        head.expect_continue = false;
    }
    Ok(Some(head))
}

/// Bytes of empty lines (`\r\n` or `\n`) at the front of `buf`, which a server ignores
/// before a request line (RFC 9112 2.2).
pub fn skip_leading_crlf(buf: &[u8]) -> usize {
    buf.iter()
        .take_while(|&&c| c == b'\r' || c == b'\n')
        .count()
}

/// Whether `head` has a LF not preceded by CR.
fn has_bare_lf(head: &[u8]) -> bool {
    // Branch-free over byte pairs, so the compiler vectorises it: ~5x fewer
    // instructions than stopping at the first bare LF (a valid head has none).
    let pairs = head.iter().skip(1).zip(head.iter());
    let bad = pairs.fold(0u8, |bad, (&c, &prev)| {
        bad | u8::from((c == b'\n') & (prev != b'\r'))
    });
    bad != 0 || head.first() == Some(&b'\n')
}

/// A `Host` value: `uri-host [":" port]` (RFC 9110 7.2, RFC 3986 3.2.2), or empty.
fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if v.first() == Some(&b'[') {
        // IP-literal: "[" IPv6 or IPvFuture "]".
        let Some(close) = v.iter().position(|&c| c == b']') else {
            return false;
        };
        let inner = &v[1..close];
        if inner.is_empty()
            || !inner
                .iter()
                .all(|&c| c.is_ascii_hexdigit() || matches!(c, b':' | b'.' | b'v' | b'V'))
        {
            return false;
        }
        match &v[close + 1..] {
            [] => return true,
            [b':', port @ ..] => (&v[..0], port),
            _ => return false,
        }
    } else {
        match v.iter().rposition(|&c| c == b':') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &v[..0]),
        }
    };
    let reg_name = |c: u8| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    };
    host.iter().all(|&c| reg_name(c)) && port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
}

/// Whether a field name other than `Content-Length` and `Transfer-Encoding` spells one
/// of them in its letters (`Transfer_Encoding`, `Content--Length`): a peer in front that
/// folds `_` into `-` or drops punctuation would frame the body by it, and we would not
/// (a request-smuggling vector listed by http_desync_guardian as ambiguous).
fn framing_near_miss(name: &[u8]) -> bool {
    const LONGEST: usize = b"transferencoding".len();
    if name.len() < b"contentlength".len() {
        return false;
    }
    let mut letters = [0u8; LONGEST];
    let mut n = 0;
    for &c in name.iter().filter(|c| c.is_ascii_alphabetic()) {
        if n == LONGEST {
            return false;
        }
        letters[n] = c.to_ascii_lowercase();
        n += 1;
    }
    matches!(&letters[..n], b"contentlength" | b"transferencoding")
}

/// Where the minor digit of an `HTTP/1.x` version with `x` in 2..=9 is in a request
/// line, if it has one.
fn later_minor_version(line: &[u8]) -> Option<usize> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let v = line.len().checked_sub(8)?;
    let version = &line[v..];
    (v > 0
        && line[v - 1] == b' '
        && version.starts_with(b"HTTP/1.")
        && matches!(version[7], b'2'..=b'9'))
    .then_some(v + 7)
}

/// Whether a first line, complete or still arriving, starts as a request line can: a
/// method token of at most 32 bytes (the longest registered method has 17). Rejecting
/// garbage early keeps a confused client from waiting for a timeout.
fn looks_like_request_start(buf: &[u8]) -> bool {
    const LONGEST_METHOD: usize = 32;
    let start = &buf[..buf.len().min(LONGEST_METHOD + 1)];
    let token_end = start.iter().position(|&c| c == b' ').unwrap_or(start.len());
    token_end <= LONGEST_METHOD && start[..token_end].iter().all(|&c| c.is_ascii_graphic())
}

/// Distinguishes an unsupported but well-formed version (505) from garbage (400): a
/// 505 needs a request line of exactly three parts, so a target with a space in it
/// (`GET /a b HTTP/1.1`, where httparse reads `b` as the version) is a 400.
fn version_error(buf: &[u8]) -> ParseError {
    let line_end = memchr(b'\n', buf).unwrap_or(buf.len());
    let line = buf[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..line_end]);
    let mut parts = line.split(|&c| c == b' ');
    let (Some(_method), Some(_target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return ParseError::Malformed;
    };
    match version.strip_prefix(b"HTTP/") {
        Some([major, b'.', minor]) if major.is_ascii_digit() && minor.is_ascii_digit() => {
            ParseError::VersionNotSupported
        }
        _ => ParseError::Malformed,
    }
}

/// Splits a request target into (path, query). Origin form `/p?q`, absolute form
/// `http://host/p?q` (reduced to its path; empty when the target has none, which
/// means `/`) and `*` are accepted. A fragment is dropped.
fn split_target(target: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    if target.first() == Some(&b'/') {
        // Origin form (nearly every request): one pass finds the end of the path.
        let Some(i) = target.iter().position(|&c| c == b'?' || c == b'#') else {
            return Ok((target, &target[target.len()..]));
        };
        let (path, rest) = target.split_at(i);
        return Ok(match rest {
            [b'?', query @ ..] => (path, &query[..memchr(b'#', query).unwrap_or(query.len())]),
            _ => (path, &rest[..0]),
        });
    }
    let target = &target[..memchr(b'#', target).unwrap_or(target.len())];
    let rest = if target.first() == Some(&b'/') || target == b"*" {
        target
    } else {
        let scheme =
            |s: &[u8]| target.len() >= s.len() && target[..s.len()].eq_ignore_ascii_case(s);
        let after = if scheme(b"http://") {
            &target[7..]
        } else if scheme(b"https://") {
            &target[8..]
        } else {
            return Err(ParseError::Malformed);
        };
        let path_at = after
            .iter()
            .position(|&c| c == b'/' || c == b'?')
            .unwrap_or(after.len());
        &after[path_at..]
    };
    Ok(match memchr(b'?', rest) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &rest[rest.len()..]),
    })
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    // Vectorised (the request line is searched for its end on every request).
    memchr::memchr(needle, hay)
}

pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        if c.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests;
