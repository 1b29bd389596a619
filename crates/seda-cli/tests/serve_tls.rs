//! `seda serve --tls-listen` with real clients on loopback: curl over TLS (keep-alive,
//! a file streamed through the encryption), openssl s_client for ALPN and session
//! resumption (TLS 1.3 and 1.2), Python's ssl for the bad inputs (plain HTTP on the
//! TLS port, a truncated ClientHello, an unknown server name, a stalled handshake),
//! the handshake bound, and certificates reloaded by SIGHUP. Certificates are made
//! by openssl in a temporary directory; every wait is bounded.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use support::{BOUND, Served, run_bounded};

/// A CA and a leaf for `localhost` and 127.0.0.1 signed by it (ECDSA P-256).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Pki {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let sh = |script: &str| {
            let out = run_bounded(
                Command::new("sh").arg("-c").arg(script).current_dir(&dir),
                BOUND,
            );
            assert!(
                out.status.success(),
                "{script}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        sh(
            "openssl ecparam -name prime256v1 -genkey -noout -out ca.key \
            && openssl req -x509 -new -key ca.key -subj '/CN=seda test CA' -days 2 -out ca.pem \
            && openssl ecparam -name prime256v1 -genkey -noout -out key.pem \
            && openssl req -new -key key.pem -subj /CN=localhost -out leaf.csr \
            && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf \
            && openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
               -days 2 -extfile ext.cnf -out leaf.pem \
            && cat leaf.pem ca.pem > chain.pem",
        );
        Pki { dir }
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).to_str().unwrap().to_owned()
    }
}

/// Starts `seda serve` with a TLS listener; returns it and the TLS address.
fn serve_tls(pki: &Pki, extra: &[&str]) -> (Served, SocketAddr) {
    let cert = pki.path("chain.pem");
    let key = pki.path("key.pem");
    let mut args = vec![
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    args.extend_from_slice(extra);
    let s = Served::start(&args);
    let line = s
        .stdout
        .recv_timeout(BOUND)
        .expect("a `listening on https` line");
    let addr = line
        .strip_prefix("listening on https://")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .unwrap();
    (s, addr)
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

fn tls_stats(s: &Served) -> serde_json::Value {
    s.stats()["tls"].clone()
}

#[test]
fn curl_over_tls_keeps_the_connection_and_streams_a_file() {
    curl_over_tls("pool");
}

/// The same with the TLS work inline on the socket loops: the application's stages
/// then run on the thread that decrypted (and write to the same connection).
#[test]
fn curl_over_tls_with_the_tls_stage_inline() {
    curl_over_tls("inline");
}

fn curl_over_tls(stage: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "pki");
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("a.txt"), "hello over tls\n").unwrap();
    // Past the page cache's bound: streamed from the file, encrypted a window at a
    // time.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(www.join("big.bin"), &big).unwrap();
    let log = dir.path().join("access.log");
    let (s, addr) = serve_tls(
        &pki,
        &[
            "--root",
            www.to_str().unwrap(),
            "--tls-stage",
            stage,
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "json",
        ],
    );
    let base = format!("https://localhost:{}", addr.port());
    let got = dir.path().join("big.out");
    let (ok, out) = curl(&[
        "--cacert",
        &pki.path("ca.pem"),
        &format!("{base}/a.txt"),
        "-o",
        "-",
        &format!("{base}/big.bin"),
        "-o",
        got.to_str().unwrap(),
        "-w",
        "%{http_code} %{num_connects} %{http_version}\\n",
    ]);
    assert!(ok, "{out}");
    assert!(out.starts_with("hello over tls\n"), "{out}");
    let codes: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(
        codes,
        ["200 1 1.1", "200 0 1.1"],
        "one connection for both: {out}"
    );
    assert!(
        std::fs::read(&got).unwrap() == big,
        "the file came back changed"
    );
    // Plain HTTP still works beside it.
    let (ok, out) = curl(&[&format!("http://{}/a.txt", s.addr)]);
    assert!(ok && out == "hello over tls\n", "{out}");
    let t = tls_stats(&s);
    assert_eq!(t["handshakes"], 1, "{t}");
    assert_eq!(t["handshakes_in_progress"], 0, "{t}");
    // The TLS stage has its own counters in the stage list too.
    let stages = s.stats()["stages"].clone();
    let tls = stages
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "tls")
        .expect("a tls stage");
    assert!(tls["processed"].as_u64().unwrap() > 0, "{tls}");
    // One access-log line per request, TLS or not, with what was sent.
    s.wait_stats("three lines logged", |st| st["access_log"]["lines"] == 3);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(&str, u64, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["uri"].as_str().unwrap(),
                l["status"].as_u64().unwrap(),
                l["body_bytes_sent"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("/a.txt", 200, 15),
            ("/big.bin", 200, 3_000_000),
            ("/a.txt", 200, 15)
        ],
        "{lines:#?}"
    );
    assert!(lines.iter().all(|l| l["stage"] == "static"), "{lines:#?}");
}

