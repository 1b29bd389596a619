//! The little of Gnutella 0.6 the simulated peers speak: the 23-byte message header,
//! the four message types they time, and the client side of the handshake.
//!
//! Written from the protocol (the Gnutella 0.6 draft, section 2.2 and 2.3), not
//! shared with the router it drives: a load generator with its own codec tests
//! interoperation too. `seda-experiments`' `tests/gnutella.rs` checks this codec
//! against `seda_gnutella::proto` both ways.
//!
//! ```text
//! header  = guid(16) type(1) ttl(1) hops(1) payload-length(4, little endian)
//! connect = "GNUTELLA CONNECT/0.6" CRLF *(name ":" SP value CRLF) CRLF
//! answer  = "GNUTELLA/0.6" SP code SP reason CRLF *(header line CRLF) CRLF
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Bytes of a message header.
pub const HEADER_LEN: usize = 23;

/// Payload-type byte of a ping.
pub const PING: u8 = 0x00;
/// Payload-type byte of a pong.
pub const PONG: u8 = 0x01;
/// Payload-type byte of a query.
pub const QUERY: u8 = 0x80;
/// Payload-type byte of a query hit.
pub const QUERY_HIT: u8 = 0x81;
/// Payload-type byte of a query routing table message (QRP).
pub const QRP: u8 = 0x30;

/// The QRP hash of a keyword (ASCII, lowercased by the caller) into a table of
/// 2^`bits` slots, as the Query Routing Protocol specifies it: the bytes XORed
/// into a little-endian 32-bit word at rotating positions, times 0x4F1BBCDC, the
/// top `bits` bits of the low 32.
pub fn qrp_hash(word: &str, bits: u32) -> usize {
    let mut x: u32 = 0;
    for (i, b) in word.bytes().enumerate() {
        x ^= u32::from(b) << ((i % 4) * 8);
    }
    (x.wrapping_mul(0x4F1B_BCDC) >> (32 - bits)) as usize
}

/// A leaf's query routing table holding `words` (2^`bits` slots), as the payloads
/// of a RESET (infinity 2) and one uncompressed PATCH of 1-bit entries (a set bit
/// flips an empty slot to present; bit 7 of the first byte is slot 0).
pub fn qrp_payloads(words: &[String], bits: u32) -> Vec<Vec<u8>> {
    let slots = 1usize << bits;
    let mut reset = vec![0u8];
    reset.extend_from_slice(&(slots as u32).to_le_bytes());
    reset.push(2);
    let mut patch = vec![1u8, 1, 1, 0, 1];
    let mut bitmap = vec![0u8; slots / 8];
    for w in words {
        let i = qrp_hash(&w.to_ascii_lowercase(), bits);
        bitmap[i / 8] |= 0x80 >> (i % 8);
    }
    patch.extend_from_slice(&bitmap);
    vec![reset, patch]
}

/// Longest handshake answer a peer reads before giving up, bytes.
pub const MAX_ANSWER: usize = 16 * 1024;

/// A message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message identifier.
    pub guid: [u8; 16],
    /// Payload-type byte.
    pub kind: u8,
    /// Hops the message may still travel.
    pub ttl: u8,
    /// Hops it has travelled.
    pub hops: u8,
    /// Payload length, bytes.
    pub len: u32,
}

impl Header {
    /// The header at the front of `b`, or `None` if `b` is shorter than
    /// [`HEADER_LEN`].
    pub fn parse(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        let mut guid = [0u8; 16];
        guid.copy_from_slice(&b[..16]);
        Some(Header {
            guid,
            kind: b[16],
            ttl: b[17],
            hops: b[18],
            len: u32::from_le_bytes([b[19], b[20], b[21], b[22]]),
        })
    }
}

