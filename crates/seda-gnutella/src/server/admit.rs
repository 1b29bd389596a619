//! Which incoming connections the server accepts: the handshake rate limit
//! ([`super::limit`]), slots per role, and hosts to name when it refuses.
//!
//! # Invariants
//! - A slot is taken when we answer 200 (or when an outgoing handshake completes)
//!   and released exactly once, when the connection closes or its handshake fails;
//!   so `leaves <= max_leaves` holds at all times, and `ultrapeers <= max_peers`
//!   for incoming connections (outgoing ones, which the catcher limits, may take
//!   the last slots).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use parking_lot::Mutex;

use super::limit::{Limiter, Verdict};
use crate::config::RouterConfig;
use crate::events::Role;
use crate::proto::handshake::Block;
use crate::stats::Event;

/// Connections per role, counted by the server (the only stage that admits).
#[derive(Debug)]
pub(crate) struct Slots {
    max_ultrapeers: usize,
    max_leaves: usize,
    taken: Mutex<Taken>,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Taken {
    pub(crate) ultrapeers: usize,
    pub(crate) leaves: usize,
}

impl Slots {
    pub(crate) fn new(cfg: &RouterConfig) -> Slots {
        Slots {
            max_ultrapeers: cfg.max_peers,
            max_leaves: cfg.max_leaves,
            taken: Mutex::new(Taken::default()),
        }
    }

    /// Takes a slot of `role` if one is free.
    pub(crate) fn take(&self, role: Role) -> bool {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer if t.ultrapeers < self.max_ultrapeers => t.ultrapeers += 1,
            Role::Leaf if t.leaves < self.max_leaves => t.leaves += 1,
            _ => return false,
        }
        true
    }

    /// Takes a slot of `role` even past the limit (an outgoing connection).
    pub(crate) fn force(&self, role: Role) {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer => t.ultrapeers += 1,
            Role::Leaf => t.leaves += 1,
        }
    }

    /// Gives a slot back.
    pub(crate) fn release(&self, role: Role) {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer => t.ultrapeers = t.ultrapeers.saturating_sub(1),
            Role::Leaf => t.leaves = t.leaves.saturating_sub(1),
        }
    }

    /// `X-Ultrapeer-Needed` as today's ultrapeers send it: `True` while ultrapeer
    /// slots are free, `False` (become our leaf) while only leaf slots are.
    pub(crate) fn needed(&self) -> Option<&'static str> {
        let t = *self.taken.lock();
        if t.ultrapeers < self.max_ultrapeers {
            Some("True")
        } else if t.leaves < self.max_leaves {
            Some("False")
        } else {
            None
        }
    }
}

/// The server's answer to a `GNUTELLA CONNECT`.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Answer 200; the slot of this role is taken.
    Accept(Role),
    /// Answer `code reason` and close; count `event`.
    Refuse {
        code: u16,
        reason: &'static str,
        event: Event,
    },
    /// Answer `429` with `Retry-After: secs` and close (rate limit).
    Banned { secs: u64, event: Event },
}

/// Decides on a `GNUTELLA CONNECT` block `b` from `ip`, taking a slot if it
/// accepts.
pub(crate) fn decide(
    b: &Block,
    ip: std::net::IpAddr,
    slots: &Slots,
    limiter: &Limiter,
    now: Instant,
) -> Admission {
    match limiter.attempt(ip, now) {
        Verdict::Allow => {}
        Verdict::BannedAddr(d) => {
            return Admission::Banned {
                secs: d.as_secs().max(1),
                event: Event::RateLimited,
            };
        }
        Verdict::BannedNet(d) => {
            return Admission::Banned {
                secs: d.as_secs().max(1),
                event: Event::RateLimitedNet,
            };
        }
    }
    match b.connect_version() {
        None => {
            return Admission::Refuse {
                code: 400,
                reason: "Bad Request",
                event: Event::HandshakeMalformed,
            };
        }
        Some((0, minor)) if minor < 6 => {
            return Admission::Refuse {
                code: 505,
                reason: "Gnutella 0.6 or later required",
                event: Event::HandshakeLegacy,
            };
        }
        Some(_) => {}
    }
    if b.get("X-Ultrapeer").is_none() {
        return Admission::Refuse {
            code: 403,
            reason: "Normal nodes refused",
            event: Event::RefusedNormal,
        };
    }
    if !b.is_true("X-Ultrapeer") {
        if slots.max_leaves == 0 {
            return Admission::Refuse {
                code: 503,
                reason: "Leaves not accepted",
                event: Event::RefusedLeaf,
            };
        }
        if !slots.take(Role::Leaf) {
            return Admission::Refuse {
                code: 503,
                reason: "Too many leaves",
                event: Event::RefusedLeavesFull,
            };
        }
        return Admission::Accept(Role::Leaf);
    }
    if !slots.take(Role::Ultrapeer) {
        return Admission::Refuse {
            code: 503,
            reason: "Too many connections",
            event: Event::RefusedFull,
        };
    }
    Admission::Accept(Role::Ultrapeer)
}

/// Most hosts the server remembers to name in `X-Try-Ultrapeers`.
const RECENT: usize = 32;

/// Ultrapeer addresses the server saw in handshakes (peers' own listening
/// addresses, `X-Try-Ultrapeers` headers), most recent first: what a refused
/// servent is told to try instead. The catcher's host cache is its own; this is
/// what the server itself knows.
#[derive(Debug, Default)]
pub(crate) struct RecentHosts {
    hosts: Mutex<VecDeque<SocketAddr>>,
}

impl RecentHosts {
    pub(crate) fn learn(&self, addrs: &[SocketAddr]) {
        let mut h = self.hosts.lock();
        for a in addrs {
            if a.port() == 0 || a.ip().is_unspecified() {
                continue;
            }
            h.retain(|x| x != a);
            h.push_front(*a);
            h.truncate(RECENT);
        }
    }

    /// A header value of at most 10 hosts other than `not` (servents kick peers
    /// whose headers are oversized).
    pub(crate) fn header(&self, not: SocketAddr) -> Option<String> {
        let h = self.hosts.lock();
        let list: Vec<String> = h
            .iter()
            .filter(|a| **a != not)
            .take(10)
            .map(SocketAddr::to_string)
            .collect();
        (!list.is_empty()).then(|| list.join(","))
    }
}
