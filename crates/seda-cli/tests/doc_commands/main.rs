//! Every command the docs give still runs as written (issue 25: "every figure of
//! `docs/` still reproduces with the moved commands"). Nothing is executed: a `seda`
//! command is parsed with the binary's own clap definition, a script is looked up.
//!
//! **What is read**: `README.md`, `ARCHITECTURE.md`, every `*.md` and `README*` under
//! `docs/` and `bench/` (not in hidden or `target` folders).
//!
//! **Where commands are found**
//! - *Code*: every line of a fenced block marked `sh` and of an indented (4
//!   spaces, after a blank line) block. Lines are split like a shell would: a
//!   trailing `\` and an open quote continue the line, `#` starts a comment, `;`
//!   `&&` `||` ` | ` ` & ` `(` `)` and line ends separate commands, and the
//!   strings of `$(...)` and `bash -c`/`sh -c` are commands too. A comment
//!   `# = COMMAND` ("the same as", continued over `#` lines after a `\`) is a command.
//!   Every command in code must be classified (below) or the test fails. A fenced
//!   block not marked `sh` is output; a line of it that parses as a `seda` command
//!   or runs a script of the repo fails ("mark the block sh").
//! - *Prose*: an inline code span whose first word (after `VAR=value` words) is the
//!   seda binary, `cargo`, `env`, `nice`, `timeout`, `bash`, `sh` or a path in the
//!   repository (`bench/`, `scripts/`, `fuzz/`, `docs/`) with more words after it.
//!   A span that is one path alone is a path.
//! - *Paths*: every `bench/`, `scripts/`, `fuzz/`, `crates/`, `docs/` path named
//!   anywhere (prose, code, links) exists, but those in [`NOT_IN_REPO`].
//!
//! **How a command is classified and checked**
//! - Prefixes are checked and looked through: `VAR=value` words, `env`, `nice [-n N]`,
//!   `timeout SECS`, `bench/quiet-run --` (which must exist and be executable).
//! - *seda*: `seda`, `target/{release,debug}/seda`, `cargo run ... --bin seda --`
//!   or `-p seda-cli --`: the arguments go to `seda_cli::check_command_line`, the
//!   binary's own clap definition and validation. Help, and a command group named
//!   alone (`seda experiment`), pass. `seda WORD: ...` is seda's own output quoted
//!   (its messages start so): skipped, and listed. A `VAR=value` in front of seda
//!   must name a variable some crate reads (`"VAR"` in `crates/**/*.rs`).
//! - *Script*: a relative path in command position exists in the repository and
//!   is executable, and every `VAR=value` given to it (in front, through `env`,
//!   `bench/quiet-run` or an enclosing `sh -c`) is read by it or by a file it
//!   sources (`$VAR`, `${VAR`, or `"VAR"` in Python).
//! - *cargo*: `-p P` names a workspace package; `--example E`, `--bench B`,
//!   `--test T` name a target of it that exists.
//! - `$VAR` as the program: the same block sets `VAR` before.
//! - A program in [`OTHER_PROGRAMS`] (systemctl, gunicorn, ...): counted, not checked.
//! - Anything else fails, unless its text is in [`ALLOWED`], with its reason.
//!
//! **Placeholders** (the convention the docs follow): a word `...` (or a word's end
//! `,...`) is "more of the same" and dropped; `[` `]` around words mark an optional
//! part, checked as given; `a|b|c` (no spaces) is a choice, each alternative checked;
//! a capital word of [`PLACEHOLDERS`] (`DIR`, `N`, `ADDR`, ...) or `<anything>` stands
//! for a value and is replaced by an example value of its kind before parsing.
//!
//! Run it with `cargo test -p seda-cli --test doc_commands -- --nocapture` to see
//! every command checked and every line skipped, with its reason.
mod check;
mod markdown;
mod seda;
mod shell;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use check::Checker;
use markdown::{Source, documents, pieces};
use seda::{Parse, expand_placeholders, parse_seda};
use shell::split_shell;

/// Capital words that stand for a value, and the value put in their place.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("ADDR", "127.0.0.1:9300"),
    ("HOST", "127.0.0.1"),
    ("PORT", "9300"),
    ("UPSTREAM", "127.0.0.1:9000"),
    ("N", "4"),
    ("K", "4455"),
    ("PATH", "bin/gunicorn"),
    ("MS", "100"),
    ("T", "100"),
    ("DIR", "out-dir"),
    ("OUT", "out-dir"),
    ("FILE", "file.toml"),
    ("SRC", "src-dir"),
    ("STAGES", "5"),
    ("MODEL", "shared"),
];

/// Programs that are not the repository's: counted, not checked.
const OTHER_PROGRAMS: &[&str] = &[
    "cd",
    "gunicorn",
    "head",
    "install",
    "kill",
    "pgrep",
    "systemctl",
];

/// What reads like a command and is not one (a prose span as written, or a program
/// in code), and why.
const ALLOWED: &[(&str, &str)] = &[
    (
        "/tmp/proxy_w2.sh",
        "a one-off script of that benchmark window; the lines after it in the block are \
         what it ran, and each of them is checked",
    ),
    (
        "seda <- seda-io <- applications <- seda-load, seda-experiments <- seda-cli",
        "crates and their dependencies",
    ),
    (
        "seda interop sample.txt",
        "the name of a file the gtk-gnutella peer shares",
    ),
    ("seda interop", "the query string the interop test sends"),
];

