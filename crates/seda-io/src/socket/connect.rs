//! Outbound connections and the drain coupling of a relay (see "Outbound
//! connections" in the module docs of `socket`).
//!
//! The backend contract, which every socket backend keeps: `connect` returns an id at
//! once and never blocks; the connection's events go to the sink it was given, in
//! order, `Connected` first (or only `Closed` when the connect fails); output sent
//! before `Connected` is queued, never lost or reordered; `resume_on_drain` fires at
//! most once per call, when the watched queue is at or under its low-water mark (at
//! once if it already is) or when the watched connection closes.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use seda::Sink;

use super::conn::Conn;
use super::event::{ConnId, SocketEvent};
use super::shared::Cmd;
use super::writer::Writer;

impl Writer {
    /// Opens a connection to `addr` without blocking; its events go to `sink` (see
    /// the module docs, "Outbound connections"). The id is returned before the
    /// connect completes; output sent on it meanwhile waits for `Connected`.
    ///
    /// Errors: the sockets are stopping, or no socket could be created (descriptors
    /// exhausted). A refused or unreachable address is not an error here: it arrives
    /// as `Closed { reason: Error(kind) }`.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(w: &seda_io::Writer, upstream_events: seda::Sink<seda_io::SocketEvent>) -> std::io::Result<()> {
    /// use seda_io::Outgoing;
    /// let conn = w.connect("127.0.0.1:9000".parse().unwrap(), upstream_events)?;
    /// // Queued until the handshake completes, then written.
    /// let _ = w.send(conn, Outgoing::from(&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..]));
    /// # Ok(()) }
    /// ```
    pub fn connect(&self, addr: SocketAddr, sink: Sink<SocketEvent>) -> io::Result<ConnId> {
        self.connect_on(addr, sink, self.shared.next_owner())
    }

    /// As [`Writer::connect`], on the event loop that owns connection `near` (if it
    /// is open; any loop otherwise): a relay's two sides then run on one core.
    pub fn connect_near(
        &self,
        addr: SocketAddr,
        sink: Sink<SocketEvent>,
        near: ConnId,
    ) -> io::Result<ConnId> {
        let owner = match self.shared.conns.get(near) {
            Some(c) => c.owner,
            None => self.shared.next_owner(),
        };
        self.connect_on(addr, sink, owner)
    }

    fn connect_on(
        &self,
        addr: SocketAddr,
        sink: Sink<SocketEvent>,
        owner: usize,
    ) -> io::Result<ConnId> {
        if self.shared.stopping() {
            return Err(io::Error::other("socket stages are stopping"));
        }
        let stream = crate::sys::connect_nonblocking(addr)?;
        let id = self
            .shared
            .new_id(owner)
            .ok_or_else(|| io::Error::other("every slot of the event loop's table is taken"))?;
        let stream = mio::net::TcpStream::from_std(stream);
        // In the table before the loop hears of it, so that output sent right away
        // finds the connection (and is queued until it is connected).
        let conn = Arc::new(Conn::connecting(id, owner, stream));
        self.shared.conns.insert(Arc::clone(&conn));
        self.shared.open.fetch_add(1, Relaxed);
        self.shared.command(
            owner,
            Cmd::Connect {
                conn,
                peer: addr,
                sink,
            },
        );
        Ok(id)
    }

    /// Resumes reading `paused` (stopped with [`Writer::pause_reading`]) once the
    /// outgoing queue of `watched` holds at most `low_water` bytes: at once if it
    /// already does, else when the loop has flushed it that far, or when `watched`
    /// closes. `paused` then gets its `Resumed` event. One watch per connection: a
    /// second call replaces the first. No-op if `watched` is not open (then `paused`
    /// is resumed at once: nothing will ever drain).
    ///
    /// A relay copying from A to B pauses A when B's queue passes a window and calls
    /// `resume_on_drain(B, window / 2, A)`: it then holds at most a window (plus one
    /// read) of A's bytes, however slowly B reads.
    pub fn resume_on_drain(&self, watched: ConnId, low_water: usize, paused: ConnId) {
        let Some(c) = self.shared.conns.get(watched) else {
            self.resume_reading(paused);
            return;
        };
        let mut o = c.out.lock();
        if o.queued <= low_water || o.state == super::conn::WriteState::Closed {
            o.drain_watch = None;
            drop(o);
            self.resume_reading(paused);
        } else {
            o.drain_watch = Some(Box::new((low_water, paused)));
        }
    }
}
