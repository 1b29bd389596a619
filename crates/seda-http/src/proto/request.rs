//! Incremental HTTP/1.x request-head parser over `httparse`, with limits.
//!
//! The HttpParse stage (SEDA 5.1) keeps one buffer per connection and calls
//! [`parse_head`] each time bytes arrive. A call either finds a complete request head
//! at the front of the buffer, says more bytes are needed, or fails with the status the
//! client must get. Several pipelined requests in one buffer are parsed by calling it
//! again on the bytes after the previous request's head and body.
//!
//! # Invariants
//! - Never panics, whatever the bytes (a proptest checks this).
//! - A head that is still incomplete is bounded: once the request line passes
//!   `max_request_line` bytes without its end the answer is 414, once the head passes
//!   `max_head_bytes` it is 431, so a connection cannot grow its buffer without bound.
//! - `head_len` of a parsed head is at most `max_head_bytes`.

use std::fmt;

use super::Status;

/// Limits on one request head and body. Every size is in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line (method, target, version); longer is 414. Default 8 KiB.
    pub max_request_line: usize,
    /// Longest head (request line and headers); longer is 431. Default 16 KiB.
    pub max_head_bytes: usize,
    /// Most header fields; more is 431. Default 64, at most [`MAX_HEADERS`].
    pub max_headers: usize,
    /// Largest request body accepted (`Content-Length`); larger is 413. Default 1 MiB.
    pub max_body: u64,
}

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
    /// HTTP/1.1
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

/// Request method; the static server answers `Get` and `Head`, others get 405.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// Any other token (PUT, DELETE, OPTIONS, ...).
    Other,
}

impl Method {
    fn from_token(m: &str) -> Method {
        match m {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            _ => Method::Other,
        }
    }
}

/// Why a request head could not be parsed; each maps to the status the client gets.
/// After any of these the connection is closed, since the stream can no longer be
/// framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed request: 400.
    Malformed,
    /// Request line or target too long: 414.
    UriTooLong,
    /// Head too large or too many header fields: 431.
    HeadersTooLarge,
    /// HTTP/2 or another version than 1.0/1.1: 505.
    VersionNotSupported,
    /// Body larger than [`Limits::max_body`]: 413.
    BodyTooLarge,
    /// `Transfer-Encoding` in a request (chunked request bodies are not supported): 501.
    TransferEncoding,
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

/// Stack scratch for the header fields of one parse; reuse it across calls.
pub struct HeaderScratch<'b> {
    fields: [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS],
}

impl fmt::Debug for HeaderScratch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HeaderScratch")
    }
}

impl Default for HeaderScratch<'_> {
    fn default() -> Self {
        // Left uninitialised: httparse initialises the fields it fills, so a parse
        // costs nothing for the slots a request does not use.
        HeaderScratch {
            fields: [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS],
        }
    }
}

/// A parsed request head borrowing the connection's buffer.
#[derive(Debug)]
pub struct RequestHead<'h, 'b> {
    /// Method token.
    pub method_str: &'b str,
    /// Classified method.
    pub method: Method,
    /// Path part of the target, still percent-encoded, always starting with `/`
    /// (absolute-form targets are reduced to their path), or `*`.
    pub path: &'b [u8],
    /// Query string after `?`, still encoded (empty if none).
    pub query: &'b [u8],
    /// Protocol version.
    pub version: Version,
    /// Whether the connection stays open after the response (HTTP/1.1 default yes,
    /// HTTP/1.0 default no; the `Connection` header overrides).
    pub keep_alive: bool,
    /// Body length from `Content-Length` (0 if absent).
    pub content_length: u64,
    /// Bytes of the head, including the blank line; the body starts here.
    pub head_len: usize,
    /// `If-None-Match` value.
    pub if_none_match: Option<&'b [u8]>,
    /// `If-Modified-Since` value.
    pub if_modified_since: Option<&'b [u8]>,
    /// `Range` value.
    pub range: Option<&'b [u8]>,
    /// `If-Range` value.
    pub if_range: Option<&'b [u8]>,
    fields: &'h [httparse::Header<'b>],
}

