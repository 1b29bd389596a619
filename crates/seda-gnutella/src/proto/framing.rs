//! Message framing over a byte stream, and the stream's deflate layer.
//!
//! # Invariants
//! - [`Framer`] holds at most one incomplete message: `pending` never exceeds
//!   `HEADER_LEN + max_payload` bytes plus one read chunk, because a header that
//!   announces more than `max_payload` is refused before its payload is awaited.
//! - A [`Chunk`]'s frames lie inside its buffer, in stream order, back to back.
//! - [`Inflater`] never produces more than the caller's step per call, so a small
//!   compressed input that expands a thousandfold is framed piece by piece.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::message::{HEADER_LEN, Header};

/// One message inside a [`Chunk`]: its header and where its header starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The parsed header.
    pub header: Header,
    /// Offset of the header in the chunk's buffer.
    pub at: usize,
}

impl Frame {
    /// Offset of the payload in the chunk's buffer.
    pub fn payload_at(&self) -> usize {
        self.at + HEADER_LEN
    }

    /// Offset just past the message.
    pub fn end(&self) -> usize {
        self.payload_at() + self.header.len as usize
    }
}

/// Complete messages read from one connection, sharing one buffer.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    /// The bytes of the messages, back to back.
    pub buf: Bytes,
    /// The messages, in stream order.
    pub frames: Vec<Frame>,
}

impl Chunk {
    /// The payload of `f`.
    pub fn payload(&self, f: &Frame) -> &[u8] {
        &self.buf[f.payload_at()..f.end()]
    }

    /// The whole message `f`, header included.
    pub fn message(&self, f: &Frame) -> &[u8] {
        &self.buf[f.at..f.end()]
    }
}

/// The messages of a buffer that holds complete messages back to back (what
/// [`Framer::feed_each`] returns): `(offset, header)` of each, in order. A
/// truncated last message is not yielded.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (usize, Header)> + '_ {
    let mut off = 0;
    std::iter::from_fn(move || {
        if buf.len() - off < HEADER_LEN {
            return None;
        }
        let h = Header::parse(&buf[off..off + HEADER_LEN]);
        let end = off + HEADER_LEN + h.len as usize;
        if end > buf.len() {
            return None;
        }
        let at = off;
        off = end;
        Some((at, h))
    })
}

/// A header announced a payload longer than the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TooLarge {
    /// The announced payload length.
    pub len: u32,
    /// The limit.
    pub max: u32,
}

/// Cuts a byte stream into messages.
#[derive(Debug)]
pub struct Framer {
    pending: Vec<u8>,
    max_payload: u32,
}

impl Framer {
    /// A framer refusing payloads longer than `max_payload` bytes.
    pub fn new(max_payload: u32) -> Framer {
        Framer {
            pending: Vec::new(),
            max_payload,
        }
    }

    /// Bytes of an incomplete message held back.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Appends `data` to the stream and returns the complete messages now available
    /// (possibly none). After an error the stream is unusable: close it.
    pub fn feed(&mut self, data: Vec<u8>) -> Result<Chunk, TooLarge> {
        let all = if self.pending.is_empty() {
            data
        } else {
            let mut p = std::mem::take(&mut self.pending);
            p.extend_from_slice(&data);
            p
        };
        self.frame(all)
    }

    /// As [`Framer::feed`] from a borrowed slice.
    pub fn feed_slice(&mut self, data: &[u8]) -> Result<Chunk, TooLarge> {
        let mut all = std::mem::take(&mut self.pending);
        all.extend_from_slice(data);
        self.frame(all)
    }

    /// Appends `data` to the stream and returns the complete messages now available,
    /// back to back in one buffer (the incomplete tail is kept for the next call),
    /// calling `visit(offset, header, payload)` for each in stream order. One pass
    /// over the headers, no allocation beyond the buffer. After an error the stream
    /// is unusable: close it.
    pub fn feed_each(
        &mut self,
        data: Vec<u8>,
        mut visit: impl FnMut(usize, &Header, &[u8]),
    ) -> Result<Vec<u8>, TooLarge> {
        let mut all = if self.pending.is_empty() {
            data
        } else {
            let mut p = std::mem::take(&mut self.pending);
            p.extend_from_slice(&data);
            p
        };
        let mut off = 0;
        while all.len() - off >= HEADER_LEN {
            let header = Header::parse(&all[off..off + HEADER_LEN]);
            if header.len > self.max_payload {
                return Err(TooLarge {
                    len: header.len,
                    max: self.max_payload,
                });
            }
            let end = off + HEADER_LEN + header.len as usize;
            if end > all.len() {
                break;
            }
            visit(off, &header, &all[off + HEADER_LEN..end]);
            off = end;
        }
        if off < all.len() {
            self.pending = all[off..].to_vec();
            all.truncate(off);
        }
        Ok(all)
    }

    fn frame(&mut self, mut all: Vec<u8>) -> Result<Chunk, TooLarge> {
        let mut frames = Vec::new();
        let mut off = 0;
        while all.len() - off >= HEADER_LEN {
            let header = Header::parse(&all[off..off + HEADER_LEN]);
            if header.len > self.max_payload {
                return Err(TooLarge {
                    len: header.len,
                    max: self.max_payload,
                });
            }
            let end = off + HEADER_LEN + header.len as usize;
            if end > all.len() {
                break;
            }
            frames.push(Frame { header, at: off });
            off = end;
        }
        if off < all.len() {
            self.pending = all[off..].to_vec();
            all.truncate(off);
        }
        Ok(Chunk {
            buf: Bytes::from(all),
            frames,
        })
    }
}

/// Corrupt compressed input.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InflateError(pub String);

