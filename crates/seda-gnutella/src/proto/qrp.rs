//! The Query Routing Protocol (QRP, message type 0x30) as LimeWire specified it and
//! gtk-gnutella implements it: keyword hashing, tables, RESET and PATCH messages.
//!
//! A servent summarises the keywords of what it shares in a table of 2^bits
//! slots: each keyword is hashed ([`hash_code`]) and the slot its top `bits` bits
//! name is marked present. It sends the table to its ultrapeer as a RESET (table
//! length, "infinity") and a sequence of PATCH messages whose data, concatenated
//! and inflated if compressed (zlib), holds one signed entry per slot (1, 2, 4 or
//! 8 bits, the first entry in the high bits of the first byte): a negative entry
//! marks the slot present, a positive one absent, zero leaves it as it was; a
//! 1-bit entry flips it. Later PATCH sequences without a RESET change the table
//! incrementally. An ultrapeer forwards a query to a leaf only if the leaf's table
//! holds every keyword of the query (last-hop filtering), and may send other
//! ultrapeers the union of its leaves' tables so that they filter too.
//!
//! Keywords of a query: its text (up to the NUL), lowercased, cut at every
//! character that is not a letter or a digit; words shorter than 3 bytes are left
//! out (gtk-gnutella's `QRP_MIN_WORD_LENGTH`). A query with no keyword matches no
//! table.
//!
//! # Invariants
//! - A [`RouteTable`] has between 2^[`MIN_BITS`] and 2^[`MAX_BITS`] slots; its
//!   memory is one bit per slot.
//! - A [`TableReceiver`] never writes past its table: a patch that would is an
//!   error, as is any other breach of the sequence rules; after an error the
//!   receiver is unusable (the caller drops the peer).
//! - Inflating a patch produces at most as many bytes as the table has entries
//!   left, so a compressed bomb costs no more than the table it claims to patch.

use std::fmt;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Variant byte of a RESET message.
pub const RESET: u8 = 0x00;
/// Variant byte of a PATCH message.
pub const PATCH: u8 = 0x01;
/// Compressor byte: none.
pub const COMPRESSOR_NONE: u8 = 0x00;
/// Compressor byte: zlib (deflate with the zlib header).
pub const COMPRESSOR_ZLIB: u8 = 0x01;
/// Shortest keyword hashed, in bytes.
pub const MIN_WORD: usize = 3;
/// Smallest table: 2^3 slots (gtk-gnutella's empty table).
pub const MIN_BITS: u8 = 3;
/// Largest table: 2^21 slots, 256 KiB (gtk-gnutella's `MAX_TABLE_BITS`).
pub const MAX_BITS: u8 = 21;
/// The "infinity" of the tables we send: present slots hold 1, absent ones 7.
pub const OUR_INFINITY: u8 = 7;

/// The multiplier of the QRP hash (the golden ratio of 2^32, `0x4F1BBCDC`).
const A: u32 = 0x4F1B_BCDC;

/// The 32-bit QRP hash code of `word` (already lowercased): the low byte of each
/// character (UTF-16 surrogates for characters past the BMP) XORed into a
/// little-endian word at rotating byte positions, times [`A`]. A table of 2^bits
/// slots uses the top `bits` bits ([`slot`]).
pub fn hash_code(word: &str) -> u32 {
    let mut x: u32 = 0;
    let mut j = 0u32;
    let mut put = |b: u32| {
        x ^= (b & 0xff) << j;
        j = (j + 8) & 24;
    };
    for c in word.chars() {
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            put(u32::from(*u));
        }
    }
    x.wrapping_mul(A)
}

/// The slot of hash code `code` in a table of 2^`bits` slots.
pub fn slot(code: u32, bits: u8) -> usize {
    debug_assert!((1..=32).contains(&bits));
    (u64::from(code) >> (32 - u32::from(bits))) as usize
}

