//! What one router batch sends, collected per destination.
//!
//! The router rewrites a forwarded message's TTL and hops in place, in the buffer
//! the server read it into, so a message leaves exactly as it lies there. Each
//! destination collects *runs*: ranges of that buffer holding messages that go to
//! it back to back. When one peer's read is broadcast to every other peer (the
//! common case), each destination gets the whole read as one slice: no copy, one
//! `iovec`, one `writev` per destination per batch.
//!
//! # Invariants
//! - A run holds whole messages only, in the order they were read.
//! - `msgs` counts the messages in `bufs`, in the runs of the current buffer and in
//!   `own`.

use bytes::Bytes;

use crate::proto::message::Header;

/// Output for one destination.
#[derive(Debug, Default)]
pub(crate) struct Dest {
    /// Slices ready to send.
    pub(crate) bufs: Vec<Bytes>,
    /// Byte ranges of the buffer being routed, not yet sliced.
    runs: Vec<(usize, usize)>,
    /// Messages of our own (pongs answering pings), copied.
    own: Vec<u8>,
    /// Messages collected.
    pub(crate) msgs: u64,
}

impl Dest {
    /// Adds the message at `at..end` of the current buffer.
    pub(crate) fn take(&mut self, at: usize, end: usize) {
        match self.runs.last_mut() {
            Some(last) if last.1 == at => last.1 = end,
            _ => self.runs.push((at, end)),
        }
        self.msgs += 1;
    }

    /// Adds a message of our own.
    pub(crate) fn own(&mut self, h: &Header, payload: &[u8]) {
        let h = Header {
            len: payload.len() as u32,
            ..*h
        };
        self.own.extend_from_slice(&h.to_bytes());
        self.own.extend_from_slice(payload);
        self.msgs += 1;
    }

    /// Turns the runs into slices of `buf`, the buffer they refer to.
    pub(crate) fn slice(&mut self, buf: &Bytes) {
        for (a, b) in self.runs.drain(..) {
            self.bufs.push(buf.slice(a..b));
        }
    }

    /// Moves our own messages behind the slices; everything is then in `bufs`.
    pub(crate) fn seal(&mut self) {
        if !self.own.is_empty() {
            self.bufs.push(Bytes::from(std::mem::take(&mut self.own)));
        }
    }

    /// Whether any run refers to the current buffer.
    pub(crate) fn has_runs(&self) -> bool {
        !self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::message::{Guid, MsgType};

    #[test]
    fn adjacent_messages_make_one_run_and_gaps_split_runs() {
        let buf = Bytes::from((0..100u8).collect::<Vec<u8>>());
        let mut d = Dest::default();
        d.take(0, 10);
        d.take(10, 30);
        d.take(40, 50);
        d.slice(&buf);
        assert_eq!(d.bufs.len(), 2);
        assert_eq!(&d.bufs[0][..], &buf[0..30]);
        assert_eq!(&d.bufs[1][..], &buf[40..50]);
        let h = Header {
            guid: Guid([1; 16]),
            kind: MsgType::Pong,
            ttl: 1,
            hops: 0,
            len: 0,
        };
        d.own(&h, &[9; 14]);
        d.seal();
        assert_eq!(d.msgs, 4);
        assert_eq!(d.bufs.len(), 3);
        assert_eq!(d.bufs[2].len(), 23 + 14);
        assert!(!d.has_runs());
    }
}
