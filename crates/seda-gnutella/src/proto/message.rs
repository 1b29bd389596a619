//! Gnutella 0.6 messages: the 23-byte header, message types and payload rules.
//!
//! Header layout (all servents since 0.4): GUID (16 bytes), payload type (1), TTL
//! (1), hops (1), payload length (4, little endian). The payload rules below are
//! those a modern servent enforces on what it receives (gtk-gnutella 1.2 was seen
//! to apply each of them): a message that breaks one is dropped and counted, never
//! forwarded.

use std::fmt;
use std::net::Ipv4Addr;

/// Length of a message header.
pub const HEADER_LEN: usize = 23;

/// Default hard limit on a payload's length (64 KiB).
pub const DEFAULT_MAX_PAYLOAD: u32 = 64 * 1024;

/// The min-speed bit of a query that says the field holds flags (0x8000, big
/// endian). Modern servents drop a query without it ("ancient query format").
pub const QUERY_FLAGS_MARK: u16 = 0x8000;

/// A message or servent identifier.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Guid(pub [u8; 16]);

/// One 16-byte word, not a slice (whose hash adds its length first): the routing
/// tables hash a GUID per message with SipHash, where the 8 bytes of a length
/// prefix were a third of the input.
impl std::hash::Hash for Guid {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(u128::from_le_bytes(self.0));
    }
}

impl Guid {
    /// A random GUID marked as a modern servent's (byte 8 = 0xff, byte 15 = 0x00).
    pub fn random() -> Guid {
        let mut g = [0u8; 16];
        let a = fastrand::u64(..).to_le_bytes();
        let b = fastrand::u64(..).to_le_bytes();
        g[..8].copy_from_slice(&a);
        g[8..].copy_from_slice(&b);
        g[8] = 0xff;
        g[15] = 0x00;
        Guid(g)
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Payload type of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgType {
    /// 0x00: host discovery.
    Ping,
    /// 0x01: a host's address and library size, answering a ping.
    Pong,
    /// 0x02: the sender is closing the connection (code and reason).
    Bye,
    /// 0x30: query routing protocol table (reset or patch).
    Qrp,
    /// 0x31: vendor-specific message.
    Vendor,
    /// 0x32: standard vendor message.
    StdVendor,
    /// 0x40: ask a firewalled servent to connect out.
    Push,
    /// 0x80: a search.
    Query,
    /// 0x81: search results, answering a query.
    QueryHit,
    /// Any other payload type: read by its length and dropped.
    Unknown(u8),
}

impl MsgType {
    /// The type of payload-type byte `b`.
    pub fn from_byte(b: u8) -> MsgType {
        match b {
            0x00 => MsgType::Ping,
            0x01 => MsgType::Pong,
            0x02 => MsgType::Bye,
            0x30 => MsgType::Qrp,
            0x31 => MsgType::Vendor,
            0x32 => MsgType::StdVendor,
            0x40 => MsgType::Push,
            0x80 => MsgType::Query,
            0x81 => MsgType::QueryHit,
            other => MsgType::Unknown(other),
        }
    }

    /// The payload-type byte.
    pub fn byte(self) -> u8 {
        match self {
            MsgType::Ping => 0x00,
            MsgType::Pong => 0x01,
            MsgType::Bye => 0x02,
            MsgType::Qrp => 0x30,
            MsgType::Vendor => 0x31,
            MsgType::StdVendor => 0x32,
            MsgType::Push => 0x40,
            MsgType::Query => 0x80,
            MsgType::QueryHit => 0x81,
            MsgType::Unknown(b) => b,
        }
    }

    /// Lower-case name used in stats and reports.
    pub fn name(self) -> &'static str {
        match self {
            MsgType::Ping => "ping",
            MsgType::Pong => "pong",
            MsgType::Bye => "bye",
            MsgType::Qrp => "qrp",
            MsgType::Vendor => "vendor",
            MsgType::StdVendor => "std-vendor",
            MsgType::Push => "push",
            MsgType::Query => "query",
            MsgType::QueryHit => "queryhit",
            MsgType::Unknown(_) => "unknown",
        }
    }

    /// Whether the message is broadcast to every other connection (ping, query).
    pub fn is_broadcast(self) -> bool {
        matches!(self, MsgType::Ping | MsgType::Query)
    }

    /// Whether the message is for the connection only and never forwarded.
    pub fn is_link_local(self) -> bool {
        matches!(
            self,
            MsgType::Bye | MsgType::Qrp | MsgType::Vendor | MsgType::StdVendor
        )
    }
}

/// A message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message identifier (for pongs and query hits: the ping's or query's).
    pub guid: Guid,
    /// Payload type.
    pub kind: MsgType,
    /// Hops the message may still travel.
    pub ttl: u8,
    /// Hops it has travelled.
    pub hops: u8,
    /// Payload length in bytes.
    pub len: u32,
}

