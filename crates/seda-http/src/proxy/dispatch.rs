//! Handing a flight to an upstream: choose one (round robin over those not
//! ejected), take a kept-alive connection from its pool or open one, write the
//! forwarded head. Used by the route's stage, and again by the upstream-events
//! stage and the sweeper for a retry.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use seda::Meta;
use seda_io::{ConnId, Outgoing};

use super::flight::{Flight, UpConn};
use super::state::{RouteState, Shared};
use crate::proto::Status;

/// Settles a flight's admission once (see `flight.rs`): the route's gate learns its
/// response time, its upstream's in-flight count drops.
pub(crate) fn settle(route: &RouteState, upstream: Option<usize>, f: &mut Flight, now: Instant) {
    if std::mem::replace(&mut f.settled, true) {
        return;
    }
    route.gate.finish(
        f.class,
        f.born,
        now.saturating_duration_since(f.started),
        now,
    );
    if let Some(u) = upstream.and_then(|i| route.upstreams.get(i)) {
        u.counters.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The metadata of a flight's answer.
pub(crate) fn meta_of(f: &Flight) -> Meta {
    Meta::born_at(f.born).with_class(f.class)
}

/// Fails a flight that never got a response head: the client gets `status` (unless
/// a body error of its own came first, or it is gone).
pub(crate) fn fail(
    shared: &Shared,
    route: &RouteState,
    upstream: Option<usize>,
    mut f: Flight,
    status: Status,
    now: Instant,
) {
    settle(route, upstream, &mut f, now);
    let status = match f.body.as_ref().and_then(|b| b.failure()) {
        Some(Some(own)) => own,
        Some(None) => {
            // The client went away mid-body.
            route.counters.client_gone.fetch_add(1, Relaxed);
            if let Some(ex) = f.ex.take() {
                ex.cancel();
            }
            return;
        }
        None => status,
    };
    if let Some(b) = &f.body {
        b.abandon();
    }
    let meta = meta_of(&f);
    if let Some(mut ex) = f.ex.take() {
        if status == Status::GATEWAY_TIMEOUT {
            route.counters.gateway_timeout.fetch_add(1, Relaxed);
        } else if status == Status::BAD_GATEWAY {
            route.counters.bad_gateway.fetch_add(1, Relaxed);
        }
        if f.body.as_ref().is_some_and(|b| !b.is_finished()) {
            // The rest of the body is skipped, but it may be long: say we close.
            ex.close_after();
        }
        shared.answer(ex, status, meta);
    }
}

/// Hands `f` to an upstream of `route` other than those it failed on (see the
/// module docs). `client` is the client's connection (the upstream connection
/// opens on the same event loop).
pub(crate) fn dispatch(
    shared: &Shared,
    route: &RouteState,
    mut f: Flight,
    client: ConnId,
    now: Instant,
) {
    let Some(i) = route.pick(now, &f.failed_on) else {
        tracing::debug!(route = %route.cfg.prefix, "no upstream available");
        return fail(shared, route, None, f, Status::BAD_GATEWAY, now);
    };
    let up = &route.upstreams[i];
    up.counters.requests.fetch_add(1, Relaxed);
    up.counters.in_flight.fetch_add(1, Relaxed);
    f.started = now;
    f.deadline = now + route.cfg.timeout;
    f.resp = super::flight::Resp::Head;
    // The client's loop: a pooled connection of the same loop is taken first, a
    // new one opens on it (both sides on one core).
    let near = shared.writer.event_loop_of(client).unwrap_or(0);
    while let Some(c) = up.take_idle(near) {
        let mut st = c.st.lock();
        if st.dead || st.flight.is_some() {
            continue;
        }
        st.idle_since = None;
        st.reused = true;
        st.buf.clear();
        up.counters.reused.fetch_add(1, Relaxed);
        let head = f.head.clone();
        let body = f.body.clone();
        st.flight = Some(f);
        // A failed send closes the connection: its `Closed` retries the request.
        let _ = shared.writer.send(c.id, Outgoing::Bytes(head));
        if let Some(b) = body {
            b.attach(c.id);
        }
        return;
    }
    let head = f.head.clone();
    let opened = shared.conns.open(
        f,
        || {
            shared
                .writer
                .connect_near(up.url.addr(), shared.upstream_events.clone(), client)
        },
        |id, f| {
            let owner = shared.writer.event_loop_of(id).unwrap_or(near);
            Arc::new(UpConn::new(id, route.index, i, owner, f))
        },
    );
    match opened {
        // The head waits in the socket layer until the connection is up.
        Ok(id) => {
            let _ = shared.writer.send(id, Outgoing::Bytes(head));
        }
        Err((e, mut f)) => {
            tracing::warn!(upstream = %up.url, "cannot open a connection: {e}");
            up.counters.connect_failures.fetch_add(1, Relaxed);
            up.failed(now);
            up.counters.in_flight.fetch_sub(1, Relaxed);
            f.failed_on.push(i);
            fail(shared, route, None, f, Status::BAD_GATEWAY, now);
        }
    }
}
