//! A seda command's arguments, placeholders replaced, parsed by the binary's clap
//! definition.

use std::sync::OnceLock;

use clap::error::{ContextKind, ErrorKind};
use regex::Regex;

use crate::{PLACEHOLDERS, re};

/// Applies the placeholder convention to a seda command's arguments: the argument
/// lists to parse (more than one when a word offers a choice `a|b`).
pub(crate) fn expand_placeholders(args: &[String]) -> Vec<Vec<String>> {
    static ANGLE: OnceLock<Regex> = OnceLock::new();
    let mut lists = vec![Vec::new()];
    for arg in args {
        let mut a = arg.trim_end_matches(",...").to_owned();
        if a == "..." || a == "…" || a.is_empty() {
            continue;
        }
        if a.starts_with('[') && !a[1..].trim_end_matches(']').contains(']') {
            a.remove(0);
        }
        if !a.contains('[') {
            a = a.trim_end_matches(']').to_owned();
        }
        let a = re(&ANGLE, r"<([^<>]+)>").replace_all(&a, |c: &regex::Captures<'_>| {
            let name = c[1].to_uppercase();
            PLACEHOLDERS
                .iter()
                .find(|(k, _)| *k == name)
                .map_or("x", |(_, v)| v)
                .to_owned()
        });
        let a = replace_placeholder_words(&a);
        let choices: Vec<&str> = if a.contains("://") {
            vec![&a]
        } else {
            a.split('|').collect()
        };
        lists = lists
            .into_iter()
            .flat_map(|l| {
                choices.iter().map(move |c| {
                    let mut l = l.clone();
                    l.push((*c).to_owned());
                    l
                })
            })
            .collect();
    }
    lists
}

/// Replaces each run of `[A-Za-z0-9_-]` that is a name of [`PLACEHOLDERS`].
pub(crate) fn replace_placeholder_words(arg: &str) -> String {
    let (mut out, mut run) = (String::new(), String::new());
    for c in arg.chars().map(Some).chain([None]) {
        if let Some(c) = c.filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-') {
            run.push(c);
            continue;
        }
        let value = PLACEHOLDERS
            .iter()
            .find(|(k, _)| *k == run)
            .map(|(_, v)| *v);
        out.push_str(value.unwrap_or(&run));
        run.clear();
        out.extend(c);
    }
    out
}

/// How strictly a seda command is parsed.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Parse {
    /// Code: a command line to run as written.
    Run,
    /// Prose names a command or a flag: it may leave out required arguments (clap
    /// checks every word given before it says so) or a flag's value (the flag is
    /// dropped and the rest parsed again).
    Name,
}

/// Parses a seda command's arguments with the binary's clap definition.
pub(crate) fn parse_seda(args: &[String], how: Parse) -> Result<(), String> {
    for mut list in expand_placeholders(args) {
        let argv = std::iter::once("seda".to_owned()).chain(list.iter().cloned());
        match seda_cli::check_command_line(argv) {
            Ok(()) => {}
            Err(e) if how == Parse::Name && e.kind() == ErrorKind::MissingRequiredArgument => {}
            Err(e) if how == Parse::Name && e.to_string().contains("but none was supplied") => {
                let flag = e
                    .get(ContextKind::InvalidArg)
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                let flag = flag.split([' ', '=']).next().unwrap_or_default().to_owned();
                let at = list
                    .iter()
                    .rposition(|w| *w == flag)
                    .ok_or_else(|| e.to_string())?;
                list.remove(at);
                parse_seda(&list, how)?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        | ErrorKind::MissingSubcommand
                ) => {}
            Err(e) => {
                let first = e.render().to_string();
                let first = first.lines().next().unwrap_or_default().to_owned();
                return Err(format!("`seda {}`: {first}", list.join(" ")));
            }
        }
    }
    Ok(())
}