impl Header {
    /// Parses a header from the first [`HEADER_LEN`] bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`HEADER_LEN`].
    pub fn parse(b: &[u8]) -> Header {
        let mut guid = [0u8; 16];
        guid.copy_from_slice(&b[..16]);
        Header {
            guid: Guid(guid),
            kind: MsgType::from_byte(b[16]),
            ttl: b[17],
            hops: b[18],
            len: u32::from_le_bytes([b[19], b[20], b[21], b[22]]),
        }
    }

    /// The header's 23 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..16].copy_from_slice(&self.guid.0);
        b[16] = self.kind.byte();
        b[17] = self.ttl;
        b[18] = self.hops;
        b[19..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Appends the header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// Appends a whole message (header with `payload.len()`, then payload) to `out`.
pub fn write_message(
    out: &mut Vec<u8>,
    guid: Guid,
    kind: MsgType,
    ttl: u8,
    hops: u8,
    payload: &[u8],
) {
    Header {
        guid,
        kind,
        ttl,
        hops,
        len: payload.len() as u32,
    }
    .write(out);
    out.extend_from_slice(payload);
}

/// Why a message is refused. Every variant is counted in the stats under its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Malformed {
    /// Payload shorter than its type's fixed part.
    TooShort,
    /// A query whose min-speed field lacks the 0x8000 mark (pre-0.6 format).
    AncientQuery,
    /// A query whose search text is not NUL-terminated.
    UnterminatedQuery,
    /// A vendor message or Bye not sent with TTL 1 and hops 0.
    ImproperHopsTtl,
    /// A broadcast or routed message that arrives with TTL 0.
    ZeroTtl,
    /// A relayed pong naming an address no one can connect to.
    UnusableAddress,
}

impl Malformed {
    /// Name in stats.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::TooShort => "too_short",
            Malformed::AncientQuery => "ancient_query",
            Malformed::UnterminatedQuery => "unterminated_query",
            Malformed::ImproperHopsTtl => "improper_hops_ttl",
            Malformed::ZeroTtl => "zero_ttl",
            Malformed::UnusableAddress => "unusable_address",
        }
    }
}

/// Smallest payload of each type: pong = port, IPv4, files, KiB; push = servent id,
/// file index, IPv4, port; query = min speed + NUL; query hit = count, port, IPv4,
/// speed + servent id; vendor = vendor, selector, version; QRP = variant; Bye = code.
fn min_len(kind: MsgType) -> usize {
    match kind {
        MsgType::Pong => 14,
        MsgType::Push => 26,
        MsgType::Query => 3,
        MsgType::QueryHit => 11 + 16,
        MsgType::Vendor | MsgType::StdVendor => 8,
        MsgType::Qrp => 1,
        MsgType::Bye => 2,
        MsgType::Ping | MsgType::Unknown(_) => 0,
    }
}

