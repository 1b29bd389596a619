//! Mail to seed the service with: the SpamAssassin public corpus (real mail of 2002,
//! CC0) or a synthetic corpus for tests and machines without npm.
//!
//! Every message becomes a [`NewMessage`] of plain text: RFC 5322 headers and MIME
//! bodies are parsed by `mail-parser`; an HTML-only message keeps its text (the
//! parser's HTML-to-text conversion), never its markup, and attachments are dropped.

mod spamassassin;
mod synthetic;

pub use spamassassin::{SPAMASSASSIN_PACKAGE, load_spamassassin};
pub use synthetic::synthetic;

use mail_parser::{Address, MessageParser};

use crate::store::{MATCH_END, MATCH_START, NewMessage};

/// Longest body kept, bytes (longer bodies are cut at a character boundary).
pub const MAX_BODY: usize = 256 * 1024;

/// Text safe to store: the search-snippet markers and NULs become U+FFFD.
pub(crate) fn clean(s: &str) -> String {
    s.replace([MATCH_START, MATCH_END, '\0'], "\u{FFFD}")
}

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn addresses(a: Option<&Address<'_>>) -> String {
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
fn timestamp(d: &mail_parser::DateTime) -> i64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_headers_and_mime_text() {
        let raw = b"From: \"Jane Doe\" <jane@example.org>\r\nTo: a@x.org, b@y.org\r\n\
Subject: =?utf-8?q?caf=C3=A9?=\r\nDate: Thu, 22 Aug 2002 12:36:23 +0100\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=XX\r\n\r\n\
--XX\r\nContent-Type: text/plain\r\n\r\nplain <b>text</b>\x02\r\n--XX\r\n\
Content-Type: text/html\r\n\r\n<p>html</p>\r\n--XX--\r\n";
        let m = parse_message(raw, 7).unwrap();
        assert_eq!(m.sender, "Jane Doe <jane@example.org>");
        assert_eq!(m.recipients, "a@x.org, b@y.org");
        assert_eq!(m.subject, "café");
        assert_eq!(m.date, 1_030_016_183);
        assert!(
            m.body.starts_with("plain <b>text</b>\u{FFFD}"),
            "{:?}",
            m.body
        );
        let old = parse_message(
            b"Date: Sun, 21 Jul 02 10:00:00 +0000\r\nSubject: a  \r\n   b\r\n\r\nx",
            7,
        )
        .unwrap();
        assert_eq!((old.date, old.subject.as_str()), (1_027_245_600, "a b"));
        let y2k = parse_message(b"Date: Sun, 21 Jul 102 10:00:00 +0000\r\n\r\nx", 7).unwrap();
        assert_eq!(y2k.date, 1_027_245_600);
        let bare = parse_message(b"Subject:\r\n\r\nbody", 7).unwrap();
        assert_eq!((bare.subject.as_str(), bare.date), ("(no subject)", 7));
        assert_eq!(bare.sender, "(unknown sender)");
        assert_eq!(cut("aé".into(), 2), "a");
    }
}