/// The hash codes of a query's keywords (see the module docs), deduplicated.
pub fn query_codes(payload: &[u8], out: &mut Vec<u32>) {
    out.clear();
    let text = payload.get(2..).unwrap_or(&[]);
    let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
    let text = String::from_utf8_lossy(text).to_lowercase();
    for w in text.split(|c: char| !c.is_alphanumeric()) {
        if w.len() >= MIN_WORD {
            let c = hash_code(w);
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
}

/// The hash codes of every word of `text` and of its prefixes down to
/// [`MIN_WORD`] bytes, as a sharing servent builds its table (gtk-gnutella also
/// inserts words cut by up to five characters, so that "music" finds "musical").
pub fn shared_codes(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for w in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
        let mut end = w.len();
        for _ in 0..=5 {
            if end < MIN_WORD {
                break;
            }
            let c = hash_code(&w[..end]);
            if !out.contains(&c) {
                out.push(c);
            }
            // Cut one character.
            end = w[..end].char_indices().next_back().map_or(0, |(i, _)| i);
        }
    }
    out
}

/// A query routing table: one presence bit per slot.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteTable {
    bits: u8,
    words: Box<[u64]>,
}

impl fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteTable")
            .field("slots", &self.slots())
            .field("present", &self.present())
            .finish()
    }
}

impl RouteTable {
    /// An empty table of 2^`bits` slots.
    ///
    /// # Panics
    /// If `bits` is outside [`MIN_BITS`]..=[`MAX_BITS`].
    pub fn new(bits: u8) -> RouteTable {
        assert!((MIN_BITS..=MAX_BITS).contains(&bits), "table bits {bits}");
        RouteTable {
            bits,
            words: vec![0u64; (1usize << bits).div_ceil(64)].into_boxed_slice(),
        }
    }

    /// log2 of the number of slots.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        1 << self.bits
    }

    /// Bytes of memory the table holds.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Whether slot `i` is present.
    pub fn get(&self, i: usize) -> bool {
        self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Marks slot `i` present or absent.
    pub fn set(&mut self, i: usize, on: bool) {
        let m = 1u64 << (i % 64);
        if on {
            self.words[i / 64] |= m;
        } else {
            self.words[i / 64] &= !m;
        }
    }

    fn flip(&mut self, i: usize) {
        self.words[i / 64] ^= 1u64 << (i % 64);
    }

    /// Slots present.
    pub fn present(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Marks the slot of hash code `code` present.
    pub fn insert(&mut self, code: u32) {
        self.set(slot(code, self.bits), true);
    }

    /// Whether the slot of hash code `code` is present.
    pub fn contains(&self, code: u32) -> bool {
        self.get(slot(code, self.bits))
    }

    /// Whether the table holds every keyword of a query (`codes` from
    /// [`query_codes`]); false for a query without keywords.
    pub fn matches(&self, codes: &[u32]) -> bool {
        !codes.is_empty() && codes.iter().all(|c| self.contains(*c))
    }

    /// Adds every slot present in `other` to `self`, whatever their sizes: a slot
    /// of a larger table maps onto the slot its top bits name, a slot of a smaller
    /// table onto every slot it covers (the union never misses a keyword).
    pub fn merge(&mut self, other: &RouteTable) {
        if other.bits == self.bits {
            for (a, b) in self.words.iter_mut().zip(other.words.iter()) {
                *a |= b;
            }
            return;
        }
        for (wi, w) in other.words.iter().enumerate() {
            let mut w = *w;
            while w != 0 {
                let i = wi * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                if other.bits > self.bits {
                    self.set(i >> (other.bits - self.bits), true);
                } else {
                    let k = self.bits - other.bits;
                    for j in (i << k)..((i + 1) << k) {
                        self.set(j, true);
                    }
                }
            }
        }
    }
}

/// A QRP message that breaks the protocol. The peer that sent it is dropped
/// (gtk-gnutella answers such a peer with Bye 413).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QrpError(pub String);

impl fmt::Display for QrpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, QrpError> {
    Err(QrpError(msg.into()))
}

/// A parsed QRP message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QrpMsg<'a> {
    /// Start a new table of `table_len` slots, all absent.
    Reset {
        /// Slots of the new table.
        table_len: u32,
        /// The value that means "absent" in the sender's entries.
        infinity: u8,
    },
    /// One message of a patch sequence.
    Patch {
        /// Its number, from 1.
        seq_no: u8,
        /// Messages in the sequence.
        seq_size: u8,
        /// [`COMPRESSOR_NONE`] or [`COMPRESSOR_ZLIB`].
        compressor: u8,
        /// Bits per entry: 1, 2, 4 or 8.
        entry_bits: u8,
        /// This message's share of the (compressed) entries.
        data: &'a [u8],
    },
}

