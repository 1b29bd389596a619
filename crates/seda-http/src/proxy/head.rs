//! The heads a proxy writes, and the upstream's head it reads: pure functions of
//! their inputs, unit-tested here.
//!
//! # One framing (RFC 9112 6.3, 7; RFC 9110 7.6.1)
//! - The upstream sees a normalised request: `METHOD TARGET HTTP/1.1`, origin-form
//!   target, one `Host`, the client's fields less the hop-by-hop ones (`Connection`,
//!   `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
//!   `Upgrade`, `Proxy-Authorization`, `Proxy-Authenticate`, and every field the
//!   client's `Connection` names), less `Content-Length` and `Expect`, then the
//!   framing *we* chose: `Content-Length: N`, or `Transfer-Encoding: chunked` with
//!   a body we re-chunk, or none. The front already refused every request whose
//!   framing was ambiguous (`proto::parse_head`), so the upstream reads exactly the
//!   request we parsed, never two.
//! - `X-Forwarded-For` gets the client's address appended (after any the client
//!   sent), `X-Forwarded-Proto` is set (a client's is dropped), and `Via` gets our
//!   hop.
//! - The upstream's response is parsed with limits (an oversized or malformed head
//!   is the upstream's failure: `502`); a response with both `Transfer-Encoding`
//!   and `Content-Length`, or disagreeing `Content-Length`s, is refused the same
//!   way; the client gets a head we write, with the same hop-by-hop rules and our
//!   own framing.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;

use crate::proto::{self, RequestHead, Status, Version};

/// Fields that belong to one connection, never forwarded (RFC 9110 7.6.1, and the
/// non-standard `Proxy-Connection` and `Keep-Alive`).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// Our hop in `Via`.
const VIA: &str = "seda";

/// Whether a field is hop-by-hop, or named by one of the message's `Connection`
/// fields (`named`, compared without regard to case).
fn is_hop_by_hop(name: &[u8], named: &[&[u8]]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
        || named.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// The tokens of every `Connection` field that may name a field to drop: `close`
/// and `keep-alive` are the connection's options (and `Keep-Alive` is hop-by-hop
/// anyway), so the usual `Connection: keep-alive` costs no allocation.
fn connection_tokens<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for (n, v) in fields {
        if n.eq_ignore_ascii_case(b"connection") {
            for t in v.split(|&c| c == b',') {
                let t = t.trim_ascii();
                if !t.is_empty()
                    && !t.eq_ignore_ascii_case(b"close")
                    && !t.eq_ignore_ascii_case(b"keep-alive")
                {
                    out.push(t);
                }
            }
        }
    }
    out
}

/// How a forwarded request's body is framed to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestBody {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// Re-chunked as it arrives.
    Chunked,
}

/// What the forwarded head is made of, besides the client's head.
#[derive(Debug)]
pub(crate) struct Forward<'a> {
    /// The route's prefix (replaced by `base` when there is one).
    pub(crate) prefix: &'a str,
    /// The upstream's base path.
    pub(crate) base: Option<&'a str>,
    /// The upstream's `host:port` (the `Host` of a client that sent none).
    pub(crate) authority: &'a str,
    /// The client's address.
    pub(crate) peer: SocketAddr,
    /// The scheme the client spoke to us (`X-Forwarded-Proto`).
    pub(crate) scheme: &'a str,
    pub(crate) body: RequestBody,
}

