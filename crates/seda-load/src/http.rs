//! The crate's one HTTP/1.1 response reader, incremental: status and headers by
//! `httparse`, bodies framed by Content-Length, chunked transfer coding (decoded by
//! `seda_chunked`, the decoder the server uses and `fuzz/` fuzzes), or the end of the
//! connection. The load generator's reader ([`ResponseReader::new`]) counts body
//! bytes and drops them; the mail readers' client ([`ResponseReader::keeping`]) keeps
//! the header fields and the body, up to a bound.

use seda_chunked::{ChunkLimits, ChunkedDecoder};

/// Largest response head accepted, in bytes.
pub const MAX_HEAD: usize = 64 * 1024;

/// The chunked decoder's bounds: the body is unbounded here (a keeping reader
/// bounds what it keeps itself, as [`HttpError::BodyTooLarge`]); a size line holds
/// at most 4 KiB, the trailers 16 KiB.
fn chunk_limits() -> ChunkLimits {
    ChunkLimits::new(u64::MAX)
}

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The head is not valid HTTP or exceeds [`MAX_HEAD`].
    BadHead(String),
    /// The chunked framing is malformed (RFC 9112 7.1, as strictly as the server
    /// reads request bodies: lines end with CRLF) or a size line or the trailers
    /// pass their bound (4 KiB, 16 KiB).
    BadChunk,
    /// The connection ended before the response did.
    Truncated,
    /// The body is longer than a keeping reader's bound.
    BodyTooLarge,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::BadHead(e) => write!(f, "bad response head: {e}"),
            HttpError::BadChunk => f.write_str("bad chunked encoding"),
            HttpError::Truncated => f.write_str("connection closed mid-response"),
            HttpError::BodyTooLarge => f.write_str("response body too large"),
        }
    }
}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// The server will close the connection (Connection: close, HTTP/1.0 without
    /// keep-alive, or a body delimited by the connection's end).
    pub close: bool,
    /// Bytes of the response, head included.
    pub bytes: u64,
}

/// Result of feeding bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// All bytes consumed; the response is not complete yet.
    More,
    /// The response is complete; `used` bytes of the input belonged to it.
    Done { response: Response, used: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Fixed(u64),
    /// A chunked body, read by `ResponseReader::chunked`.
    Chunked,
    UntilClose,
}

/// What a keeping reader keeps of the current response.
#[derive(Debug)]
struct Kept {
    max_body: usize,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads one response at a time; `start` before each request.
#[derive(Debug)]
pub struct ResponseReader {
    state: State,
    head: Vec<u8>,
    /// The decoder of the current chunked body (reset at each one).
    chunked: ChunkedDecoder,
    head_request: bool,
    status: u16,
    close: bool,
    bytes: u64,
    kept: Option<Kept>,
}

impl Default for ResponseReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseReader {
    /// A reader waiting for a response head.
    pub fn new() -> Self {
        ResponseReader {
            state: State::Head,
            head: Vec::with_capacity(1024),
            chunked: ChunkedDecoder::new(chunk_limits()),
            head_request: false,
            status: 0,
            close: false,
            bytes: 0,
            kept: None,
        }
    }

    /// A reader that also keeps each response's header fields and body (the body up
    /// to `max_body` bytes: a longer one is [`HttpError::BodyTooLarge`]).
    pub fn keeping(max_body: usize) -> Self {
        ResponseReader {
            kept: Some(Kept {
                max_body,
                headers: Vec::new(),
                body: Vec::new(),
            }),
            ..Self::new()
        }
    }

    /// The header fields of the last response head read, in order (empty unless the
    /// reader is [`keeping`](Self::keeping)).
    pub fn headers(&self) -> &[(String, String)] {
        self.kept.as_ref().map_or(&[], |k| &k.headers)
    }

    /// The body read so far, taken out of the reader (empty unless it is
    /// [`keeping`](Self::keeping)).
    pub fn take_body(&mut self) -> Vec<u8> {
        self.kept
            .as_mut()
            .map(|k| std::mem::take(&mut k.body))
            .unwrap_or_default()
    }

