//! The files of `docs/deploy/` as an operator copies them: the sample `serve.toml`
//! (its system paths pointed at a temporary directory) passes `--check` and serves
//! HTTP, HTTPS and the access log, and `--check` refuses its `max-connections`
//! under an open-files limit too low for it (as the start does); the systemd unit passes `systemd-analyze verify`;
//! the logrotate stanza rotates the log and its `postrotate` signal (SIGUSR1 here,
//! `systemctl kill` in the file) makes the server write to the new file.
//!
//! `systemd-analyze` and `logrotate` are peers ([`support::peer`]): skipped when
//! missing, a failure under `SEDA_REQUIRE_PEERS=1` (CI installs them).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{BOUND, Served, peer, run_bounded};

fn deploy(file: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/deploy")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `text` with each `(from, to)` replaced; every `from` must be there (the test
/// follows the file: a path renamed there must be renamed here).
fn rewrite(mut text: String, subs: &[(&str, &str)]) -> String {
    for (from, to) in subs {
        assert!(text.contains(from), "{from:?} is not in the file any more");
        text = text.replace(from, to);
    }
    text
}

/// A self-signed certificate for `localhost` (ECDSA P-256): `chain.pem`, `key.pem`.
fn self_signed(dir: &Path) {
    let out = run_bounded(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
            ])
            .args(["-keyout", "key.pem", "-out", "chain.pem"])
            .current_dir(dir),
        BOUND,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn curl(args: &[&str]) -> (bool, String) {
    let out = run_bounded(
        Command::new("curl")
            .args(["-sS", "--max-time", "20"])
            .args(args),
        BOUND,
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Lines of the access log (wait for them through the stats first).
fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

struct Site {
    _dir: tempfile::TempDir,
    conf: PathBuf,
    log: PathBuf,
    tls: PathBuf,
}

/// `max-connections` of the sample: 20,000 on each of its two listeners, which the
/// unit's `LimitNOFILE=65536` holds (checked below); a test process may have a
/// lower hard limit (20,000 on the test machine), so the sites served here take
/// fewer.
const SAMPLE_MAX_CONNECTIONS: &str = "max-connections = 20000";

/// `docs/deploy/serve.toml` with its system paths and ports moved into a temporary
/// directory and onto loopback, and `max_connections` of its own.
fn site() -> Site {
    site_with(&[(SAMPLE_MAX_CONNECTIONS, "max-connections = 2000")])
}

fn site_with(extra: &[(&str, &str)]) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tls = d.join("tls");
    let www = d.join("www");
    std::fs::create_dir_all(&tls).unwrap();
    std::fs::create_dir_all(&www).unwrap();
    self_signed(&tls);
    std::fs::write(www.join("index.html"), "deployed\n").unwrap();
    let log = d.join("access.log");
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let (chain, key, www_s, log_s) = (
        s(&tls.join("chain.pem")),
        s(&tls.join("key.pem")),
        s(&www),
        s(&log),
    );
    let mut subs = vec![
        ("\"0.0.0.0:80\"", "\"127.0.0.1:0\""),
        ("\"0.0.0.0:443\"", "\"127.0.0.1:0\""),
        ("\"127.0.0.1:9090\"", "\"127.0.0.1:0\""),
        ("/etc/seda/tls/fullchain.pem", &chain),
        ("/etc/seda/tls/privkey.pem", &key),
        ("/srv/www", &www_s),
        ("/var/log/seda/access.log", &log_s),
    ];
    subs.extend_from_slice(extra);
    let text = rewrite(deploy("serve.toml"), &subs);
    let conf = d.join("serve.toml");
    std::fs::write(&conf, text).unwrap();
    Site {
        _dir: dir,
        conf,
        log,
        tls,
    }
}

fn check(conf: &Path) -> std::process::Output {
    run_bounded(
        Command::new(env!("CARGO_BIN_EXE_seda"))
            .args(["serve", "--config"])
            .arg(conf)
            .arg("--check"),
        BOUND,
    )
}

/// Open files the sample's 20,000 connections on each of two listeners need at
/// most (the server's own descriptors and reserve are well under 1,000).
const SAMPLE_NOFILE: u64 = 2 * 20_000 + 1_000;

/// `--check` makes the open-files check the start makes: the sample's 20,000
/// connections per listener pass where the limit holds them (the unit's
/// `LimitNOFILE`) and are refused, with the figures, where it does not (it passed
/// `--check` and then failed to start).
#[test]
fn check_refuses_what_the_open_files_limit_cannot_hold() {
    let site = site_with(&[]);
    let out = check(&site.conf);
    let err = String::from_utf8_lossy(&out.stderr);
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX);
    if hard >= SAMPLE_NOFILE {
        assert!(out.status.success(), "{err}");
    } else {
        assert!(
            !out.status.success(),
            "--check passed under a limit of {hard}"
        );
        assert!(
            err.contains("max_connections 20000 on each of 2 listeners needs more open files")
                && err.contains("raise `ulimit -n`"),
            "{err}"
        );
    }
}

#[test]
fn the_sample_configuration_checks_and_serves_http_https_and_the_log() {
    let site = site();
    let out = check(&site.conf);
    assert!(
        out.status.success(),
        "--check refused the sample: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = site.conf.to_str().unwrap();
    let s = Served::start(&["--config", conf]);
    let https: std::net::SocketAddr = s
        .stdout
        .recv_timeout(BOUND)
        .expect("a `listening on https` line")
        .strip_prefix("listening on https://")
        .expect("the sample has a TLS listener")
        .parse()
        .unwrap();
    let (status, _, body) = support::http_get(s.addr, "/index.html", "");
    assert_eq!((status, &body[..]), (200, &b"deployed\n"[..]));
    let ca = site.tls.join("chain.pem");
    let (ok, out) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        &format!("https://localhost:{}/index.html", https.port()),
    ]);
    assert!(ok && out == "deployed\n", "{out}");
    s.wait_stats("two log lines", |st| st["access_log"]["lines"] == 2);
    let got = lines(&site.log);
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(
        got.iter()
            .all(|l| l.contains("\"GET /index.html HTTP/1.1\" 200 9 ")),
        "combined format: {got:#?}"
    );
}

