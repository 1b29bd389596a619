//! Each command classified and checked, and the report of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use crate::markdown::Source;
use crate::seda::{Parse, parse_seda};
use crate::shell::split_shell;
use crate::{ALLOWED, NOT_IN_REPO, OTHER_PROGRAMS, SEDA, re};

/// What the checks found.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) checked: BTreeMap<&'static str, usize>,
    pub(crate) skipped: Vec<String>,
    pub(crate) failed: Vec<String>,
    pub(crate) lines: Vec<String>,
}

impl Report {
    pub(crate) fn pass(&mut self, kind: &'static str, at: &str, text: &str) {
        *self.checked.entry(kind).or_default() += 1;
        self.lines.push(format!("{kind:>8}  {at}  {text}"));
    }
    pub(crate) fn skip(&mut self, at: &str, text: &str, why: &str) {
        self.skipped
            .push(format!("{at}  {text}\n        skipped: {why}"));
    }
    pub(crate) fn fail(&mut self, at: &str, text: &str, why: &str) {
        self.failed.push(format!("{at}  {text}\n        {why}"));
    }
}

/// Checks the commands of every document, into its report.
pub(crate) struct Checker {
    root: PathBuf,
    pub(crate) report: Report,
    /// Variable names set by an assignment-only command earlier in a block.
    pub(crate) block_vars: BTreeSet<String>,
    /// The workspace's packages and their folders.
    packages: BTreeMap<String, PathBuf>,
    /// Every `.rs` file of `crates/`, to find who reads an environment variable.
    rust_sources: String,
}

impl Checker {
    pub(crate) fn new(root: PathBuf) -> Checker {
        let mut packages = BTreeMap::new();
        let mut rust_sources = String::new();
        for entry in fs::read_dir(root.join("crates")).unwrap() {
            let dir = entry.unwrap().path();
            let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            let name = manifest
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap()
                .to_owned();
            packages.insert(name, dir.clone());
            collect_rust(&dir, &mut rust_sources);
        }
        Checker {
            root,
            report: Report::default(),
            block_vars: BTreeSet::new(),
            packages,
            rust_sources,
        }
    }

    /// A relative path to a file or folder of the repository, as a program names it.
    fn repo_path(&self, word: &str) -> Option<PathBuf> {
        let top = ["bench/", "scripts/", "fuzz/", "docs/", "crates/", "./"];
        (top.iter().any(|t| word.starts_with(t)) && !word.contains('$'))
            .then(|| self.root.join(word.trim_start_matches("./")))
    }

    /// Checks every simple command of a piece of shell text.
    pub(crate) fn check_text(&mut self, at: &str, text: &str, env: &[String], source: Source) {
        for simple in split_shell(text) {
            let line_at = match at.rsplit_once(':') {
                Some((doc, n)) => format!("{doc}:{}", n.parse::<usize>().unwrap() + simple.line),
                None => at.to_owned(),
            };
            for inner in &simple.substituted {
                self.check_text(&line_at, inner, env, Source::Code);
            }
            self.check_words(&line_at, &simple.words, env.to_vec(), source);
        }
    }

