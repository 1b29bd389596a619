//! Vendor messages (types 0x31 and 0x32): the few a router must understand.
//!
//! Payload: vendor code (4 ASCII bytes), selector (u16 LE), version (u16 LE), data.
//! Vendor messages travel one hop: TTL 1, hops 0, never forwarded.
//! - "Messages Supported" (vendor 0000, selector 0): the list of vendor messages the
//!   sender understands, `count: u16 LE` then `(vendor, selector, version)` items.
//!   Servents send it right after the handshake; we answer with ours.
//! - "Features Supported" (0000/10): `count` then `(name[4], version: u16 LE)`.
//!   Read and recorded; we send none (we have no optional features to announce).
//! - "Hops Flow" (BEAR/4 v1): one byte `h`; the receiver must stop sending the peer
//!   queries whose hop count is `>= h` (0: no queries at all). We implement it.

/// A parsed vendor message payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorMsg<'a> {
    /// Vendor code.
    pub vendor: [u8; 4],
    /// Message selector.
    pub selector: u16,
    /// Message version.
    pub version: u16,
    /// The rest of the payload.
    pub data: &'a [u8],
}

/// The vendor code of the standard messages ("Messages/Features Supported").
pub const VENDOR_STD: [u8; 4] = [0, 0, 0, 0];
/// BearShare's vendor code (Hops Flow).
pub const VENDOR_BEAR: [u8; 4] = *b"BEAR";
/// Selector of "Messages Supported".
pub const MESSAGES_SUPPORTED: u16 = 0;
/// Selector of "Features Supported".
pub const FEATURES_SUPPORTED: u16 = 10;
/// Selector of BEAR "Hops Flow".
pub const HOPS_FLOW: u16 = 4;

/// The vendor messages we understand, as announced in our "Messages Supported".
pub const SUPPORTED: &[([u8; 4], u16, u16)] = &[(VENDOR_BEAR, HOPS_FLOW, 1)];

impl<'a> VendorMsg<'a> {
    /// Parses a vendor payload (at least 8 bytes).
    pub fn parse(p: &'a [u8]) -> Option<VendorMsg<'a>> {
        Some(VendorMsg {
            vendor: p.get(..4)?.try_into().ok()?,
            selector: u16::from_le_bytes(p.get(4..6)?.try_into().ok()?),
            version: u16::from_le_bytes(p.get(6..8)?.try_into().ok()?),
            data: &p[8..],
        })
    }

    /// Whether it is "Messages Supported".
    pub fn is_messages_supported(&self) -> bool {
        self.vendor == VENDOR_STD && self.selector == MESSAGES_SUPPORTED
    }

    /// Whether it is "Features Supported".
    pub fn is_features_supported(&self) -> bool {
        self.vendor == VENDOR_STD && self.selector == FEATURES_SUPPORTED
    }

    /// The hop limit of a "Hops Flow" message.
    pub fn hops_flow(&self) -> Option<u8> {
        (self.vendor == VENDOR_BEAR && self.selector == HOPS_FLOW)
            .then(|| self.data.first().copied())
            .flatten()
    }

    /// The `(vendor, selector, version)` items of "Messages Supported", or the
    /// `(name, version)` items of "Features Supported" as `(name, 0, version)`;
    /// `None` if the count does not match the length.
    pub fn items(&self) -> Option<Vec<([u8; 4], u16, u16)>> {
        let count = u16::from_le_bytes(self.data.get(..2)?.try_into().ok()?) as usize;
        let size = if self.is_features_supported() { 6 } else { 8 };
        let body = self.data.get(2..2 + count * size)?;
        Some(
            body.chunks_exact(size)
                .map(|c| {
                    let v: [u8; 4] = [c[0], c[1], c[2], c[3]];
                    if size == 6 {
                        (v, 0, u16::from_le_bytes([c[4], c[5]]))
                    } else {
                        (
                            v,
                            u16::from_le_bytes([c[4], c[5]]),
                            u16::from_le_bytes([c[6], c[7]]),
                        )
                    }
                })
                .collect(),
        )
    }
}

/// A vendor payload.
pub fn payload(vendor: [u8; 4], selector: u16, version: u16, data: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + data.len());
    p.extend_from_slice(&vendor);
    p.extend_from_slice(&selector.to_le_bytes());
    p.extend_from_slice(&version.to_le_bytes());
    p.extend_from_slice(data);
    p
}

/// Our "Messages Supported" payload.
pub fn messages_supported() -> Vec<u8> {
    let mut data = Vec::with_capacity(2 + 8 * SUPPORTED.len());
    data.extend_from_slice(&(SUPPORTED.len() as u16).to_le_bytes());
    for (v, s, ver) in SUPPORTED {
        data.extend_from_slice(v);
        data.extend_from_slice(&s.to_le_bytes());
        data.extend_from_slice(&ver.to_le_bytes());
    }
    payload(VENDOR_STD, MESSAGES_SUPPORTED, 0, &data)
}

/// A "Hops Flow" payload limiting queries to hop counts below `hops`.
pub fn hops_flow(hops: u8) -> Vec<u8> {
    payload(VENDOR_BEAR, HOPS_FLOW, 1, &[hops])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_supported_round_trips() {
        let p = messages_supported();
        let m = VendorMsg::parse(&p).unwrap();
        assert!(m.is_messages_supported());
        assert_eq!(m.items().unwrap(), SUPPORTED.to_vec());
    }

    #[test]
    fn hops_flow_and_features() {
        let p = hops_flow(3);
        assert_eq!(VendorMsg::parse(&p).unwrap().hops_flow(), Some(3));
        let f = payload(
            VENDOR_STD,
            FEATURES_SUPPORTED,
            0,
            &[1, 0, b'Q', b'R', b'P', b'1', 1, 0],
        );
        let m = VendorMsg::parse(&f).unwrap();
        assert!(m.is_features_supported());
        assert_eq!(m.items().unwrap(), vec![(*b"QRP1", 0, 1)]);
        let short = payload(VENDOR_STD, MESSAGES_SUPPORTED, 0, &[5, 0, 1]);
        assert_eq!(VendorMsg::parse(&short).unwrap().items(), None);
        assert_eq!(VendorMsg::parse(&[1, 2, 3]), None);
    }
}
