//! The handshake rate limit, per address and per network (gtk-gnutella's `ban.c`).
//!
//! Control law, per source `s` (an address, or its /24; /64 for IPv6): a counter
//! `c_s` that decays linearly, `c_s(t) = max(0, c_s(t0) - (t - t0) * n / T)`, and
//! grows by 1 per handshake attempt. When an attempt finds `c_s > n` the source is
//! banned for `B_k = min(ban * 2^k, max_ban)`, `k` the bans it had within the last
//! hour; attempts during a ban are refused (and still counted, as gtk-gnutella
//! does, so a hammering host stays banned). Parameters: `n` = `per_addr` or
//! `per_net` attempts (0 disables that limit), `T` = `period`, `ban`, `max_ban`
//! (see [`HandshakeLimit`]).
//!
//! # Invariants
//! - Each table holds at most [`MAX_SOURCES`] sources: a full table first forgets
//!   sources whose counter decayed to zero and are not banned, then the one idle
//!   the longest; a banned source is forgotten only when every source is banned.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::HandshakeLimit;

/// Most sources remembered per table.
pub(crate) const MAX_SOURCES: usize = 4096;

/// Why an attempt is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go ahead.
    Allow,
    /// The address is banned for this much longer.
    BannedAddr(Duration),
    /// Its network is banned for this much longer.
    BannedNet(Duration),
}

#[derive(Clone, Copy, Debug)]
struct Source {
    counter: f64,
    updated: Instant,
    banned_until: Option<Instant>,
    /// Bans within the last hour, and when the last one began.
    bans: u32,
    last_ban: Option<Instant>,
}

#[derive(Debug)]
struct Table {
    limit: u32,
    sources: HashMap<IpAddr, Source>,
}

impl Table {
    fn new(limit: u32) -> Table {
        Table {
            limit,
            sources: HashMap::new(),
        }
    }

    /// Counts an attempt from `key`; the remaining ban if it is refused.
    fn attempt(&mut self, key: IpAddr, cfg: &HandshakeLimit, now: Instant) -> Option<Duration> {
        if self.limit == 0 {
            return None;
        }
        let decay = f64::from(self.limit) / cfg.period.as_secs_f64();
        if !self.sources.contains_key(&key) && self.sources.len() >= MAX_SOURCES {
            self.evict(decay, now);
        }
        let s = self.sources.entry(key).or_insert(Source {
            counter: 0.0,
            updated: now,
            banned_until: None,
            bans: 0,
            last_ban: None,
        });
        let idle = now.saturating_duration_since(s.updated).as_secs_f64();
        s.counter = (s.counter - idle * decay).max(0.0) + 1.0;
        s.updated = now;
        if let Some(until) = s.banned_until {
            if until > now {
                return Some(until - now);
            }
            s.banned_until = None;
        }
        if s.counter > f64::from(self.limit) {
            if s.last_ban
                .is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(3600))
            {
                s.bans = 0;
            }
            let ban = cfg
                .ban
                .saturating_mul(1u32 << s.bans.min(16))
                .min(cfg.max_ban);
            s.bans += 1;
            s.last_ban = Some(now);
            s.banned_until = Some(now + ban);
            return Some(ban);
        }
        None
    }

    fn evict(&mut self, decay: f64, now: Instant) {
        let idle = |s: &Source| now.saturating_duration_since(s.updated).as_secs_f64();
        self.sources.retain(|_, s| {
            s.banned_until.is_some_and(|u| u > now) || s.counter - idle(s) * decay > 0.0
        });
        if self.sources.len() >= MAX_SOURCES {
            let oldest = self
                .sources
                .iter()
                .filter(|(_, s)| s.banned_until.is_none_or(|u| u <= now))
                .min_by_key(|(_, s)| s.updated)
                .or_else(|| self.sources.iter().min_by_key(|(_, s)| s.updated))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.sources.remove(&k);
            }
        }
    }
}

/// The limiter: one table per address, one per network.
#[derive(Debug)]
pub(crate) struct Limiter {
    cfg: HandshakeLimit,
    tables: Mutex<(Table, Table)>,
}

