//! Graceful shutdown: what each client sees when the grace period ends with requests
//! still waiting (issue 29.3: `seda serve --bottleneck-ms 20 --shutdown-grace 1`, 200
//! concurrent requests and a SIGTERM left 103 clients with a bare end of file).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use seda::control::ThreadPoolConfig;
use seda_http::proto::Status;
use seda_http::{HandlerContext, HandlerRegistration, Request, Response};
use support::{Client, TestServer, start};

/// What the handler waits on; opened once the test has seen what it needs.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// A server whose `/gate` handler runs one request at a time and holds it until the
/// gate opens; `started` counts the requests the handler began.
fn gated() -> (TestServer, Arc<Gate>, Arc<AtomicUsize>) {
    let gate = Arc::new(Gate::default());
    let started = Arc::new(AtomicUsize::new(0));
    let (g, n) = (Arc::clone(&gate), Arc::clone(&started));
    let s = start(move |c| {
        c.handlers.push(
            HandlerRegistration::new("/gate", move |_: &Request, _: &HandlerContext<'_>| {
                n.fetch_add(1, Ordering::SeqCst);
                g.wait();
                Response::text(Status::OK, "done\n")
            })
            .capacity(256)
            .thread_pool(
                ThreadPoolConfig::default()
                    .with_min_threads(1)
                    .with_max_threads(1),
            ),
        );
    });
    (s, gate, started)
}

fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

const GET: &[u8] = b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n";

#[test]
fn requests_not_started_at_the_end_of_the_grace_get_503_and_only_the_running_one_is_cut() {
    const N: usize = 12;
    let (mut s, gate, started) = gated();
    let mut clients: Vec<Client> = (0..N)
        .map(|_| {
            let mut c = s.connect();
            c.send(GET);
            c
        })
        .collect();
    // A connection with two requests pipelined behind the running one's.
    let mut pipelined = s.connect();
    pipelined.send(&[GET, GET].concat());
    // Every request handed to the handler's stage, one of them running.
    assert!(
        wait_for(Duration::from_secs(30), || {
            s.server().haboob_stats().dynamic_requests == N as u64 + 2
                && started.load(Ordering::SeqCst) == 1
        }),
        "requests did not reach the handler: {:?}",
        s.server().haboob_stats()
    );
    let server = s.server.take().expect("a server");
    let report = server.shutdown(Duration::from_millis(300));
    gate.open();

    assert!(!report.requests_drained);
    assert_eq!(
        (report.requests_refused, report.requests_running),
        (N, 1),
        "every connection but the running one's was answered"
    );
    let (mut refused, mut cut) = (0, 0);
    for c in clients.iter_mut().chain(std::iter::once(&mut pipelined)) {
        match c.read_response(false) {
            Some(r) => {
                assert_eq!(r.status, 503);
                assert_eq!(r.header("connection"), Some("close"));
                assert_eq!(r.header("retry-after"), Some("1"));
                assert!(c.is_closed(), "one answer per connection, then the close");
                refused += 1;
            }
            None => cut += 1,
        }
    }
    assert_eq!(
        (refused, cut),
        (N, 1),
        "only the request running in the handler may see a bare end of file"
    );
    assert_eq!(started.load(Ordering::SeqCst), 1, "a refused request ran");
}
