//! The TLS layer above the socket stages, on the backend under test
//! (`SEDA_TEST_IO=epoll|uring`, as the socket suites): a rustls client echoes small
//! and large messages through an application stage that writes with
//! [`TlsWriter`], resumes its session on a second connection, and a peer that sends
//! plain text is closed without the application hearing of it. Certificates are made
//! by openssl in a temporary directory; every wait is bounded.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use seda::{Batch, Context, Runtime};
use seda_io::{
    IoBackend, Outgoing, SocketEvent, TlsConfig, TlsHandle, TlsKeys, TlsSockets, TlsStats,
    TlsWriter,
};

/// A CA and a leaf for `localhost` signed by it (ECDSA P-256), in `dir`.
fn pki(dir: &Path) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(
            "openssl ecparam -name prime256v1 -genkey -noout -out ca.key \
            && openssl req -x509 -new -key ca.key -subj '/CN=seda test CA' -days 2 -out ca.pem \
            && openssl ecparam -name prime256v1 -genkey -noout -out key.pem \
            && openssl req -new -key key.pem -subj /CN=localhost -out leaf.csr \
            && printf 'subjectAltName=DNS:localhost\\n' > ext.cnf \
            && openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
               -days 2 -extfile ext.cnf -out leaf.pem \
            && cat leaf.pem ca.pem > chain.pem",
        )
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the application heard.
#[derive(Default, Debug)]
struct Heard {
    accepted: usize,
    closed: usize,
    bytes: usize,
}

struct Echo {
    _rt: Runtime,
    tls: TlsHandle,
    heard: Arc<Mutex<Heard>>,
}

/// A TLS listener whose application stage echoes every `Data`.
fn echo(dir: &Path) -> Echo {
    let keys = TlsKeys::load(&dir.join("chain.pem"), &dir.join("key.pem")).unwrap();
    let rt = Runtime::builder().build();
    let heard = Arc::new(Mutex::new(Heard::default()));
    let writer: Arc<OnceLock<TlsWriter>> = Arc::default();
    let (h, w) = (Arc::clone(&heard), Arc::clone(&writer));
    let app = rt
        .stage(
            "app",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                let Some(w) = w.get() else { return };
                for ev in batch {
                    match ev {
                        SocketEvent::Accepted { .. } => h.lock().accepted += 1,
                        SocketEvent::Data { conn, bytes, .. } => {
                            h.lock().bytes += bytes.len();
                            if let Some(c) = w.bind(conn) {
                                let _ = c.send(Outgoing::from(bytes));
                            }
                        }
                        SocketEvent::Closed { .. } => h.lock().closed += 1,
                        _ => {}
                    }
                }
            },
        )
        .fixed_threads(2)
        .build()
        .unwrap();
    let backend = support::test_backend();
    let bound = TlsSockets::bind(
        support::test_config()
            .with_listen("127.0.0.1:0".parse().unwrap())
            .with_stage_name("sock-io-tls".to_owned()),
        TlsConfig::default(),
        &keys,
    )
    .unwrap();
    assert!(writer.set(bound.writer()).is_ok());
    let tls = bound.start(&rt, app).unwrap();
    if backend != IoBackend::Auto {
        assert_eq!(tls.backend(), backend, "the backend under test runs");
    }
    rt.start().unwrap();
    Echo {
        _rt: rt,
        tls,
        heard,
    }
}

fn client_config(dir: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

type Client = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>) -> Client {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::clone(cfg), ServerName::try_from("localhost").unwrap())
            .unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Writes `msg` and reads as many bytes back.
fn round_trip(c: &mut Client, msg: &[u8]) -> Vec<u8> {
    c.write_all(msg).unwrap();
    c.flush().unwrap();
    let mut back = vec![0u8; msg.len()];
    c.read_exact(&mut back).unwrap();
    back
}

fn wait_for(what: &str, tls: &TlsHandle, ok: impl Fn(&TlsStats) -> bool) {
    let t0 = Instant::now();
    while !ok(&tls.stats()) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{what}: {:?}",
            tls.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_rustls_client_echoes_through_the_tls_layer_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let e = echo(dir.path());
    let addr = e.tls.local_addr();
    let cfg = client_config(dir.path());

    let mut c = connect(addr, &cfg);
    assert_eq!(round_trip(&mut c, b"hello over tls"), b"hello over tls");
    assert_eq!(c.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    // 1 MiB each way: more than a record, more than the socket buffers.
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    assert!(
        round_trip(&mut c, &big) == big,
        "the echo came back changed"
    );
    c.conn.send_close_notify();
    let _ = c.flush();
    drop(c);

    // The client's session cache: the second connection resumes.
    let mut again = connect(addr, &cfg);
    assert_eq!(round_trip(&mut again, b"again"), b"again");
    assert_eq!(
        again.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    drop(again);

    wait_for("two connections closed", &e.tls, |t| {
        t.handshakes == 2 && t.handshakes_in_progress == 0
    });
    let t = e.tls.stats();
    assert_eq!(t.resumed, 1, "{t:?}");
    let t0 = Instant::now();
    while e.heard.lock().closed < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{:?}",
            e.heard.lock()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let h = e.heard.lock();
    assert_eq!((h.accepted, h.closed), (2, 2), "{h:?}");
    assert_eq!(h.bytes, "hello over tls".len() + big.len() + "again".len());
}

#[test]
fn plain_text_on_the_tls_port_is_closed_unheard() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let e = echo(dir.path());
    let mut s = TcpStream::connect(e.tls.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "an answer in clear: {:?}", &buf[..n]);
    wait_for("counted as not TLS", &e.tls, |t| t.not_tls == 1);
    wait_for("the slot free again", &e.tls, |t| {
        t.handshakes_in_progress == 0
    });
    assert_eq!(e.heard.lock().accepted, 0);
}
