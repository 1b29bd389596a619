//! The documents read, and the pieces of them that may hold commands.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use crate::re;

/// The documents read, as (path relative to the repository, text).
pub(crate) fn documents(root: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with('.') || name == "target" {
                // Made by a script or a build (bench/proxy/.venv, bench/ceiling/target).
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else {
                if name.ends_with(".md") || name.starts_with("README") {
                    out.push(path);
                }
            }
        }
    }
    let mut paths = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    walk(&root.join("docs"), &mut paths);
    walk(&root.join("bench"), &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            (rel, fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// Where a piece of text comes from, for the messages.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Source {
    Code,
    Prose,
}

/// A text to read commands from, with the doc and line it starts at.
pub(crate) struct Piece {
    pub(crate) at: String,
    pub(crate) text: String,
    pub(crate) source: Source,
}

/// Splits a document into its command-bearing pieces: `sh` blocks (and the `# =`
/// commands in their comments), indented blocks and prose code spans; and the lines
/// of the other fenced blocks (output), which are checked not to be commands.
pub(crate) fn pieces(doc: &str, text: &str) -> (Vec<Piece>, Vec<Piece>) {
    static SPAN: OnceLock<Regex> = OnceLock::new();
    static SAME_AS: OnceLock<Regex> = OnceLock::new();
    let (mut found, mut output) = (Vec::new(), Vec::new());
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    let flush = |paragraph: &mut Vec<(usize, &str)>, found: &mut Vec<Piece>| {
        if let Some(&(first, _)) = paragraph.first() {
            let joined: Vec<&str> = paragraph.iter().map(|&(_, l)| l).collect();
            let joined = joined.join("\n");
            for m in re(&SPAN, r"`([^`]+)`").captures_iter(&joined) {
                let at = first + joined[..m.get(0).unwrap().start()].matches('\n').count();
                found.push(Piece {
                    at: format!("{doc}:{}", at + 1),
                    text: m[1].replace('\n', " "),
                    source: Source::Prose,
                });
            }
        }
        paragraph.clear();
    };
    let block = |start: usize, body: &[&str], found: &mut Vec<Piece>| {
        // `# = COMMAND` comments, continued over `#` lines after a trailing `\`.
        let mut same_as: Option<(usize, String)> = None;
        let mut code = Vec::new();
        for (k, line) in body.iter().enumerate() {
            let cont = same_as.as_ref().is_some_and(|(_, s)| s.ends_with('\\'));
            if let Some(c) = re(&SAME_AS, r"^\s*#\s*=\s*(.*)$").captures(line) {
                same_as = Some((start + k, c[1].to_owned()));
            } else if cont && line.trim_start().starts_with('#') {
                let s = &mut same_as.as_mut().unwrap().1;
                s.push('\n');
                s.push_str(line.trim_start().trim_start_matches('#'));
            } else {
                if let Some((at, text)) = same_as.take() {
                    found.push(Piece {
                        at: format!("{doc}:{}", at + 1),
                        text,
                        source: Source::Code,
                    });
                }
                code.push(*line);
                continue;
            }
            code.push("");
        }
        if let Some((at, text)) = same_as.take() {
            found.push(Piece {
                at: format!("{doc}:{}", at + 1),
                text,
                source: Source::Code,
            });
        }
        found.push(Piece {
            at: format!("{doc}:{}", start + 1),
            text: code.join("\n"),
            source: Source::Code,
        });
    };
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            flush(&mut paragraph, &mut found);
            let fence = &trimmed[..3];
            let info = trimmed[3..].trim();
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim_start().starts_with(fence))
                .unwrap_or(lines.len());
            if matches!(info, "sh" | "bash" | "shell") {
                block(i + 1, &lines[i + 1..end], &mut found);
            } else {
                for (j, l) in lines.iter().enumerate().take(end).skip(i + 1) {
                    output.push(Piece {
                        at: format!("{doc}:{}", j + 1),
                        text: (*l).to_owned(),
                        source: Source::Code,
                    });
                }
            }
            i = end + 1;
            continue;
        }
        let after_blank = i == 0 || lines[i - 1].trim().is_empty();
        if line.starts_with("    ") && !trimmed.is_empty() && after_blank && paragraph.is_empty() {
            let end = (i..lines.len())
                .find(|&j| !(lines[j].starts_with("    ") || lines[j].trim().is_empty()))
                .unwrap_or(lines.len());
            block(i, &lines[i..end], &mut found);
            i = end;
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut paragraph, &mut found);
        } else {
            paragraph.push((i, line));
        }
        i += 1;
    }
    flush(&mut paragraph, &mut found);
    (found, output)
}
