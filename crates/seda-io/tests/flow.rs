//! Flow control of the socket stages: reading paused by the application or by a
//! backed-up outgoing queue, the send timeout, and the refusal at `max_connections`.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use seda_io::{BacklogAction, CloseReason, ConnId};
use support::*;

fn only_conn(e: &Echo) -> ConnId {
    assert!(wait_for(Duration::from_secs(5), || e.log.snapshot().len() == 1));
    *e.log.snapshot().keys().next().unwrap()
}

fn bytes_seen(e: &Echo, conn: ConnId) -> usize {
    e.log.snapshot().get(&conn).map_or(0, |s| s.bytes)
}

/// Waits until the (only) event loop has taken a turn after every byte written so
/// far arrived: a fresh connection's round trip. Loopback delivers a write before
/// `write` returns, so the readiness of those bytes came to the loop no later than
/// the probe's; a read the loop would make of them happens before the probe's
/// answer (the application stage takes events in order). What is still unread
/// then was not read on purpose.
fn loop_has_turned(e: &Echo) {
    let mut probe = connect(e.sockets.local_addr());
    assert_eq!(roundtrip(&mut probe, b"probe"), b"probe");
}

#[test]
fn a_backed_up_connection_is_not_read_until_it_drains_and_is_never_cut() {
    let cfg = test_config()
        .with_write_threshold(256 * 1024)
        .with_on_backlog(BacklogAction::Pause)
        .with_send_buffer(Some(32 * 1024))
        // One loop, so that `loop_has_turned` sees the turn after "ping" arrived.
        .with_event_loops(1);
    let e = echo(cfg, 4096, Duration::ZERO);
    let mut c = connect(e.sockets.local_addr());
    // 4 MiB of output for a client that reads nothing for now.
    c.write_all(b"FLOOD 64").unwrap();
    let conn = only_conn(&e);
    assert!(wait_for(Duration::from_secs(5), || e
        .sockets
        .stats()
        .backlog_pauses
        >= 1));
    let before = bytes_seen(&e, conn);
    c.write_all(b"ping").unwrap();
    loop_has_turned(&e);
    assert_eq!(
        bytes_seen(&e, conn),
        before,
        "a connection whose output is backed up must not be read"
    );
    // Read the flood; the connection is then read again and "ping" comes back.
    let mut got = vec![0u8; 64 * 64 * 1024 + 4];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got[got.len() - 4..], b"ping");
    let seen = e.log.snapshot()[&conn].clone();
    assert_eq!(seen.flood_result, None, "no send failed");
    assert!(seen.closed.is_empty(), "the connection was cut");
    assert_eq!(e.sockets.stats().backlog_closes, 0);
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn the_send_timeout_cuts_a_peer_that_takes_nothing_but_not_a_slow_reader() {
    let cfg = test_config()
        .with_write_threshold(64 << 20)
        .with_send_timeout(Some(Duration::from_millis(800)))
        .with_send_buffer(Some(32 * 1024));
    let e = echo(cfg, 4096, Duration::ZERO);
    let addr = e.sockets.local_addr();
    let mut stuck = connect(addr);
    stuck.write_all(b"FLOOD 32").unwrap();
    let mut slow = connect(addr);
    slow.write_all(b"FLOOD 96").unwrap();
    // The slow reader takes 16 KiB every 20 ms (about 0.8 MB/s) for 3 s, less than
    // the 6 MiB flood.
    slow.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        let mut total = 0;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            match slow.read(&mut buf) {
                Ok(0) => return (total, false),
                Ok(n) => total += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return (total, false),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (total, true)
    });
    assert!(
        wait_for(Duration::from_secs(5), || e.log.snapshot().values().any(
            |s| s.closed == vec![CloseReason::Error(std::io::ErrorKind::TimedOut)]
        )),
        "the stuck peer was not cut"
    );
    let (read, open) = reader.join().unwrap();
    assert!(open, "the slow reader was cut after {read} bytes");
    assert_eq!(e.sockets.stats().send_timeouts, 1);
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn the_application_pauses_and_resumes_reading() {
    let cfg = test_config().with_event_loops(1);
    let e = echo(cfg, 4096, Duration::ZERO);
    let mut c = connect(e.sockets.local_addr());
    assert_eq!(roundtrip(&mut c, b"one"), b"one");
    let conn = only_conn(&e);
    let w = e.sockets.writer();
    w.pause_reading(conn);
    c.write_all(b"two").unwrap();
    loop_has_turned(&e);
    assert_eq!(bytes_seen(&e, conn), 3, "read while paused");
    w.resume_reading(conn);
    let mut back = [0u8; 3];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"two");
    assert!(wait_for(Duration::from_secs(5), || e.log.snapshot()[&conn]
        .resumed
        == 1));
    // Resuming what is not paused is a no-op: no second `Resumed`.
    w.resume_reading(conn);
    assert_eq!(roundtrip(&mut c, b"three"), b"three");
    assert_eq!(e.log.snapshot()[&conn].resumed, 1);
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn a_connection_over_the_limit_gets_the_refusal_then_eof() {
    let cfg = test_config()
        .with_max_connections(1)
        .with_refusal(Some(bytes::Bytes::from_static(b"busy\n")));
    let e = echo(cfg, 4096, Duration::ZERO);
    let addr = e.sockets.local_addr();
    let mut first = connect(addr);
    assert_eq!(roundtrip(&mut first, b"hi"), b"hi");
    let mut second = TcpStream::connect(addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let _ = second.read_to_end(&mut got);
    assert_eq!(got, b"busy\n");
    assert_eq!(e.sockets.stats().refused, 1);
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn loops_in_a_domain_hand_events_to_the_app_inline() {
    use seda::{Batch, Context, Runtime};
    use seda_io::{Outgoing, SocketEvent, Sockets};
    use std::sync::{Arc, OnceLock};

    let rt = Runtime::builder().build();
    let domain = rt.domain("io");
    let writer: Arc<OnceLock<seda_io::Writer>> = Arc::default();
    let w = Arc::clone(&writer);
    let app = rt
        .stage(
            "app",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                for ev in batch {
                    if let (SocketEvent::Data { conn, bytes, .. }, Some(w)) = (ev, w.get()) {
                        let _ = w.send(conn, Outgoing::from(bytes));
                    }
                }
            },
        )
        .domain(&domain)
        .build()
        .unwrap();
    let cfg = test_config().with_domain(Some(domain));
    let sockets = Sockets::start(&rt, cfg, app).unwrap();
    let _ = writer.set(sockets.writer());
    rt.start().unwrap();
    let mut c = connect(sockets.local_addr());
    for i in 0..20 {
        let msg = format!("ping {i}");
        assert_eq!(roundtrip(&mut c, msg.as_bytes()), msg.as_bytes());
    }
    let snap = rt.snapshot();
    let app = snap.stage("app").unwrap();
    assert!(
        app.inlined > 0,
        "no event ran inline on a loop thread: {app:?}"
    );
    assert!(
        snap.edges
            .contains(&("sock-io".to_owned(), "app".to_owned()))
    );
    sockets.stop();
    rt.shutdown(Duration::from_secs(5));
}