/// The network of `ip`: its /24 (IPv4) or /64 (IPv6), as an address.
pub(crate) fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::from([o[0], o[1], o[2], 0])
        }
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::from(s)
        }
    }
}

impl Limiter {
    pub(crate) fn new(cfg: &HandshakeLimit) -> Limiter {
        Limiter {
            tables: Mutex::new((Table::new(cfg.per_addr), Table::new(cfg.per_net))),
            cfg: cfg.clone(),
        }
    }

    /// Counts a handshake attempt from `ip` at `now`.
    pub(crate) fn attempt(&self, ip: IpAddr, now: Instant) -> Verdict {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.cfg.exempt_loopback && ip.is_loopback() {
            return Verdict::Allow;
        }
        let mut t = self.tables.lock();
        let (addr, net) = &mut *t;
        // Both tables count every attempt, so a banned address still weighs on
        // its network.
        let a = addr.attempt(ip, &self.cfg, now);
        let n = net.attempt(network(ip), &self.cfg, now);
        match (a, n) {
            (Some(d), _) => Verdict::BannedAddr(d),
            (None, Some(d)) => Verdict::BannedNet(d),
            (None, None) => Verdict::Allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_addr: u32, per_net: u32) -> Limiter {
        Limiter::new(&HandshakeLimit {
            per_addr,
            per_net,
            exempt_loopback: false,
            ..HandshakeLimit::default()
        })
    }

    #[test]
    fn a_third_attempt_within_a_minute_is_banned_and_the_ban_doubles() {
        let l = limiter(2, 0);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let t0 = Instant::now();
        assert_eq!(l.attempt(ip, t0), Verdict::Allow);
        assert_eq!(l.attempt(ip, t0), Verdict::Allow);
        assert_eq!(
            l.attempt(ip, t0),
            Verdict::BannedAddr(Duration::from_secs(300))
        );
        // Still banned later, with the time left.
        assert_eq!(
            l.attempt(ip, t0 + Duration::from_secs(100)),
            Verdict::BannedAddr(Duration::from_secs(200))
        );
        // After the ban the counter has decayed (2 per minute): allowed again.
        let t1 = t0 + Duration::from_secs(301);
        assert_eq!(l.attempt(ip, t1), Verdict::Allow);
        assert_eq!(l.attempt(ip, t1), Verdict::Allow);
        // Hammering again within the hour: twice the ban.
        assert_eq!(
            l.attempt(ip, t1),
            Verdict::BannedAddr(Duration::from_secs(600))
        );
        // Another address is not affected.
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(l.attempt(other, t1), Verdict::Allow);
    }

    #[test]
    fn attempts_spread_over_time_are_never_banned() {
        let l = limiter(2, 0);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..100u64 {
            // One every 30 s: the decay (2 per 60 s) keeps the counter at 1.
            let v = l.attempt(ip, t0 + Duration::from_secs(30 * i));
            assert_eq!(v, Verdict::Allow, "attempt {i}");
        }
    }

    #[test]
    fn many_addresses_of_one_network_are_banned_together() {
        let l = limiter(2, 8);
        let t0 = Instant::now();
        let mut verdicts = Vec::new();
        for i in 1..=10u8 {
            let ip = IpAddr::from([192, 0, 2, i]);
            verdicts.push(l.attempt(ip, t0));
        }
        assert!(verdicts[..8].iter().all(|v| *v == Verdict::Allow));
        assert_eq!(verdicts[8], Verdict::BannedNet(Duration::from_secs(300)));
        // Another network is not affected.
        assert_eq!(l.attempt(IpAddr::from([192, 0, 3, 1]), t0), Verdict::Allow);
        assert_eq!(
            network("2001:db8:1:2:3:4:5:6".parse().unwrap()),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn loopback_is_exempt_unless_asked_and_the_tables_stay_bounded() {
        let exempt = Limiter::new(&HandshakeLimit::default());
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(exempt.attempt(lo, t0), Verdict::Allow);
        }
        let l = limiter(2, 0);
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let _ = l.attempt(
                IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000u32 + i)),
                t0,
            );
        }
        assert!(l.tables.lock().0.sources.len() <= MAX_SOURCES);
    }
}