impl<'a> QrpMsg<'a> {
    /// Parses a QRP payload.
    pub fn parse(p: &'a [u8]) -> Result<QrpMsg<'a>, QrpError> {
        match p.first() {
            Some(&RESET) if p.len() >= 6 => Ok(QrpMsg::Reset {
                table_len: u32::from_le_bytes([p[1], p[2], p[3], p[4]]),
                infinity: p[5],
            }),
            Some(&PATCH) if p.len() >= 5 => Ok(QrpMsg::Patch {
                seq_no: p[1],
                seq_size: p[2],
                compressor: p[3],
                entry_bits: p[4],
                data: &p[5..],
            }),
            Some(&RESET | &PATCH) => err("QRP message too short"),
            Some(v) => err(format!("unknown QRP variant {v}")),
            None => err("empty QRP message"),
        }
    }

    /// The payload of this message.
    pub fn to_payload(&self) -> Vec<u8> {
        match *self {
            QrpMsg::Reset {
                table_len,
                infinity,
            } => {
                let mut p = vec![RESET];
                p.extend_from_slice(&table_len.to_le_bytes());
                p.push(infinity);
                p
            }
            QrpMsg::Patch {
                seq_no,
                seq_size,
                compressor,
                entry_bits,
                data,
            } => {
                let mut p = vec![PATCH, seq_no, seq_size, compressor, entry_bits];
                p.extend_from_slice(data);
                p
            }
        }
    }
}

/// A patch sequence in progress.
#[derive(Debug)]
struct Seq {
    /// The next message number expected.
    next: u8,
    size: u8,
    entry_bits: u8,
    inflater: Option<Box<Decompress>>,
    /// The next slot an entry applies to.
    index: usize,
}

/// Approximate memory of a zlib inflater (its 32 KiB window and state).
const INFLATER_BYTES: usize = 44 * 1024;

/// What a [`TableReceiver`] did with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A RESET: a new, empty table (not usable until its first patch completes).
    Reset,
    /// A PATCH applied; the sequence goes on.
    Patching,
    /// The last PATCH of a sequence applied: the table is complete.
    Complete,
}

/// One peer's query routing table, built from its RESET and PATCH messages.
#[derive(Debug, Default)]
pub struct TableReceiver {
    table: Option<RouteTable>,
    /// Whether a whole patch sequence was applied since the last RESET.
    complete: bool,
    seq: Option<Seq>,
}

impl TableReceiver {
    /// The table, once a whole patch sequence has been applied.
    pub fn table(&self) -> Option<&RouteTable> {
        self.table.as_ref().filter(|_| self.complete)
    }

    /// Bytes of memory held (the table, and an inflater during a sequence).
    pub fn bytes(&self) -> usize {
        self.table.as_ref().map_or(0, RouteTable::bytes)
            + self
                .seq
                .as_ref()
                .and_then(|s| s.inflater.as_ref())
                .map_or(0, |_| INFLATER_BYTES)
    }

    /// Bytes a RESET to `table_len` slots would make this receiver hold.
    pub fn bytes_after_reset(table_len: u32) -> usize {
        (table_len as usize).div_ceil(64) * 8
    }

