//! Unit tests of `seda serve`'s settings: flags over the TOML file over the defaults, overload
//! settings, one-line errors.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;
use seda::ThreadModel;
use seda_http::proto::Dotfiles;
use seda_http::{Admission, OverloadAction, ServerConfig};

use super::*;

#[derive(clap::Parser)]
struct Argv {
    #[command(flatten)]
    args: ServeArgs,
}

/// `seda serve ARGV...` as clap parses it.
fn parse(argv: &[&str]) -> ServeArgs {
    Argv::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))
        .unwrap()
        .args
}

/// Resolves `seda serve ARGV...`, errors as one string.
fn resolve_argv(argv: &[&str]) -> Result<Settings, String> {
    resolve(&parse(argv)).map_err(|e| e.to_string())
}

#[test]
fn flags_override_the_config_file_over_the_defaults() {
    let dir = tempfile_dir();
    let file = dir.join("serve.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:9999\"\ncache-mb = 7\nthread-model = \"shared\"\nidle-timeout = 2.5\nadmin-listen = \"none\"\ndotfiles = \"serve\"\nheader-cache = false\n").unwrap();
    let f = file.to_str().unwrap();
    let Settings { cfg, root, .. } =
        resolve_argv(&["--config", f, "--cache-mb", "3", "--no-header-cache"]).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:9999".parse().unwrap());
    assert_eq!(cfg.cache_bytes, 3 << 20, "the flag wins");
    assert_eq!(cfg.thread_model, ThreadModel::Shared);
    assert_eq!(cfg.idle_timeout, Duration::from_millis(2500));
    assert_eq!(cfg.admin_listen, None);
    assert_eq!(cfg.dotfiles, Dotfiles::Serve);
    assert!(!cfg.header_cache);
    assert!(root.is_none());
    // Unset anywhere: the library's defaults.
    let d = ServerConfig::default();
    assert_eq!(cfg.send_timeout, d.send_timeout);
    assert_eq!(cfg.max_pipelined, d.max_pipelined);
    let Settings { cfg, .. } = resolve_argv(&[]).unwrap();
    assert_eq!(cfg.listen, d.listen);
    assert_eq!(cfg.cache_bytes, d.cache_bytes);
    assert!(cfg.header_cache);
    assert_eq!(cfg.admin_listen, Some("127.0.0.1:0".parse().unwrap()));
    // A flag over a file value of the wrong type: the file is still refused.
    std::fs::write(&file, "cache-mb = \"lots\"\n").unwrap();
    let err = resolve_argv(&["--config", f, "--cache-mb", "3"]).unwrap_err();
    assert!(err.contains("cache-mb") && !err.contains('\n'), "{err}");
    std::fs::write(&file, "cache-mbb = 7\n").unwrap();
    let err = resolve_argv(&["--config", f]).unwrap_err();
    assert!(err.contains("cache-mbb") && !err.contains('\n'), "{err}");
    assert!(err.contains(f), "the error names the file: {err}");
    std::fs::write(&file, "cache-mb = \n").unwrap();
    let err = resolve_argv(&["--config", f]).unwrap_err();
    assert!(err.contains(f) && !err.contains('\n'), "{err}");
    let err = resolve_argv(&["--config", "/nonexistent/serve.toml"]).unwrap_err();
    assert!(err.contains("/nonexistent/serve.toml"), "{err}");
    let err = resolve_argv(&["--header-timeout=-1"]).unwrap_err();
    assert!(err.contains("header-timeout"), "{err}");
    let err = resolve_argv(&["--idle-timeout", "1e300"]).unwrap_err();
    assert!(err.contains("1e300") && err.len() < 200, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 29.7: `--idle-timeout 1e300` printed a 301-digit number; `1e-300` was taken
/// as a timeout of nothing.
#[test]
fn a_bad_number_is_shown_as_given() {
    for (given, text) in [
        ("1e300", "1e300"),
        ("-1", "-1"),
        ("2e9", "2000000000"),
        ("1e-300", "1e-300"),
    ] {
        let err = resolve_argv(&[&format!("--idle-timeout={given}")]).unwrap_err();
        assert!(err.ends_with(&format!("got {text}")), "{err}");
        assert!(err.len() < 100, "{err}");
    }
    let err = resolve_argv(&["--rt-target-ms", "1e300"]).unwrap_err();
    assert!(err.ends_with("got 1e300"), "{err}");
}

/// Issue 29.7: `--class-header 'bad name'` only warned (and every request was class 0).
#[test]
fn an_invalid_class_header_is_refused_at_start() {
    let err = resolve_argv(&["--class-header", "bad name"]).unwrap_err();
    assert!(
        err.contains("`bad name` is not a valid header name"),
        "{err}"
    );
    let err = with_file("[classes]\ncookie = \"a;b\"\n", &[]).unwrap_err();
    assert!(err.contains("cookie"), "{err}");
    assert!(resolve_argv(&["--class-header", "X-Class"]).is_ok());
}

/// Writes `toml` to a fresh file and resolves it under the flags `argv`.
fn with_file(toml: &str, argv: &[&str]) -> Result<Settings, String> {
    let dir = tempfile_dir();
    let file = dir.join("serve.toml");
    std::fs::write(&file, toml).unwrap();
    let mut all = vec!["--config", file.to_str().unwrap()];
    all.extend_from_slice(argv);
    let r = resolve_argv(&all);
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "seda-serve-config-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn overload_settings_from_flags_and_toml() {
    let toml = r#"
        rt-target-ms = 800
        admission = "codel"
        codel-interval-ms = 50
        overload-action = "redirect:http://elsewhere/busy"
        [classes]
        header = "X-From-File"
        cookie = "class"
        prefixes = [{ prefix = "127.0.0.2/32", class = 1 }, { prefix = "::1/128", class = 2 }]
        [[handler]]
        name = "bottleneck"
        rt-target-ms = 500
        class-targets-ms = [1000, 200]
        [aimd]
        backoff = 0.8
        [response-time]
        nreq = 20
        bucket-depth = 4
    "#;
    let s = with_file(
        toml,
        &[
            "--admission",
            "response-time",
            "--class-header",
            "X-Class",
            "--bottleneck-ms",
            "40",
            "--degrade",
        ],
    )
    .unwrap();
    let oc = &s.overload;
    assert_eq!(s.bottleneck, Some(Duration::from_millis(40)));
    assert_eq!(oc.admission, Some(Admission::ResponseTime), "the flag wins");
    assert_eq!(oc.rt_target, Some(Duration::from_millis(800)));
    assert_eq!(oc.codel.interval, Duration::from_millis(50));
    assert_eq!(oc.classes.header.as_deref(), Some("X-Class"));
    assert_eq!(oc.classes.cookie.as_deref(), Some("class"));
    assert_eq!(oc.classes.prefixes.len(), 2);
    assert_eq!(oc.handlers[0].rt_target, Some(Duration::from_millis(500)));
    assert_eq!(oc.handlers[0].class_targets.len(), 2);
    assert_eq!(oc.aimd.as_ref().map(|a| a.backoff), Some(0.8));
    assert_eq!(
        (oc.response_time.nreq, oc.response_time.bucket_depth),
        (20, 4.0)
    );
    assert_eq!(
        oc.aimd.as_ref().map(|a| a.timeout),
        Some(Duration::from_millis(800)),
        "aimd's timeout defaults to the target"
    );
    assert!(oc.degrade);
    assert_eq!(
        oc.on_overload,
        OverloadAction::Redirect("http://elsewhere/busy".into())
    );
    assert_eq!(
        oc.target_for("bottleneck"),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        oc.policy_for("bottleneck").unwrap().unwrap().name(),
        "multiclass",
        "classes turn response-time into multiclass"
    );

    let s = with_file("", &[]).unwrap();
    assert_eq!(s.overload.policy_kind("bottleneck"), Admission::None);
    assert_eq!(
        s.overload.on_overload,
        OverloadAction::Reject503 {
            retry_after_secs: 1
        }
    );
    let s = resolve_argv(&[
        "--rt-target-ms",
        "100",
        "--retry-after-secs",
        "3",
        "--overload-action",
        "reject",
    ])
    .unwrap();
    assert_eq!(s.overload.policy_kind("bottleneck"), Admission::DelayBudget);
    assert_eq!(
        s.overload.on_overload,
        OverloadAction::Reject503 {
            retry_after_secs: 3
        }
    );
}

#[test]
fn bottleneck_passes_replace_the_calibration() {
    assert!(
        resolve_argv(&["--bottleneck-passes", "10"])
            .unwrap_err()
            .contains("needs bottleneck-ms")
    );
    assert!(
        resolve_argv(&["--bottleneck-ms", "5", "--bottleneck-passes", "0"])
            .unwrap_err()
            .contains("at least 1")
    );
    let s = resolve_argv(&["--bottleneck-ms", "5", "--bottleneck-passes", "7"]).unwrap();
    let mut cfg = ServerConfig::default();
    let passes = mount_overload(&mut cfg, &s.overload, s.bottleneck, s.bottleneck_passes);
    assert_eq!(passes, Ok(Some(7)));
    assert_eq!(cfg.handlers.len(), 1);
}

#[test]
fn agent_drain_on_refusals_is_checked() {
    let listen = ["--agent-listen", "127.0.0.1:0"];
    let with = |l: &[&str], d: &str| {
        let mut v = l.to_vec();
        v.extend_from_slice(&["--agent-drain-refused", d]);
        resolve_argv(&v)
    };
    assert!(with(&listen, "1.5").unwrap_err().contains("(0, 1]"));
    assert!(with(&[], "0.9").unwrap_err().contains("needs agent-listen"));
    let s = with(&listen, "0.9").unwrap();
    assert_eq!(s.agent_cfg.drain_refused, Some(0.9));
    let s = resolve_argv(&[]).unwrap();
    assert_eq!(
        s.agent_cfg.drain_refused, None,
        "refusals never drain by default"
    );
}

#[test]
fn bad_overload_settings_are_one_line_errors() {
    let cases: [(&str, &[&str], &str); 11] = [
        (
            "[response-time]\nadj-d = 0.5\n",
            &[],
            "adj_d must be above 1",
        ),
        (
            "[classes]\nprefixes = [{ prefix = \"10.0.0.0/33\", class = 1 }]\n",
            &[],
            "bad address prefix",
        ),
        ("admission = \"bogus\"\n", &[], "bogus"),
        ("", &["--overload-action", "redirect:"], "overload-action"),
        ("", &["--rt-target-ms", "0"], "rt-target-ms"),
        ("", &["--degrade"], "degrade needs bottleneck-ms"),
        (
            "[[handler]]\nname = \"a\"\n[[handler]]\nname = \"a\"\n",
            &[],
            "twice",
        ),
        ("[classes]\nheadr = \"X\"\n", &[], "headr"),
        // Errors that need the mounted handlers: a policy without its target, a
        // [[handler]] that names none of them.
        (
            "",
            &["--admission", "multiclass"],
            "needs a response-time target",
        ),
        ("[[handler]]\nname = \"nosuch\"\n", &[], "nosuch"),
        (
            "[[handler]]\nname = \"bottleneck\"\n",
            &["--root", "/"],
            "names no mounted handler",
        ),
    ];
    for (toml, args, want) in cases {
        let err = with_file(toml, args).unwrap_err();
        assert!(err.contains(want) && !err.contains('\n'), "{want}: {err}");
    }
}

#[test]
fn check_refuses_a_missing_root() {
    let s = resolve_argv(&["--root", "/nonexistent/www"]).unwrap();
    let err = check(&s).unwrap_err();
    assert!(err.contains("/nonexistent/www"), "{err}");
    let dir = tempfile_dir();
    let s = resolve_argv(&["--root", dir.to_str().unwrap()]).unwrap();
    assert_eq!(check(&s), Ok(()));
    std::fs::remove_dir_all(&dir).unwrap();
}