    /// Classifies and checks one simple command.
    fn check_words(&mut self, at: &str, words: &[String], mut env: Vec<String>, source: Source) {
        static ASSIGN: OnceLock<Regex> = OnceLock::new();
        let text = words.join(" ");
        let mut i = 0;
        let is_assignment = |w: &str| re(&ASSIGN, r"^[A-Za-z_][A-Za-z0-9_]*=").is_match(w);
        loop {
            while i < words.len() && is_assignment(&words[i]) {
                env.push(words[i].split('=').next().unwrap().to_owned());
                i += 1;
            }
            let Some(program) = words.get(i).map(String::as_str) else {
                if i > 0 && !is_assignment(&words[i - 1]) {
                    return self
                        .report
                        .fail(at, &text, "a prefix with no command after it");
                }
                self.block_vars.extend(env);
                return self.report.pass("sets", at, &text);
            };
            let rest = &words[i + 1..];
            match program {
                "env" => i += 1,
                "nice" => {
                    i += 1;
                    if words.get(i).is_some_and(|w| w == "-n") {
                        i += 2;
                    } else if words.get(i).is_some_and(|w| w.starts_with('-')) {
                        i += 1;
                    }
                }
                "timeout"
                    if words
                        .get(i + 1)
                        .is_some_and(|w| w.starts_with(|c: char| c.is_ascii_digit())) =>
                {
                    i += 2
                }
                "bash" | "sh" if rest.first().is_some_and(|w| w == "-c") => {
                    let script = rest.get(1).cloned().unwrap_or_default();
                    return self.check_text(at, &script, &env, source);
                }
                "bench/quiet-run" => {
                    if !self.check_script(at, &text, program, &[]) {
                        return;
                    }
                    i += 1;
                    if words.get(i).is_some_and(|w| w == "--") {
                        i += 1;
                    }
                }
                p if SEDA.contains(&p) => return self.check_seda(at, &text, rest, &env, source),
                "cargo" => return self.check_cargo(at, &text, rest, &env, source),
                "COMMAND" | "..." if i > 0 => {
                    return self.report.skip(
                        at,
                        &text,
                        "a placeholder for any command after a prefix",
                    );
                }
                p if NOT_IN_REPO.iter().any(|(n, _)| p.starts_with(n)) => {
                    return self
                        .report
                        .skip(at, &text, "a program a build makes (NOT_IN_REPO)");
                }
                p if p.starts_with('$') => {
                    let name = p.trim_start_matches('$').trim_matches(['{', '}']);
                    return if self.block_vars.contains(name) {
                        self.report.pass("variable", at, &text)
                    } else {
                        self.report
                            .fail(at, &text, &format!("`{p}`: no line before sets {name}"))
                    };
                }
                p if self.repo_path(p).is_some() => {
                    if self.check_script(at, &text, p, &env) {
                        self.check_forwarded(at, &text, p, rest);
                    }
                    return;
                }
                p if OTHER_PROGRAMS.contains(&p) => return self.report.pass("other", at, &text),
                p if ALLOWED.iter().any(|(t, _)| *t == p) => {
                    let why = ALLOWED.iter().find(|(t, _)| *t == p).unwrap().1;
                    return self.report.skip(at, &text, why);
                }
                p => {
                    let why = format!(
                        "`{p}`: not a command this test knows ({}): add it to OTHER_PROGRAMS, \
                         or to ALLOWED with the reason",
                        if source == Source::Code {
                            "code"
                        } else {
                            "prose"
                        }
                    );
                    return self.report.fail(at, &text, &why);
                }
            }
        }
    }

    /// A seda command: its arguments parse (strictly in code, as a name in prose).
    fn check_seda(
        &mut self,
        at: &str,
        text: &str,
        args: &[String],
        env: &[String],
        source: Source,
    ) {
        for var in env {
            if !self.rust_sources.contains(&format!("\"{var}\"")) {
                self.report.fail(at, text, &format!("no crate reads {var}"));
            }
        }
        if args.first().is_some_and(|w| w.ends_with(':')) {
            let why = "seda's own output quoted (`seda WORD: ...`), not a command";
            return self.report.skip(at, text, why);
        }
        let how = if source == Source::Code {
            Parse::Run
        } else {
            Parse::Name
        };
        match parse_seda(args, how) {
            Ok(()) => self.report.pass("seda", at, text),
            Err(e) => self.report.fail(at, text, &e),
        }
    }