/// `openssl s_client` sending one request with `Connection: close` and reading until
/// the server closes (`-ign_eof`); its output. (With stdin closed at once it quits
/// right after the handshake, and a TLS 1.3 session ticket, sent after the
/// handshake, may not have arrived: `-sess_out` then writes no file.)
fn s_client(args: &[&str]) -> String {
    let out = run_bounded(
        Command::new("sh")
            .arg("-c")
            .arg(
                "printf 'GET /hello HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' \
                 | openssl s_client -ign_eof \"$@\"",
            )
            .arg("sh")
            .args(args),
        BOUND,
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn openssl_sees_alpn_http11_and_resumes_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "pki");
    let (s, addr) = serve_tls(&pki, &[]);
    let connect = addr.to_string();
    let ca = pki.path("ca.pem");
    let out = s_client(&["-connect", &connect, "-CAfile", &ca, "-alpn", "h2,http/1.1"]);
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    // A client that speaks only h2 is refused (no_application_protocol).
    let out = s_client(&["-connect", &connect, "-CAfile", &ca, "-alpn", "h2"]);
    assert!(out.contains("no application protocol"), "{out}");
    for (version, name) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
        let sess = dir.path().join(format!("{name}.sess"));
        let sess = sess.to_str().unwrap();
        let first = s_client(&[
            "-connect",
            &connect,
            "-CAfile",
            &ca,
            version,
            "-sess_out",
            sess,
        ]);
        assert!(first.contains(&format!("New, {name}")), "{first}");
        assert!(first.contains("HTTP/1.1 200 OK"), "{first}");
        let again = s_client(&[
            "-connect", &connect, "-CAfile", &ca, version, "-sess_in", sess,
        ]);
        assert!(
            again.contains(&format!("Reused, {name}")),
            "{name}: {again}"
        );
    }
    let t = tls_stats(&s);
    assert!(t["resumed"].as_u64().unwrap() >= 2, "{t}");
    assert!(t["tls13"].as_u64().unwrap() >= 2, "{t}");
}

/// Runs a Python script (its stdout); the script prints one result per line.
fn python(script: &str, args: &[&str]) -> String {
    let out = run_bounded(
        Command::new("python3").arg("-c").arg(script).args(args),
        BOUND,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each bad input, then what the server did: `closed` (end of file, no reply),
/// `reply:<first bytes>`, or the client's TLS error.
const BAD_INPUTS: &str = r#"
import socket, ssl, sys, time
host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def outcome(s):
    s.settimeout(15)
    try:
        data = s.recv(100)
    except (ConnectionResetError, socket.timeout) as e:
        return "error:" + type(e).__name__
    return "closed" if not data else "reply:" + repr(data[:16])

# Plain HTTP to the TLS port.
s = socket.create_connection((host, port))
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
print("plain", outcome(s))

# A real ClientHello, cut short, then end of file.
ctx = ssl.create_default_context(cafile=ca)
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
try:
    obj.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()
s = socket.create_connection((host, port))
s.sendall(hello[:40])
s.shutdown(socket.SHUT_WR)
print("truncated", outcome(s))

# A name the certificate does not cover.
s = socket.create_connection((host, port))
try:
    ctx2 = ssl.create_default_context(cafile=ca)
    ctx2.check_hostname = False
    t = ctx2.wrap_socket(s, server_hostname="evil.example")
    print("sni", "handshake completed")
except ssl.SSLError as e:
    print("sni", "tls-error:" + e.reason)

# A handshake that stalls: half a ClientHello, then nothing.
s = socket.create_connection((host, port))
s.sendall(hello[:40])
t0 = time.time()
print("stall", outcome(s), "after", round(time.time() - t0, 1))

# And a good client still gets in.
s = socket.create_connection((host, port))
t = ctx.wrap_socket(s, server_hostname="localhost")
t.sendall(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
data = b""
while True:
    d = t.recv(4096)
    if not d:
        break
    data += d
print("good", data.split(b"\r\n")[0].decode())
"#;

#[test]
fn bad_inputs_get_clean_closes_and_never_reach_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "pki");
    let (s, addr) = serve_tls(&pki, &["--tls-handshake-timeout", "1"]);
    let out = python(
        BAD_INPUTS,
        &["127.0.0.1", &addr.port().to_string(), &pki.path("ca.pem")],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "plain closed", "{out}");
    assert_eq!(lines[1], "truncated closed", "{out}");
    assert!(lines[2].starts_with("sni tls-error:"), "{out}");
    assert!(lines[3].starts_with("stall closed after"), "{out}");
    assert_eq!(lines[4], "good HTTP/1.1 200 OK", "{out}");
    let st = s.stats();
    let t = &st["tls"];
    assert_eq!(t["not_tls"], 1, "{t}");
    assert!(t["handshake_failures"].as_u64().unwrap() >= 2, "{t}");
    assert_eq!(t["unknown_names"], 1, "{t}");
    assert_eq!(t["handshake_timeouts"], 1, "{t}");
    assert_eq!(t["handshakes"], 1, "{t}");
    // Only the good client reached Haboob.
    assert_eq!(st["haboob"]["connections_accepted"], 1, "{}", st["haboob"]);
}

#[test]
fn handshakes_in_progress_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "pki");
    let (s, addr) = serve_tls(&pki, &["--tls-max-handshakes", "2"]);
    // Two connections that never say a word hold the two handshake slots.
    let _idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    s.wait_stats("two handshakes in progress", |st| {
        st["tls"]["handshakes_in_progress"] == 2
    });
    // A third is closed at once.
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(BOUND)).unwrap();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut third, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the third connection was not closed");
    assert_eq!(s.stats()["tls"]["handshakes_refused"], 1);
    drop(_idle);
    s.wait_stats("slots free again", |st| {
        st["tls"]["handshakes_in_progress"] == 0
    });
    let (ok, out) = curl(&[
        "--cacert",
        &pki.path("ca.pem"),
        &format!("https://localhost:{}/hello", addr.port()),
    ]);
    assert!(ok, "{out}");
}

