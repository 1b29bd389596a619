//! Which incoming connections the server accepts: slots per role, and hosts to
//! name when it refuses.
//!
//! # Invariants
//! - A slot is taken when we answer 200 (or when an outgoing handshake completes)
//!   and released exactly once, when the connection closes or its handshake fails;
//!   so `ultrapeers <= max_peers` holds for incoming connections at all times
//!   (outgoing ones, which the catcher limits, may take the last slots).

use std::collections::VecDeque;
use std::net::SocketAddr;

use parking_lot::Mutex;

use crate::config::RouterConfig;
use crate::events::Role;
use crate::proto::handshake::Block;
use crate::stats::Event;

/// Connections per role, counted by the server (the only stage that admits).
#[derive(Debug)]
pub(crate) struct Slots {
    max_ultrapeers: usize,
    taken: Mutex<Taken>,
}

#[derive(Debug, Default)]
struct Taken {
    ultrapeers: usize,
}

impl Slots {
    pub(crate) fn new(cfg: &RouterConfig) -> Slots {
        Slots {
            max_ultrapeers: cfg.max_peers,
            taken: Mutex::new(Taken::default()),
        }
    }

    /// Takes a slot of `role` if one is free.
    pub(crate) fn take(&self, role: Role) -> bool {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer if t.ultrapeers < self.max_ultrapeers => {
                t.ultrapeers += 1;
                true
            }
            _ => false,
        }
    }

    /// Takes a slot of `role` even past the limit (an outgoing connection).
    pub(crate) fn force(&self, role: Role) {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer | Role::Leaf => t.ultrapeers += 1,
        }
    }

    /// Gives a slot back.
    pub(crate) fn release(&self, role: Role) {
        let mut t = self.taken.lock();
        match role {
            Role::Ultrapeer | Role::Leaf => t.ultrapeers = t.ultrapeers.saturating_sub(1),
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
}

/// Decides on a `GNUTELLA CONNECT` block `b`, taking a slot if it accepts.
pub(crate) fn decide(b: &Block, slots: &Slots) -> Admission {
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
        return Admission::Refuse {
            code: 503,
            reason: "Ultrapeer router: leaves not accepted",
            event: Event::RefusedLeaf,
        };
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
