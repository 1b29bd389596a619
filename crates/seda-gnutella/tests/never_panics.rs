//! Property: no input bytes make the codec panic, and framing never holds more than
//! one incomplete message.

use proptest::prelude::*;
use seda_gnutella::proto::framing::{Framer, Inflater};
use seda_gnutella::proto::handshake::Block;
use seda_gnutella::proto::message::{HEADER_LEN, Header, check};
use seda_gnutella::proto::vendor::VendorMsg;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn framing_checks_and_parsers_never_panic(
        pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 1..8),
        max in 64u32..4096,
    ) {
        let mut f = Framer::new(max);
        for p in &pieces {
            match f.feed(p.clone()) {
                Ok(chunk) => {
                    for fr in &chunk.frames {
                        prop_assert!(fr.header.len <= max);
                        let payload = chunk.payload(fr);
                        let _ = check(&fr.header, payload);
                        let _ = VendorMsg::parse(payload).map(|v| (v.items(), v.hops_flow()));
                    }
                    prop_assert!(f.pending() < HEADER_LEN + max as usize);
                }
                Err(e) => {
                    prop_assert!(e.len > max);
                    break;
                }
            }
        }
        let all: Vec<u8> = pieces.concat();
        let _ = Block::parse(&all).map(|b| b.map(|(b, _)| (b.status(), b.connect_version())));
        if all.len() >= HEADER_LEN {
            let h = Header::parse(&all);
            let _ = check(&h, &all[HEADER_LEN..]);
        }
        let mut inf = Inflater::default();
        let mut out = Vec::new();
        let mut rest: &[u8] = &all;
        for _ in 0..64 {
            match inf.inflate(rest, &mut out, 4096) {
                Ok(used) => rest = &rest[used..],
                Err(_) => break,
            }
            prop_assert!(out.len() <= 4096);
            if rest.is_empty() && out.len() < 4096 {
                break;
            }
        }
    }
}