/// A connection counts against `--max-connections` from its accept: handshakes that
/// never finish fill the TLS listener's cap (below `--tls-max-handshakes`), and the
/// connection past it is closed at once by the socket layer.
#[test]
fn handshakes_count_against_the_connection_cap() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "pki");
    let (s, addr) = serve_tls(&pki, &["--max-connections", "2"]);
    let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    s.wait_stats("two handshakes in progress", |st| {
        st["tls"]["handshakes_in_progress"] == 2
    });
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(BOUND)).unwrap();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut third, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the third connection was not closed");
    let st = s.stats();
    assert_eq!(st["tls_sockets"]["refused"], 1, "{}", st["tls_sockets"]);
    // The TLS layer's own bound was not what refused it.
    assert_eq!(st["tls"]["handshakes_refused"], 0, "{}", st["tls"]);
    drop(idle);
    s.wait_stats("the cap free again", |st| {
        st["tls"]["handshakes_in_progress"] == 0 && st["tls_sockets"]["open"] == 0
    });
    let (ok, out) = curl(&[
        "--cacert",
        &pki.path("ca.pem"),
        &format!("https://localhost:{}/hello", addr.port()),
    ]);
    assert!(ok, "{out}");
}

#[test]
fn certificates_reload_on_sighup_and_a_bad_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let old = Pki::new(dir.path(), "old");
    let new = Pki::new(dir.path(), "new");
    // The server reads its files from a directory of its own.
    let live = Pki {
        dir: dir.path().join("live"),
    };
    std::fs::create_dir(&live.dir).unwrap();
    let install = |p: &Pki| {
        for f in ["chain.pem", "key.pem"] {
            std::fs::copy(p.dir.join(f), live.dir.join(f)).unwrap();
        }
    };
    install(&old);
    let (s, addr) = serve_tls(&live, &[]);
    let url = format!("https://localhost:{}/hello", addr.port());
    let with = |ca: &Pki| curl(&["--cacert", &ca.path("ca.pem"), &url]).0;
    assert!(with(&old) && !with(&new));
    install(&new);
    s.signal(Signal::HUP);
    let line = s.stderr_line("seda serve: reload");
    assert!(line.contains("tls certificates"), "{line}");
    assert!(with(&new) && !with(&old), "the new certificate is served");
    // A key that does not match the certificate: refused, the new one stays.
    std::fs::copy(old.dir.join("key.pem"), live.dir.join("key.pem")).unwrap();
    s.signal(Signal::HUP);
    let line = s.stderr_line("seda serve: reload");
    assert!(
        line.contains("reload refused") && line.contains("does not match"),
        "{line}"
    );
    assert!(with(&new));
    let t0 = Instant::now();
    while tls_stats(&s)["reloads"] != 1 {
        assert!(t0.elapsed() < BOUND, "{}", tls_stats(&s));
        std::thread::sleep(Duration::from_millis(20));
    }
}