#[test]
fn the_systemd_unit_verifies() {
    let Some(analyze) = peer("systemd-analyze") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("seda.service");
    // The unit runs /usr/local/bin/seda: here, the binary under test.
    let text = rewrite(
        deploy("seda.service"),
        &[("/usr/local/bin/seda", env!("CARGO_BIN_EXE_seda"))],
    );
    // The unit's open-files limit holds the sample's connections.
    let nofile: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("LimitNOFILE in the unit")
        .parse()
        .unwrap();
    assert!(nofile >= SAMPLE_NOFILE, "LimitNOFILE={nofile}");
    assert!(deploy("serve.toml").contains(SAMPLE_MAX_CONNECTIONS));
    for key in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "ExecReload=/bin/kill -HUP $MAINPID",
        " --check",
    ] {
        assert!(text.contains(key), "the unit lost {key:?}");
    }
    std::fs::write(&unit, text).unwrap();
    let out = run_bounded(
        Command::new(analyze)
            .args(["verify", "--man=no"])
            .arg(&unit),
        BOUND,
    );
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "systemd-analyze verify: {said}");
    // Nothing to say about the unit itself (systemd may talk about other units).
    assert!(!said.contains("seda.service"), "{said}");
}

#[test]
fn the_logrotate_stanza_rotates_and_the_server_reopens() {
    let Some(logrotate) = peer("logrotate") else {
        return;
    };
    let site = site();
    let s = Served::start(&["--config", site.conf.to_str().unwrap()]);
    let _https = s.stdout.recv_timeout(BOUND).expect("the https line");
    assert_eq!(support::http_get(s.addr, "/index.html", "").0, 200);
    s.wait_stats("a log line", |st| st["access_log"]["lines"] == 1);
    // The stanza as shipped, with the server's pid for `systemctl kill`.
    let conf = site.conf.with_file_name("logrotate.conf");
    let text = rewrite(
        deploy("seda.logrotate"),
        &[
            ("/var/log/seda/access.log", site.log.to_str().unwrap()),
            (
                "systemctl kill --kill-whom=main --signal=SIGUSR1 seda.service",
                &format!("kill -USR1 {}", s.child.0.id()),
            ),
        ],
    );
    std::fs::write(&conf, text).unwrap();
    let state = site.conf.with_file_name("logrotate.state");
    let out = run_bounded(
        Command::new(logrotate)
            .arg("--force")
            .arg("--state")
            .arg(&state)
            .arg(&conf),
        BOUND,
    );
    assert!(
        out.status.success(),
        "logrotate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.wait_stats("the reopen", |st| st["access_log"]["reopens"] == 1);
    assert_eq!(support::http_get(s.addr, "/index.html", "").0, 200);
    s.wait_stats("two log lines", |st| st["access_log"]["lines"] == 2);
    // delaycompress: the first rotation is kept as it is, beside the new file.
    let rotated = site.log.with_extension("log.1");
    assert_eq!(
        (lines(&rotated).len(), lines(&site.log).len()),
        (1, 1),
        "one line before the rotation, one after"
    );
}
