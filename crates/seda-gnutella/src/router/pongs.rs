//! The pong cache of the 0.6 ping/pong scheme (LimeWire's ping reduction, as
//! gtk-gnutella's `pcache.c` runs it on an ultrapeer).
//!
//! A ping is not broadcast: it is answered from pongs cached per hop count (the
//! hops a pong had travelled when it reached us), up to `per_ping` of them, from
//! the lines whose hop count is below the ping's TTL, taken round-robin so that
//! successive pings see different hosts. The cache is filled by the pongs that
//! answer our own pings; when it is older than `lifespan` it is emptied and the
//! router pings its ultrapeers again: at most one refill per lifespan, however many
//! pings arrive.
//!
//! # Invariants
//! - Each line holds at most `per_hop` pongs, each naming a usable address, one
//!   pong per address (a newer pong from the same host replaces the older).
//! - A ping is never answered with a pong that came from the connection that sent
//!   the ping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use seda_io::ConnId;

/// A cached pong: its payload and the connection it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cached {
    payload: [u8; 14],
    from: ConnId,
}

/// Pongs by hop count.
#[derive(Debug)]
pub(crate) struct PongCache {
    lines: Vec<VecDeque<Cached>>,
    /// Per line: where the next answer starts.
    cursor: Vec<usize>,
    per_hop: usize,
    lifespan: Duration,
    /// When the cache was last emptied and refilled (None: never).
    filled: Option<Instant>,
}

impl PongCache {
    /// A cache of lines for hop counts `0..hops`.
    pub(crate) fn new(hops: u8, per_hop: usize, lifespan: Duration) -> PongCache {
        let n = usize::from(hops.max(1));
        PongCache {
            lines: vec![VecDeque::new(); n],
            cursor: vec![0; n],
            per_hop,
            lifespan,
            filled: None,
        }
    }

    /// Pongs cached.
    pub(crate) fn len(&self) -> usize {
        self.lines.iter().map(VecDeque::len).sum()
    }

    /// Caches a pong (payload of a pong naming a usable address) that reached us
    /// with `hops` hops from connection `from`.
    pub(crate) fn insert(&mut self, hops: u8, payload: [u8; 14], from: ConnId) {
        let Some(line) = self.lines.get_mut(usize::from(hops)) else {
            return;
        };
        // One entry per host (address and port are the first 6 bytes).
        line.retain(|c| c.payload[..6] != payload[..6]);
        if line.len() >= self.per_hop {
            line.pop_front();
        }
        line.push_back(Cached { payload, from });
    }

    /// Up to `max` pongs answering a ping of TTL `ttl` from `asker`: `(hops at
    /// arrival, payload)`, from the lines below `ttl`, round-robin.
    pub(crate) fn answer(&mut self, ttl: u8, asker: ConnId, max: usize) -> Vec<(u8, [u8; 14])> {
        let mut out = Vec::new();
        let lines = usize::from(ttl).min(self.lines.len());
        // Take from each line in turn so near and far hosts both show.
        let mut progress = true;
        let mut seen = vec![0usize; lines];
        while out.len() < max && progress {
            progress = false;
            for (h, (line, seen)) in self.lines.iter().zip(&mut seen).enumerate() {
                while *seen < line.len() {
                    let i = (self.cursor[h] + *seen) % line.len();
                    *seen += 1;
                    let c = line[i];
                    if c.from != asker {
                        out.push((h as u8, c.payload));
                        progress = true;
                        break;
                    }
                }
                if out.len() >= max {
                    break;
                }
            }
        }
        for (h, n) in seen.into_iter().enumerate() {
            if let Some(len) = self.lines.get(h).map(VecDeque::len).filter(|l| *l > 0) {
                self.cursor[h] = (self.cursor[h] + n) % len;
            }
        }
        out
    }

    /// If the cache is older than its lifespan: empties it, marks it refilled at
    /// `now`, and returns true (the caller pings its ultrapeers).
    pub(crate) fn refresh_due(&mut self, now: Instant) -> bool {
        if self
            .filled
            .is_some_and(|t| now.saturating_duration_since(t) < self.lifespan)
        {
            return false;
        }
        for l in &mut self.lines {
            l.clear();
        }
        self.cursor.fill(0);
        self.filled = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pong(i: u8) -> [u8; 14] {
        let mut p = [0u8; 14];
        p[0] = 0xca;
        p[1] = 0x18;
        p[2..6].copy_from_slice(&[10, 0, 0, i]);
        p
    }

    #[test]
    fn answers_round_robin_below_the_ping_ttl_never_the_askers_own() {
        let mut c = PongCache::new(4, 8, Duration::from_secs(20));
        let (a, b) = (ConnId(1), ConnId(2));
        for i in 0..4 {
            c.insert(0, pong(i), a);
        }
        c.insert(1, pong(10), b);
        c.insert(3, pong(30), b);
        // TTL 2: lines 0 and 1 only; b's pong from line 1 and a's from line 0.
        let got = c.answer(2, ConnId(9), 3);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|(h, _)| *h < 2));
        assert!(got.contains(&(1, pong(10))));
        // The next answer starts where this one stopped.
        let next = c.answer(2, ConnId(9), 2);
        assert_ne!(next[0], got[0]);
        // The asker's own pongs are left out.
        let from_a = c.answer(4, a, 10);
        assert_eq!(from_a.len(), 2, "only b's pongs: {from_a:?}");
        assert!(from_a.iter().all(|(_, p)| p[5] >= 10));
    }

    #[test]
    fn lines_are_bounded_and_one_pong_per_host() {
        let mut c = PongCache::new(2, 3, Duration::from_secs(20));
        for i in 0..10 {
            c.insert(0, pong(i), ConnId(1));
        }
        c.insert(0, pong(9), ConnId(2));
        assert_eq!(c.len(), 3);
        c.insert(7, pong(1), ConnId(1));
        assert_eq!(c.len(), 3, "hops past the lines are not cached");
    }

    #[test]
    fn a_refill_is_due_once_per_lifespan() {
        let mut c = PongCache::new(2, 3, Duration::from_secs(20));
        let t0 = Instant::now();
        assert!(c.refresh_due(t0), "an empty cache is filled at once");
        c.insert(0, pong(1), ConnId(1));
        assert!(!c.refresh_due(t0 + Duration::from_secs(19)));
        assert_eq!(c.len(), 1);
        assert!(c.refresh_due(t0 + Duration::from_secs(20)));
        assert_eq!(c.len(), 0, "expired pongs are dropped");
    }
}