/// Paths the docs name that a script or a build makes, not kept in the repository.
const NOT_IN_REPO: &[(&str, &str)] = &[
    (
        "bench/proxy/.venv",
        "made by bench/proxy/install.sh (gunicorn from PyPI)",
    ),
    ("fuzz/target", "cargo fuzz's build output"),
    ("fuzz/scratch", "made by fuzz/run.sh"),
    ("fuzz/artifacts", "made by cargo fuzz for a crash"),
];

/// The names of the seda binary in command position.
const SEDA: &[&str] = &[
    "seda",
    "target/release/seda",
    "target/debug/seda",
    "./target/release/seda",
];

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn every_command_in_the_docs_parses_and_every_script_exists() {
    let root = repo();
    let mut checker = Checker::new(root.clone());
    for (doc, text) in documents(&root) {
        checker.check_paths(&doc, &text);
        let (found, output) = pieces(&doc, &text);
        for piece in found {
            checker.block_vars.clear();
            match piece.source {
                Source::Code => checker.check_text(&piece.at, &piece.text, &[], Source::Code),
                Source::Prose => checker.check_span(&piece.at, &piece.text),
            }
        }
        for line in output {
            checker.check_output_line(&line.at, &line.text);
        }
    }
    let r = &checker.report;
    let mut summary = String::new();
    for line in &r.lines {
        writeln!(summary, "{line}").unwrap();
    }
    for s in &r.skipped {
        writeln!(summary, "skip  {s}").unwrap();
    }
    writeln!(
        summary,
        "checked: {:?}; skipped: {}",
        r.checked,
        r.skipped.len()
    )
    .unwrap();
    println!("{summary}");
    assert!(
        r.checked.get("seda").copied().unwrap_or(0) >= 50,
        "fewer seda commands than the docs hold: is the extraction broken?"
    );
    assert!(
        r.failed.is_empty(),
        "{} stale command(s) or path(s) in the docs:\n{}",
        r.failed.len(),
        r.failed.join("\n")
    );
}

/// The extraction itself, on small inputs, so that a broken splitter cannot pass
/// the docs by finding nothing.
#[test]
fn the_shell_splitter_and_the_placeholders() {
    let cmds = split_shell(
        "A=1 bench/x.sh --y 'a b' \\\n  --z # comment\nenv B=2 sh -c 'c; d' && e | f 2>&1 > out\n(cd g && h) &",
    );
    let words: Vec<Vec<&str>> = cmds
        .iter()
        .map(|c| c.words.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        words,
        [
            vec!["A=1", "bench/x.sh", "--y", "a b", "--z"],
            vec!["env", "B=2", "sh", "-c", "c; d"],
            vec!["e"],
            vec!["f"],
            vec!["cd", "g"],
            vec!["h"],
        ]
    );
    assert_eq!(cmds[1].line, 2);
    let x = split_shell("G=$(bench/proxy/install.sh)");
    assert_eq!(x[0].substituted, ["bench/proxy/install.sh"]);

    let args: Vec<String> = "serve --io epoll|uring --agent-listen ADDR ... [--max-connections N]"
        .split(' ')
        .map(String::from)
        .collect();
    let lists = expand_placeholders(&args);
    assert_eq!(lists.len(), 2);
    assert_eq!(
        lists[1].join(" "),
        "serve --io uring --agent-listen 127.0.0.1:9300 --max-connections 4"
    );
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert!(parse_seda(&lists[0], Parse::Run).is_ok());
    assert!(parse_seda(&words("serve --no-such-flag"), Parse::Name).is_err());
    assert!(
        parse_seda(&words("experiment"), Parse::Run).is_ok(),
        "a command group named alone"
    );
    // Prose may name a flag without its value, or a command without its required
    // arguments; code may not, and a bad word after the flag still fails.
    assert!(parse_seda(&words("serve --proxy --rt-target-ms 100"), Parse::Name).is_ok());
    assert!(parse_seda(&words("serve --proxy --rt-target-ms 100"), Parse::Run).is_err());
    assert!(parse_seda(&words("serve --proxy --rt-target-ms x"), Parse::Name).is_err());
    assert!(parse_seda(&words("load arashi"), Parse::Name).is_ok());
    assert!(parse_seda(&words("load arashi"), Parse::Run).is_err());
}

/// Where commands are found in a document (module doc): spans across lines, `sh`
/// blocks with their `# =` comments, indented blocks; other blocks are output.
#[test]
fn the_markdown_pieces() {
    let doc = "Run `seda serve\n--io epoll` or `x`.\n\n```sh\nseda a \\\n  b  # c\n# = seda d \\\n#   e\n```\n\n    f g\n\n```text\nseda h\n```\n";
    let (found, output) = pieces("d.md", doc);
    let got: Vec<(&str, &str)> = found
        .iter()
        .map(|p| (p.at.as_str(), p.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("d.md:1", "seda serve --io epoll"),
            ("d.md:2", "x"),
            ("d.md:7", "seda d \\\n   e"),
            ("d.md:5", "seda a \\\n  b  # c\n\n"),
            ("d.md:11", "    f g\n"),
        ]
    );
    assert_eq!(output.len(), 1);
    assert_eq!(
        (output[0].at.as_str(), output[0].text.as_str()),
        ("d.md:14", "seda h")
    );
}