    /// Keeps `bytes` of the body if the reader keeps bodies.
    fn keep_body(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        if let Some(k) = &mut self.kept {
            if k.body.len() + bytes.len() > k.max_body {
                return Err(HttpError::BodyTooLarge);
            }
            k.body.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Expect the response to a new request (`head_request`: it was a HEAD, so no body).
    pub fn start(&mut self, head_request: bool) {
        self.state = State::Head;
        self.head.clear();
        self.head_request = head_request;
        self.status = 0;
        self.close = false;
        self.bytes = 0;
        if let Some(k) = &mut self.kept {
            k.headers.clear();
            k.body.clear();
        }
    }

    /// True if no byte of the current response has arrived yet.
    pub fn is_fresh(&self) -> bool {
        self.state == State::Head && self.head.is_empty()
    }

    fn done(&self, used: usize) -> Feed {
        Feed::Done {
            response: Response {
                status: self.status,
                close: self.close,
                bytes: self.bytes,
            },
            used,
        }
    }

    /// Feed bytes received from the connection.
    pub fn feed(&mut self, data: &[u8]) -> Result<Feed, HttpError> {
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            match self.state {
                State::Head => {
                    let consumed = if self.head.is_empty() {
                        // The usual case: the whole head in one read; parse it in place
                        // rather than copying the body that follows it.
                        match find_crlfcrlf(rest, 0) {
                            Some(end) => {
                                self.parse_head(&rest[..end + 4])?;
                                end + 4
                            }
                            None => {
                                self.buffer_partial_head(rest)?;
                                return Ok(Feed::More);
                            }
                        }
                    } else {
                        let scan_from = self.head.len().saturating_sub(3);
                        let old = self.head.len();
                        self.head.extend_from_slice(rest);
                        let Some(end) = find_crlfcrlf(&self.head, scan_from) else {
                            self.head.truncate(old);
                            self.buffer_partial_head(rest)?;
                            return Ok(Feed::More);
                        };
                        let head = std::mem::take(&mut self.head);
                        let r = self.parse_head(&head[..end + 4]);
                        self.head = head;
                        r?;
                        end + 4 - old
                    };
                    self.bytes += consumed as u64;
                    i += consumed;
                    self.head.clear();
                    if self.state == State::Head {
                        // 1xx interim response: drop it and read the real one.
                        continue;
                    }
                    if let State::Fixed(0) = self.state {
                        return Ok(self.done(i));
                    }
                    if self.head_request || matches!(self.status, 204 | 304) {
                        return Ok(self.done(i));
                    }
                }
                State::Fixed(n) => {
                    let take = (rest.len() as u64).min(n);
                    self.keep_body(&rest[..take as usize])?;
                    self.bytes += take;
                    i += take as usize;
                    self.state = State::Fixed(n - take);
                    if n == take {
                        return Ok(self.done(i));
                    }
                }
                State::UntilClose => {
                    self.keep_body(rest)?;
                    self.bytes += rest.len() as u64;
                    i = data.len();
                }
                State::Chunked => {
                    let kept = &mut self.kept;
                    let mut over = false;
                    let fed = self
                        .chunked
                        .feed(rest, |bytes| {
                            if let Some(k) = kept {
                                if over || k.body.len() + bytes.len() > k.max_body {
                                    over = true;
                                } else {
                                    k.body.extend_from_slice(bytes);
                                }
                            }
                        })
                        .map_err(|_| HttpError::BadChunk)?;
                    if over {
                        return Err(HttpError::BodyTooLarge);
                    }
                    self.bytes += fed.consumed as u64;
                    i += fed.consumed;
                    if fed.done {
                        return Ok(self.done(i));
                    }
                    // Short of the end, the decoder consumes all it is given.
                    debug_assert_eq!(fed.consumed, rest.len());
                    i = data.len();
                }
            }
        }
        Ok(Feed::More)
    }

    /// The connection reached end of file. A body delimited by the connection's end is
    /// now complete; anything else in progress is truncated.
    pub fn eof(&mut self) -> Result<Response, HttpError> {
        match self.state {
            State::UntilClose => Ok(Response {
                status: self.status,
                close: true,
                bytes: self.bytes,
            }),
            _ => Err(HttpError::Truncated),
        }
    }

    fn buffer_partial_head(&mut self, rest: &[u8]) -> Result<(), HttpError> {
        self.head.extend_from_slice(rest);
        self.bytes += rest.len() as u64;
        if self.head.len() > MAX_HEAD {
            return Err(HttpError::BadHead("head too large".into()));
        }
        Ok(())
    }

    fn parse_head(&mut self, head: &[u8]) -> Result<(), HttpError> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(HttpError::BadHead("incomplete".into())),
            Err(e) => return Err(HttpError::BadHead(e.to_string())),
        }
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut close = http10;
        for h in resp.headers.iter() {
            let v = std::str::from_utf8(h.value).unwrap_or("").trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    v.parse()
                        .map_err(|_| HttpError::BadHead(format!("content-length {v:?}")))?,
                );
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v
                    .to_ascii_lowercase()
                    .split(',')
                    .any(|t| t.trim() == "chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = v.to_ascii_lowercase();
                if v.contains("close") {
                    close = true;
                } else if v.contains("keep-alive") {
                    close = false;
                }
            }
        }
        self.status = status;
        self.close = close;
        if let Some(k) = &mut self.kept {
            k.headers.clear();
            k.headers.extend(resp.headers.iter().map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            }));
        }
        if (100..200).contains(&status) {
            self.state = State::Head;
        } else if self.head_request || matches!(status, 204 | 304) {
            self.state = State::Fixed(0);
        } else if chunked {
            self.chunked = ChunkedDecoder::new(chunk_limits());
            self.state = State::Chunked;
        } else if let Some(n) = length {
            self.state = State::Fixed(n);
        } else {
            self.close = true;
            self.state = State::UntilClose;
        }
        Ok(())
    }
}

