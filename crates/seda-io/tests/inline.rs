//! The socket loops with the application in their domain, so that its handler runs
//! on the loop threads and its output comes from the loop's own thread: Haboob's
//! path. Under io_uring that output is queued and sent by the loop at the end of its
//! turn instead of written by the caller, so the bounds, pauses, timeouts and the
//! shutdown are checked again on that path (`SEDA_TEST_IO` picks the backend).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use seda_io::{BacklogAction, CloseReason, SocketConfig};
use support::*;

fn inline_echo(cfg: SocketConfig) -> Echo {
    echo_with(cfg, 4096, Duration::ZERO, true)
}

#[test]
fn many_connections_echo_correctly_from_the_loop_thread() {
    let e = inline_echo(test_config());
    let addr = e.sockets.local_addr();
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..50).map(|_| connect(addr)).collect();
                for round in 0..5 {
                    for (i, s) in conns.iter_mut().enumerate() {
                        let msg = format!("t{t} c{i} r{round} {}", "x".repeat(i * 37 % 3000));
                        s.write_all(msg.as_bytes()).unwrap();
                    }
                    for (i, s) in conns.iter_mut().enumerate() {
                        let msg = format!("t{t} c{i} r{round} {}", "x".repeat(i * 37 % 3000));
                        let mut got = vec![0; msg.len()];
                        s.read_exact(&mut got).unwrap();
                        assert_eq!(got, msg.as_bytes());
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(wait_for(Duration::from_secs(10), || e.log.closed_total() == 200));
    let app = e.rt.snapshot();
    let app = app.stage("app").unwrap();
    assert!(
        app.inlined > 0,
        "the handler never ran on a loop thread: {app:?}"
    );
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn output_queued_on_the_loop_thread_pauses_reading_until_it_drains() {
    let cfg = test_config()
        .with_write_threshold(256 * 1024)
        .with_on_backlog(BacklogAction::Pause)
        .with_send_buffer(Some(32 * 1024));
    let e = inline_echo(cfg);
    let mut c = connect(e.sockets.local_addr());
    c.write_all(b"FLOOD 64").unwrap();
    assert!(wait_for(Duration::from_secs(5), || e
        .sockets
        .stats()
        .backlog_pauses
        >= 1));
    let conn = *e.log.snapshot().keys().next().unwrap();
    let before = e.log.snapshot()[&conn].bytes;
    c.write_all(b"ping").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        e.log.snapshot()[&conn].bytes,
        before,
        "a connection whose output is backed up must not be read"
    );
    let mut got = vec![0u8; 64 * 64 * 1024 + 4];
    c.read_exact(&mut got).unwrap();
    assert!(got[..64 * 64 * 1024].iter().all(|&b| b == b'x'));
    assert_eq!(&got[got.len() - 4..], b"ping");
    assert!(e.log.snapshot()[&conn].closed.is_empty());
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn output_queued_on_the_loop_thread_closes_at_the_threshold() {
    let cfg = test_config()
        .with_write_threshold(256 * 1024)
        .with_on_backlog(BacklogAction::Close)
        .with_send_buffer(Some(32 * 1024));
    let e = inline_echo(cfg);
    let addr = e.sockets.local_addr();
    let mut hog = connect(addr);
    hog.write_all(b"FLOOD 64").unwrap();
    assert!(wait_for(Duration::from_secs(5), || e
        .sockets
        .stats()
        .backlog_closes
        == 1));
    // Others are served meanwhile.
    let mut ok = connect(addr);
    assert_eq!(roundtrip(&mut ok, b"hello"), b"hello");
    let seen = e.log.snapshot();
    let closed: Vec<_> = seen.values().filter(|s| !s.closed.is_empty()).collect();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].closed, vec![CloseReason::Backlog]);
    assert_eq!(closed[0].flood_result, Some(seda_io::WriteError::Backlog));
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

#[test]
fn a_peer_that_takes_nothing_from_the_loop_thread_is_cut_at_the_send_timeout() {
    let cfg = test_config()
        .with_write_threshold(64 << 20)
        .with_send_timeout(Some(Duration::from_millis(500)))
        .with_send_buffer(Some(32 * 1024));
    let e = inline_echo(cfg);
    let mut stuck = connect(e.sockets.local_addr());
    stuck.write_all(b"FLOOD 32").unwrap();
    let t = Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || e.log.snapshot().values().any(
            |s| s.closed == vec![CloseReason::Error(std::io::ErrorKind::TimedOut)]
        )),
        "the stuck peer was not cut"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "cut too early: {:?}",
        t.elapsed()
    );
    assert_eq!(e.sockets.stats().send_timeouts, 1);
    assert_eq!(e.sockets.open_connections(), 0);
    e.sockets.stop();
    e.rt.shutdown(Duration::from_secs(5));
}

/// Stopping with output in flight to peers that read nothing: every connection is
/// closed once (`Shutdown`), and every peer sees its socket closed (the loops'
/// operations cancelled and reaped, not left pending).
#[test]
fn stop_with_sends_in_flight_closes_every_connection_once() {
    let cfg = test_config()
        .with_write_threshold(64 << 20)
        .with_send_buffer(Some(32 * 1024));
    let e = inline_echo(cfg);
    let addr = e.sockets.local_addr();
    let mut clients: Vec<TcpStream> = (0..20).map(|_| connect(addr)).collect();
    for c in &mut clients {
        c.write_all(b"FLOOD 16").unwrap();
    }
    assert!(wait_for(Duration::from_secs(10), || e
        .sockets
        .stats()
        .accepted
        == 20));
    assert!(wait_for(Duration::from_secs(10), || {
        e.log.snapshot().values().filter(|s| s.bytes > 0).count() == 20
    }));
    e.sockets.stop();
    assert!(wait_for(Duration::from_secs(60), || e.log.closed_total() == 20));
    for s in e.log.snapshot().values() {
        assert_eq!(s.closed, vec![CloseReason::Shutdown]);
        assert_eq!(s.after_close, 0);
    }
    assert_eq!(e.sockets.open_connections(), 0);
    // The peers see the end of the stream (not our read timeout: 60 s) after at
    // most what was queued: the stop closed their sockets, it did not leave them
    // to a loop stuck in an operation it could not cancel.
    for mut c in clients {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut sink = Vec::new();
        match c.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("a peer was not closed by the stop: {e}"),
        }
        assert!(sink.len() <= 16 * 64 * 1024);
    }
    e.rt.shutdown(Duration::from_secs(5));
}

/// A handler that sends its last words and aborts the connection in the same call:
/// the peer gets the words, then the close (the abort drops only what the socket
/// would not take). Under io_uring the words were queued for the end of the loop's
/// turn when the abort came, and the abort dropped them: the peer saw nothing.
#[test]
fn an_abort_right_after_a_send_from_the_loop_thread_keeps_the_output() {
    let e = inline_echo(test_config());
    let addr = e.sockets.local_addr();
    for i in 0..20 {
        let mut s = connect(addr);
        let words = format!("last words {i}");
        s.write_all(format!("ABORT {words}").as_bytes()).unwrap();
        let mut got = Vec::new();
        // A reset after the words may end the read with an error: what came before
        // it is what counts.
        let _ = s.read_to_end(&mut got);
        assert_eq!(
            String::from_utf8_lossy(&got),
            words,
            "connection {i}: the peer got other bytes than the words sent before the abort"
        );
    }
    assert!(wait_for(Duration::from_secs(5), || e.log.closed_total() == 20));
    for (conn, s) in e.log.snapshot() {
        assert_eq!(s.closed, vec![CloseReason::Local], "{conn:?}");
    }
}