/// Checks a received message against the rules of its type. Unknown types pass
/// (the caller drops them by type).
pub fn check(h: &Header, payload: &[u8]) -> Result<(), Malformed> {
    if payload.len() < min_len(h.kind) {
        return Err(Malformed::TooShort);
    }
    match h.kind {
        MsgType::Vendor | MsgType::StdVendor | MsgType::Bye => {
            if h.ttl != 1 || h.hops != 0 {
                return Err(Malformed::ImproperHopsTtl);
            }
        }
        MsgType::Ping | MsgType::Pong | MsgType::Push | MsgType::Query | MsgType::QueryHit => {
            if h.ttl == 0 {
                return Err(Malformed::ZeroTtl);
            }
        }
        MsgType::Qrp | MsgType::Unknown(_) => {}
    }
    match h.kind {
        MsgType::Query => {
            let speed = u16::from_be_bytes([payload[0], payload[1]]);
            if speed & QUERY_FLAGS_MARK == 0 {
                return Err(Malformed::AncientQuery);
            }
            if !payload[2..].contains(&0) {
                return Err(Malformed::UnterminatedQuery);
            }
        }
        // A direct answer (hops 0) to a neighbour's ping may name any address: the
        // neighbour knows where we are. Relayed pongs must be connectible.
        MsgType::Pong if h.hops > 0 && !usable(pong_addr(payload)) => {
            return Err(Malformed::UnusableAddress);
        }
        _ => {}
    }
    Ok(())
}

/// The IPv4 address a pong names (bytes 2..6, network order).
pub fn pong_addr(payload: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(payload[2], payload[3], payload[4], payload[5])
}

/// The port a pong names (bytes 0..2, little endian).
pub fn pong_port(payload: &[u8]) -> u16 {
    u16::from_le_bytes([payload[0], payload[1]])
}

/// Whether other hosts could connect to `ip`: not loopback, unspecified, broadcast,
/// multicast or link-local.
pub fn usable(ip: Ipv4Addr) -> bool {
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_link_local())
}

/// A pong payload for a host at `ip:port` sharing `files` files of `kib` KiB.
pub fn pong_payload(ip: Ipv4Addr, port: u16, files: u32, kib: u32) -> [u8; 14] {
    let mut p = [0u8; 14];
    p[..2].copy_from_slice(&port.to_le_bytes());
    p[2..6].copy_from_slice(&ip.octets());
    p[6..10].copy_from_slice(&files.to_le_bytes());
    p[10..].copy_from_slice(&kib.to_le_bytes());
    p
}

/// The servent identifier at the end of a query hit (its last 16 bytes).
pub fn queryhit_servent(payload: &[u8]) -> Option<Guid> {
    let n = payload.len();
    let tail: [u8; 16] = payload.get(n.checked_sub(16)?..)?.try_into().ok()?;
    Some(Guid(tail))
}

/// The servent identifier a push is addressed to (its first 16 bytes).
pub fn push_servent(payload: &[u8]) -> Option<Guid> {
    let head: [u8; 16] = payload.get(..16)?.try_into().ok()?;
    Some(Guid(head))
}

/// A Bye payload: code (little endian), reason, NUL.
pub fn bye_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(3 + reason.len());
    p.extend_from_slice(&code.to_le_bytes());
    p.extend_from_slice(reason.as_bytes());
    p.push(0);
    p
}

