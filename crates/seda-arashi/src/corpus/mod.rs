//! Mail to seed the service with: the SpamAssassin public corpus (real mail of 2002,
//! CC0) or a synthetic corpus for tests and machines without npm.
//!
//! Every message becomes a [`NewMessage`] of plain text: RFC 5322 headers and MIME
//! bodies are parsed by `mail-parser`; an HTML-only message keeps its text (the
//! parser's HTML-to-text conversion), never its markup, and attachments are dropped.

mod parse;
mod spamassassin;
mod synthetic;

pub use parse::{MAX_BODY, parse_message};
pub use spamassassin::{SPAMASSASSIN_PACKAGE, load_spamassassin};
pub use synthetic::synthetic;

#[cfg(test)]
mod tests {
    use super::parse::cut;
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
