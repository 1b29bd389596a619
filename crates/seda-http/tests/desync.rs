//! The request-smuggling corpus of `http_desync_guardian` (AWS, Apache-2.0; the cases
//! and their licence are in `tests/data/desync-guardian/`) against our head parser.
//!
//! # From a case to bytes
//! A case names a method, a URI, a version and header fields. The bytes are built as
//! the guardian's own test builds its raw request: `METHOD SP URI SP VERSION CRLF`,
//! each field as `NAME ": " VALUE CRLF`, then CRLF. Escapes are read as the guardian
//! reads them (`\xNN`, `\t`, `\r`, ... also inside single-quoted YAML), and a character
//! up to U+00FF is the byte of that value (`"\xa0"` is the byte 0xA0), a later one its
//! UTF-8 (the dotless `ı` of `Transfer-Encodıng` is two bytes). The guardian does not
//! require `Host`, which we do for HTTP/1.1: a case without a `Host` field gets
//! `Host: desync.test` as its first field, or every HTTP/1.1 case would be a trivial
//! 400.
//!
//! # What "safe" means
//! Our verdict on a case is the result of [`parse_head`] with the default [`Limits`]:
//! *rejected* (an error: the server answers its status and closes the connection, so
//! no byte after it is ever read as a request) or *parsed*. Waiting for more bytes on a
//! complete head is never right. A parse is *unambiguous* when all of these hold:
//! 1. the head is exactly the bytes sent (`head_len` is their length: nothing after
//!    the blank line was taken, nothing of the head is left to read as a next request);
//! 2. method, path, query and version are the case's, byte for byte;
//! 3. the fields we read are the case's fields in order (names exact, values without
//!    surrounding SP/HTAB): no field hidden, merged or split;
//! 4. no field name is a near miss of a framing field: a name that is not an RFC 9110
//!    token, or whose ASCII letters spell `contentlength` or `transferencoding` without
//!    the name being exactly `Content-Length` or `Transfer-Encoding` (`Transfer_Encoding`,
//!    `Content--Length`), makes every parse unsafe, since a peer that reads it as the
//!    framing field frames the body differently;
//! 5. the body framing is the one RFC 9112 6.3 reads from the exact framing fields: at
//!    most one kind of them, every `Content-Length` value `1*DIGIT` and all equal
//!    (`0` means no body), `Transfer-Encoding` only in HTTP/1.1, once, exactly
//!    `chunked`; anything else has no unambiguous reading and must be rejected.
//!
//! The guardian's `Severe` cases must be rejected (its own rule: "400 and close");
//! `Ambiguous` ones must be rejected or parsed unambiguously; `Compliant` and
//! `Acceptable` ones must be parsed unambiguously, except those listed in
//! [`REFUSED_ON_PURPOSE`] with the reason we refuse them (the test fails if a listed
//! case is no longer refused, so the list cannot go stale).
//!
//! With `SEDA_DESYNC_SEEDS=DIR` the test also writes each case's bytes to `DIR` (how
//! the seeds of the `request_head` fuzz target were made).

use std::path::{Path, PathBuf};

use seda_http::proto::{BodyFraming, Limits, RequestHead, Version, parse_head, skip_leading_crlf};
use yaml_rust2::{Yaml, YamlLoader};

const FILES: &[&str] = &[
    "acceptable",
    "ambiguous",
    "bad-header-characters",
    "edge-cases",
    "more-compliant-tests",
    "real-life-test-cases",
    "rfc-compliant",
    "severe",
    "uri-specific-test-cases",
];

const WS_BEFORE_COLON: &str =
    "whitespace between a field name and its colon: RFC 9112 5.1 says a server MUST answer 400";
const CTL_IN_FIELD: &str = "a control character in a field: not a token or field-vchar (RFC 9110 5.1, 5.5), refused like hyper and nginx do";
const CODINGS: &str = "transfer codings other than chunked alone: 501, as RFC 9112 6.1 advises for codings a server does not implement";

