//! The Gnutella 0.6 three-way handshake.
//!
//! ```text
//! client: GNUTELLA CONNECT/0.6 + headers      (1)
//! server: GNUTELLA/0.6 200 OK + headers       (2)  or a refusal: 403, 503, ...
//! client: GNUTELLA/0.6 200 OK + headers       (3)
//! ```
//! Each block is CRLF-terminated lines ending in an empty line. Header names are
//! case-insensitive; a line starting with a space or tab continues the previous
//! header. Compression is negotiated per direction: a side that can inflate sends
//! `Accept-Encoding: deflate` in its first block, and a side that will compress
//! what it sends says `Content-Encoding: deflate` in its next block; the stream is
//! compressed from the first byte after that side's last block.
//!
//! # Invariants
//! A block is refused once it passes [`MAX_BLOCK`] bytes or [`MAX_HEADERS`] lines
//! (servents kick a peer that sends oversized headers; so do we).

use std::fmt::Write as _;

/// Longest handshake block we read.
pub const MAX_BLOCK: usize = 8 * 1024;
/// Most header lines in a block.
pub const MAX_HEADERS: usize = 64;

/// A parsed handshake block: its first line and its headers in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// The request or status line.
    pub start: String,
    /// `(name, value)` pairs, names as sent.
    pub headers: Vec<(String, String)>,
}

/// Why a handshake block is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Longer than [`MAX_BLOCK`] or more than [`MAX_HEADERS`] lines.
    Oversized,
    /// Not valid text, or a header line without a colon.
    Malformed(String),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Oversized => f.write_str("handshake headers too large"),
            HandshakeError::Malformed(why) => write!(f, "malformed handshake: {why}"),
        }
    }
}

impl Block {
    /// Parses one block from the front of `buf`. `Ok(None)`: incomplete, read more.
    /// `Ok(Some((block, n)))`: the block took the first `n` bytes.
    pub fn parse(buf: &[u8]) -> Result<Option<(Block, usize)>, HandshakeError> {
        let Some(end) = find_end(buf) else {
            if buf.len() > MAX_BLOCK {
                return Err(HandshakeError::Oversized);
            }
            return Ok(None);
        };
        if end > MAX_BLOCK {
            return Err(HandshakeError::Oversized);
        }
        let text = std::str::from_utf8(&buf[..end])
            .map_err(|_| HandshakeError::Malformed("not UTF-8 text".into()))?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let start = lines.next().unwrap_or_default().trim().to_owned();
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in lines {
            if line.is_empty() {
                break;
            }
            if headers.len() >= MAX_HEADERS {
                return Err(HandshakeError::Oversized);
            }
            if line.starts_with([' ', '\t']) {
                let Some(last) = headers.last_mut() else {
                    return Err(HandshakeError::Malformed("continuation first".into()));
                };
                last.1.push(' ');
                last.1.push_str(line.trim());
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(HandshakeError::Malformed(format!(
                    "header line without a colon: {:?}",
                    truncate(line, 40)
                )));
            };
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
        Ok(Some((Block { start, headers }, end)))
    }

    /// The value of header `name` (case-insensitive), the first if repeated.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether header `name` is present and its comma-separated list holds `token`
    /// (case-insensitive).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }

    /// Whether header `name` says `True`.
    pub fn is_true(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// For a status block, the status code (`GNUTELLA/0.6 200 OK` -> 200).
    pub fn status(&self) -> Option<u16> {
        let rest = self.start.strip_prefix("GNUTELLA/")?;
        let (version, rest) = rest.split_once(' ')?;
        parse_version(version)?;
        rest.split_whitespace().next()?.parse().ok()
    }

    /// For a request block, the protocol version asked for
    /// (`GNUTELLA CONNECT/0.6` -> (0, 6)).
    pub fn connect_version(&self) -> Option<(u32, u32)> {
        parse_version(self.start.strip_prefix("GNUTELLA CONNECT/")?)
    }

    /// Serialises a block: start line, headers, empty line.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut s = String::with_capacity(256);
        s.push_str(&self.start);
        s.push_str("\r\n");
        for (n, v) in &self.headers {
            let _ = write!(s, "{n}: {v}\r\n");
        }
        s.push_str("\r\n");
        s.into_bytes()
    }

    /// A block with `start` and no headers.
    pub fn new(start: impl Into<String>) -> Block {
        Block {
            start: start.into(),
            headers: Vec::new(),
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Block {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

/// Where the empty line ending a block ends (`\r\n\r\n`, or a bare `\n\n` from a
/// lax peer), or `None`.
fn find_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Whether bytes at the start of a connection look like a handshake request at all
/// (used to answer garbage with a clear 400 rather than waiting for a block end).
pub fn plausible_request(buf: &[u8]) -> bool {
    const P: &[u8] = b"GNUTELLA";
    let n = buf.len().min(P.len());
    buf[..n] == P[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_blocks_with_continuations_and_any_case() {
        let raw = b"GNUTELLA CONNECT/0.6\r\nUser-Agent: gtk-gnutella/1.2.3\r\nx-ultrapeer: True\r\nAccept-Encoding: gzip,\r\n deflate\r\n\r\nrest";
        let (b, n) = Block::parse(raw).unwrap().unwrap();
        assert_eq!(&raw[n..], b"rest");
        assert_eq!(b.connect_version(), Some((0, 6)));
        assert!(b.is_true("X-Ultrapeer"));
        assert!(b.has_token("accept-encoding", "deflate"));
        assert_eq!(b.get("USER-AGENT"), Some("gtk-gnutella/1.2.3"));
        assert_eq!(b.status(), None);
    }

    #[test]
    fn status_lines_and_round_trip() {
        let b = Block::new("GNUTELLA/0.6 503 Full").header("X-Try-Ultrapeers", "1.2.3.4:6346");
        let bytes = b.to_bytes();
        let (p, n) = Block::parse(&bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        assert_eq!(p, b);
        assert_eq!(p.status(), Some(503));
        assert_eq!(Block::new("GNUTELLA OK").status(), None);
        assert_eq!(
            Block::new("GNUTELLA CONNECT/0.4").connect_version(),
            Some((0, 4))
        );
    }

    #[test]
    fn incomplete_oversized_and_malformed_blocks() {
        assert_eq!(Block::parse(b"GNUTELLA CONNECT/0.6\r\nA: b\r\n"), Ok(None));
        let big = vec![b'a'; MAX_BLOCK + 1];
        assert_eq!(Block::parse(&big), Err(HandshakeError::Oversized));
        let mut many = b"GNUTELLA CONNECT/0.6\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(Block::parse(&many), Err(HandshakeError::Oversized));
        assert!(matches!(
            Block::parse(b"GNUTELLA CONNECT/0.6\r\nnocolon\r\n\r\n"),
            Err(HandshakeError::Malformed(_))
        ));
        assert!(matches!(
            Block::parse(b"GNUTELLA \xff\r\n\r\n"),
            Err(HandshakeError::Malformed(_))
        ));
        assert!(plausible_request(b"GNUT"));
        assert!(!plausible_request(b"GET / HTTP/1.1"));
    }
}
