//! What both event loops (epoll and io_uring) share: offering an event to the
//! application, the read-rate token bucket, a freshly accepted socket's set-up (or
//! its refusal at `max_connections`), the backlog of what a connection holds back,
//! and the periods of their retries.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use seda::{Color, Meta, Sink};

use super::event::SocketEvent;
use super::shared::Shared;

/// Retry period of refused deliveries (backpressure).
pub(super) const RETRY: Duration = Duration::from_millis(1);
/// Retry period of an accept that failed for want of descriptors or memory.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// Longest wait with nothing to do (the stop flag comes with a wake-up; this is only
/// a safety net).
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(500);
/// How long a stopping loop keeps offering `Closed` events to a full application.
pub(super) const STOP_DELIVERY: Duration = Duration::from_secs(2);

/// How often a loop looks for connections past the send timeout: a quarter of it,
/// at most a second, so a stalled peer is cut within 1.25 timeouts.
pub(super) fn send_check_period(timeout: Duration) -> Duration {
    (timeout / 4).min(Duration::from_secs(1))
}

/// What a connection holds back, oldest first: events the application refused, or
/// (io_uring) reads completed while reading was paused.
///
/// # Invariants
/// The box exists exactly while the backlog is non-empty: an empty backlog, which is
/// nearly every connection nearly always, takes one word in the loop's entry and no
/// allocation (a `VecDeque` takes four words, and keeps the allocation a burst grew
/// for as long as the connection lives).
#[derive(Debug)]
// The box is the point: one word instead of four in every connection's entry.
#[allow(clippy::box_collection)]
pub(super) struct Backlog<T>(Option<Box<VecDeque<T>>>);

impl<T> Default for Backlog<T> {
    fn default() -> Self {
        Backlog(None)
    }
}

impl<T> Backlog<T> {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    pub(super) fn push_back(&mut self, item: T) {
        self.0.get_or_insert_with(Box::default).push_back(item);
    }

    pub(super) fn push_front(&mut self, item: T) {
        self.0.get_or_insert_with(Box::default).push_front(item);
    }

    /// The oldest item; the allocation goes with the last one.
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let q = self.0.as_mut()?;
        let item = q.pop_front();
        if q.is_empty() {
            self.0 = None;
        }
        item
    }

    /// Moves every item of `other` to the back of this one.
    pub(super) fn append(&mut self, other: &mut Backlog<T>) {
        match (&mut self.0, other.0.take()) {
            (_, None) => {}
            (None, o) => self.0 = o,
            (Some(q), Some(mut o)) => q.append(&mut o),
        }
    }

    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}

/// Token bucket of the optional read-rate controller: bytes per second
/// (`SocketConfig::read_rate`), depth one `read_chunk`.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub(super) fn new(depth: usize) -> Self {
        Bucket {
            tokens: depth as f64,
            last: Instant::now(),
        }
    }

    /// Refills the bucket for the time since the last call; `None` if a read may
    /// go ahead, else how long until one may.
    pub(super) fn wait(&mut self, rate: f64, depth: usize) -> Option<Duration> {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * rate).min(depth as f64);
        self.last = now;
        (self.tokens < 1.0).then(|| Duration::from_secs_f64((1.0 - self.tokens) / rate))
    }

    /// `n` bytes were read (the bucket may go below zero: a read is never cut short).
    pub(super) fn take(&mut self, n: usize) {
        self.tokens -= n as f64;
    }
}

/// Result of offering an event to the application.
pub(super) enum Offer {
    Taken,
    Refused(SocketEvent),
    Gone,
}

/// Offers an event of connection `id` to `sink` (an outbound connection's, else the
/// application's), colored by the connection. Counts an event it cannot deliver
/// because the stage stopped.
pub(super) fn offer(
    shared: &Shared,
    idx: usize,
    sink: &Sink<SocketEvent>,
    id: u64,
    event: SocketEvent,
    born: Instant,
) -> Offer {
    let meta = Meta::born_at(born).with_color(Color::new(id));
    match sink.try_enqueue_with(event, meta) {
        Ok(()) => Offer::Taken,
        Err(e) if e.is_closed() => {
            shared.counters(idx).undelivered.fetch_add(1, Relaxed);
            Offer::Gone
        }
        // Full or rejected: an overload signal, the event comes back.
        Err(e) => Offer::Refused(e.into_inner()),
    }
}

/// A socket just accepted (or adopted) by loop `idx`: refused (the refusal written
/// best effort, then closed) if `max_connections` are open, else set up
/// (`TCP_NODELAY`, `SO_SNDBUF`) and handed back.
pub(super) fn admit_socket(
    shared: &Shared,
    idx: usize,
    stream: mio::net::TcpStream,
) -> Option<mio::net::TcpStream> {
    let cfg = &shared.cfg;
    if shared.open.load(Relaxed) >= shared.max_connections.load(Relaxed) {
        shared.counters(idx).refused.fetch_add(1, Relaxed);
        if let Some(bytes) = &cfg.refusal {
            // Best effort: a fresh socket's buffer takes a short answer whole.
            let _ = std::io::Write::write(&mut &stream, bytes);
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
        return None;
    }
    if cfg.nodelay {
        let _ = stream.set_nodelay(true);
    }
    if let Some(n) = cfg.send_buffer
        && let Err(e) = crate::sys::set_send_buffer(&stream, n)
    {
        tracing::debug!("cannot set SO_SNDBUF: {e}");
    }
    Some(stream)
}

#[cfg(test)]
mod tests {
    use super::Backlog;

    /// Oldest first, with a refused item put back in front; empty again, the
    /// backlog holds no allocation (an idle connection keeps none).
    #[test]
    fn a_backlog_keeps_order_and_frees_its_box_when_empty() {
        let mut b = Backlog::default();
        assert!(b.is_empty() && b.0.is_none());
        b.push_back(1);
        b.push_back(2);
        let first = b.pop_front().unwrap();
        b.push_front(first);
        let mut more = Backlog::default();
        more.push_back(3);
        b.append(&mut more);
        assert!(more.is_empty() && more.0.is_none());
        assert_eq!(b.len(), 3);
        let mut got = Vec::new();
        while let Some(x) = b.pop_front() {
            got.push(x);
        }
        assert_eq!(got, [1, 2, 3]);
        assert!(
            b.is_empty() && b.0.is_none(),
            "the box went with the last item"
        );
        b.push_back(4);
        b.clear();
        assert!(b.is_empty() && b.0.is_none());
    }
}