/// The code and reason of a Bye payload.
pub fn parse_bye(payload: &[u8]) -> Option<(u16, String)> {
    let code = u16::from_le_bytes(payload.get(..2)?.try_into().ok()?);
    let text = &payload[2..];
    let end = text
        .iter()
        .position(|&b| b == 0 || b == b'\r' || b == b'\n')
        .unwrap_or(text.len());
    Some((code, String::from_utf8_lossy(&text[..end]).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: MsgType, ttl: u8, hops: u8, len: usize) -> Header {
        Header {
            guid: Guid([7; 16]),
            kind,
            ttl,
            hops,
            len: len as u32,
        }
    }

    #[test]
    fn header_round_trips_with_little_endian_length() {
        let h = hdr(MsgType::QueryHit, 3, 4, 0x0102_0304);
        let b = h.to_bytes();
        assert_eq!(&b[19..], &[4, 3, 2, 1]);
        assert_eq!(b[16], 0x81);
        assert_eq!(Header::parse(&b), h);
        for t in 0..=255u8 {
            assert_eq!(MsgType::from_byte(t).byte(), t);
        }
    }

    #[test]
    fn queries_need_the_flags_mark_and_a_terminator() {
        let ok = [0x80, 0x00, b'a', 0];
        assert_eq!(check(&hdr(MsgType::Query, 3, 0, 4), &ok), Ok(()));
        let ancient = [0x00, 0x00, b'a', 0];
        assert_eq!(
            check(&hdr(MsgType::Query, 3, 0, 4), &ancient),
            Err(Malformed::AncientQuery)
        );
        let open = [0x80, 0x00, b'a', b'b'];
        assert_eq!(
            check(&hdr(MsgType::Query, 3, 0, 4), &open),
            Err(Malformed::UnterminatedQuery)
        );
        assert_eq!(
            check(&hdr(MsgType::Query, 3, 0, 2), &[0x80, 0]),
            Err(Malformed::TooShort)
        );
    }

    #[test]
    fn vendor_messages_and_bye_need_ttl_one_hops_zero() {
        let p = [0u8; 8];
        assert_eq!(check(&hdr(MsgType::Vendor, 1, 0, 8), &p), Ok(()));
        assert_eq!(
            check(&hdr(MsgType::Vendor, 2, 0, 8), &p),
            Err(Malformed::ImproperHopsTtl)
        );
        assert_eq!(
            check(&hdr(MsgType::StdVendor, 1, 1, 8), &p),
            Err(Malformed::ImproperHopsTtl)
        );
        assert_eq!(
            check(&hdr(MsgType::Bye, 2, 0, 2), &[0, 0]),
            Err(Malformed::ImproperHopsTtl)
        );
    }

    #[test]
    fn relayed_pongs_must_name_a_usable_address() {
        let lo = pong_payload(Ipv4Addr::LOCALHOST, 6346, 0, 0);
        let good = pong_payload(Ipv4Addr::new(10, 1, 2, 3), 6346, 0, 0);
        assert_eq!(check(&hdr(MsgType::Pong, 1, 0, 14), &lo), Ok(()));
        assert_eq!(
            check(&hdr(MsgType::Pong, 1, 1, 14), &lo),
            Err(Malformed::UnusableAddress)
        );
        assert_eq!(check(&hdr(MsgType::Pong, 1, 1, 14), &good), Ok(()));
        assert_eq!(pong_port(&good), 6346);
        assert_eq!(pong_addr(&good), Ipv4Addr::new(10, 1, 2, 3));
    }

    #[test]
    fn zero_ttl_and_short_payloads_are_refused() {
        assert_eq!(
            check(&hdr(MsgType::Ping, 0, 1, 0), &[]),
            Err(Malformed::ZeroTtl)
        );
        assert_eq!(
            check(&hdr(MsgType::Push, 1, 0, 10), &[0; 10]),
            Err(Malformed::TooShort)
        );
        assert_eq!(
            check(&hdr(MsgType::QueryHit, 1, 0, 26), &[0; 26]),
            Err(Malformed::TooShort)
        );
        assert_eq!(check(&hdr(MsgType::Unknown(0x99), 0, 0, 0), &[]), Ok(()));
    }

    #[test]
    fn servent_ids_and_bye_payloads() {
        let mut hit = vec![1u8; 11];
        hit.extend_from_slice(&[9; 16]);
        assert_eq!(queryhit_servent(&hit), Some(Guid([9; 16])));
        assert_eq!(queryhit_servent(&[1; 3]), None);
        let mut push = vec![5u8; 16];
        push.extend_from_slice(&[0; 10]);
        assert_eq!(push_servent(&push), Some(Guid([5; 16])));
        let b = bye_payload(503, "full");
        assert_eq!(parse_bye(&b), Some((503, "full".to_owned())));
        assert_eq!(parse_bye(&[1]), None);
    }
}
