//! `seda arashi import` on the real binary (issue 29.8: no test ran a successful
//! import, nor `--replace`): a corpus laid out as the npm package of the SpamAssassin
//! corpus ships it, read from its directory and from its tarball.
//!
//! Every child runs bounded ([`support::run_bounded`]).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use seda_arashi::store::{FolderRole, ListQuery, MailStore, SqliteStore};

const BOUND: Duration = Duration::from_secs(120);

/// `package/data/<group>/<id>.<md5>.json` files, each `{"text": RAW MESSAGE}`, with
/// subjects `TAG 0`, `TAG 1`, ...
fn corpus(dir: &Path, tag: &str, n: usize) {
    for (group, range) in [("easy_ham", 0..n / 2), ("spam", n / 2..n)] {
        let d = dir.join("package/data").join(group);
        std::fs::create_dir_all(&d).unwrap();
        for i in range {
            let text = format!(
                "From: Sender {i} <s{i}@example.org>\r\nTo: user@example.org\r\n\
                 Subject: {tag} {i}\r\nDate: Thu, 01 Aug 2002 10:00:{:02} +0000\r\n\
                 Message-ID: <{tag}.{i}@example.org>\r\n\r\nBody of {tag} message {i}.\r\n",
                i % 60
            );
            let json = serde_json::json!({ "text": text }).to_string();
            std::fs::write(d.join(format!("{i:05}.{:032x}.json", i)), json).unwrap();
        }
    }
}

fn import(corpus: &Path, data: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = support::run_bounded(
        Command::new(env!("CARGO_BIN_EXE_seda"))
            .args(["arashi", "import", "--corpus"])
            .arg(corpus)
            .arg("--data")
            .arg(data)
            .args(["--seed-users", "3", "--largest-folder", "4"])
            .args(extra),
        BOUND,
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The subjects in user1's Inbox.
fn inbox_subjects(data: &Path) -> Vec<String> {
    let store = SqliteStore::open(&data.join("arashi.db")).expect("the database opens");
    let user = store
        .authenticate("user1", "user1-pw")
        .unwrap()
        .expect("user1 was seeded");
    let inbox = store.folder_of_role(user.id, FolderRole::Inbox).unwrap();
    store
        .list(user.id, inbox, &ListQuery::default())
        .unwrap()
        .messages
        .into_iter()
        .map(|m| m.subject)
        .collect()
}

#[test]
fn import_seeds_real_mail_and_replace_seeds_it_anew() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, data) = (
        dir.path().join("first"),
        dir.path().join("second"),
        dir.path().join("data"),
    );
    corpus(&first, "alpha", 10);
    corpus(&second, "beta", 12);

    let (code, stdout, stderr) = import(&first, &data, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("imported: 3 users, ") && stdout.contains("arashi.db"),
        "{stdout}"
    );
    assert!(stderr.contains("parsed 10 messages"), "{stderr}");
    let subjects = inbox_subjects(&data);
    assert!(!subjects.is_empty(), "user1's Inbox is empty");
    assert!(
        subjects.iter().all(|s| s.starts_with("alpha ")),
        "{subjects:?}"
    );

    // A seeded directory is not overwritten by accident.
    let (code, _, stderr) = import(&second, &data, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("exists already (use --replace"), "{stderr}");
    assert!(
        inbox_subjects(&data)
            .iter()
            .all(|s| s.starts_with("alpha "))
    );

    // --replace seeds it anew, here from the tarball `npm pack` gives.
    let tgz = dir.path().join("second.tgz");
    let tar = support::run_bounded(
        Command::new("tar")
            .arg("czf")
            .arg(&tgz)
            .arg("-C")
            .arg(&second)
            .arg("package"),
        BOUND,
    );
    assert!(tar.status.success(), "tar: {:?}", tar);
    let (code, stdout, stderr) = import(&tgz, &data, &["--replace"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("imported: 3 users, "), "{stdout}");
    assert!(stderr.contains("parsed 12 messages"), "{stderr}");
    let subjects = inbox_subjects(&data);
    assert!(
        !subjects.is_empty() && subjects.iter().all(|s| s.starts_with("beta ")),
        "{subjects:?}"
    );
    assert!(
        !data.join("arashi.db.partial").exists(),
        "no partial database left behind"
    );
}
