//! `seda serve --access-log`: one line per response with the right fields, reopened
//! by SIGUSR1 after a rename (logrotate), and a full log queue drops lines (counted)
//! instead of slowing requests. The real binary on loopback; every wait is bounded.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use rustix::process::Signal;
use support::{BOUND, Served, http_get};

/// `n` GETs of `path` on one keep-alive connection; their statuses.
fn keep_alive_gets(addr: SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let mut s = TcpStream::connect_timeout(&addr, BOUND).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s.set_nodelay(true).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nUser-Agent: log-test\r\n\r\n");
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for _ in 0..n {
        // One write per request: several small ones would wait on Nagle and the
        // server's delayed ACK.
        s.write_all(req.as_bytes()).unwrap();
        // Read one response: head, then Content-Length bytes.
        let (head_end, len) = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                break (end + 4, len);
            }
            let mut chunk = [0u8; 16 << 10];
            let k = s.read(&mut chunk).expect("read");
            assert!(k > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..k]);
        };
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 16 << 10];
            let k = s.read(&mut chunk).expect("read");
            assert!(k > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..k]);
        }
        out.push(String::from_utf8_lossy(&buf[9..12]).parse().unwrap());
        buf.drain(..head_end + len);
    }
    out
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until the log has written `n` lines (the stats say so).
fn wait_lines(s: &Served, n: u64) {
    s.wait_stats(&format!("{n} log lines"), |st| {
        st["access_log"]["lines"].as_u64() == Some(n)
    });
}

