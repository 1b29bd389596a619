//! One RFC 5322 message, parsed with mail-parser, into a [`NewMessage`]: cleaned
//! text, capped body, a date even when the header has none. A leaf.

use mail_parser::{Address, MessageParser};

use crate::store::{MATCH_END, MATCH_START, NewMessage};

/// Longest body kept, bytes (longer bodies are cut at a character boundary).
pub const MAX_BODY: usize = 256 * 1024;

/// Text safe to store: the search-snippet markers and NULs become U+FFFD.
pub(crate) fn clean(s: &str) -> String {
    s.replace([MATCH_START, MATCH_END, '\0'], "\u{FFFD}")
}
pub(super) fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
pub(super) fn addresses(a: Option<&Address<'_>>) -> String {
    let Some(a) = a else { return String::new() };
    a.iter()
        .map(|addr| match (addr.name(), addr.address()) {
            (Some(n), Some(e)) if !n.trim().is_empty() => format!("{} <{e}>", n.trim()),
            (_, Some(e)) => e.to_owned(),
            (Some(n), None) => n.to_owned(),
            (None, None) => String::new(),
        })
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds since the epoch of a `Date:`, reading obsolete years as RFC 5322 4.3 says:
/// two digits 00-49 are 20xx, 50-99 are 19xx, three digits (`102`, a Y2K bug of
/// 2002's mailers) are 1900 + the year.
pub(super) fn timestamp(d: &mail_parser::DateTime) -> i64 {
    let mut d = *d;
    if d.year < 50 {
        d.year += 2000;
    } else if d.year < 1000 {
        d.year += 1900;
    }
    d.to_timestamp()
}

/// Parses one RFC 5322 message. `None` if it has no header at all. A missing date
/// becomes `fallback_date`; a missing subject `(no subject)`.
pub fn parse_message(raw: &[u8], fallback_date: i64) -> Option<NewMessage> {
    let msg = MessageParser::default().parse(raw)?;
    if msg.headers().is_empty() {
        return None;
    }
    let sender = addresses(msg.from());
    // Folded and padded subjects (spam pads with runs of blanks) read as one line.
    let subject = msg
        .subject()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "(no subject)".to_owned());
    let body = msg.body_text(0).map(|b| b.into_owned()).unwrap_or_default();
    Some(NewMessage {
        sender: clean(if sender.is_empty() {
            "(unknown sender)"
        } else {
            &sender
        }),
        recipients: clean(&addresses(msg.to())),
        subject: clean(&subject),
        date: msg.date().map_or(fallback_date, timestamp),
        body: cut(clean(&body), MAX_BODY),
    })
}
