use super::*;

#[test]
fn the_hash_matches_the_specs_and_gtk_gnutellas_test_vectors() {
    let cases: &[(&str, u8, usize)] = &[
        ("", 13, 0),
        ("eb", 13, 6791),
        ("ebc", 13, 7082),
        ("ebck", 13, 6698),
        ("ebckl", 13, 3179),
        ("ebcklm", 13, 3235),
        ("ebcklme", 13, 6438),
        ("ebcklmen", 13, 1062),
        ("ebcklmenq", 13, 3527),
        ("", 16, 0),
        ("n", 16, 65003),
        ("nd", 16, 54193),
        ("ndf", 16, 4953),
        ("ndfl", 16, 58201),
        ("ndfla", 16, 34830),
        ("ndflal", 16, 36910),
        ("ndflale", 16, 34586),
        ("ndflalem", 16, 37658),
        ("ndflaleme", 16, 45559),
        ("ol2j34lj", 10, 318),
        ("asdfas23", 10, 503),
        ("9um3o34fd", 10, 758),
        ("a234d", 10, 281),
        ("a3f", 10, 767),
        ("3nja9", 10, 581),
        ("2459345938032343", 10, 146),
        ("7777a88a8a8a8", 10, 342),
        ("asdfjklkj3k", 10, 861),
        ("adfk32l", 10, 1011),
        ("zzzzzzzzzzz", 10, 944),
        // Non-ASCII (gtk-gnutella's test_hash): the low byte of each UTF-16 unit.
        ("\u{30a2}\u{30cb}\u{30e1}", 10, 46),
        ("\u{30e9}", 10, 0),
        ("\u{58f0}\u{512a}", 10, 731),
        ("\u{10400}", 10, 316),
        ("\u{10428}", 10, 658),
        ("\u{0001}\u{0028}", 10, 658),
        ("\u{ff01}\u{9428}", 10, 658),
        ("\u{1001}\u{2000}", 10, 316),
    ];
    for (w, bits, want) in cases {
        assert_eq!(slot(hash_code(w), *bits), *want, "hash({w:?}, {bits})");
    }
    // The hash itself does not lowercase: callers do.
    assert_ne!(slot(hash_code("FAIL"), 16), 37458);
}

#[test]
fn query_keywords_are_lowercased_words_of_three_bytes_or_more() {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(b"Free MUSIC!! ab free_music\0urn:sha1:XYZ");
    let mut codes = Vec::new();
    query_codes(&p, &mut codes);
    assert_eq!(codes, vec![hash_code("free"), hash_code("music")]);
    query_codes(&[0x80, 0x00, b'a', b'b', 0], &mut codes);
    assert!(codes.is_empty());
    let t = RouteTable::new(16);
    assert!(!t.matches(&codes), "no keyword matches nothing");
}

#[test]
fn a_table_matches_only_queries_whose_every_keyword_it_holds() {
    let mut t = RouteTable::new(16);
    for c in shared_codes("Seda Interop Sample.txt") {
        t.insert(c);
    }
    let q = |text: &str| {
        let mut p = vec![0x80, 0x00];
        p.extend_from_slice(text.as_bytes());
        p.push(0);
        let mut v = Vec::new();
        query_codes(&p, &mut v);
        v
    };
    assert!(t.matches(&q("seda interop")));
    assert!(t.matches(&q("SAMPLE txt")));
    assert!(t.matches(&q("samp")), "prefixes are in the table");
    assert!(!t.matches(&q("seda opera")), "one keyword missing");
    assert!(!t.matches(&q("zz")), "no keyword at all");
}

#[test]
fn merging_tables_of_other_sizes_never_loses_a_keyword() {
    let words = ["alpha", "bravo", "charlie", "delta"];
    let mut big = RouteTable::new(18);
    let mut small = RouteTable::new(10);
    for w in &words[..2] {
        big.insert(hash_code(w));
    }
    for w in &words[2..] {
        small.insert(hash_code(w));
    }
    for bits in [8, 10, 16, 18, 20] {
        let mut m = RouteTable::new(bits);
        m.merge(&big);
        m.merge(&small);
        for w in words {
            assert!(m.contains(hash_code(w)), "{w} lost at {bits} bits");
        }
    }
}

