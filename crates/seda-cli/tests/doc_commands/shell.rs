//! Shell text split into simple commands, as far as the docs need it.

use std::sync::OnceLock;

use regex::Regex;

use crate::re;

/// One simple command: its words, the line it starts on (relative to its piece),
/// and the strings of its `$(...)`.
#[derive(Debug, Default)]
pub(crate) struct Simple {
    pub(crate) words: Vec<String>,
    pub(crate) line: usize,
    pub(crate) substituted: Vec<String>,
}

/// Splits shell text into simple commands (see the module doc for what is known).
pub(crate) fn split_shell(text: &str) -> Vec<Simple> {
    // `<a placeholder with spaces>` is one word.
    static ANGLE: OnceLock<Regex> = OnceLock::new();
    let text = re(&ANGLE, r"<[A-Za-z][^<>\n]*>")
        .replace_all(text, |c: &regex::Captures<'_>| c[0].replace(' ', "_"));
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut cmd, mut word) = (Vec::new(), Simple::default(), None::<String>);
    let mut line = 0;
    let end_word = |cmd: &mut Simple, word: &mut Option<String>| {
        if let Some(w) = word.take() {
            cmd.words.push(w);
        }
    };
    let end_cmd = |out: &mut Vec<Simple>, cmd: &mut Simple, word: &mut Option<String>, line| {
        end_word(cmd, word);
        let done = std::mem::take(cmd);
        if !done.words.is_empty() {
            out.push(done);
        }
        cmd.line = line;
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if word.is_none() && cmd.words.is_empty() {
            cmd.line = line;
        }
        match c {
            '\\' if next == Some('\n') => {
                line += 1;
                i += 2;
                continue;
            }
            '\\' => {
                word.get_or_insert_with(String::new).extend(next);
                i += 2;
                continue;
            }
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                let close = (i + 1..chars.len())
                    .find(|&j| chars[j] == c)
                    .unwrap_or(chars.len());
                let inner: String = chars[i + 1..close].iter().collect();
                line += inner.matches('\n').count();
                w.push_str(&inner);
                i = close + 1;
                continue;
            }
            '$' if next == Some('(') => {
                let mut depth = 0;
                let close = (i + 1..chars.len())
                    .find(|&j| {
                        depth += match chars[j] {
                            '(' => 1,
                            ')' => -1,
                            _ => 0,
                        };
                        depth == 0
                    })
                    .unwrap_or(chars.len() - 1);
                let inner: String = chars[i + 2..close].iter().collect();
                word.get_or_insert_with(String::new)
                    .push_str(&format!("$({inner})"));
                cmd.substituted.push(inner);
                i = close + 1;
                continue;
            }
            '#' if word.is_none() => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            ' ' | '\t' => end_word(&mut cmd, &mut word),
            '\n' => {
                line += 1;
                end_cmd(&mut out, &mut cmd, &mut word, line);
            }
            ';' | ')' => end_cmd(&mut out, &mut cmd, &mut word, line),
            '(' if word.is_none() => end_cmd(&mut out, &mut cmd, &mut word, line),
            '&' | '|' if next == Some(c) => {
                end_cmd(&mut out, &mut cmd, &mut word, line);
                i += 2;
                continue;
            }
            '&' | '|' if word.is_none() => end_cmd(&mut out, &mut cmd, &mut word, line),
            _ => word.get_or_insert_with(String::new).push(c),
        }
        i += 1;
    }
    end_cmd(&mut out, &mut cmd, &mut word, line);
    for cmd in &mut out {
        drop_redirections(&mut cmd.words);
    }
    out
}

/// Drops `> file`, `2>&1` and the like.
pub(crate) fn drop_redirections(words: &mut Vec<String>) {
    let mut kept = Vec::new();
    let mut skip_next = false;
    for w in words.drain(..) {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let redirect = ["2>", ">", "&>", "<"].iter().any(|p| w.starts_with(p))
            && !(w.starts_with('<') && w.ends_with('>') && w.len() > 2);
        if redirect {
            skip_next = matches!(w.as_str(), ">" | ">>" | "2>" | "&>" | "<");
            continue;
        }
        kept.push(w);
    }
    *words = kept;
}
