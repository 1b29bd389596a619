//! The send half of a connection, a leaf: the framed responses ([`Reply`]) and the
//! reorder buffer that keeps them in request order ([`SendState`]; see the
//! invariants in `conn.rs`, whose `Conn` holds it behind its own lock).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

/// One response, framed and ready to go out.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The head: either complete, or (for cached `200` heads) without its `Date`
    /// and `Connection` lines, which `date` and the close flag supply.
    pub(crate) head: Bytes,
    /// The `Date` line when `head` is a cached prefix.
    pub(crate) date: Option<Bytes>,
    pub(crate) body: Body,
    /// Close the connection after this response.
    pub(crate) close: bool,
}

#[derive(Debug)]
pub(crate) enum Body {
    None,
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

/// The send half of a connection (HttpSend).
#[derive(Debug, Default)]
pub(super) struct SendState {
    /// Sequence number of the next response to send.
    pub(super) next: u64,
    /// Responses finished before their turn and a `100 Continue` still due: boxed,
    /// and only while either is there (see [`Parked`]).
    pub(super) parked: Option<Box<Parked>>,
    /// Nothing more is written.
    pub(super) dead: bool,
    /// Requests a handler has begun whose responses are not handed over yet (see
    /// the invariants).
    pub(super) running: Running,
}

/// Requests a handler has begun whose responses are not handed over yet: nearly
/// always none, so one word, which owns an allocation only while one is running
/// (a `Vec` took three words, and kept its buffer for the connection's life once a
/// dynamic handler had run on it).
// A `Box<Vec>`, not a `Vec` (three words) nor a `Box<[u64]>` (two): one word in
// every connection's record is the point.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(super) struct Running(pub(super) Option<Box<Vec<u64>>>);

impl Running {
    pub(super) fn push(&mut self, seq: u64) {
        self.0.get_or_insert_with(Box::default).push(seq);
    }

    /// Request `seq`'s response is handed over (or it never ran); frees the list
    /// once empty.
    pub(super) fn remove(&mut self, seq: u64) {
        if let Some(v) = self.0.as_mut() {
            v.retain(|&s| s != seq);
            if v.is_empty() {
                self.0 = None;
            }
        }
    }

    pub(super) fn contains(&self, seq: u64) -> bool {
        self.0.as_ref().is_some_and(|v| v.contains(&seq))
    }
}

/// What the send half keeps for later, rarely: responses of pipelined requests
/// finished before their turn, and the request waiting for an interim
/// `100 Continue`. An idle connection keeps none of it: the box goes once both are
/// empty (a `BTreeMap` keeps its root node, room for 11 replies, after its last
/// entry goes; a connection's record is 40 bytes smaller without them inline).
#[derive(Debug, Default)]
pub(super) struct Parked {
    /// Responses finished before their turn, by sequence number.
    pub(super) replies: BTreeMap<u64, Reply>,
    /// Request waiting for an interim `100 Continue` once its turn comes.
    pub(super) continue_at: Option<u64>,
}

impl SendState {
    /// Keeps `reply` (request `seq`) until its turn.
    pub(super) fn park(&mut self, seq: u64, reply: Reply) {
        self.parked
            .get_or_insert_with(Box::default)
            .replies
            .insert(seq, reply);
    }

    /// Request `seq` waits for `100 Continue` until its turn.
    pub(super) fn defer_continue(&mut self, seq: u64) {
        self.parked.get_or_insert_with(Box::default).continue_at = Some(seq);
    }

    /// The reply parked for request `seq`, if any.
    pub(super) fn take_parked(&mut self, seq: u64) -> Option<Reply> {
        let p = self.parked.as_mut()?;
        let r = p.replies.remove(&seq);
        self.tidy();
        r
    }

    /// Whether request `seq` (whose turn it is) waits for `100 Continue`; taken.
    pub(super) fn take_continue(&mut self, seq: u64) -> bool {
        match self.parked.as_mut() {
            Some(p) if p.continue_at == Some(seq) => {
                p.continue_at = None;
                self.tidy();
                true
            }
            _ => false,
        }
    }

    /// Drops every parked reply and a due `100 Continue` (nothing more goes out).
    pub(super) fn drop_parked(&mut self) {
        self.parked = None;
    }

    /// Frees the box once nothing is in it.
    pub(super) fn tidy(&mut self) {
        if self
            .parked
            .as_ref()
            .is_some_and(|p| p.replies.is_empty() && p.continue_at.is_none())
        {
            self.parked = None;
        }
    }
}
