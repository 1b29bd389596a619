//! Unit tests of `seda serve`'s settings: flags over the TOML file, overload
//! settings, one-line errors.

use super::*;

#[test]
fn flags_override_the_config_file() {
    let dir = std::env::temp_dir().join(format!("seda-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:9999\"\ncache-mb = 7\nthread-model = \"shared\"\nidle-timeout = 2.5\nadmin-listen = \"none\"\ndotfiles = \"serve\"\n").unwrap();
    let args = ServeArgs {
        config: Some(file.clone()),
        cache_mb: Some(3),
        ..ServeArgs::default()
    };
    let Settings { cfg, root, .. } = resolve(args).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:9999".parse().unwrap());
    assert_eq!(cfg.cache_bytes, 3 << 20, "the flag wins");
    assert_eq!(cfg.thread_model, ThreadModel::Shared);
    assert_eq!(cfg.idle_timeout, Duration::from_millis(2500));
    assert_eq!(cfg.admin_listen, None);
    assert_eq!(cfg.dotfiles, Dotfiles::Serve);
    assert!(root.is_none());
    std::fs::write(&file, "cache-mbb = 7\n").unwrap();
    let err = resolve(ServeArgs {
        config: Some(file.clone()),
        ..ServeArgs::default()
    })
    .unwrap_err();
    assert!(err.contains("cache-mbb") && !err.contains('\n'), "{err}");
    let err = resolve(ServeArgs {
        header_timeout: Some(-1.0),
        ..ServeArgs::default()
    })
    .unwrap_err();
    assert!(err.contains("header-timeout"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `toml` to a fresh file and resolves it under `args`.
fn with_file(toml: &str, args: ServeArgs) -> Result<Settings, String> {
    let dir = tempfile_dir();
    let file = dir.join("serve.toml");
    std::fs::write(&file, toml).unwrap();
    let r = resolve(ServeArgs {
        config: Some(file),
        ..args
    });
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "seda-serve-overload-{}-{}",
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
        ServeArgs {
            admission: Some(Admission::ResponseTime),
            class_header: Some("X-Class".into()),
            bottleneck_ms: Some(40.0),
            degrade: true,
            ..ServeArgs::default()
        },
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

    let s = with_file("", ServeArgs::default()).unwrap();
    assert_eq!(s.overload.policy_kind("bottleneck"), Admission::None);
    assert_eq!(
        s.overload.on_overload,
        OverloadAction::Reject503 {
            retry_after_secs: 1
        }
    );
    let s = resolve(ServeArgs {
        rt_target_ms: Some(100.0),
        retry_after_secs: Some(3),
        overload_action: Some("reject".into()),
        ..ServeArgs::default()
    })
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
    let args = |ms: Option<f64>, k: Option<u64>| ServeArgs {
        bottleneck_ms: ms,
        bottleneck_passes: k,
        ..ServeArgs::default()
    };
    assert!(
        resolve(args(None, Some(10)))
            .unwrap_err()
            .contains("needs --bottleneck-ms")
    );
    assert!(
        resolve(args(Some(5.0), Some(0)))
            .unwrap_err()
            .contains("at least 1")
    );
    let s = resolve(args(Some(5.0), Some(7))).unwrap();
    let mut cfg = ServerConfig::default();
    let passes = mount_overload(&mut cfg, &s.overload, s.bottleneck, s.bottleneck_passes);
    assert_eq!(passes, Ok(Some(7)));
    assert_eq!(cfg.handlers.len(), 1);
}

#[test]
fn agent_drain_on_refusals_is_checked() {
    let args = |listen: bool, d: f64| ServeArgs {
        agent_listen: listen.then(|| "127.0.0.1:0".parse().unwrap()),
        agent_drain_refused: Some(d),
        ..ServeArgs::default()
    };
    assert!(resolve(args(true, 1.5)).unwrap_err().contains("(0, 1]"));
    assert!(
        resolve(args(false, 0.9))
            .unwrap_err()
            .contains("needs --agent-listen")
    );
    let s = resolve(args(true, 0.9)).unwrap();
    assert_eq!(s.agent_cfg.drain_refused, Some(0.9));
    let s = resolve(ServeArgs::default()).unwrap();
    assert_eq!(
        s.agent_cfg.drain_refused, None,
        "refusals never drain by default"
    );
}

#[test]
fn bad_overload_settings_are_one_line_errors() {
    let cases: [(&str, ServeArgs, &str); 8] = [
        (
            "[response-time]\nadj-d = 0.5\n",
            ServeArgs::default(),
            "adj_d must be above 1",
        ),
        (
            "[classes]\nprefixes = [{ prefix = \"10.0.0.0/33\", class = 1 }]\n",
            ServeArgs::default(),
            "bad address prefix",
        ),
        ("admission = \"bogus\"\n", ServeArgs::default(), "bogus"),
        (
            "",
            ServeArgs {
                overload_action: Some("redirect:".into()),
                ..ServeArgs::default()
            },
            "--overload-action",
        ),
        (
            "",
            ServeArgs {
                rt_target_ms: Some(0.0),
                ..ServeArgs::default()
            },
            "--rt-target-ms",
        ),
        (
            "",
            ServeArgs {
                degrade: true,
                ..ServeArgs::default()
            },
            "--degrade needs --bottleneck-ms",
        ),
        (
            "[[handler]]\nname = \"a\"\n[[handler]]\nname = \"a\"\n",
            ServeArgs::default(),
            "twice",
        ),
        ("[classes]\nheadr = \"X\"\n", ServeArgs::default(), "headr"),
    ];
    for (toml, args, want) in cases {
        let err = with_file(toml, args).unwrap_err();
        assert!(err.contains(want) && !err.contains('\n'), "{want}: {err}");
    }
    // Errors that need the handlers: a policy without its target, an unknown
    // [[handler]].
    for (toml, args, want) in [
        (
            "",
            ServeArgs {
                admission: Some(Admission::Multiclass),
                ..ServeArgs::default()
            },
            "needs a response-time target",
        ),
        (
            "[[handler]]\nname = \"nosuch\"\n",
            ServeArgs::default(),
            "nosuch",
        ),
    ] {
        let s = with_file(toml, args).unwrap();
        let mut cfg = ServerConfig::default();
        cfg.handlers.push(DemoSite::hello_handler());
        let err = mount_overload(&mut cfg, &s.overload, s.bottleneck, None).unwrap_err();
        assert!(err.contains(want) && !err.contains('\n'), "{want}: {err}");
    }
}
