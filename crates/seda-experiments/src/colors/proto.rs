//! The wire format of the colors experiment's file server, an SFS-like read protocol
//! (libasync-mp thesis 5.2): the server's side and the client's side of every frame
//! are decided here, once.
//!
//! - On connect the server sends a *hello*: [`HELLO_MAGIC`] and the connection's
//!   32-byte ChaCha20-Poly1305 key. The key travels in the clear: it stands in for
//!   SFS's public-key session negotiation, which happens once per connection and is
//!   not part of what the experiment measures (the per-response sealing is).
//! - Requests are [`REQUEST_LEN`] bytes: `op: u8 = 1 (read)`, three zero bytes,
//!   `len: u32 LE`, `offset: u64 LE`: read `len` bytes of the served file at
//!   `offset`. Requests are not encrypted (the client must stay cheap: it shares the
//!   machine's two cores with the server).
//! - Every response is a [`HEADER_LEN`]-byte header, `status: u8`, three zero bytes,
//!   `body_len: u32 LE`, `nonce: u64 LE`, then `body_len` bytes: the plaintext
//!   encrypted with ChaCha20-Poly1305 under the connection's key and nonce
//!   `[0; 4] ++ nonce.to_le_bytes()`, the header as associated data, and the 16-byte
//!   tag at the end. The nonce counts the connection's responses from 0, so a
//!   response out of order (or replayed) fails to open. Status [`STATUS_OK`]: the
//!   plaintext is the file range; [`STATUS_BAD_REQUEST`]: a UTF-8 message, after
//!   which the server closes the connection.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag};

/// First bytes of the hello.
pub const HELLO_MAGIC: &[u8; 8] = b"SEDACOL1";
/// Bytes of the hello: magic and key.
pub const HELLO_LEN: usize = 8 + 32;
/// Bytes of a request.
pub const REQUEST_LEN: usize = 16;
/// Bytes of a response header.
pub const HEADER_LEN: usize = 16;
/// Bytes of the authentication tag at the end of a body.
pub const TAG_LEN: usize = 16;
/// Request opcode: read a file range.
pub const OP_READ: u8 = 1;
/// Response status: the body is the file range asked for.
pub const STATUS_OK: u8 = 0;
/// Response status: the request was invalid; the body is why; the connection closes.
pub const STATUS_BAD_REQUEST: u8 = 1;

/// A parsed read request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// Bytes to read.
    pub len: u32,
    /// Where in the file.
    pub offset: u64,
}

impl ReadRequest {
    /// The request's bytes.
    pub fn encode(self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0] = OP_READ;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// Parses one request; the error says what is wrong with it.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Self, String> {
        if b[0] != OP_READ {
            return Err(format!("unknown opcode {}", b[0]));
        }
        if b[1..4] != [0, 0, 0] {
            return Err("reserved request bytes must be zero".to_owned());
        }
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[8..16]);
        Ok(ReadRequest {
            len,
            offset: u64::from_le_bytes(off),
        })
    }
}

/// A parsed response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// [`STATUS_OK`] or [`STATUS_BAD_REQUEST`].
    pub status: u8,
    /// Bytes of the body that follows (ciphertext and tag).
    pub body_len: u32,
    /// The connection's response counter.
    pub nonce: u64,
}

impl Header {
    fn encode(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.status;
        b[4..8].copy_from_slice(&self.body_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// Parses a header; the error says what is wrong with it.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, String> {
        if b[1..4] != [0, 0, 0] {
            return Err("reserved header bytes must be zero".to_owned());
        }
        let body_len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if (body_len as usize) < TAG_LEN {
            return Err(format!("body of {body_len} bytes has no room for a tag"));
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(&b[8..16]);
        Ok(Header {
            status: b[0],
            body_len,
            nonce: u64::from_le_bytes(n),
        })
    }
}

/// The hello the server sends a new connection.
pub fn hello(key: &Key) -> Vec<u8> {
    let mut v = Vec::with_capacity(HELLO_LEN);
    v.extend_from_slice(HELLO_MAGIC);
    v.extend_from_slice(key);
    v
}

/// The cipher of a connection, from its hello; `None` if the hello is not one.
pub fn open_hello(b: &[u8; HELLO_LEN]) -> Option<ChaCha20Poly1305> {
    (&b[..8] == HELLO_MAGIC).then(|| ChaCha20Poly1305::new(Key::from_slice(&b[8..])))
}

fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_le_bytes());
    Nonce::from(b)
}