/// Appends a message (header and payload) to `out`.
pub fn write_message(
    out: &mut Vec<u8>,
    guid: [u8; 16],
    kind: u8,
    ttl: u8,
    hops: u8,
    payload: &[u8],
) {
    out.extend_from_slice(&guid);
    out.extend_from_slice(&[kind, ttl, hops]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The first block of the handshake: `GNUTELLA CONNECT/0.6` and `headers`.
pub fn connect_block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = String::from("GNUTELLA CONNECT/0.6\r\n");
    for (name, value) in headers {
        s.push_str(name);
        s.push_str(": ");
        s.push_str(value);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// The third block of the handshake: the peer accepts the connection.
pub const ACCEPT_BLOCK: &[u8] = b"GNUTELLA/0.6 200 OK\r\n\r\n";

/// The status code and the status line of a handshake answer (a whole block,
/// ending in an empty line), or `None` if its first line is not
/// `GNUTELLA/<version> <code> ...`.
pub fn answer_status(block: &[u8]) -> Option<(u16, String)> {
    let end = block.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&block[..end])
        .ok()?
        .trim_end_matches('\r');
    let rest = line.strip_prefix("GNUTELLA/")?;
    let (_version, rest) = rest.split_once(' ')?;
    let code = rest.split(' ').next()?;
    if code.len() != 3 {
        return None;
    }
    Some((code.parse().ok()?, line.to_owned()))
}

/// Handshakes with the router at `router` as an ultrapeer (`leaf`: as a leaf) that
/// names itself `agent`, without compression (a generator measures the router, not
/// zlib), blocking, and returns the stream nonblocking. `patience` bounds each read
/// of the router's answer; the connect may take half of it.
pub fn handshake(
    router: SocketAddr,
    agent: &str,
    leaf: bool,
    patience: Duration,
) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&router, patience / 2)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(patience))?;
    let hello = connect_block(&[
        ("User-Agent", agent),
        ("X-Ultrapeer", if leaf { "False" } else { "True" }),
        ("X-Query-Routing", "0.2"),
        ("Vendor-Message", "0.2"),
    ]);
    s.write_all(&hello)?;
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 || buf.len() > MAX_ANSWER {
            return Err(io::Error::other("router closed during the handshake"));
        }
        buf.push(b[0]);
    }
    let (status, line) =
        answer_status(&buf).ok_or_else(|| io::Error::other("unreadable handshake answer"))?;
    if status != 200 {
        return Err(io::Error::other(format!(
            "router refused the connection: {line}"
        )));
    }
    s.write_all(ACCEPT_BLOCK)?;
    s.set_read_timeout(None)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back() {
        let mut out = Vec::new();
        let guid = [7u8; 16];
        write_message(&mut out, guid, QUERY, 2, 1, b"\x80\x00abc\x00");
        assert_eq!(out.len(), HEADER_LEN + 6);
        let h = Header::parse(&out).unwrap();
        assert_eq!(
            h,
            Header {
                guid,
                kind: QUERY,
                ttl: 2,
                hops: 1,
                len: 6
            }
        );
        assert_eq!(Header::parse(&out[..HEADER_LEN - 1]), None);
    }

    #[test]
    fn the_qrp_hash_matches_the_spec_vectors() {
        for (w, bits, want) in [
            ("ebckl", 13, 3179),
            ("ndflalem", 16, 37658),
            ("3nja9", 10, 581),
            ("zzzzzzzzzzz", 10, 944),
        ] {
            assert_eq!(qrp_hash(w, bits), want, "{w}");
        }
        let p = qrp_payloads(&["k0001".to_owned()], 10);
        assert_eq!(p[0], vec![0, 0, 4, 0, 0, 2]);
        assert_eq!(p[1].len(), 5 + 128);
        let i = qrp_hash("k0001", 10);
        assert_eq!(p[1][5 + i / 8], 0x80 >> (i % 8));
    }

    #[test]
    fn handshake_blocks() {
        let b = connect_block(&[("User-Agent", "x/1"), ("X-Ultrapeer", "True")]);
        assert_eq!(
            b,
            b"GNUTELLA CONNECT/0.6\r\nUser-Agent: x/1\r\nX-Ultrapeer: True\r\n\r\n"
        );
        assert_eq!(
            answer_status(b"GNUTELLA/0.6 200 OK\r\nX-Ultrapeer: True\r\n\r\n"),
            Some((200, "GNUTELLA/0.6 200 OK".to_owned()))
        );
        assert_eq!(
            answer_status(b"GNUTELLA/0.6 503 Full\r\n\r\n").map(|s| s.0),
            Some(503)
        );
        assert_eq!(answer_status(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(answer_status(b"GNUTELLA/0.6 2000 OK\r\n\r\n"), None);
        assert_eq!(answer_status(b"no line end"), None);
    }
}
