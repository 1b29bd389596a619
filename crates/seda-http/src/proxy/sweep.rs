//! The proxy's timeout sweeper: a thread (not a stage: it handles no events) that
//! looks at every upstream connection a few times per timeout and
//! - drops a flight whose client went away (aborting its upstream connection);
//! - aborts a connect that took longer than the route's connect timeout (its
//!   `Closed` then retries or fails the request, `recv.rs`);
//! - answers `504` to a request whose response head is overdue, and cuts a response
//!   whose upstream went silent mid-body for the timeout;
//! - closes pooled connections idle longer than the route's idle timeout, and a
//!   pool's surplus once its peak has passed (`upstream.rs`).
//!
//! A slow upstream therefore holds a client slot at most `timeout` plus one period.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::dispatch::{fail, meta_of, settle};
use super::flight::Resp;
use super::state::Shared;
use crate::proto::Status;

/// One sweep.
pub(crate) fn sweep(shared: &Shared, now: Instant) {
    for c in shared.conns.all() {
        let Some(route) = shared.routes.get(c.route) else {
            continue;
        };
        let up = &route.upstreams[c.upstream];
        let mut st = c.st.lock();
        let Some(f) = st.flight.as_mut() else {
            continue;
        };
        let cancelled = match &f.resp {
            Resp::Head => f.ex.as_ref().is_some_and(|ex| ex.is_cancelled()),
            Resp::Body { held, stream, .. } => {
                held.as_ref().is_some_and(|(ex, _, _)| ex.is_cancelled())
                    || stream.as_ref().is_some_and(|s| s.is_cancelled())
            }
        };
        if cancelled {
            route.counters.client_gone.fetch_add(1, Relaxed);
            let mut f = st.flight.take().expect("checked above");
            settle(route, Some(c.upstream), &mut f, now);
            if let Some(ex) = f.ex.take() {
                ex.cancel();
            }
            if let Resp::Body { held, .. } = &mut f.resp
                && let Some((ex, _, _)) = held.take()
            {
                ex.cancel();
            }
            st.dead = true;
            drop(st);
            shared.writer.abort(c.id);
            continue;
        }
        if matches!(f.resp, Resp::Head) && f.body.as_ref().is_some_and(|b| b.failure().is_some()) {
            // The client's body failed before it reached the upstream: answer its
            // status (`fail` takes the body's own).
            let f = st.flight.take().expect("checked above");
            st.dead = true;
            drop(st);
            shared.writer.abort(c.id);
            fail(shared, route, Some(c.upstream), f, Status::BAD_REQUEST, now);
            continue;
        }
        let connect_by = f.started + route.cfg.connect_timeout.min(route.cfg.timeout);
        let overdue = now > f.deadline;
        if !st.connected && now > connect_by {
            // Its `Closed` (never connected) counts the failure and retries.
            drop(st);
            shared.writer.abort(c.id);
            continue;
        }
        if !overdue {
            continue;
        }
        let mut f = st.flight.take().expect("checked above");
        st.dead = true;
        drop(st);
        let meta = meta_of(&f);
        match &mut f.resp {
            Resp::Head => {
                up.failed(now);
                fail(
                    shared,
                    route,
                    Some(c.upstream),
                    f,
                    Status::GATEWAY_TIMEOUT,
                    now,
                );
            }
            Resp::Body { held, stream, .. } => {
                if let Some((ex, _, _)) = held.take() {
                    route.counters.gateway_timeout.fetch_add(1, Relaxed);
                    shared.answer(ex, Status::GATEWAY_TIMEOUT, meta);
                }
                // Dropped unfinished: the client's connection is aborted.
                drop(stream.take());
            }
        }
        shared.writer.abort(c.id);
    }
    for route in &shared.routes {
        for up in &route.upstreams {
            let Some(cutoff) = now.checked_sub(route.cfg.idle_timeout) else {
                continue;
            };
            for c in up.expired(now, cutoff) {
                c.st.lock().dead = true;
                shared.writer.close(c.id);
            }
        }
    }
}

/// The sweeper thread; stops when dropped.
#[derive(Debug)]
pub(crate) struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Starts sweeping `shared` every `period`.
    pub(crate) fn start(shared: Arc<Shared>, period: Duration) -> std::io::Result<Sweeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("proxy-timeouts".into())
            .spawn(move || {
                while !s.load(Acquire) {
                    std::thread::park_timeout(period);
                    if s.load(Acquire) {
                        break;
                    }
                    sweep(&shared, Instant::now());
                }
            })?;
        Ok(Sweeper {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