fn receive(payloads: &[Vec<u8>], r: &mut TableReceiver) -> Result<Progress, QrpError> {
    let mut last = Progress::Patching;
    for p in payloads {
        last = r.apply(&QrpMsg::parse(p)?, MAX_BITS)?;
    }
    Ok(last)
}

#[test]
fn our_patches_rebuild_the_table_from_scratch_and_incrementally() {
    let mut t = RouteTable::new(16);
    for i in 0..500u32 {
        t.insert(hash_code(&format!("word{i}")));
    }
    let mut r = TableReceiver::default();
    let msgs = patch_payloads(&t, None, 256);
    assert!(msgs.len() >= 2, "a RESET and at least one PATCH");
    assert_eq!(receive(&msgs, &mut r), Ok(Progress::Complete));
    assert_eq!(r.table(), Some(&t));
    // Some words go, others come: a patch without RESET.
    let mut t2 = RouteTable::new(16);
    for i in 250..900u32 {
        t2.insert(hash_code(&format!("word{i}")));
    }
    let msgs = patch_payloads(&t2, Some(&t), 256);
    assert_eq!(msgs[0][0], PATCH, "incremental: no RESET");
    assert_eq!(receive(&msgs, &mut r), Ok(Progress::Complete));
    assert_eq!(r.table(), Some(&t2));
}

#[test]
fn one_and_eight_bit_patches_apply_as_gtk_gnutella_reads_them() {
    let mut r = TableReceiver::default();
    let reset = QrpMsg::Reset {
        table_len: 16,
        infinity: 2,
    }
    .to_payload();
    // 1 bit per slot: a set bit flips the slot; bit 7 of byte 0 is slot 0.
    let p1 = QrpMsg::Patch {
        seq_no: 1,
        seq_size: 1,
        compressor: COMPRESSOR_NONE,
        entry_bits: 1,
        data: &[0b1000_0001, 0b0000_0010],
    }
    .to_payload();
    assert_eq!(receive(&[reset, p1], &mut r), Ok(Progress::Complete));
    let t = r.table().unwrap();
    let on: Vec<usize> = (0..16).filter(|i| t.get(*i)).collect();
    assert_eq!(on, vec![0, 7, 14]);
    // 8 bits per slot, signed: negative sets, positive clears, zero keeps; the
    // sequence spans two messages.
    let mut e = [0u8; 16];
    e[0] = 0x01; // clear slot 0
    e[3] = 0xff; // set slot 3 (-1)
    let a = QrpMsg::Patch {
        seq_no: 1,
        seq_size: 2,
        compressor: COMPRESSOR_NONE,
        entry_bits: 8,
        data: &e[..8],
    }
    .to_payload();
    let b = QrpMsg::Patch {
        seq_no: 2,
        seq_size: 2,
        compressor: COMPRESSOR_NONE,
        entry_bits: 8,
        data: &e[8..],
    }
    .to_payload();
    assert_eq!(receive(&[a], &mut r), Ok(Progress::Patching));
    assert_eq!(receive(&[b], &mut r), Ok(Progress::Complete));
    let t = r.table().unwrap();
    let on: Vec<usize> = (0..16).filter(|i| t.get(*i)).collect();
    assert_eq!(on, vec![3, 7, 14]);
}

fn patch(seq_no: u8, seq_size: u8, compressor: u8, bits: u8, data: &[u8]) -> Vec<u8> {
    QrpMsg::Patch {
        seq_no,
        seq_size,
        compressor,
        entry_bits: bits,
        data,
    }
    .to_payload()
}

fn reset(len: u32) -> Vec<u8> {
    QrpMsg::Reset {
        table_len: len,
        infinity: 7,
    }
    .to_payload()
}