/// Compliant or Acceptable cases we refuse, with why (file, case name, reason).
const REFUSED_ON_PURPOSE: &[(&str, &str, &str)] = &[
    (
        "acceptable",
        "No TE/CL headers, some others are non-compliant",
        WS_BEFORE_COLON,
    ),
    (
        "acceptable",
        "TE and some others are non-compliant",
        WS_BEFORE_COLON,
    ),
    (
        "acceptable",
        "CL and some others are non-compliant",
        WS_BEFORE_COLON,
    ),
    (
        "acceptable",
        "A non-essential header with a non-printable character (x01)",
        CTL_IN_FIELD,
    ),
    ("bad-header-characters", r"Some-Header\x01", CTL_IN_FIELD),
    ("bad-header-characters", r"\x01Some-Header", CTL_IN_FIELD),
    (
        "bad-header-characters",
        r"Some-Header: \x01value",
        CTL_IN_FIELD,
    ),
    (
        "bad-header-characters",
        r"Some-Header: value\x01",
        CTL_IN_FIELD,
    ),
    (
        "acceptable",
        "Non-RFC, but OK HTTP/0.9",
        "HTTP/0.9 is not served (505)",
    ),
    (
        "acceptable",
        "Empty version, which means HTTP/0.9",
        "HTTP/0.9 is not served (400: a request line of two words)",
    ),
    (
        "uri-specific-test-cases",
        "Extra spaces in version",
        "two spaces in the request line: RFC 9112 3 allows a recipient to refuse anything but single SP",
    ),
    (
        "uri-specific-test-cases",
        "[space] in URI",
        "a space in the target: RFC 9112 3.2 says 400 rather than guessing",
    ),
    (
        "rfc-compliant",
        "Empty URI",
        "an empty request-target is not in the grammar of RFC 9112 3.2",
    ),
    (
        "more-compliant-tests",
        "Large Size OK",
        "Content-Length 4,000,000 is past the default 1 MiB body limit: 413",
    ),
    ("more-compliant-tests", "Correct TE OK", CODINGS),
    (
        "more-compliant-tests",
        "Transfer-Encoding: identity and chunked OK",
        CODINGS,
    ),
    (
        "more-compliant-tests",
        "Multiple transfer encoding headers in a single request OK",
        CODINGS,
    ),
    (
        "more-compliant-tests",
        "TE with custom parameters OK",
        CODINGS,
    ),
    (
        "rfc-compliant",
        "Different Transfer-Encoding headers",
        CODINGS,
    ),
    (
        "rfc-compliant",
        "Different Transfer-Encoding headers combined",
        CODINGS,
    ),
    (
        "rfc-compliant",
        "Transfer-Encoding with a param: chunked;custom_param",
        CODINGS,
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Compliant,
    Acceptable,
    Ambiguous,
    Severe,
}

#[derive(Debug)]
struct Case {
    file: &'static str,
    name: String,
    method: Vec<u8>,
    uri: Vec<u8>,
    version: Vec<u8>,
    /// Fields as sent, `Host` added where the case has none.
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    tier: Tier,
}

impl Case {
    /// The request as bytes (see the module docs).
    fn raw(&self) -> Vec<u8> {
        let mut r = Vec::new();
        for (i, part) in [&self.method, &self.uri, &self.version]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                r.push(b' ');
            }
            r.extend_from_slice(part);
        }
        r.extend_from_slice(b"\r\n");
        for (name, value) in &self.fields {
            r.extend_from_slice(name);
            r.extend_from_slice(b": ");
            r.extend_from_slice(value);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"\r\n");
        r
    }
}

/// The guardian's `unescape_value`, then characters up to U+00FF as single bytes.
fn bytes_of(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chars = s.chars();
    let push = |c: char, out: &mut Vec<u8>| match u8::try_from(u32::from(c)) {
        Ok(b) => out.push(b),
        Err(_) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            push(c, &mut out);
            continue;
        }
        let e = chars.next().expect("an escape ends a string");
        let c = match e {
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                char::from(u8::from_str_radix(&hex, 16).expect("\\x escape"))
            }
            'b' => '\x08',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            other => other,
        };
        push(c, &mut out);
    }
    out
}

/// A string or integer field of a case.
fn text(y: &Yaml, what: &str, case: &str) -> Vec<u8> {
    match y {
        Yaml::String(s) => bytes_of(s),
        Yaml::Integer(n) => n.to_string().into_bytes(),
        _ => panic!("case {case:?}: no {what}"),
    }
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/desync-guardian")
}

