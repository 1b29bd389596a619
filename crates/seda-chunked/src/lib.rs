//! # seda-chunked: the one decoder of HTTP/1.1 chunked bodies
//!
//! An incremental decoder of chunked bodies (RFC 9112 7.1), with limits. The
//! server's request bodies and the proxy's upstream responses (`seda-http`, which
//! re-exports it as `seda_http::proto::ChunkedDecoder`), the load generator's response
//! reader (`seda-load`) and the experiments' stats reader all decode with it, and
//! `fuzz/fuzz_targets/chunked.rs` fuzzes it. It depends on nothing, so that
//! `seda-load`, which shares no code with the servers it measures, can use it too.
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! last-chunk   = 1*("0") [ chunk-ext ] CRLF
//! ```
//!
//! [`ChunkedDecoder::feed`] takes whatever bytes arrived, hands the decoded data to a
//! callback (which may keep or drop it) and says how many input bytes it consumed and
//! whether the body ended. It is a pure state machine over bytes, so it is fuzzed on
//! its own.
//!
//! # Examples
//!
//! ```
//! use seda_chunked::{ChunkLimits, ChunkedDecoder};
//!
//! let mut decoder = ChunkedDecoder::new(ChunkLimits::new(1024));
//! let mut body = Vec::new();
//! // A body that arrives in two reads, followed by the next message.
//! let first = decoder.feed(b"5\r\nhel", |data| body.extend_from_slice(data)).unwrap();
//! assert_eq!((first.consumed, first.done), (6, false));
//! let second = decoder
//!     .feed(b"lo\r\n0\r\n\r\nGET /next", |data| body.extend_from_slice(data))
//!     .unwrap();
//! assert!(second.done);
//! assert_eq!(body, b"hello");
//! assert_eq!(second.consumed, 9, "the next message is not consumed");
//! ```
//!
//! # Strictness
//! Lines end with CRLF only (a bare LF or CR is an error, as in the head); the size is
//! hexadecimal without sign or leading whitespace; whitespace after the size is
//! allowed only before an extension (`BWS ";"`); extensions are skipped but bounded
//! with the size line by [`ChunkLimits::max_line`]; trailer fields are skipped, bounded
//! in total by [`ChunkLimits::max_trailer`].
//!
//! # Invariants
//! - Never panics, whatever the bytes, and never consumes more than it was given.
//! - The data handed to the callback adds up to at most [`ChunkLimits::max_body`];
//!   past it the decoder fails with [`ChunkedError::TooLarge`] before handing any of
//!   the chunk that would cross it.
//! - After `done` or an error, further input is never consumed.

#![forbid(unsafe_code)]

use std::fmt;

/// Bounds of one chunked body, in bytes. `#[non_exhaustive]`: start from
/// [`ChunkLimits::new`] and set what differs with the `with_*` setters.
///
/// ```
/// use seda_chunked::ChunkLimits;
///
/// let limits = ChunkLimits::new(1 << 20).with_max_line(64).with_max_trailer(0);
/// assert_eq!((limits.max_body, limits.max_line, limits.max_trailer), (1 << 20, 64, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChunkLimits {
    /// Most decoded body bytes.
    pub max_body: u64,
    /// Longest chunk-size line, extensions included (CRLF excluded). Default 4 KiB.
    pub max_line: usize,
    /// Most bytes of trailer section. Default 16 KiB.
    pub max_trailer: usize,
}

impl ChunkLimits {
    /// Defaults for lines and trailers, with `max_body`.
    pub fn new(max_body: u64) -> Self {
        ChunkLimits {
            max_body,
            max_line: 4096,
            max_trailer: 16 * 1024,
        }
    }

    /// Sets [`max_body`](Self::max_body).
    #[must_use]
    pub fn with_max_body(mut self, max_body: u64) -> Self {
        self.max_body = max_body;
        self
    }

    /// Sets [`max_line`](Self::max_line).
    #[must_use]
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// Sets [`max_trailer`](Self::max_trailer).
    #[must_use]
    pub fn with_max_trailer(mut self, max_trailer: usize) -> Self {
        self.max_trailer = max_trailer;
        self
    }
}

/// Why a chunked body could not be decoded. `#[non_exhaustive]`: a match needs a `_`
/// arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkedError {
    /// Malformed framing: 400.
    Malformed,
    /// The body, a size line or the trailers passed their limit: 413.
    TooLarge,
}

impl fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkedError::Malformed => "malformed chunked body",
            ChunkedError::TooLarge => "chunked body too large",
        })
    }
}

