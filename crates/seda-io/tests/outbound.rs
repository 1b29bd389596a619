//! Outbound connections (`Writer::connect`) and the relay coupling
//! (`Writer::resume_on_drain`): what a reverse proxy needs of the socket layer.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use seda::{Batch, Context, Runtime, Sink};
use seda_io::{CloseReason, ConnId, Outgoing, SocketEvent};
use support::{echo, test_config, wait_for};

/// Records the events of outbound connections, in order, as short strings.
type EventLog = Arc<Mutex<Vec<(ConnId, String)>>>;

fn recorder(rt: &Runtime) -> (Sink<SocketEvent>, EventLog) {
    let log: EventLog = Arc::default();
    let l = Arc::clone(&log);
    let sink = rt
        .stage(
            "upstream-events",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                for ev in batch {
                    let what = match &ev {
                        SocketEvent::Connected { .. } => "connected".to_owned(),
                        SocketEvent::Data { bytes, .. } => {
                            format!("data:{}", String::from_utf8_lossy(bytes))
                        }
                        SocketEvent::Closed { reason, .. } => format!("closed:{reason:?}"),
                        SocketEvent::Resumed { .. } => "resumed".to_owned(),
                        SocketEvent::ReadClosed { .. } => "read-closed".to_owned(),
                        other => format!("{other:?}"),
                    };
                    l.lock().push((ev.conn(), what));
                }
            },
        )
        .build()
        .unwrap();
    (sink, log)
}

fn events_of(log: &Mutex<Vec<(ConnId, String)>>, conn: ConnId) -> Vec<String> {
    log.lock()
        .iter()
        .filter(|(c, _)| *c == conn)
        .map(|(_, e)| e.clone())
        .collect()
}

#[test]
fn an_outbound_connection_delivers_connected_then_data_to_its_own_sink() {
    // The sockets' own application is an echo server; the outbound connection goes
    // to a plain listener and its events to a recorder, never to the echo app.
    let e = echo(test_config(), 1024, Duration::ZERO);
    let (sink, log) = recorder(&e.rt);
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = peer.local_addr().unwrap();
    let w = e.sockets.writer();
    let conn = w.connect(addr, sink).unwrap();
    // Sent before the handshake completes: queued, then written.
    w.send(conn, Outgoing::from(&b"hello "[..])).unwrap();
    w.send(conn, Outgoing::from(&b"upstream"[..])).unwrap();
    let (mut s, _) = peer.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = [0u8; 14];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello upstream");
    s.write_all(b"answer").unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, conn).iter().any(|e| e.starts_with("data:"))
    }));
    drop(s);
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, conn)
            .iter()
            .any(|e| e.starts_with("closed"))
    }));
    let events = events_of(&log, conn);
    assert_eq!(events[0], "connected", "{events:?}");
    assert_eq!(events[1], "data:answer", "{events:?}");
    assert_eq!(
        events.iter().filter(|e| e.starts_with("closed")).count(),
        1,
        "{events:?}"
    );
    assert!(!e.log.snapshot().contains_key(&conn), "the echo app saw it");
    let st = e.sockets.stats();
    assert_eq!((st.connects, st.connect_failures), (1, 0));
}

#[test]
fn a_refused_connect_delivers_only_closed_with_the_error() {
    let e = echo(test_config(), 1024, Duration::ZERO);
    let (sink, log) = recorder(&e.rt);
    // A port nobody listens on: bind, note the port, close.
    let addr: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let w = e.sockets.writer();
    let conn = w.connect(addr, sink).unwrap();
    let _ = w.send(conn, Outgoing::from(&b"lost"[..]));
    assert!(wait_for(Duration::from_secs(10), || {
        !events_of(&log, conn).is_empty()
    }));
    std::thread::sleep(Duration::from_millis(50));
    let events = events_of(&log, conn);
    assert_eq!(
        events,
        [format!(
            "closed:{:?}",
            CloseReason::Error(std::io::ErrorKind::ConnectionRefused)
        )]
    );
    let st = e.sockets.stats();
    assert_eq!((st.connects, st.connect_failures), (0, 1));
    assert_eq!(e.sockets.open_connections(), 0);
}