fn load() -> Vec<Case> {
    let mut cases = Vec::new();
    for &file in FILES {
        let path = data_dir().join(format!("{file}.yaml"));
        let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let docs = YamlLoader::load_from_str(&src).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for y in docs[0].as_vec().expect("a list of cases") {
            let name = y["name"].as_str().expect("a case name").to_string();
            let mut fields: Vec<(Vec<u8>, Vec<u8>)> = y["headers"]
                .as_vec()
                .map(|hs| {
                    hs.iter()
                        .map(|h| {
                            (
                                text(&h["name"], "header name", &name),
                                text(&h["value"], "header value", &name),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"host")) {
                fields.insert(0, (b"Host".to_vec(), b"desync.test".to_vec()));
            }
            let tier = match y["expected"]["tier"].as_str() {
                Some("Compliant") => Tier::Compliant,
                Some("Acceptable") => Tier::Acceptable,
                Some("Ambiguous") => Tier::Ambiguous,
                Some("Severe") => Tier::Severe,
                t => panic!("case {name:?}: tier {t:?}"),
            };
            cases.push(Case {
                file,
                method: text(&y["method"], "method", &name),
                uri: text(&y["uri"], "uri", &name),
                version: text(&y["version"], "version", &name),
                name,
                fields,
                tier,
            });
        }
    }
    cases
}

#[derive(Debug)]
enum Verdict {
    Rejected(u16),
    Parsed(Box<RequestHead>),
    /// `Ok(None)` on a complete head: a client would wait for a timeout.
    Waiting,
}

fn verdict(raw: &[u8]) -> (Verdict, usize) {
    let skip = skip_leading_crlf(raw);
    let v = match parse_head(&raw[skip..], &Limits::default()) {
        Ok(Some(head)) => Verdict::Parsed(Box::new(head)),
        Ok(None) => Verdict::Waiting,
        Err(e) => Verdict::Rejected(e.status().code()),
    };
    (v, skip)
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Rule 4 of the module docs.
fn near_miss_framing_name(name: &[u8]) -> bool {
    if name.is_empty() || !name.iter().all(|&c| is_tchar(c)) {
        return true;
    }
    let letters: Vec<u8> = name
        .iter()
        .filter(|c| c.is_ascii_alphabetic())
        .map(u8::to_ascii_lowercase)
        .collect();
    let framing = letters == b"contentlength" || letters == b"transferencoding";
    framing
        && !name.eq_ignore_ascii_case(b"content-length")
        && !name.eq_ignore_ascii_case(b"transfer-encoding")
}

fn ows_trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Rule 5: the one framing RFC 9112 6.3 reads, or `None` if there is none.
fn strict_framing(c: &Case) -> Option<BodyFraming> {
    let mut lengths = Vec::new();
    let mut codings = Vec::new();
    for (name, value) in &c.fields {
        if name.eq_ignore_ascii_case(b"content-length") {
            lengths.push(ows_trim(value));
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            codings.push(ows_trim(value));
        }
    }
    match (lengths.as_slice(), codings.as_slice()) {
        ([], []) => Some(BodyFraming::None),
        ([], [te]) if te.eq_ignore_ascii_case(b"chunked") && c.version == b"HTTP/1.1" => {
            Some(BodyFraming::Chunked)
        }
        ([first, rest @ ..], []) => {
            let digits = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
            if !digits(first) || rest.iter().any(|v| v != first) {
                return None;
            }
            let n: u64 = std::str::from_utf8(first).ok()?.parse().ok()?;
            Some(if n == 0 {
                BodyFraming::None
            } else {
                BodyFraming::Length(n)
            })
        }
        _ => None,
    }
}

/// Why a parse of `c` is not the one unambiguous reading (rules 1-5), if it is not.
fn ambiguity(c: &Case, raw: &[u8], skip: usize, head: &RequestHead) -> Option<String> {
    let buf = &raw[skip..];
    if head.head_len != buf.len() {
        return Some(format!("head_len {} of {} bytes", head.head_len, buf.len()));
    }
    if head.get(buf, &head.method_token) != c.method.as_slice() {
        return Some("another method".into());
    }
    let target = c.uri.split(|&b| b == b'#').next().unwrap_or_default();
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], &target[i + 1..]),
        None => (target, &target[target.len()..]),
    };
    if head.get(buf, &head.path) != path || head.get(buf, &head.query) != query {
        return Some("another target".into());
    }
    let version = match c.version.as_slice() {
        b"HTTP/1.0" => Version::Http10,
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'1'..=b'9'] => Version::Http11,
        _ => return Some("a version that is not HTTP/1.x".into()),
    };
    if head.version != version {
        return Some("another version".into());
    }
    let ours: Vec<(&[u8], &[u8])> = head.fields(buf).collect();
    let theirs: Vec<(&[u8], &[u8])> = c
        .fields
        .iter()
        .map(|(n, v)| (n.as_slice(), ows_trim(v)))
        .collect();
    if ours != theirs {
        return Some("other fields".into());
    }
    if let Some((n, _)) = c.fields.iter().find(|(n, _)| near_miss_framing_name(n)) {
        return Some(format!(
            "near miss of a framing field: {:?}",
            String::from_utf8_lossy(n)
        ));
    }
    match strict_framing(c) {
        None => Some("framing fields without one reading were accepted".into()),
        Some(f) if f != head.body => Some(format!("framed as {:?}, not {f:?}", head.body)),
        Some(_) => None,
    }
}