/// The receiving side of a `Content-Encoding: deflate` stream (zlib format, as
/// every Gnutella servent sends it).
#[derive(Debug)]
pub struct Inflater {
    z: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater {
            z: Decompress::new(true),
        }
    }
}

impl Inflater {
    /// Inflates from `input` into `out` (cleared first), producing at most `step`
    /// bytes. Returns how many input bytes were consumed; call again with the rest
    /// while it is not empty.
    pub fn inflate(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        step: usize,
    ) -> Result<usize, InflateError> {
        out.clear();
        out.reserve(step);
        let before = self.z.total_in();
        match self.z.decompress_vec(input, out, FlushDecompress::Sync) {
            Ok(Status::Ok | Status::BufError) => {}
            Ok(Status::StreamEnd) => return Err(InflateError("compressed stream ended".into())),
            Err(e) => return Err(InflateError(e.to_string())),
        }
        let used = (self.z.total_in() - before) as usize;
        if used == 0 && out.is_empty() && !input.is_empty() {
            return Err(InflateError("compressed stream makes no progress".into()));
        }
        Ok(used)
    }
}

/// The sending side of a `Content-Encoding: deflate` stream.
#[derive(Debug)]
pub struct Deflater {
    z: Compress,
}

impl Default for Deflater {
    fn default() -> Self {
        Deflater {
            z: Compress::new(Compression::fast(), true),
        }
    }
}

impl Deflater {
    /// Compresses `input` and appends it to `out`, ending with a sync flush so the
    /// peer can inflate everything sent so far.
    pub fn deflate(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut rest = input;
        loop {
            out.reserve(rest.len() / 2 + 64);
            let before = self.z.total_in();
            let out_before = out.len();
            // Compressing into a Vec with spare room cannot fail.
            let _ = self.z.compress_vec(rest, out, FlushCompress::Sync);
            let used = (self.z.total_in() - before) as usize;
            rest = &rest[used..];
            // Done once all input is in and the flush fit (room left over).
            if rest.is_empty() && out.len() < out.capacity() {
                break;
            }
            if used == 0 && out.len() == out_before && out.len() < out.capacity() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::{Guid, MsgType, write_message};
    use super::*;

    fn stream(n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let payload = vec![i as u8; i % 40];
            write_message(&mut v, Guid([i as u8; 16]), MsgType::Ping, 1, 0, &payload);
        }
        v
    }

    #[test]
    fn frames_survive_any_split_of_the_stream() {
        let s = stream(50);
        for cut in [1, 2, 7, 22, 23, 24, 100, 1000] {
            let mut f = Framer::new(1024);
            let mut seen = Vec::new();
            for piece in s.chunks(cut) {
                let c = f.feed(piece.to_vec()).unwrap();
                for fr in &c.frames {
                    seen.push((fr.header.guid, c.payload(fr).to_vec()));
                }
            }
            assert_eq!(f.pending(), 0, "cut {cut}");
            assert_eq!(seen.len(), 50, "cut {cut}");
            for (i, (g, p)) in seen.iter().enumerate() {
                assert_eq!(*g, Guid([i as u8; 16]));
                assert_eq!(p.len(), i % 40);
            }
        }
    }

    #[test]
    fn feed_each_visits_every_message_once_and_keeps_the_tail() {
        let s = stream(50);
        for cut in [1, 7, 23, 100, 1000] {
            let mut f = Framer::new(1024);
            let mut seen = Vec::new();
            let mut walked = 0;
            for piece in s.chunks(cut) {
                let buf = f
                    .feed_each(piece.to_vec(), |at, h, p| {
                        seen.push((at, h.guid, p.len()));
                    })
                    .unwrap();
                walked += messages(&buf).count();
            }
            assert_eq!(f.pending(), 0, "cut {cut}");
            assert_eq!(seen.len(), 50, "cut {cut}");
            assert_eq!(walked, 50, "cut {cut}");
            for (i, (_, g, n)) in seen.iter().enumerate() {
                assert_eq!(*g, Guid([i as u8; 16]));
                assert_eq!(*n, i % 40);
            }
        }
    }

    #[test]
    fn an_oversized_header_is_refused_before_its_payload() {
        let mut v = Vec::new();
        Header {
            guid: Guid([1; 16]),
            kind: MsgType::Query,
            ttl: 1,
            hops: 0,
            len: 70_000,
        }
        .write(&mut v);
        let mut f = Framer::new(65_536);
        assert_eq!(
            f.feed(v).unwrap_err(),
            TooLarge {
                len: 70_000,
                max: 65_536
            }
        );
    }

    #[test]
    fn deflate_round_trips_in_pieces_and_bounds_each_step() {
        let s = stream(400);
        let mut d = Deflater::default();
        let mut z = Vec::new();
        for piece in s.chunks(333) {
            d.deflate(piece, &mut z);
        }
        let mut inf = Inflater::default();
        let mut got = Vec::new();
        let mut out = Vec::new();
        for piece in z.chunks(100) {
            let mut rest = piece;
            while !rest.is_empty() {
                let used = inf.inflate(rest, &mut out, 64).unwrap();
                assert!(out.len() <= 64);
                got.extend_from_slice(&out);
                rest = &rest[used..];
            }
        }
        // Everything flushed so far is inflatable: a sync flush ends every call.
        loop {
            inf.inflate(&[], &mut out, 64).unwrap();
            if out.is_empty() {
                break;
            }
            got.extend_from_slice(&out);
        }
        assert_eq!(got, s);
    }

    #[test]
    fn garbage_is_an_inflate_error_not_a_panic() {
        let mut inf = Inflater::default();
        let mut out = Vec::new();
        assert!(inf.inflate(b"GNUTELLA garbage", &mut out, 1024).is_err());
    }
}
