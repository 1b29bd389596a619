//! A connection's outgoing queue with value-ordered dropping (SEDA 5.2.2).
//!
//! SEDA's first Gnutella router ran out of memory because packets queued without
//! bound for slow wide-area peers; the fix was a threshold on each socket's
//! outgoing queue. We keep the threshold and, as today's servents do, drop by value
//! before giving up on the peer: past the threshold the lowest-value messages go
//! first (pings, then pongs, then queries; replies and control messages last), the
//! oldest first within a class. A peer that stays over its threshold is closed by
//! the router.
//!
//! # Invariants
//! - `bytes` is the sum of the lengths of the queued messages and never exceeds
//!   `threshold` after [`OutQueue::push`] returns.
//! - Messages of one class leave in the order they were queued; classes leave
//!   highest value first.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::proto::message::MsgType;

/// The value of a message to the network, lowest first: what is dropped first when a
/// peer cannot keep up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Value {
    /// Pings: any later ping does the same job.
    Ping = 0,
    /// Pongs: host addresses, plentiful.
    Pong = 1,
    /// Queries: a lost one costs a search some results.
    Query = 2,
    /// Query hits and pushes: answers someone is waiting for.
    Reply = 3,
    /// Vendor messages, Bye, our own link messages.
    Control = 4,
}

/// Number of value classes.
pub(crate) const CLASSES: usize = 5;

impl Value {
    /// The value of a message of type `kind`.
    pub(crate) fn of(kind: MsgType) -> Value {
        match kind {
            MsgType::Ping => Value::Ping,
            MsgType::Pong => Value::Pong,
            MsgType::Query => Value::Query,
            MsgType::QueryHit | MsgType::Push => Value::Reply,
            _ => Value::Control,
        }
    }

    /// Name in stats.
    pub(crate) fn name(self) -> &'static str {
        ["ping", "pong", "query", "reply", "control"][self as usize]
    }
}

/// What [`OutQueue::push`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// Whether the new message was queued (false: it was the lowest value and was
    /// dropped itself).
    pub(crate) queued: bool,
    /// Messages dropped per class to make room (the new one included if dropped).
    pub(crate) dropped: [u32; CLASSES],
}

/// The queue. See the module docs.
#[derive(Debug)]
pub(crate) struct OutQueue {
    classes: [VecDeque<Bytes>; CLASSES],
    bytes: usize,
    threshold: usize,
}

impl OutQueue {
    /// An empty queue holding at most `threshold` bytes.
    pub(crate) fn new(threshold: usize) -> OutQueue {
        OutQueue {
            classes: Default::default(),
            bytes: 0,
            threshold: threshold.max(1),
        }
    }

    /// Bytes queued.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The threshold.
    pub(crate) fn threshold(&self) -> usize {
        self.threshold
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Messages queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.classes.iter().map(VecDeque::len).sum()
    }

    /// Queues `msg` of value `v`, first dropping queued messages of lower or equal
    /// value (lowest, oldest first) if it would not fit; if only higher-value
    /// messages are in the way, or the message alone passes the threshold, `msg`
    /// itself is dropped.
    pub(crate) fn push(&mut self, v: Value, msg: Bytes) -> Pushed {
        let mut out = Pushed::default();
        if msg.len() > self.threshold {
            out.dropped[v as usize] += 1;
            return out;
        }
        while self.bytes + msg.len() > self.threshold {
            let Some(c) = (0..=v as usize).find(|&c| !self.classes[c].is_empty()) else {
                out.dropped[v as usize] += 1;
                return out;
            };
            if let Some(old) = self.classes[c].pop_front() {
                self.bytes -= old.len();
                out.dropped[c] += 1;
            }
        }
        self.bytes += msg.len();
        self.classes[v as usize].push_back(msg);
        out.queued = true;
        debug_assert!(self.bytes <= self.threshold);
        out
    }

    /// Moves messages, highest value first, into `out` until it holds `max` bytes
    /// (at least one message if any is queued). Returns how many moved.
    pub(crate) fn pop_into(&mut self, out: &mut Vec<u8>, max: usize) -> usize {
        let mut n = 0;
        for c in (0..CLASSES).rev() {
            while let Some(m) = self.classes[c].front() {
                if n > 0 && out.len() + m.len() > max {
                    return n;
                }
                out.extend_from_slice(m);
                self.bytes -= m.len();
                self.classes[c].pop_front();
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, len: usize) -> Bytes {
        Bytes::from(vec![tag; len])
    }

    #[test]
    fn drops_lowest_value_oldest_first_and_stays_under_threshold() {
        let mut q = OutQueue::new(100);
        assert!(q.push(Value::Ping, msg(1, 40)).queued);
        assert!(q.push(Value::Query, msg(2, 40)).queued);
        // A reply needs 30 more bytes: the ping goes.
        let p = q.push(Value::Reply, msg(3, 30));
        assert!(p.queued);
        assert_eq!(p.dropped, [1, 0, 0, 0, 0]);
        assert_eq!(q.bytes(), 70);
        // A pong cannot displace a query or reply: it is dropped itself.
        let p = q.push(Value::Pong, msg(4, 40));
        assert!(!p.queued);
        assert_eq!(p.dropped, [0, 1, 0, 0, 0]);
        // A query displaces the older query (same value, oldest first).
        let p = q.push(Value::Query, msg(5, 40));
        assert!(p.queued);
        assert_eq!(p.dropped, [0, 0, 1, 0, 0]);
        assert!(q.bytes() <= q.threshold());
        let mut out = Vec::new();
        assert_eq!(q.pop_into(&mut out, 1000), 2);
        // Highest value first: the reply, then the query.
        assert_eq!(out[0], 3);
        assert_eq!(out[30], 5);
        assert!(q.is_empty());
    }

    #[test]
    fn pop_respects_the_budget_but_always_moves_one() {
        let mut q = OutQueue::new(1000);
        for i in 0..5 {
            q.push(Value::Query, msg(i, 100));
        }
        let mut out = Vec::new();
        assert_eq!(q.pop_into(&mut out, 50), 1);
        out.clear();
        assert_eq!(q.pop_into(&mut out, 250), 2);
        assert_eq!(q.len(), 2);
        assert!(!q.push(Value::Control, msg(9, 2000)).queued);
    }
}