/// The request head the upstream gets (see the module docs).
pub(crate) fn request_head(raw: &[u8], head: &RequestHead, f: &Forward<'_>) -> Bytes {
    let mut out = Vec::with_capacity(raw.len() + 96);
    out.extend_from_slice(head.get(raw, &head.method_token));
    out.push(b' ');
    target(&mut out, head.path(raw), f.prefix, f.base);
    let query = head.get(raw, &head.query);
    if !query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(query);
    }
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    match &head.host {
        Some(h) => out.extend_from_slice(head.get(raw, h)),
        None => out.extend_from_slice(f.authority.as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    let named = connection_tokens(head.fields(raw));
    let mut xff: Vec<&[u8]> = Vec::new();
    let mut via: Vec<&[u8]> = Vec::new();
    for (n, v) in head.fields(raw) {
        if is_hop_by_hop(n, &named)
            || n.eq_ignore_ascii_case(b"host")
            || n.eq_ignore_ascii_case(b"content-length")
            || n.eq_ignore_ascii_case(b"expect")
            || n.eq_ignore_ascii_case(b"x-forwarded-proto")
        {
            continue;
        }
        if n.eq_ignore_ascii_case(b"x-forwarded-for") {
            xff.push(v);
            continue;
        }
        if n.eq_ignore_ascii_case(b"via") {
            via.push(v);
            continue;
        }
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    for v in xff.iter().filter(|v| !v.is_empty()) {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    match f.peer.ip() {
        IpAddr::V4(ip) => {
            let [a, b, c, d] = ip.octets();
            push_decimal(&mut out, a.into());
            for o in [b, c, d] {
                out.push(b'.');
                push_decimal(&mut out, o.into());
            }
        }
        ip @ IpAddr::V6(_) => {
            let _ = write!(Text(&mut out), "{ip}");
        }
    }
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: ");
    out.extend_from_slice(f.scheme.as_bytes());
    out.extend_from_slice(b"\r\nVia: ");
    for v in via.iter().filter(|v| !v.is_empty()) {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(match head.version {
        Version::Http10 => b"1.0 ",
        Version::Http11 => b"1.1 ",
    });
    out.extend_from_slice(VIA.as_bytes());
    out.extend_from_slice(b"\r\n");
    match f.body {
        RequestBody::None
            if matches!(
                head.method,
                proto::Method::Post | proto::Method::Put | proto::Method::Patch
            ) =>
        {
            out.extend_from_slice(b"Content-Length: 0\r\n");
        }
        RequestBody::None => {}
        RequestBody::Length(n) => content_length(&mut out, n),
        RequestBody::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// `n` in decimal (the head writers' integers, without `core::fmt`).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A `Content-Length: n` field line.
fn content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"Content-Length: ");
    push_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// `fmt::Write` into a byte vector.
struct Text<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The upstream path of a request: the raw path when the upstream has no base,
/// else the base followed by what follows the prefix (percent-encoded as needed if
/// the client encoded characters of the prefix).
fn target(out: &mut Vec<u8>, raw_path: &[u8], prefix: &str, base: Option<&str>) {
    let Some(base) = base else {
        out.extend_from_slice(raw_path);
        return;
    };
    let rest: Vec<u8> = if prefix == "/" {
        raw_path.to_vec()
    } else if let Some(r) = raw_path.strip_prefix(prefix.as_bytes()) {
        r.to_vec()
    } else {
        // The prefix matched only once decoded: forward the decoded rest, encoded.
        let decoded = proto::percent_decode(raw_path).unwrap_or_else(|| raw_path.to_vec());
        let r = decoded.strip_prefix(prefix.as_bytes()).unwrap_or(&decoded);
        let mut enc = Vec::with_capacity(r.len());
        for &c in r {
            if c.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&c) {
                enc.push(c);
            } else {
                let _ = write!(Text(&mut enc), "%{c:02X}");
            }
        }
        enc
    };
    let base = base.trim_end_matches('/');
    out.extend_from_slice(base.as_bytes());
    if !rest.starts_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(&rest);
}

/// Limits on an upstream's response head.
pub(crate) const MAX_RESPONSE_HEAD: usize = 32 * 1024;
const MAX_RESPONSE_FIELDS: usize = 100;

/// How an upstream's response body is delimited (RFC 9112 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResponseBody {
    /// None (HEAD, 1xx, 204, 304).
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the upstream closes.
    Close,
}

/// A parsed response head of an upstream.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    /// The start of the client's head: our status line (the upstream's reason, or
    /// the standard one if it sent none), then the fields to forward in order
    /// (hop-by-hop and framing removed) as `Name: value\r\n` lines. One buffer per
    /// response, which [`client_head`] completes and hands on without a copy.
    pub(crate) out: Vec<u8>,
    pub(crate) body: ResponseBody,
    /// The upstream keeps the connection open after this response.
    pub(crate) keep_alive: bool,
    /// Bytes of the head.
    pub(crate) len: usize,
    /// The upstream's `Content-Length` of a bodiless answer to a HEAD (forwarded).
    pub(crate) head_length: Option<u64>,
}

/// Why an upstream's response was refused: the client gets a `502`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadResponse {
    /// Not HTTP/1.x, or malformed.
    Malformed,
    /// The head passed [`MAX_RESPONSE_HEAD`] or [`MAX_RESPONSE_FIELDS`].
    TooLarge,
    /// Ambiguous framing (`Transfer-Encoding` with `Content-Length`, disagreeing
    /// lengths).
    Framing,
    /// `101 Switching Protocols`: never asked for (`Upgrade` is not forwarded).
    Upgrade,
}

/// Parses the response head at the front of `buf`. `Ok(None)`: incomplete (and
/// within limits). An interim `1xx` (other than 101) is reported as a head with
/// `status < 200` for the caller to skip. `head_request`: the request was a HEAD.
pub(crate) fn parse_response(
    buf: &[u8],
    head_request: bool,
) -> Result<Option<ResponseHead>, BadResponse> {
    let window = &buf[..buf.len().min(MAX_RESPONSE_HEAD)];
    // Uninitialised: zeroing 100 fields (3.2 KB) cost ~400 instructions a response.
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        window,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
            return Err(BadResponse::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(BadResponse::TooLarge),
        Err(_) => return Err(BadResponse::Malformed),
    };
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return Err(BadResponse::Malformed);
    };
    if !(100..=999).contains(&status) {
        return Err(BadResponse::Malformed);
    }
    if status == 101 {
        return Err(BadResponse::Upgrade);
    }
    let mut keep_alive = minor >= 1;
    let mut length: Option<u64> = None;
    let mut chunked: Option<bool> = None;
    // The head as the upstream sent it, plus what `client_head` adds.
    let mut out = Vec::with_capacity(len + CLIENT_HEAD_EXTRA);
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(&mut out, status.into());
    out.push(b' ');
    let reason = resp.reason.unwrap_or("").as_bytes();
    out.extend_from_slice(if reason.is_empty() {
        Status::from_code(status).map_or(b"", |s| s.reason().as_bytes())
    } else {
        reason
    });
    out.extend_from_slice(b"\r\n");
    let named = connection_tokens(resp.headers.iter().map(|h| (h.name.as_bytes(), h.value)));
    for h in resp.headers.iter() {
        let (n, v) = (h.name.as_bytes(), h.value.trim_ascii());
        if n.eq_ignore_ascii_case(b"connection") {
            for t in v.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
                if t.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && minor == 0 {
                    keep_alive = true;
                }
            }
        } else if n.eq_ignore_ascii_case(b"content-length") {
            let n = decimal(v).ok_or(BadResponse::Framing)?;
            if length.is_some_and(|m| m != n) {
                return Err(BadResponse::Framing);
            }
            length = Some(n);
            continue;
        } else if n.eq_ignore_ascii_case(b"transfer-encoding") {
            for coding in v.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
                if coding.is_empty() || chunked == Some(true) {
                    return Err(BadResponse::Framing);
                }
                chunked = Some(coding.eq_ignore_ascii_case(b"chunked"));
            }
        }
        if is_hop_by_hop(n, &named) {
            continue;
        }
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = head_request || status < 200 || status == 204 || status == 304;
    let body = match (chunked, length) {
        (Some(_), Some(_)) => return Err(BadResponse::Framing),
        _ if bodiless => ResponseBody::None,
        (Some(true), None) => ResponseBody::Chunked,
        (Some(false), None) => ResponseBody::Close,
        (None, Some(n)) => ResponseBody::Length(n),
        (None, None) => ResponseBody::Close,
    };
    if body == ResponseBody::Close {
        keep_alive = false;
    }
    Ok(Some(ResponseHead {
        status,
        out,
        body,
        keep_alive,
        len,
        head_length: if head_request && status != 204 {
            length
        } else {
            None
        },
    }))
}

