//! The chunked body decoder (`seda_chunked::ChunkedDecoder`, the one decoder of the
//! servers, the proxy and the load generator). Properties checked beyond "no
//! panic":
//! - the same bytes fed whole, one byte at a time, or cut at arbitrary points give the
//!   same body, the same bytes consumed, the same end and the same error;
//! - it never consumes more than it is given, never hands more than `max_body` bytes,
//!   and after the end or an error consumes nothing more;
//! - a body written as chunks (sizes, hex case, leading zeros, extensions and trailers
//!   chosen by the input) decodes back to itself, ending exactly where the encoding
//!   ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seda_chunked::{ChunkLimits, ChunkedDecoder, ChunkedError};

fuzz_target!(|data: &[u8]| {
    for limits in [
        ChunkLimits::new(1 << 20),
        ChunkLimits::new(100).with_max_line(16).with_max_trailer(64),
    ] {
        same_in_any_split(data, limits);
    }
    round_trip(data);
});

/// What decoding a stream gave: body bytes, input consumed, ended, error.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    body: Vec<u8>,
    consumed: usize,
    done: bool,
    error: Option<ChunkedError>,
}

/// Decodes `input` fed in the given pieces, as the server does across reads.
fn decode<'a>(pieces: impl Iterator<Item = &'a [u8]>, limits: ChunkLimits) -> Outcome {
    let mut d = ChunkedDecoder::new(limits);
    let mut o = Outcome {
        body: Vec::new(),
        consumed: 0,
        done: false,
        error: None,
    };
    for piece in pieces {
        match d.feed(piece, |b| o.body.extend_from_slice(b)) {
            Ok(fed) => {
                assert!(fed.consumed <= piece.len());
                o.consumed += fed.consumed;
                if fed.done {
                    assert!(d.is_done());
                    o.done = true;
                    // Done for good: more input is not consumed.
                    let again = d.feed(b"0\r\n\r\n", |_| panic!("data after the end")).unwrap();
                    assert_eq!((again.consumed, again.done), (0, true));
                    break;
                }
                assert_eq!(fed.consumed, piece.len(), "stopped early without an end");
            }
            Err(e) => {
                // What was consumed before an error does not matter: the connection
                // closes.
                o.consumed = 0;
                o.error = Some(e);
                assert!(d.feed(b"0\r\n\r\n", |_| panic!("data after an error")).is_err());
                break;
            }
        }
    }
    let handed = o.body.len() as u64;
    assert!(handed <= limits.max_body);
    if o.done {
        assert_eq!(d.body_len(), handed);
    } else {
        assert!(handed <= d.body_len());
    }
    o
}

fn same_in_any_split(data: &[u8], limits: ChunkLimits) {
    let whole = decode(std::iter::once(data), limits);
    let bytes = decode(data.chunks(1), limits);
    assert_eq!(whole, bytes, "fed whole vs byte by byte");
    // Cuts chosen by the bytes themselves (stable for an input, so crashes replay).
    let mut cuts = Vec::new();
    let mut at = 0;
    let mut seed = data.len();
    for &b in data.iter().rev().take(8) {
        seed = seed.wrapping_mul(31).wrapping_add(usize::from(b));
        at += 1 + seed % 13;
        if at >= data.len() {
            break;
        }
        cuts.push(at);
    }
    let mut pieces = Vec::new();
    let mut from = 0;
    for &c in &cuts {
        pieces.push(&data[from..c]);
        from = c;
    }
    pieces.push(&data[from..]);
    assert_eq!(whole, decode(pieces.into_iter(), limits), "cut at {cuts:?}");
}

/// Encodes the input's tail as a chunked body shaped by its first bytes, and decodes it.
fn round_trip(data: &[u8]) {
    let [shape, step, body @ ..] = data else { return };
    let mut enc = Vec::new();
    let mut rest = body;
    let mut size = usize::from(*step) % 40 + 1;
    while !rest.is_empty() {
        let n = size.min(rest.len());
        let hex = match shape & 3 {
            0 => format!("{n:x}"),
            1 => format!("{n:X}"),
            2 => format!("000{n:x}"),
            _ => format!("{n:x} \t; name=\"quoted ; value\";flag"),
        };
        enc.extend_from_slice(hex.as_bytes());
        enc.extend_from_slice(b"\r\n");
        enc.extend_from_slice(&rest[..n]);
        enc.extend_from_slice(b"\r\n");
        rest = &rest[n..];
        size = size * 7 % 41 + 1;
    }
    enc.extend_from_slice(if shape & 4 == 0 { b"0\r\n" } else { b"00;last\r\n" });
    if shape & 8 != 0 {
        enc.extend_from_slice(b"Trailer-One: 1\r\nX:\r\n");
    }
    enc.extend_from_slice(b"\r\n");
    let end = enc.len();
    enc.extend_from_slice(b"GET /next HTTP/1.1\r\n");
    let limits = ChunkLimits::new(body.len() as u64);
    let expect = Outcome {
        body: body.to_vec(),
        consumed: end,
        done: true,
        error: None,
    };
    assert_eq!(decode(std::iter::once(&enc[..]), limits), expect);
    assert_eq!(decode(enc.chunks(usize::from(*step) % 7 + 1), limits), expect);
}