#[test]
fn one_json_line_per_response_with_the_stage_that_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.json");
    // The demo's /hello under a response-time controller pinned at 0.05 req/s with
    // a bucket of one token: the first request passes, the rest are refused by
    // admission (503).
    let conf = dir.path().join("serve.toml");
    std::fs::write(
        &conf,
        "admission = \"response-time\"\nrt-target-ms = 50\n[response-time]\nrate-min = 0.05\nrate-max = 0.05\ninitial-rate = 0.05\nburst-ms = 0\n",
    )
    .unwrap();
    let s = Served::start(&[
        "--config",
        conf.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    let mut sent = Vec::new();
    let (st, _, body) = http_get(s.addr, "/", "Referer: http://ref.example/\r\n");
    sent.push(("/", st, body.len()));
    let (st, _, body) = http_get(s.addr, "/no-such-file", "");
    sent.push(("/no-such-file", st, body.len()));
    for _ in 0..3 {
        let (st, _, body) = http_get(s.addr, "/hello?name=log", "User-Agent: ua/1\r\n");
        sent.push(("/hello?name=log", st, body.len()));
    }
    // A request that does not parse.
    let mut bad = TcpStream::connect_timeout(&s.addr, BOUND).unwrap();
    bad.set_read_timeout(Some(BOUND)).unwrap();
    bad.write_all(b"NOT HTTP\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    let _ = bad.read_to_end(&mut resp);
    assert!(resp.starts_with(b"HTTP/1.1 400"), "{resp:?}");
    wait_lines(&s, sent.len() as u64 + 1);
    let got = lines(&log);
    assert_eq!(got.len(), sent.len() + 1, "{got:#?}");
    let v: Vec<serde_json::Value> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One line per response, in the order they were sent (one client, in turn).
    for (line, (path, status, len)) in v.iter().zip(&sent) {
        assert_eq!(line["uri"], *path, "{line}");
        assert_eq!(line["method"], "GET");
        assert_eq!(line["protocol"], "HTTP/1.1");
        assert_eq!(line["status"], *status, "{line}");
        assert_eq!(line["body_bytes_sent"], *len as u64, "{line}");
        assert_eq!(line["remote_addr"], "127.0.0.1");
        assert!(line["request_time"].as_f64().unwrap() >= 0.0);
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(v[0]["referer"], "http://ref.example/");
    assert_eq!(v[0]["stage"], "static");
    assert_eq!(
        (v[1]["status"].as_u64(), &v[1]["stage"]),
        (Some(404), &"static".into())
    );
    assert_eq!(v[2]["status"], 200);
    assert_eq!(v[2]["stage"], "handler:hello");
    assert_eq!(v[2]["user_agent"], "ua/1");
    for refused in &v[3..5] {
        assert_eq!(refused["status"], 503, "{refused}");
        assert_eq!(refused["stage"], "admission:handler:hello", "{refused}");
    }
    assert_eq!(v[5]["status"], 400);
    assert_eq!(v[5]["stage"], "parse");
    assert_eq!(v[5]["request"], "NOT HTTP");
}

#[test]
fn combined_lines_survive_a_rename_and_sigusr1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = Served::start(&["--access-log", log.to_str().unwrap()]);
    assert!(keep_alive_gets(s.addr, "/", 2).iter().all(|&st| st == 200));
    wait_lines(&s, 2);
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    s.signal(Signal::USR1);
    s.stderr_line("reopening the access log");
    s.wait_stats("the reopen", |st| {
        st["access_log"]["reopens"].as_u64() == Some(1)
    });
    assert!(
        keep_alive_gets(s.addr, "/hello", 3)
            .iter()
            .all(|&st| st == 200)
    );
    wait_lines(&s, 5);
    let old = lines(&rotated);
    let new = lines(&log);
    assert_eq!((old.len(), new.len()), (2, 3), "{old:#?} {new:#?}");
    // nginx's combined, then the request time and the stage.
    let re_ok = |l: &str, path: &str, stage: &str| {
        let fields: Vec<&str> = l.split('"').collect();
        assert!(fields[0].starts_with("127.0.0.1 - - ["), "{l}");
        assert!(fields[0].ends_with("+0000] "), "{l}");
        assert_eq!(fields[1], format!("GET {path} HTTP/1.1"), "{l}");
        let status_len: Vec<&str> = fields[2].split_whitespace().collect();
        assert_eq!(status_len[0], "200", "{l}");
        assert!(status_len[1].parse::<u64>().unwrap() > 0, "{l}");
        assert_eq!((fields[3], fields[5]), ("-", "log-test"), "{l}");
        let tail: Vec<&str> = fields[6].split_whitespace().collect();
        assert!(tail[0].parse::<f64>().is_ok(), "{l}");
        assert_eq!(tail[1], stage, "{l}");
    };
    for l in &old {
        re_ok(l, "/", "static");
    }
    for l in &new {
        re_ok(l, "/hello", "handler:hello");
    }
}

#[test]
fn a_full_log_queue_drops_lines_instead_of_stalling_requests() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    // The log is a pipe that nobody reads: the log stage's writes block once the
    // pipe's 64 KiB are full, then its queue (4 lines) fills.
    let fifo = dir.path().join("access.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o600),
        0,
    )
    .unwrap();
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .unwrap();
    let s = Served::start(&[
        "--access-log",
        fifo.to_str().unwrap(),
        "--access-log-queue",
        "4",
    ]);
    // ~100 bytes a line: 2,000 lines are three pipes full.
    const N: usize = 2000;
    let statuses = keep_alive_gets(s.addr, "/", N);
    assert!(statuses.iter().all(|&st| st == 200));
    let st = s.stats();
    let dropped = st["access_log"]["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "nothing dropped: {}", st["access_log"]);
    let stage = st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "access-log")
        .expect("the access-log stage in the stats");
    assert_eq!(stage["dropped"].as_u64(), Some(dropped), "{stage}");
    // Now read the pipe: every line that was not dropped arrives, whole.
    let mut text = Vec::new();
    let t0 = std::time::Instant::now();
    loop {
        let mut chunk = [0u8; 64 << 10];
        match reader.read(&mut chunk) {
            Ok(k) => text.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
        let written = text.iter().filter(|&&b| b == b'\n').count() as u64;
        if written + dropped == N as u64 {
            break;
        }
        assert!(
            t0.elapsed() < BOUND,
            "{written} lines + {dropped} dropped != {N}"
        );
    }
    let text = String::from_utf8(text).unwrap();
    assert!(text.lines().all(|l| l.contains("\"GET / HTTP/1.1\" 200 ")));
}