/// A `Content-Length` value: decimal digits only, at most 19.
fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u64::from(c - b'0'))
    })
}

/// How the client gets the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientBody {
    /// No body (or a HEAD's `Content-Length` only).
    None,
    /// `Content-Length` bytes, copied as they come.
    Length(u64),
    /// Re-chunked (an HTTP/1.1 client of a chunked or close-delimited body).
    Chunked,
    /// Until we close (an HTTP/1.0 client of a body of unknown length).
    Close,
}

impl ClientBody {
    /// The client framing of an upstream body for a client of `version`.
    pub(crate) fn of(body: ResponseBody, version: Version) -> ClientBody {
        match body {
            ResponseBody::None => ClientBody::None,
            ResponseBody::Length(n) => ClientBody::Length(n),
            ResponseBody::Chunked | ResponseBody::Close if version == Version::Http11 => {
                ClientBody::Chunked
            }
            ResponseBody::Chunked | ResponseBody::Close => ClientBody::Close,
        }
    }
}

/// Room [`client_head`] needs past the upstream's head: `Via`, the framing field
/// and `Connection` (at most 103 bytes).
const CLIENT_HEAD_EXTRA: usize = 128;

/// The head the client gets for an upstream's response (module docs), completing
/// the parsed head's buffer. `close`: the connection closes after it (the client
/// asked, the server drains, or the body is close-delimited).
pub(crate) fn client_head(r: ResponseHead, body: ClientBody, close: bool) -> Bytes {
    let mut out = r.out;
    out.extend_from_slice(b"Via: 1.1 ");
    out.extend_from_slice(VIA.as_bytes());
    out.extend_from_slice(b"\r\n");
    match body {
        ClientBody::None => {
            if let Some(n) = r.head_length {
                content_length(&mut out, n);
            }
        }
        ClientBody::Length(n) => content_length(&mut out, n),
        ClientBody::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        ClientBody::Close => {}
    }
    out.extend_from_slice(if close {
        b"Connection: close\r\n\r\n"
    } else {
        b"Connection: keep-alive\r\n\r\n"
    });
    Bytes::from(out)
}

/// The chunk header of `len` bytes of data (`len` > 0).
pub(crate) fn chunk_header(len: usize) -> Bytes {
    let mut digits = [0u8; 18];
    let mut i = 16;
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    digits[16..].copy_from_slice(b"\r\n");
    Bytes::copy_from_slice(&digits[i..])
}

/// What follows a chunk's data.
pub(crate) static CRLF: Bytes = Bytes::from_static(b"\r\n");
/// The last chunk and the empty trailer section.
pub(crate) static LAST_CHUNK: Bytes = Bytes::from_static(b"0\r\n\r\n");

#[cfg(test)]
mod tests;