    /// Applies one QRP message. `max_bits` bounds the table a RESET may ask for.
    pub fn apply(&mut self, msg: &QrpMsg<'_>, max_bits: u8) -> Result<Progress, QrpError> {
        match *msg {
            QrpMsg::Reset {
                table_len,
                infinity,
            } => {
                if !table_len.is_power_of_two() {
                    return err(format!("Invalid QRP table length {table_len}"));
                }
                let bits = table_len.trailing_zeros() as u8;
                if bits < MIN_BITS || bits > max_bits.min(MAX_BITS) {
                    return err(format!("QRP table of {table_len} slots refused"));
                }
                if infinity < 1 {
                    return err(format!("Invalid QRP infinity {infinity}"));
                }
                self.table = Some(RouteTable::new(bits));
                self.complete = false;
                self.seq = None;
                Ok(Progress::Reset)
            }
            QrpMsg::Patch {
                seq_no,
                seq_size,
                compressor,
                entry_bits,
                data,
            } => self.patch(seq_no, seq_size, compressor, entry_bits, data),
        }
    }

    fn patch(
        &mut self,
        seq_no: u8,
        seq_size: u8,
        compressor: u8,
        entry_bits: u8,
        data: &[u8],
    ) -> Result<Progress, QrpError> {
        let Some(table) = self.table.as_mut() else {
            return err("No QRP RESET received before PATCH");
        };
        if self.seq.is_none() {
            if seq_no != 1 {
                return err(format!("Invalid QRP seq number {seq_no} (expected 1)"));
            }
            if seq_size == 0 {
                return err("QRP patch sequence of 0 messages");
            }
            if !matches!(entry_bits, 1 | 2 | 4 | 8) {
                return err(format!("Invalid QRP entry bits {entry_bits} for PATCH"));
            }
            let inflater = match compressor {
                COMPRESSOR_NONE => None,
                COMPRESSOR_ZLIB => Some(Box::new(Decompress::new(true))),
                c => return err(format!("Unknown QRP compressor {c}")),
            };
            self.seq = Some(Seq {
                next: 1,
                size: seq_size,
                entry_bits,
                inflater,
                index: 0,
            });
        }
        let Some(seq) = self.seq.as_mut() else {
            return err("QRP sequence lost");
        };
        if seq_no != seq.next {
            return err(format!(
                "Invalid QRP seq number {seq_no} (expected {})",
                seq.next
            ));
        }
        if seq_size != seq.size {
            return err(format!(
                "Changed QRP seq size to {seq_size} at message #{seq_no} (began with {})",
                seq.size
            ));
        }
        if entry_bits != seq.entry_bits {
            return err(format!(
                "Changed QRP patch entry bits to {entry_bits} at message #{seq_no}"
            ));
        }
        let expected_compressor = if seq.inflater.is_some() {
            COMPRESSOR_ZLIB
        } else {
            COMPRESSOR_NONE
        };
        if compressor != expected_compressor {
            return err(format!("Changed QRP compressor at message #{seq_no}"));
        }
        seq.next = seq.next.wrapping_add(1);
        let last = seq_no == seq.size;
        match seq.inflater.as_mut() {
            None => apply_entries(table, &mut seq.index, seq.entry_bits, data)?,
            Some(_) => inflate_entries(table, seq, data, last)?,
        }
        if last {
            if seq.index < table.slots() {
                return err(format!(
                    "Incomplete {}-bit QRP patch covered {}/{} slots",
                    seq.entry_bits,
                    seq.index,
                    table.slots()
                ));
            }
            self.seq = None;
            self.complete = true;
            return Ok(Progress::Complete);
        }
        Ok(Progress::Patching)
    }
}

