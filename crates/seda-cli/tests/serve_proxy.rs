//! `seda serve --proxy` and `[[route]]` (issue 26) on the real binary: a request goes
//! through to a backend, the route is a stage with the server's admission control,
//! and bad routes are one-line errors.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use support::{Served, http_get};

const SEDA: &str = env!("CARGO_BIN_EXE_seda");

/// A backend answering every request with `200 upstream <path>` on one thread.
fn backend() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                        let body = format!("upstream {path}");
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_proxy_flag_puts_a_route_with_admission_in_front_of_a_backend() {
    let up = backend();
    let served = Served::start(&[
        "--proxy",
        &format!("/api=http://{up}"),
        "--rt-target-ms",
        "200",
    ]);
    let (status, head, body) = http_get(served.addr, "/api/users", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, b"upstream /api/users");
    assert!(head.contains("Via: 1.1 seda"), "{head}");
    // The demo site is still served beside the route.
    assert_eq!(http_get(served.addr, "/hello?name=x", "").0, 200);
    let stats = served.stats();
    let stage = stats["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "proxy:api")
        .expect("a proxy:api stage");
    assert_eq!(stage["admission"]["policy"], "delay-budget");
    assert_eq!(stage["admission"]["target_ms"], 200.0);
    assert_eq!(stats["proxy"]["routes"][0]["responses"], 1);
    served.stderr_line(&format!("proxy /api -> http://{up}"));
}

#[test]
fn route_tables_set_each_route_and_bad_routes_are_one_line_errors() {
    let up = backend();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("serve.toml");
    std::fs::write(
        &cfg,
        format!(
            "proxy-timeout-ms = 2000\n[[route]]\nprefix = \"/a\"\nupstreams = [\"http://{up}/v1\"]\nrt-target-ms = 300\nclass-header = \"X-Class\"\nmax-body-kb = 64\ntimeout-ms = 1000\n[[route]]\nprefix = \"/b\"\nupstreams = [\"http://{up}\"]\n"
        ),
    )
    .unwrap();
    let served = Served::start(&["--config", cfg.to_str().unwrap()]);
    let (status, _, body) = http_get(served.addr, "/a/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"upstream /v1/x"[..]));
    let (status, _, body) = http_get(served.addr, "/b/y", "");
    assert_eq!((status, body.as_slice()), (200, &b"upstream /b/y"[..]));
    let stats = served.stats();
    let target = |name: &str| {
        stats["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["admission"]["target_ms"].clone())
    };
    assert_eq!(target("proxy:a"), Some(serde_json::json!(300.0)));
    assert_eq!(
        target("proxy:b"),
        Some(serde_json::Value::Null),
        "no target: none"
    );
    drop(served);
    let dup = dir.path().join("dup.toml");
    std::fs::write(
        &dup,
        format!("[[route]]\nprefix = \"/a\"\nupstreams = [\"http://{up}\"]\n[[route]]\nprefix = \"/a/\"\nupstreams = [\"http://{up}\"]\n"),
    )
    .unwrap();
    for (args, want) in [
        (vec!["serve", "--proxy", "/api"], "PREFIX=URL"),
        (vec!["serve", "--proxy", "/api=https://x:1"], "https"),
        (
            vec![
                "serve",
                "--proxy",
                "/api=http://127.0.0.1:1",
                "--proxy-timeout-ms",
                "0",
            ],
            "proxy-timeout-ms",
        ),
        (
            vec!["serve", "--config", dup.to_str().unwrap()],
            "two proxy routes at /a",
        ),
    ] {
        let out = support::run_bounded(Command::new(SEDA).args(&args), Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(c) if c != 0), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