    /// A cargo command: the package and the target it names exist.
    fn check_cargo(
        &mut self,
        at: &str,
        text: &str,
        args: &[String],
        env: &[String],
        source: Source,
    ) {
        let flag = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|k| args.get(k + 1))
        };
        if args.first().is_some_and(|a| a == "run") {
            let is_seda = flag("--bin").is_some_and(|b| b == "seda")
                || (flag("-p").is_some_and(|p| p == "seda-cli") && flag("--example").is_none());
            if is_seda {
                let after = args
                    .iter()
                    .position(|a| a == "--")
                    .map_or(&[][..], |k| &args[k + 1..]);
                return self.check_seda(at, text, after, env, source);
            }
        }
        let package = match flag("-p") {
            None => None,
            Some(p) => match self.packages.get(p) {
                Some(dir) => Some(dir.clone()),
                None => {
                    return self
                        .report
                        .fail(at, text, &format!("no workspace package {p}"));
                }
            },
        };
        for (option, folder) in [
            ("--example", "examples"),
            ("--bench", "benches"),
            ("--test", "tests"),
        ] {
            if let Some(target) = flag(option) {
                let Some(dir) = &package else {
                    return self.report.fail(at, text, &format!("{option} without -p"));
                };
                let file = dir.join(folder).join(format!("{target}.rs"));
                let main = dir.join(folder).join(target).join("main.rs");
                if !file.is_file() && !main.is_file() {
                    let why = format!("no {option} {target} in {}", dir.display());
                    return self.report.fail(at, text, &why);
                }
            }
        }
        self.report.pass("cargo", at, text);
    }

    /// A script's arguments, when it hands them to seda: a top-level line of it (not
    /// indented: in a function, `"$@"` is the function's) that runs
    /// `seda experiment NAME ... "$@"` or `seda serve ... "$@"` (the arguments are
    /// parsed after `experiment NAME` or `serve`, as prose: the script gives the
    /// required ones); bench/gnutella/run.sh's first argument picks the experiment
    /// from its lines `WORD) cmd=(experiment NAME ...`. Other scripts' arguments are
    /// their own (not checked).
    fn check_forwarded(&mut self, at: &str, text: &str, program: &str, args: &[String]) {
        static RUNS: OnceLock<Regex> = OnceLock::new();
        static PICKS: OnceLock<Regex> = OnceLock::new();
        let script = fs::read_to_string(self.repo_path(program).unwrap()).unwrap_or_default();
        let script = script.replace("\\\n", " ");
        let runs = r#"(?m)^[^\s#][^\n]*?(?:seda|SEDA_BIN\}?)"?\s+(experiment\s+[a-z0-9-]+|serve)\b[^\n]*"\$@""#;
        let picks = r"(?m)^\s*([a-z0-9]+)\) cmd=\((experiment [a-z0-9-]+)";
        let mut seda: Vec<String>;
        let rest: &[String];
        if let Some(c) = re(&RUNS, runs).captures(&script) {
            seda = c[1].split_whitespace().map(String::from).collect();
            rest = args;
        } else if let Some(c) = args.first().and_then(|first| {
            re(&PICKS, picks)
                .captures_iter(&script)
                .find(|c| c[1] == **first)
        }) {
            seda = c[2].split_whitespace().map(String::from).collect();
            rest = &args[1..];
        } else {
            return self.report.pass("script", at, text);
        }
        seda.extend(rest.iter().cloned());
        match parse_seda(&seda, Parse::Name) {
            Ok(_) => self.report.pass(
                "script",
                at,
                &format!("{text}   (= seda {})", seda.join(" ")),
            ),
            Err(e) => self.report.fail(
                at,
                text,
                &format!("{program} hands its arguments to seda: {e}"),
            ),
        }
    }

    /// A script of the repository: exists, is executable, reads what it is given.
    fn check_script(&mut self, at: &str, text: &str, program: &str, env: &[String]) -> bool {
        let path = self.repo_path(program).unwrap();
        let executable =
            fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !executable {
            self.report.fail(
                at,
                text,
                &format!("{program}: not an executable file of the repository"),
            );
            return false;
        }
        let mut sources = fs::read_to_string(&path).unwrap_or_default();
        static SOURCE: OnceLock<Regex> = OnceLock::new();
        let sourced: Vec<String> = re(&SOURCE, r#"(?m)^\s*(?:\.|source)\s+"?([^"\s]+)"?"#)
            .captures_iter(&sources)
            .map(|c| c[1].to_owned())
            .collect();
        for s in sourced {
            let rel = s.trim_start_matches("$REPO/").trim_start_matches("$HERE/");
            for base in [self.root.clone(), path.parent().unwrap().to_path_buf()] {
                if let Ok(t) = fs::read_to_string(base.join(rel)) {
                    sources.push_str(&t);
                    break;
                }
            }
        }
        let mut ok = true;
        for var in env {
            let reads = [format!("${var}"), format!("${{{var}"), format!("\"{var}\"")];
            let read = reads.iter().any(|r| {
                sources.match_indices(r.as_str()).any(|(k, _)| {
                    let after = sources[k + r.len()..].chars().next();
                    !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                        || r.ends_with('"')
                })
            });
            // The script may hand it on to a binary of the workspace, which reads it.
            if !read && !self.rust_sources.contains(&format!("\"{var}\"")) {
                self.report.fail(
                    at,
                    text,
                    &format!("neither {program} nor a crate reads {var}"),
                );
                ok = false;
            }
        }
        ok
    }

    /// Checks a prose code span: a command if it starts like one (module doc).
    pub(crate) fn check_span(&mut self, at: &str, span: &str) {
        if let Some((_, why)) = ALLOWED.iter().find(|(t, _)| *t == span) {
            return self.report.skip(at, span, why);
        }
        static OUTPUT: OnceLock<Regex> = OnceLock::new();
        if re(&OUTPUT, r"^seda( [a-z-]+)?: ").is_match(span) {
            return self.report.skip(
                at,
                span,
                "seda's own output quoted (`seda WORD: ...`), not a command",
            );
        }
        let simple = split_shell(span);
        let Some(first) = simple.first() else { return };
        let words = &first.words;
        let program = words.iter().find(|w| !w.contains('=')).map(String::as_str);
        let Some(program) = program else { return };
        // One word alone (`seda`, `bench/lib.sh`) is a name, not a command line.
        let next = words
            .iter()
            .skip_while(|w| *w != program)
            .nth(1)
            .map(String::as_str);
        let starts = match (program, next) {
            (_, None) => false,
            ("env", Some(n)) => n.contains('='),
            ("timeout", Some(n)) => n.starts_with(|c: char| c.is_ascii_digit()),
            ("bash" | "sh", Some(n)) => n == "-c",
            (p, _) => {
                SEDA.contains(&p) || matches!(p, "cargo" | "nice") || self.repo_path(p).is_some()
            }
        };
        if starts {
            self.check_text(at, span, &[], Source::Prose);
        }
    }

    /// A fenced block not marked `sh`: a line of it must not be a command.
    pub(crate) fn check_output_line(&mut self, at: &str, line: &str) {
        let simple = split_shell(line);
        let [only] = &simple[..] else { return };
        let words = &only.words;
        let Some(program) = words.first().map(String::as_str) else {
            return;
        };
        let is_command = (SEDA.contains(&program)
            && words.len() > 1
            && parse_seda(&words[1..], Parse::Run).is_ok())
            || self.repo_path(program).is_some_and(|p| p.is_file());
        if is_command {
            self.report.fail(
                at,
                line,
                "a command in a block not marked ```sh: mark the block sh",
            );
        }
    }

    /// Every `bench/`, `scripts/`, `fuzz/`, `crates/` and `docs/` path named exists.
    pub(crate) fn check_paths(&mut self, doc: &str, text: &str) {
        static PATH: OnceLock<Regex> = OnceLock::new();
        let pattern = r"(?:^|[^\w./-])((?:bench|scripts|fuzz|crates|docs)/[\w./@+-]*[\w/])";
        for (n, line) in text.lines().enumerate() {
            for c in re(&PATH, pattern).captures_iter(line) {
                // A capital component is a placeholder (`fuzz/corpus/TARGET`): the
                // path up to it is checked.
                let path = c[1]
                    .split('/')
                    .take_while(|p| {
                        p.is_empty() || p.chars().any(|c| !c.is_ascii_uppercase() && c != '_')
                    })
                    .collect::<Vec<_>>()
                    .join("/");
                let path = path.as_str();
                let at = format!("{doc}:{}", n + 1);
                if let Some((p, why)) = NOT_IN_REPO.iter().find(|(p, _)| path.starts_with(p)) {
                    self.report.skip(&at, path, &format!("{p}: {why}"));
                } else if self.root.join(path).exists() {
                    let full = self.root.join(path);
                    let shebang = fs::read(&full).is_ok_and(|b| b.starts_with(b"#!"));
                    let executable =
                        fs::metadata(&full).is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
                    if shebang && !executable {
                        self.report
                            .fail(&at, path, "a script (#!) that is not executable");
                    } else {
                        self.report.pass("path", &at, path);
                    }
                } else {
                    self.report
                        .fail(&at, path, "no such file or folder in the repository");
                }
            }
        }
    }
}

fn collect_rust(dir: &Path, out: &mut String) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            collect_rust(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&fs::read_to_string(&path).unwrap());
        }
    }
}