impl std::error::Error for ChunkedError {}

/// What one [`ChunkedDecoder::feed`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// Input bytes consumed (the rest belongs to what follows the body, or is not
    /// yet decodable).
    pub consumed: usize,
    /// The body ended (last chunk and trailers read).
    pub done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In the size: value so far, digits so far.
    Size { value: u64, digits: u8 },
    /// After the size, whitespace before a `;`.
    SizeSpace,
    /// In an extension, until CR.
    Extension,
    /// Saw the CR of the size line.
    SizeCr,
    /// In chunk data, bytes left.
    Data { left: u64 },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    Trailer,
    /// Saw the CR of a trailer field line.
    TrailerCr,
    /// Saw the CR of the final empty line.
    EndCr,
    /// The body ended.
    Done,
    /// An error was returned.
    Failed,
}

/// The decoder of one chunked body. See the module docs.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    limits: ChunkLimits,
    /// Decoded bytes so far.
    body: u64,
    /// Bytes of the current size line.
    line: usize,
    /// Bytes of trailers so far.
    trailer: usize,
    /// Size of the chunk whose line is being read (0 = the last chunk).
    pending: u64,
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new(limits: ChunkLimits) -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            limits,
            body: 0,
            line: 0,
            trailer: 0,
            pending: 0,
        }
    }

    /// Decoded body bytes so far.
    pub fn body_len(&self) -> u64 {
        self.body
    }

    /// Whether the body ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, handing each piece of body data to `data` in order.
    pub fn feed(&mut self, input: &[u8], mut data: impl FnMut(&[u8])) -> Result<Fed, ChunkedError> {
        let mut i = 0;
        while i < input.len() {
            let c = input[i];
            match self.state {
                State::Done => break,
                State::Failed => return Err(ChunkedError::Malformed),
                State::Data { left } => {
                    let n = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - i);
                    data(&input[i..i + n]);
                    i += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data { left }
                    };
                    continue;
                }
                State::Size { value, digits } => {
                    self.line_byte()?;
                    if let Some(d) = hex(c) {
                        if digits >= 16 {
                            return self.fail(ChunkedError::TooLarge);
                        }
                        self.state = State::Size {
                            value: value << 4 | u64::from(d),
                            digits: digits + 1,
                        };
                    } else if digits == 0 {
                        return self.fail(ChunkedError::Malformed);
                    } else {
                        self.pending = value;
                        self.state = match c {
                            b'\r' => State::SizeCr,
                            b';' => State::Extension,
                            b' ' | b'\t' => State::SizeSpace,
                            _ => return self.fail(ChunkedError::Malformed),
                        };
                        if self.body.saturating_add(value) > self.limits.max_body {
                            return self.fail(ChunkedError::TooLarge);
                        }
                    }
                }
                State::SizeSpace => {
                    self.line_byte()?;
                    self.state = match c {
                        b' ' | b'\t' => State::SizeSpace,
                        b';' => State::Extension,
                        _ => return self.fail(ChunkedError::Malformed),
                    };
                }
                State::Extension => {
                    self.line_byte()?;
                    match c {
                        b'\r' => self.state = State::SizeCr,
                        b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                        _ => return self.fail(ChunkedError::Malformed),
                    }
                }
                State::SizeCr => {
                    if c != b'\n' {
                        return self.fail(ChunkedError::Malformed);
                    }
                    self.line = 0;
                    self.state = if self.pending == 0 {
                        State::TrailerStart
                    } else {
                        self.body += self.pending;
                        State::Data { left: self.pending }
                    };
                }
                State::DataCr => {
                    if c != b'\r' {
                        return self.fail(ChunkedError::Malformed);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if c != b'\n' {
                        return self.fail(ChunkedError::Malformed);
                    }
                    self.state = State::Size {
                        value: 0,
                        digits: 0,
                    };
                }
                State::TrailerStart => {
                    self.trailer_byte()?;
                    self.state = match c {
                        b'\r' => State::EndCr,
                        b'\n' => return self.fail(ChunkedError::Malformed),
                        _ => State::Trailer,
                    };
                }
                State::Trailer => {
                    self.trailer_byte()?;
                    match c {
                        b'\r' => self.state = State::TrailerCr,
                        b'\n' => return self.fail(ChunkedError::Malformed),
                        _ => {}
                    }
                }
                State::TrailerCr => {
                    self.trailer_byte()?;
                    if c != b'\n' {
                        return self.fail(ChunkedError::Malformed);
                    }
                    self.state = State::TrailerStart;
                }
                State::EndCr => {
                    if c != b'\n' {
                        return self.fail(ChunkedError::Malformed);
                    }
                    self.state = State::Done;
                    i += 1;
                    break;
                }
            }
            i += 1;
        }
        Ok(Fed {
            consumed: i,
            done: self.state == State::Done,
        })
    }

    fn fail<T>(&mut self, e: ChunkedError) -> Result<T, ChunkedError> {
        self.state = State::Failed;
        Err(e)
    }

    fn line_byte(&mut self) -> Result<(), ChunkedError> {
        self.line += 1;
        if self.line > self.limits.max_line {
            return self.fail(ChunkedError::TooLarge);
        }
        Ok(())
    }

    fn trailer_byte(&mut self) -> Result<(), ChunkedError> {
        self.trailer += 1;
        if self.trailer > self.limits.max_trailer {
            return self.fail(ChunkedError::TooLarge);
        }
        Ok(())
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns (body, consumed, done).
    fn decode(
        input: &[u8],
        step: usize,
        max_body: u64,
    ) -> Result<(Vec<u8>, usize, bool), ChunkedError> {
        let mut d = ChunkedDecoder::new(ChunkLimits::new(max_body));
        let mut body = Vec::new();
        let mut at = 0;
        for piece in input.chunks(step) {
            let fed = d.feed(piece, |b| body.extend_from_slice(b))?;
            at += fed.consumed;
            if fed.done {
                return Ok((body, at, true));
            }
        }
        Ok((body, at, d.is_done()))
    }

    #[test]
    fn decodes_in_any_split() {
        let msg =
            b"5\r\nhello\r\n1;ext=\"x y\"\r\n,\r\n6 ; e\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET /next";
        for step in [1, 2, 3, 7, 1000] {
            let (body, consumed, done) = decode(msg, step, 100).unwrap();
            assert_eq!(body, b"hello, world", "step {step}");
            assert!(done);
            assert_eq!(&msg[consumed..], b"GET /next", "step {step}");
        }
    }

    #[test]
    fn empty_body_and_leading_zeros() {
        assert_eq!(decode(b"0\r\n\r\n", 1, 0).unwrap(), (Vec::new(), 5, true));
        assert!(decode(b"000\r\n\r\n", 3, 0).unwrap().2);
        assert_eq!(
            decode(b"0a\r\n0123456789\r\n0\r\n\r\n", 4, 10).unwrap().0,
            b"0123456789"
        );
    }

    #[test]
    fn malformed_framing_is_refused() {
        for bad in [
            &b"x\r\n"[..],
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5 x\r\n",
            b"-5\r\n",
            b"0\r\nX: 1\n\r\n",
            b"0\r\n\n",
            b"5\r\nhello\r\n0\r\n\rX",
            b"5;\x01\r\n",
        ] {
            assert_eq!(
                decode(bad, 1, 100).unwrap_err(),
                ChunkedError::Malformed,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn limits_hold() {
        assert_eq!(
            decode(b"b\r\nhello world\r\n0\r\n\r\n", 1, 10).unwrap_err(),
            ChunkedError::TooLarge
        );
        assert_eq!(
            decode(b"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n", 100, 10).unwrap_err(),
            ChunkedError::TooLarge,
            "the sum of the chunks counts"
        );
        assert_eq!(
            decode(b"fffffffffffffffff\r\n", 1, u64::MAX).unwrap_err(),
            ChunkedError::TooLarge,
            "17 hex digits"
        );
        let long_ext = format!("1;{}\r\n", "e".repeat(5000));
        assert_eq!(
            decode(long_ext.as_bytes(), 100, 10).unwrap_err(),
            ChunkedError::TooLarge
        );
        let long_trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(20_000));
        assert_eq!(
            decode(long_trailer.as_bytes(), 100, 10).unwrap_err(),
            ChunkedError::TooLarge
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_never_overconsumes(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            step in 1usize..64,
        ) {
            let mut d = ChunkedDecoder::new(ChunkLimits::new(64).with_max_line(32).with_max_trailer(64));
            let mut total = 0u64;
            for piece in bytes.chunks(step) {
                match d.feed(piece, |b| total += b.len() as u64) {
                    Ok(fed) => {
                        proptest::prop_assert!(fed.consumed <= piece.len());
                        if fed.done { break; }
                    }
                    Err(_) => break,
                }
            }
            proptest::prop_assert!(total <= 64);
        }
    }
}