#[test]
fn the_desync_guardian_corpus_is_answered_safely() {
    let cases = load();
    assert!(cases.len() >= 150, "only {} cases loaded", cases.len());
    let seeds = std::env::var_os("SEDA_DESYNC_SEEDS").map(PathBuf::from);
    let mut failures = Vec::new();
    // Per tier: (cases, rejected, parsed unambiguously).
    let mut tally = [(0usize, 0usize, 0usize); 4];
    let mut refused_on_purpose = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let raw = c.raw();
        if let Some(dir) = &seeds {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("desync-{}-{i:03}", c.file)), &raw).unwrap();
        }
        let (v, skip) = verdict(&raw);
        let t = &mut tally[c.tier as usize];
        t.0 += 1;
        let what = format!("{}: {:?} ({:?})", c.file, c.name, c.tier);
        let listed = REFUSED_ON_PURPOSE
            .iter()
            .any(|(f, n, _)| *f == c.file && *n == c.name);
        match (&v, c.tier) {
            (Verdict::Waiting, _) => failures.push(format!("{what}: waits on a complete head")),
            (Verdict::Rejected(s), _) if !(400..600).contains(s) => {
                failures.push(format!("{what}: rejected with {s}"))
            }
            (Verdict::Rejected(_), Tier::Severe | Tier::Ambiguous) => t.1 += 1,
            (Verdict::Rejected(s), _) => {
                t.1 += 1;
                if listed {
                    refused_on_purpose.push((c.file, c.name.as_str()));
                } else {
                    failures.push(format!("{what}: a compliant request got {s}"));
                }
            }
            (Verdict::Parsed(_), Tier::Severe) => {
                failures.push(format!("{what}: a severe case was parsed"))
            }
            (Verdict::Parsed(head), _) => match ambiguity(c, &raw, skip, head) {
                Some(why) => failures.push(format!("{what}: parsed, but {why}")),
                None => {
                    t.2 += 1;
                    if c.tier == Tier::Ambiguous {
                        println!("ambiguous, parsed as {:?}: {what}", head.body);
                    }
                }
            },
        }
    }
    for (f, n, _) in REFUSED_ON_PURPOSE {
        if !refused_on_purpose.contains(&(*f, *n)) {
            failures.push(format!("{f}: {n:?} is listed as refused but was not"));
        }
    }
    for (tier, (n, rejected, parsed)) in [
        Tier::Compliant,
        Tier::Acceptable,
        Tier::Ambiguous,
        Tier::Severe,
    ]
    .iter()
    .zip(tally)
    {
        println!("{tier:?}: {n} cases, {rejected} rejected, {parsed} parsed unambiguously");
    }
    assert!(
        failures.is_empty(),
        "{} unsafe verdicts:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn near_misses_and_strict_framing_are_recognised() {
    // The checks of the test above must be able to fail.
    for n in [
        &b"Transfer_Encoding"[..],
        b"Content--Length",
        b"content-length ",
    ] {
        assert!(near_miss_framing_name(n), "{}", String::from_utf8_lossy(n));
    }
    for n in [
        &b"Transfer-Encoding"[..],
        b"CONTENT-LENGTH",
        b"X-Content-Type",
    ] {
        assert!(!near_miss_framing_name(n), "{}", String::from_utf8_lossy(n));
    }
    let case = |fields: &[(&str, &str)], version: &str| Case {
        file: "t",
        name: "t".into(),
        method: b"POST".to_vec(),
        uri: b"/".to_vec(),
        version: version.as_bytes().to_vec(),
        fields: fields
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        tier: Tier::Ambiguous,
    };
    let te = ("Transfer-Encoding", "chunked");
    assert_eq!(
        strict_framing(&case(&[te], "HTTP/1.1")),
        Some(BodyFraming::Chunked)
    );
    assert_eq!(strict_framing(&case(&[te], "HTTP/1.0")), None);
    assert_eq!(
        strict_framing(&case(&[te, ("Content-Length", "5")], "HTTP/1.1")),
        None
    );
    let cl = |v| {
        case(
            &[("Content-Length", v), ("Content-Length", "5")],
            "HTTP/1.1",
        )
    };
    assert_eq!(strict_framing(&cl("5")), Some(BodyFraming::Length(5)));
    assert_eq!(strict_framing(&cl("6")), None);
    assert_eq!(strict_framing(&cl("+5")), None);
    assert_eq!(
        bytes_of(r"\x01a\xa0ı"),
        [&[1, b'a', 0xa0][..], "ı".as_bytes()].concat()
    );
}
