//! The timeout sweeper: a thread (not a stage: it handles no events) that answers
//! `408` to connections whose request head or body is overdue and closes keep-alive
//! connections idle too long (or all idle ones while the server drains).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use seda::Meta;

use super::answer::Answer;
use super::conn::Exchange;
use super::state::Responder;
use crate::access_log::events::{Origin, RequestRecord};
use crate::proto::Status;

/// One sweep over every connection.
pub(crate) fn sweep(out: &Responder, now: Instant) {
    let hb = &out.hb;
    hb.tick(now);
    let live = hb.live.load();
    let idle_ms = u64::try_from(live.idle_timeout.as_millis()).unwrap_or(u64::MAX);
    let now_ns = seda::clock::nanos(now);
    let now_ms = now_ns / 1_000_000;
    for c in hb.conns.all() {
        if c.is_gone() {
            continue;
        }
        let Some(mut rx) = c.rx.try_lock() else {
            continue;
        };
        if let Some(t0) = rx.head_started
            && std::time::Duration::from_nanos(now_ns.saturating_sub(t0.get()))
                > live.header_timeout
        {
            hb.counters.header_timeouts.fetch_add(1, Relaxed);
            // A request waiting for its body gets the 408; else a new slot does.
            let ex = match rx.body.as_mut().and_then(|b| b.take_waiting()) {
                Some(mut ex) => {
                    ex.close_after();
                    ex
                }
                None => {
                    let mut ex = Exchange::new(Arc::clone(&c), c.next_seq(), false, false);
                    if hb.log.is_some() {
                        let born = rx.born.unwrap_or(t0);
                        ex.log(RequestRecord::unparsed(
                            &rx.buf,
                            c.peer(),
                            seda::clock::instant(born.get()),
                            Origin::Timeout,
                        ));
                    }
                    ex
                }
            };
            rx.stop();
            drop(rx);
            out.answer(ex, Answer::Error(Status::REQUEST_TIMEOUT), Meta::new());
            continue;
        }
        let idle = rx.is_empty() && c.in_flight() == 0;
        if idle && (hb.draining() || now_ms.saturating_sub(c.last_active_ms()) > idle_ms) {
            hb.counters.idle_closes.fetch_add(1, Relaxed);
            rx.stop();
            c.mark_gone();
            c.close();
        }
    }
}

/// Whether every connection is idle (no request in progress or unanswered).
pub(crate) fn quiescent(out: &Responder) -> bool {
    out.hb.conns.all().iter().all(|c| {
        let rx = c.rx.lock();
        c.is_gone() || (c.in_flight() == 0 && rx.is_empty())
    })
}