/// One response frame: header, `plaintext` encrypted in place after one copy, tag.
pub fn seal(cipher: &ChaCha20Poly1305, nonce_n: u64, status: u8, plaintext: &[u8]) -> Vec<u8> {
    let body_len = plaintext.len() + TAG_LEN;
    let header = Header {
        status,
        body_len: u32::try_from(body_len).expect("responses are far below 4 GiB"),
        nonce: nonce_n,
    }
    .encode();
    let mut frame = Vec::with_capacity(HEADER_LEN + body_len);
    frame.extend_from_slice(&header);
    frame.extend_from_slice(plaintext);
    let tag = cipher
        .encrypt_in_place_detached(&nonce(nonce_n), &header, &mut frame[HEADER_LEN..])
        .expect("ChaCha20-Poly1305 encrypts any length below 256 GiB");
    frame.extend_from_slice(&tag);
    frame
}

/// Authenticates and decrypts a body in place; returns the plaintext's length.
pub fn open(cipher: &ChaCha20Poly1305, header: &Header, body: &mut [u8]) -> Result<usize, String> {
    let n = body
        .len()
        .checked_sub(TAG_LEN)
        .ok_or("body shorter than a tag")?;
    let (text, tag) = body.split_at_mut(n);
    let tag = Tag::from_slice(tag);
    let aad = header.encode();
    cipher
        .decrypt_in_place_detached(&nonce(header.nonce), &aad, text, tag)
        .map_err(|_| format!("response {} failed authentication", header.nonce))?;
    Ok(n)
}

/// The served file's content: `len` pseudo-random bytes from `seed`, so that a
/// verifying client can rebuild what it must receive.
pub fn file_content(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let r = rng.u64(..).to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_rejects_tampering() {
        let key = Key::from([7u8; 32]);
        let c = ChaCha20Poly1305::new(&key);
        let frame = seal(&c, 5, STATUS_OK, b"hello world");
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&frame[..HEADER_LEN]);
        let h = Header::decode(&hb).unwrap();
        assert_eq!((h.status, h.nonce, h.body_len), (STATUS_OK, 5, 11 + 16));
        let mut body = frame[HEADER_LEN..].to_vec();
        let n = open(&c, &h, &mut body).unwrap();
        assert_eq!(&body[..n], b"hello world");
        // Another nonce (a reordered response) or a flipped bit fails.
        let mut body = frame[HEADER_LEN..].to_vec();
        assert!(open(&c, &Header { nonce: 6, ..h }, &mut body).is_err());
        let mut body = frame[HEADER_LEN..].to_vec();
        body[0] ^= 1;
        assert!(open(&c, &h, &mut body).is_err());
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_named() {
        let r = ReadRequest {
            len: 16384,
            offset: 1 << 33,
        };
        assert_eq!(ReadRequest::decode(&r.encode()), Ok(r));
        let mut b = r.encode();
        b[0] = 9;
        assert_eq!(ReadRequest::decode(&b), Err("unknown opcode 9".to_owned()));
        let mut b = r.encode();
        b[2] = 1;
        assert!(ReadRequest::decode(&b).is_err());
    }

    #[test]
    fn hello_carries_the_key() {
        let key = Key::from([3u8; 32]);
        let h: [u8; HELLO_LEN] = hello(&key).try_into().unwrap();
        let c = open_hello(&h).unwrap();
        let frame = seal(&ChaCha20Poly1305::new(&key), 0, STATUS_OK, b"x");
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&frame[..HEADER_LEN]);
        let mut body = frame[HEADER_LEN..].to_vec();
        assert!(open(&c, &Header::decode(&hb).unwrap(), &mut body).is_ok());
        let mut bad = h;
        bad[0] = b'X';
        assert!(open_hello(&bad).is_none());
    }
}