#[test]
fn every_breach_of_the_sequence_rules_is_an_error() {
    let zeros = [0u8; 4];
    let bad: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("patch first", vec![patch(1, 1, 0, 4, &zeros)]),
        ("not a power of two", vec![reset(1000)]),
        ("too small", vec![reset(4)]),
        ("too large", vec![reset(1 << 22)]),
        (
            "infinity 0",
            vec![
                QrpMsg::Reset {
                    table_len: 8,
                    infinity: 0,
                }
                .to_payload(),
            ],
        ),
        ("starts at 2", vec![reset(8), patch(2, 2, 0, 4, &zeros)]),
        ("size 0", vec![reset(8), patch(1, 0, 0, 4, &zeros)]),
        ("3 bits", vec![reset(8), patch(1, 1, 0, 3, &zeros)]),
        ("compressor 2", vec![reset(8), patch(1, 1, 2, 4, &zeros)]),
        (
            "skips a number",
            vec![
                reset(16),
                patch(1, 3, 0, 4, &zeros),
                patch(3, 3, 0, 4, &zeros),
            ],
        ),
        (
            "changes size",
            vec![
                reset(16),
                patch(1, 2, 0, 4, &zeros),
                patch(2, 3, 0, 4, &zeros),
            ],
        ),
        (
            "changes bits",
            vec![
                reset(16),
                patch(1, 2, 0, 4, &zeros),
                patch(2, 2, 0, 8, &zeros),
            ],
        ),
        ("past the end", vec![reset(8), patch(1, 1, 0, 4, &[0; 5])]),
        (
            "short of the end",
            vec![reset(16), patch(1, 1, 0, 4, &zeros)],
        ),
        (
            "corrupt zlib",
            vec![reset(8), patch(1, 1, 1, 4, b"not zlib at all")],
        ),
        ("unknown variant", vec![vec![7, 0, 0]]),
        ("truncated reset", vec![vec![0, 1, 2]]),
    ];
    for (what, msgs) in bad {
        let mut r = TableReceiver::default();
        assert!(receive(&msgs, &mut r).is_err(), "{what} accepted");
    }
}

#[test]
fn a_compressed_bomb_costs_no_more_than_its_table() {
    // 16 MiB of zeros compress to a few KiB; the table holds 8 slots (4 bytes of
    // 4-bit entries): the patch must fail, not inflate 16 MiB.
    let zeros = vec![0u8; 16 << 20];
    let mut z = Compress::new(Compression::best(), true);
    let mut packed = Vec::with_capacity(64 << 10);
    let _ = z.compress_vec(&zeros, &mut packed, FlushCompress::Finish);
    assert!(packed.len() < 64 << 10);
    let mut r = TableReceiver::default();
    let msgs = vec![reset(8), patch(1, 1, 1, 4, &packed)];
    let e = receive(&msgs, &mut r).unwrap_err();
    assert!(e.0.contains("more than the table"), "{e}");
}

#[test]
fn memory_is_counted_for_the_table_and_a_running_inflater() {
    let mut r = TableReceiver::default();
    assert_eq!(r.bytes(), 0);
    receive(&[reset(1 << 16)], &mut r).unwrap();
    assert_eq!(r.bytes(), (1 << 16) / 8);
    assert_eq!(TableReceiver::bytes_after_reset(1 << 16), (1 << 16) / 8);
    let t = RouteTable::new(16);
    let msgs = patch_payloads(&t, None, 8);
    receive(&msgs[1..2], &mut r).unwrap();
    if msgs.len() > 2 {
        assert!(
            r.bytes() > (1 << 16) / 8,
            "the inflater counts while patching"
        );
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_qrp_messages_never_panic(
        msgs in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8)
    ) {
        let mut r = TableReceiver::default();
        for m in &msgs {
            if let Ok(q) = QrpMsg::parse(m) {
                let _ = r.apply(&q, 12);
            }
        }
    }
}