impl<'h, 'b> RequestHead<'h, 'b> {
    pub(crate) fn fields(&self) -> &'h [httparse::Header<'b>] {
        self.fields
    }

    /// Every header field in order, as (name, value).
    pub fn headers(&self) -> impl Iterator<Item = (&'b str, &'b [u8])> + '_ {
        self.fields.iter().map(|h| (h.name, h.value))
    }

    /// Total bytes this request occupies in the buffer: head plus body.
    pub fn total_len(&self) -> usize {
        self.head_len
            .saturating_add(usize::try_from(self.content_length).unwrap_or(usize::MAX))
    }
}

/// Parses the request head at the front of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete and within limits. Empty lines
/// before a request line (allowed by RFC 9112 2.2) must be stripped by the caller with
/// [`skip_leading_crlf`].
pub fn parse_head<'h, 'b>(
    buf: &'b [u8],
    scratch: &'h mut HeaderScratch<'b>,
    limits: &Limits,
) -> Result<Option<RequestHead<'h, 'b>>, ParseError> {
    let max_headers = limits.max_headers.clamp(1, MAX_HEADERS);
    // The request line limit is checked before httparse sees the bytes, so a huge
    // target is a 414 however it ends.
    let line_end = memchr(
        b'\n',
        &buf[..buf.len().min(limits.max_request_line.saturating_add(1))],
    );
    match line_end {
        None if buf.len() > limits.max_request_line => return Err(ParseError::UriTooLong),
        None => {
            return if looks_like_request_start(buf) {
                Ok(None)
            } else {
                Err(ParseError::Malformed)
            };
        }
        Some(_) => {}
    }
    let mut req = httparse::Request::new(&mut []);
    let status = match req.parse_with_uninit_headers(buf, &mut scratch.fields[..max_headers]) {
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
    if head_len > limits.max_head_bytes {
        return Err(ParseError::HeadersTooLarge);
    }
    let (Some(method_str), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(ParseError::Malformed);
    };
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let (path, query) = split_target(target.as_bytes())?;
    let method = Method::from_token(method_str);
    let fields: &'h [httparse::Header<'b>] = req.headers;

    let mut head = RequestHead {
        method_str,
        method,
        path,
        query,
        version,
        keep_alive: version == Version::Http11,
        content_length: 0,
        head_len,
        if_none_match: None,
        if_modified_since: None,
        range: None,
        if_range: None,
        fields,
    };
    let mut seen_length: Option<u64> = None;
    let mut host = false;
    for h in fields {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&c| c == b',') {
                let t = trim(token);
                if t.eq_ignore_ascii_case(b"close") {
                    head.keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::Http10 {
                    head.keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(trim(h.value)).ok_or(ParseError::Malformed)?;
            if seen_length.is_some_and(|m| m != n) {
                return Err(ParseError::Malformed);
            }
            seen_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(if version == Version::Http11 {
                ParseError::TransferEncoding
            } else {
                ParseError::Malformed
            });
        } else if name.eq_ignore_ascii_case(b"host") {
            if host {
                return Err(ParseError::Malformed);
            }
            host = true;
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            head.if_none_match = Some(h.value);
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            head.if_modified_since = Some(h.value);
        } else if name.eq_ignore_ascii_case(b"range") {
            head.range = Some(h.value);
        } else if name.eq_ignore_ascii_case(b"if-range") {
            head.if_range = Some(h.value);
        }
    }
    // RFC 9112 3.2: a 1.1 request without Host is a 400.
    if version == Version::Http11 && !host {
        return Err(ParseError::Malformed);
    }
    head.content_length = seen_length.unwrap_or(0);
    if head.content_length > limits.max_body {
        return Err(ParseError::BodyTooLarge);
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

/// Whether an incomplete first line could still become a request line: a method token
/// so far. Rejecting garbage early keeps a confused client from waiting for a timeout.
fn looks_like_request_start(buf: &[u8]) -> bool {
    let token_end = buf.iter().position(|&c| c == b' ').unwrap_or(buf.len());
    token_end <= 32 && buf[..token_end].iter().all(|&c| c.is_ascii_graphic())
}

/// Distinguishes an unsupported but well-formed version (505) from garbage (400).
fn version_error(buf: &[u8]) -> ParseError {
    let line_end = memchr(b'\n', buf).unwrap_or(buf.len());
    let line = trim(&buf[..line_end]);
    let last = line.rsplit(|&c| c == b' ').next().unwrap_or(b"");
    if let Some(v) = last.strip_prefix(b"HTTP/") {
        let ok = !v.is_empty() && v.iter().all(|&c| c.is_ascii_digit() || c == b'.');
        if ok && v != b"1.0" && v != b"1.1" {
            return ParseError::VersionNotSupported;
        }
    }
    ParseError::Malformed
}

/// Splits a request target into (path, query). Origin form `/p?q`, absolute form
/// `http://host/p?q` (reduced to its path) and `*` are accepted.
fn split_target(target: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    let rest = if target.first() == Some(&b'/') || target == b"*" {
        target
    } else {
        let lower_scheme =
            |s: &[u8]| target.len() >= s.len() && target[..s.len()].eq_ignore_ascii_case(s);
        let after = if lower_scheme(b"http://") {
            &target[7..]
        } else if lower_scheme(b"https://") {
            &target[8..]
        } else {
            return Err(ParseError::Malformed);
        };
        match after.iter().position(|&c| c == b'/' || c == b'?') {
            Some(i) if after[i] == b'/' => &after[i..],
            _ => b"/",
        }
    };
    // A fragment never belongs in a request; drop it if a client sends one.
    let rest = &rest[..memchr(b'#', rest).unwrap_or(rest.len())];
    Ok(match memchr(b'?', rest) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &rest[rest.len()..]),
    })
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
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
mod tests {
    use super::*;

    /// (method, path, query, version, keep-alive, head length, content length)
    type Summary = (Method, Vec<u8>, Vec<u8>, Version, bool, usize, u64);

    fn parse(buf: &[u8]) -> Result<Option<Summary>, ParseError> {
        let mut scratch = HeaderScratch::default();
        let r = parse_head(buf, &mut scratch, &Limits::default())?;
        Ok(r.map(|h| {
            (
                h.method,
                h.path.to_vec(),
                h.query.to_vec(),
                h.version,
                h.keep_alive,
                h.head_len,
                h.content_length,
            )
        }))
    }

    #[test]
    fn simple_get() {
        let (m, p, q, v, ka, n, cl) = parse(b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (m, p.as_slice(), q.as_slice(), v, ka, n, cl),
            (
                Method::Get,
                &b"/a/b"[..],
                &b"x=1"[..],
                Version::Http11,
                true,
                34,
                0
            )
        );
    }

    #[test]
    fn incomplete_needs_more() {
        assert_eq!(parse(b"GET /a HTTP/1.1\r\nHost: h\r\n").unwrap(), None);
        assert_eq!(parse(b"GE").unwrap(), None);
        assert_eq!(parse(b"").unwrap(), None);
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |b: &[u8]| parse(b).unwrap().unwrap().4;
        assert!(ka(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
        assert!(!ka(
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        ));
        assert!(!ka(
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n"
        ));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn pipelined_requests_parse_in_turn() {
        let buf = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut at = 0;
        let mut paths = Vec::new();
        while at < buf.len() {
            let mut scratch = HeaderScratch::default();
            let h = parse_head(&buf[at..], &mut scratch, &Limits::default())
                .unwrap()
                .unwrap();
            paths.push(h.path.to_vec());
            at += h.total_len();
        }
        assert_eq!(paths, vec![b"/1".to_vec(), b"/2".to_vec(), b"/3".to_vec()]);
    }

    #[test]
    fn error_statuses() {
        let code = |b: &[u8]| parse(b).unwrap_err().status().code();
        assert_eq!(code(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
        assert_eq!(code(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
        assert_eq!(code(b"GET / HTTP/1.1\r\n\r\n"), 400, "missing Host");
        assert_eq!(code(b"GET / FOO/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(code(b"\x00\x01\x02 garbage\r\n\r\n"), 400);
        assert_eq!(
            code(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n"),
            400
        );
        assert_eq!(
            code(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            400
        );
        assert_eq!(
            code(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"),
            501
        );
        assert_eq!(code(b"GET foo HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        let long = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(9000));
        assert_eq!(code(long.as_bytes()), 414);
        let long_partial = format!("GET /{}", "a".repeat(9000));
        assert_eq!(code(long_partial.as_bytes()), 414);
        let big = format!(
            "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
            "v".repeat(17000)
        );
        assert_eq!(code(big.as_bytes()), 431);
        let big_partial = format!("GET / HTTP/1.1\r\nHost: h\r\nX: {}", "v".repeat(17000));
        assert_eq!(code(big_partial.as_bytes()), 431);
        let many: String = (0..70).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            code(format!("GET / HTTP/1.1\r\nHost: h\r\n{many}\r\n").as_bytes()),
            431
        );
        let body = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999\r\n\r\n";
        assert_eq!(code(body), 413);
    }

    #[test]
    fn absolute_form_and_fragment() {
        let (_, p, q, ..) = parse(b"GET http://example.com/x/y?z HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((p.as_slice(), q.as_slice()), (&b"/x/y"[..], &b"z"[..]));
        let (_, p, ..) = parse(b"GET http://example.com HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(p, b"/");
    }

    #[test]
    fn content_length_body_counts_in_total() {
        let mut scratch = HeaderScratch::default();
        let buf = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET";
        let h = parse_head(buf, &mut scratch, &Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(&buf[h.head_len..h.total_len()], b"hello");
        assert_eq!(h.method, Method::Post);
    }

    #[test]
    fn conditional_headers_are_found() {
        let mut scratch = HeaderScratch::default();
        let buf = b"GET / HTTP/1.1\r\nhost: h\r\nIf-None-Match: \"a\"\r\nif-modified-since: x\r\nRange: bytes=0-1\r\n\r\n";
        let h = parse_head(buf, &mut scratch, &Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(h.if_none_match, Some(&b"\"a\""[..]));
        assert_eq!(h.if_modified_since, Some(&b"x"[..]));
        assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(h.headers().count(), 4);
    }

    #[test]
    fn leading_empty_lines_are_skipped() {
        assert_eq!(skip_leading_crlf(b"\r\n\r\nGET"), 4);
        assert_eq!(skip_leading_crlf(b"GET"), 0);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
            let mut scratch = HeaderScratch::default();
            let limits = Limits { max_request_line: 64, max_head_bytes: 512, max_headers: 4, max_body: 10 };
            if let Ok(Some(h)) = parse_head(&bytes, &mut scratch, &limits) {
                proptest::prop_assert!(h.head_len <= bytes.len());
                proptest::prop_assert!(h.head_len <= 512);
            }
        }

        #[test]
        fn parser_never_panics_on_request_like_bytes(
            line in "(GET|HEAD|POST|X) [ -~]{0,40} HTTP/[0-9]\\.[0-9]",
            headers in proptest::collection::vec("[ -~]{0,30}", 0..6),
        ) {
            let text = format!("{line}\r\n{}\r\n", headers.join("\r\n"));
            let mut scratch = HeaderScratch::default();
            let _ = parse_head(text.as_bytes(), &mut scratch, &Limits::default());
        }
    }
}