/// Inflates this message's share of a compressed patch and applies its entries.
fn inflate_entries(
    table: &mut RouteTable,
    seq: &mut Seq,
    mut data: &[u8],
    last: bool,
) -> Result<(), QrpError> {
    let Some(z) = seq.inflater.as_mut() else {
        return Ok(());
    };
    // Output goes to the table 4 KiB at a time: a patch that inflates past the
    // table's end fails in apply_entries before anything more is produced.
    let mut out = Vec::with_capacity(4096);
    loop {
        out.clear();
        let cap = out.capacity();
        let (before_in, before_out) = (z.total_in(), z.total_out());
        let status = z
            .decompress_vec(data, &mut out, FlushDecompress::Sync)
            .map_err(|e| QrpError(format!("QRP patch decompression failed: {e}")))?;
        let used = (z.total_in() - before_in) as usize;
        let made = (z.total_out() - before_out) as usize;
        data = &data[used..];
        apply_entries(table, &mut seq.index, seq.entry_bits, &out)?;
        if status == Status::StreamEnd {
            if !last || !data.is_empty() {
                return err("Early end of compressed QRP patch");
            }
            return Ok(());
        }
        if made == cap {
            continue;
        }
        if data.is_empty() {
            return Ok(());
        }
        if used == 0 && made == 0 {
            return err("QRP patch decompression makes no progress");
        }
    }
}

/// Applies entries of `bits` bits each from `data` to `table` from slot `index`.
fn apply_entries(
    table: &mut RouteTable,
    index: &mut usize,
    bits: u8,
    data: &[u8],
) -> Result<(), QrpError> {
    let per_byte = 8 / usize::from(bits);
    if *index + data.len() * per_byte > table.slots() {
        return err(format!(
            "QRP patch covers more than the table's {} slots",
            table.slots()
        ));
    }
    let mask = ((1u16 << bits) - 1) as u8;
    let sign = 1u8 << (bits - 1);
    for &b in data {
        for k in 0..per_byte {
            let v = (b >> (8 - usize::from(bits) * (k + 1))) & mask;
            let i = *index + k;
            if bits == 1 {
                if v == 1 {
                    table.flip(i);
                }
            } else if v != 0 {
                // Negative (sign bit set): present; positive: absent.
                table.set(i, v & sign != 0);
            }
        }
        *index += per_byte;
    }
    Ok(())
}

/// The RESET and PATCH payloads that bring a peer holding `old` (or, after a
/// RESET, an empty table when `old` is `None`) to `table`: 4-bit entries with
/// infinity [`OUR_INFINITY`], zlib-compressed, cut into messages of at most
/// `max_data` bytes (more if 255 messages would not hold it).
pub fn patch_payloads(
    table: &RouteTable,
    old: Option<&RouteTable>,
    max_data: usize,
) -> Vec<Vec<u8>> {
    let old = old.filter(|o| o.bits == table.bits);
    let mut out = Vec::new();
    if old.is_none() {
        out.push(
            QrpMsg::Reset {
                table_len: table.slots() as u32,
                infinity: OUR_INFINITY,
            }
            .to_payload(),
        );
    }
    // Present: 1 - infinity = -6 (0xA); absent again: +6.
    let (on, off) = (0xAu8, 0x6u8);
    let mut raw = Vec::with_capacity(table.slots() / 2);
    for pair in 0..table.slots() / 2 {
        let mut byte = 0u8;
        for k in 0..2 {
            let i = pair * 2 + k;
            let now = table.get(i);
            let was = old.is_some_and(|o| o.get(i));
            let e = match (was, now) {
                (false, true) => on,
                (true, false) => off,
                _ => 0,
            };
            byte |= e << (4 * (1 - k));
        }
        raw.push(byte);
    }
    let mut z = Compress::new(Compression::default(), true);
    let mut packed = Vec::with_capacity(raw.len() / 8 + 64);
    loop {
        packed.reserve(4096);
        let before = z.total_in() as usize;
        let status = z
            .compress_vec(&raw[before..], &mut packed, FlushCompress::Finish)
            .unwrap_or(Status::StreamEnd);
        if status == Status::StreamEnd {
            break;
        }
    }
    let chunk = max_data.max(packed.len().div_ceil(255)).max(1);
    let n = packed.len().div_ceil(chunk).max(1);
    for (i, part) in packed.chunks(chunk).enumerate() {
        out.push(
            QrpMsg::Patch {
                seq_no: (i + 1) as u8,
                seq_size: n as u8,
                compressor: COMPRESSOR_ZLIB,
                entry_bits: 4,
                data: part,
            }
            .to_payload(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
