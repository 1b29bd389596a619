//! A synthetic corpus: deterministic, plausible mail for tests and for machines
//! without npm. Senders, subjects and bodies are drawn from fixed word lists by a
//! seeded generator, dates spread over 2002 like the real corpus.

use crate::store::NewMessage;

const FIRST: &[&str] = &[
    "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
    "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Yolanda",
];
const LAST: &[&str] = &[
    "Smith", "Jones", "Garcia", "Chen", "Okafor", "Novak", "Tanaka", "Silva", "Kowalski", "Dubois",
];
const DOMAINS: &[&str] = &[
    "example.org",
    "example.com",
    "example.net",
    "lists.example.org",
];
const TOPICS: &[&str] = &[
    "meeting",
    "release",
    "kernel",
    "patch",
    "budget",
    "lunch",
    "report",
    "server",
    "backup",
    "invoice",
    "holiday",
    "conference",
    "deadline",
    "review",
    "outage",
    "upgrade",
    "newsletter",
    "offer",
    "question",
    "schedule",
];
const WORDS: &[&str] = &[
    "the", "a", "to", "of", "and", "in", "we", "will", "please", "next", "week", "about", "new",
    "version", "list", "mail", "thanks", "for", "your", "help", "with", "this", "that", "it", "is",
    "on", "at", "be", "have", "not", "can", "should", "build", "test", "linux", "python", "perl",
    "spam", "filter", "money", "free", "today", "time", "project", "team", "data", "file",
    "message", "attached", "see", "below", "regards", "cheers", "update", "fixed", "bug", "error",
    "network", "disk", "memory", "database", "query", "index", "search", "folder",
];

fn pick<'a>(rng: &mut fastrand::Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.usize(..xs.len())]
}

fn sentence(rng: &mut fastrand::Rng) -> String {
    let n = rng.usize(6..16);
    let mut s: Vec<&str> = (0..n).map(|_| pick(rng, WORDS)).collect();
    if rng.u8(..4) == 0 {
        s.insert(rng.usize(..s.len()), pick(rng, TOPICS));
    }
    let mut text = s.join(" ");
    if let Some(first) = text.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    text.push('.');
    text
}

/// `n` messages from `seed` (the same `n` and `seed` always give the same mail).
pub fn synthetic(n: usize, seed: u64) -> Vec<NewMessage> {
    let mut rng = fastrand::Rng::with_seed(seed);
    // 2002-01-01 .. 2003-01-01, like the SpamAssassin corpus.
    let (start, span) = (1_009_843_200_i64, 365 * 86_400_i64);
    (0..n)
        .map(|i| {
            let (first, last) = (pick(&mut rng, FIRST), pick(&mut rng, LAST));
            let domain = pick(&mut rng, DOMAINS);
            let topic = pick(&mut rng, TOPICS);
            let subject = match rng.u8(..3) {
                0 => format!("Re: {topic} {}", pick(&mut rng, WORDS)),
                1 => format!("{} {topic} #{i}", pick(&mut rng, WORDS)),
                _ => format!("[list] {topic} {}", pick(&mut rng, TOPICS)),
            };
            let paragraphs = rng.usize(1..5);
            let body = (0..paragraphs)
                .map(|_| {
                    let k = rng.usize(1..5);
                    (0..k)
                        .map(|_| sentence(&mut rng))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n\n")
                + &format!("\n\n-- \n{first} {last}\n");
            NewMessage {
                sender: format!(
                    "{first} {last} <{}.{}@{domain}>",
                    first.to_lowercase(),
                    last.to_lowercase()
                ),
                recipients: "undisclosed-recipients:;".into(),
                subject,
                date: start + rng.i64(0..span),
                body,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_plausible() {
        let a = synthetic(50, 3);
        assert_eq!(a, synthetic(50, 3));
        assert_ne!(a, synthetic(50, 4));
        assert!(
            a.iter()
                .all(|m| m.sender.contains('@') && !m.subject.is_empty() && m.body.len() > 20)
        );
    }
}
