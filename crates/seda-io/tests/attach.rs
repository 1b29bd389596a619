//! Attached state (`BoundSockets::start_attached`): every event of a connection
//! carries the state made for it, the socket stages drop theirs with `Closed`
//! exactly once, and an id whose connection is gone reaches no other connection,
//! even the one that took its slot. Runs on the backend `SEDA_TEST_IO` names.

mod support;

use std::io::Read;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use parking_lot::Mutex;
use seda::{Batch, Context, Runtime};
use seda_io::{ConnId, Outgoing, SocketEvent, SocketHandle, Sockets, WriteError, Writer};
use support::{connect, roundtrip, test_config, wait_for};

const LIMIT: Duration = Duration::from_secs(60);

/// The application's record of a connection: its id, and a count of the records
/// dropped.
#[derive(Debug)]
struct Rec {
    id: ConnId,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Rec {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, SeqCst);
    }
}

#[derive(Default)]
struct Tally {
    made: AtomicUsize,
    dropped: Arc<AtomicUsize>,
    /// Events whose state was missing or another connection's.
    wrong: AtomicUsize,
    events: AtomicUsize,
    closed: Mutex<Vec<ConnId>>,
}

struct Server {
    _rt: Runtime,
    sockets: SocketHandle,
    writer: Writer,
    tally: Arc<Tally>,
}

/// An echo server whose connections carry a [`Rec`].
fn server() -> Server {
    let rt = Runtime::builder().build();
    let tally = Arc::new(Tally::default());
    let bound = Sockets::bind(test_config()).unwrap();
    let writer = bound.writer();
    let (t, w) = (Arc::clone(&tally), writer.clone());
    let app = rt
        .stage(
            "app",
            move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
                for ev in batch {
                    t.events.fetch_add(1, SeqCst);
                    let conn = ev.conn();
                    let rec = ev.state().and_then(|s| s.downcast_ref::<Rec>());
                    if rec.is_none_or(|r| r.id != conn) {
                        t.wrong.fetch_add(1, SeqCst);
                    }
                    match ev {
                        SocketEvent::Data { bytes, .. } => {
                            let _ = w.send(conn, Outgoing::from(bytes));
                        }
                        SocketEvent::Closed { .. } => t.closed.lock().push(conn),
                        _ => {}
                    }
                }
            },
        )
        .fixed_threads(2)
        .build()
        .unwrap();
    let t = Arc::clone(&tally);
    let sockets = bound
        .start_attached(&rt, app, move |id, _peer| {
            t.made.fetch_add(1, SeqCst);
            Some(Arc::new(Rec {
                id,
                dropped: Arc::clone(&t.dropped),
            }))
        })
        .unwrap();
    rt.start().unwrap();
    Server {
        _rt: rt,
        sockets,
        writer,
        tally,
    }
}

/// One state per connection, in every event of it (the first included), and none
/// left held once `Closed` is handled: the application keeps no record, so each
/// is dropped exactly when the socket stages let go of theirs.
#[test]
fn every_event_carries_the_state_and_closed_takes_it_away() {
    let s = server();
    let addr = s.sockets.local_addr();
    const N: usize = 20;
    let mut clients: Vec<_> = (0..N).map(|_| connect(addr)).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let msg = format!("hello {i}");
        assert_eq!(roundtrip(c, msg.as_bytes()), msg.as_bytes());
    }
    for c in clients {
        c.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        assert_eq!(
            (&c).read_to_end(&mut rest).unwrap(),
            0,
            "closed, nothing more"
        );
    }
    let t = &s.tally;
    assert!(
        wait_for(LIMIT, || t.closed.lock().len() == N
            && t.dropped.load(SeqCst) == N),
        "closed {}, dropped {}",
        t.closed.lock().len(),
        t.dropped.load(SeqCst)
    );
    assert_eq!(t.made.load(SeqCst), N, "one state per connection");
    assert_eq!(t.wrong.load(SeqCst), 0, "an event without its own state");
    assert!(
        t.events.load(SeqCst) >= 3 * N,
        "Accepted, Data, Closed each"
    );
    s.sockets.stop();
    assert_eq!(t.dropped.load(SeqCst), N, "dropped once, not again at stop");
}

/// A closed connection's slot goes to the next one (the lowest free slot first);
/// the old id reaches neither the new connection nor its state.
#[test]
fn a_stale_id_reaches_no_other_connection() {
    let s = server();
    let addr = s.sockets.local_addr();
    let mut a = connect(addr);
    assert_eq!(roundtrip(&mut a, b"a"), b"a");
    drop(a);
    let t = &s.tally;
    assert!(wait_for(LIMIT, || t.closed.lock().len() == 1));
    let old = t.closed.lock()[0];
    // The next connections; one of them lands on the loop (and slot) `a` had.
    let mut next: Vec<_> = (0..8).map(|_| connect(addr)).collect();
    for c in &mut next {
        assert_eq!(roundtrip(c, b"b"), b"b");
    }
    assert_eq!(
        s.writer.send(old, Outgoing::from(&b"stale"[..])),
        Err(WriteError::NoConnection)
    );
    s.writer.close(old);
    s.writer.abort(old);
    s.writer.pause_reading(old);
    s.writer.resume_reading(old);
    for c in &mut next {
        assert_eq!(roundtrip(c, b"still open"), b"still open");
    }
    assert_eq!(t.wrong.load(SeqCst), 0, "an event without its own state");
    assert_eq!(t.closed.lock().len(), 1, "no other connection closed");
}