#[test]
fn aborting_a_connect_in_progress_closes_it_once() {
    let e = echo(test_config(), 1024, Duration::ZERO);
    let (sink, log) = recorder(&e.rt);
    // A listener whose backlog is full never completes a handshake quickly; but
    // abort must work whatever state the connect is in, so any address will do.
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let w = e.sockets.writer();
    let conn = w.connect(peer.local_addr().unwrap(), sink).unwrap();
    // Wait until the loop knows it, then abort.
    assert!(wait_for(Duration::from_secs(10), || w
        .queued(conn)
        .is_some()));
    w.abort(conn);
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, conn)
            .iter()
            .any(|e| e.starts_with("closed"))
    }));
    let events = events_of(&log, conn);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("closed")).count(),
        1,
        "{events:?}"
    );
}

#[test]
fn resume_on_drain_resumes_the_paused_side_once_the_other_drains() {
    let e = echo(test_config(), 1024, Duration::ZERO);
    let (sink, log) = recorder(&e.rt);
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let w = e.sockets.writer();
    // `slow` is a peer that does not read at first; `paused` is the side to resume.
    let slow = w.connect(peer.local_addr().unwrap(), sink.clone()).unwrap();
    let (mut slow_peer, _) = peer.accept().unwrap();
    let other = w.connect(peer.local_addr().unwrap(), sink).unwrap();
    let (_other_peer, _) = peer.accept().unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, slow).contains(&"connected".to_owned())
            && events_of(&log, other).contains(&"connected".to_owned())
    }));
    // Fill `slow`'s queue well past what the kernel buffers take.
    let block = bytes::Bytes::from(vec![b'x'; 256 * 1024]);
    for _ in 0..32 {
        w.send(slow, Outgoing::Bytes(block.clone())).unwrap();
    }
    assert!(w.queued(slow).unwrap() > 64 * 1024);
    w.pause_reading(other);
    w.resume_on_drain(slow, 64 * 1024, other);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !events_of(&log, other).contains(&"resumed".to_owned()),
        "resumed before the queue drained"
    );
    // The slow peer reads everything: the queue drains, `other` resumes once.
    slow_peer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut left = 32 * 256 * 1024;
    let mut buf = vec![0u8; 1 << 16];
    while left > 0 {
        let n = slow_peer.read(&mut buf).unwrap();
        assert!(n > 0);
        left -= n;
    }
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, other).contains(&"resumed".to_owned())
    }));
    // Already drained: a new watch resumes at once.
    w.pause_reading(other);
    w.resume_on_drain(slow, 0, other);
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, other)
            .iter()
            .filter(|e| *e == "resumed")
            .count()
            == 2
    }));
}

#[test]
fn a_watched_connection_that_closes_resumes_the_paused_side() {
    let e = echo(test_config(), 1024, Duration::ZERO);
    let (sink, log) = recorder(&e.rt);
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let w = e.sockets.writer();
    let slow = w.connect(peer.local_addr().unwrap(), sink.clone()).unwrap();
    let (slow_peer, _) = peer.accept().unwrap();
    let other = w.connect(peer.local_addr().unwrap(), sink).unwrap();
    let (_other_peer, _) = peer.accept().unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, other).contains(&"connected".to_owned())
            && events_of(&log, slow).contains(&"connected".to_owned())
    }));
    let block = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    for _ in 0..8 {
        w.send(slow, Outgoing::Bytes(block.clone())).unwrap();
    }
    w.pause_reading(other);
    w.resume_on_drain(slow, 0, other);
    w.abort(slow);
    drop(slow_peer);
    assert!(wait_for(Duration::from_secs(10), || {
        events_of(&log, other).contains(&"resumed".to_owned())
    }));
}