fn find_crlfcrlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_in_pieces(
        r: &mut ResponseReader,
        data: &[u8],
        piece: usize,
    ) -> Option<(Response, usize)> {
        let mut off = 0;
        while off < data.len() {
            let end = (off + piece).min(data.len());
            match r.feed(&data[off..end]).unwrap() {
                Feed::More => off = end,
                Feed::Done { response, used } => return Some((response, off + used)),
            }
        }
        None
    }

    #[test]
    fn content_length_in_any_split() {
        let msg = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
        for piece in 1..msg.len() {
            let mut r = ResponseReader::new();
            r.start(false);
            let (resp, used) = feed_in_pieces(&mut r, msg, piece).unwrap();
            assert_eq!(resp.status, 200);
            assert!(!resp.close);
            assert_eq!(used, msg.len() - 5, "piece {piece}");
            assert_eq!(resp.bytes, (msg.len() - 5) as u64);
        }
    }

    #[test]
    fn chunked_in_any_split_with_extension_and_trailer() {
        let msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        for piece in 1..=msg.len() {
            let mut r = ResponseReader::new();
            r.start(false);
            let (resp, used) = feed_in_pieces(&mut r, msg, piece).unwrap();
            assert_eq!(
                (resp.status, used, resp.bytes),
                (200, msg.len(), msg.len() as u64)
            );
        }
    }

    #[test]
    fn body_until_close_and_truncation() {
        let mut r = ResponseReader::new();
        r.start(false);
        assert_eq!(r.feed(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap(), Feed::More);
        let resp = r.eof().unwrap();
        assert!(resp.close);
        assert_eq!(resp.bytes, 22);

        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap(),
            Feed::More
        );
        assert_eq!(r.eof(), Err(HttpError::Truncated));
        r.start(false);
        assert!(r.is_fresh());
        assert_eq!(r.eof(), Err(HttpError::Truncated));
    }

    #[test]
    fn no_body_for_head_204_304_and_interim_100_is_skipped() {
        let mut r = ResponseReader::new();
        r.start(true);
        let f = r
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
            .unwrap();
        assert!(matches!(
            f,
            Feed::Done {
                response: Response { status: 200, .. },
                ..
            }
        ));
        r.start(false);
        let f = r.feed(b"HTTP/1.1 304 Not Modified\r\n\r\n").unwrap();
        assert!(matches!(
            f,
            Feed::Done {
                response: Response { status: 304, .. },
                ..
            }
        ));
        r.start(false);
        let f = r.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno").unwrap();
        match f {
            Feed::Done { response, .. } => {
                assert_eq!(response.status, 503);
                assert!(response.close);
            }
            Feed::More => panic!("incomplete"),
        }
    }

    #[test]
    fn a_keeping_reader_keeps_fields_and_body_in_any_split() {
        let chunked = b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\nHTTP/1.1 200 OK\r\nSet-Cookie: s=1\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        let fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nSet-Cookie: s=1\r\n\r\nWikipediaNEXT";
        for msg in [&chunked[..], &fixed[..]] {
            for piece in 1..=msg.len() {
                let mut r = ResponseReader::keeping(64);
                r.start(false);
                let (resp, _) = feed_in_pieces(&mut r, msg, piece).unwrap();
                assert_eq!(resp.status, 200);
                let fields: Vec<&str> = r.headers().iter().map(|(n, _)| n.as_str()).collect();
                assert!(fields.contains(&"Set-Cookie"), "{fields:?}");
                assert!(!fields.contains(&"X-Interim"), "{fields:?}");
                assert_eq!(r.take_body(), b"Wikipedia", "piece {piece}");
            }
        }
        let mut r = ResponseReader::keeping(4);
        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nWikipedia"),
            Err(HttpError::BodyTooLarge)
        );
        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nWik\r\n3\r\nipe"),
            Err(HttpError::BodyTooLarge)
        );
        r.start(false);
        assert_eq!(r.feed(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap(), Feed::More);
        assert!(r.eof().unwrap().close);
        assert_eq!(r.take_body(), b"abc");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut r = ResponseReader::new();
        r.start(false);
        assert!(r.feed(b"HTTP/1.1 2x0 OK\r\n\r\n").is_err());
        r.start(false);
        assert!(
            r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n")
                .is_err()
        );
        r.start(false);
        assert!(
            r.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .is_err()
        );
        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab")
                .unwrap(),
            Feed::More
        );
        assert_eq!(r.feed(b"X\r\n"), Err(HttpError::BadChunk));
        r.start(false);
        let big = vec![b'a'; MAX_HEAD + 10];
        assert!(r.feed(&big).is_err());
    }

    #[test]
    fn chunked_framing_is_read_as_strictly_as_the_server_reads_it() {
        // The decoder is seda-http's (seda_chunked): lines end with CRLF, the size has
        // no leading whitespace, a size line holds at most 4 KiB.
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let long_extension = format!("1;{}\r\na\r\n0\r\n\r\n", "e".repeat(5000));
        for body in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            long_extension.as_bytes(),
        ] {
            let mut r = ResponseReader::new();
            r.start(false);
            let msg = [&head[..], body].concat();
            assert_eq!(
                r.feed(&msg),
                Err(HttpError::BadChunk),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let mut r = ResponseReader::new();
        r.start(false);
        let msg = [&head[..], b"5 ; a=b\r\nhello\r\n00\r\nT: 1\r\n\r\nNEXT"].concat();
        match r.feed(&msg).unwrap() {
            Feed::Done { response, used } => {
                assert_eq!((response.status, used), (200, msg.len() - 4));
                assert_eq!(response.bytes, used as u64);
            }
            Feed::More => panic!("incomplete"),
        }
    }
}
