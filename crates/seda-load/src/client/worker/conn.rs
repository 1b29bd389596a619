//! The connection half of a load thread's [`Worker`]: a request's connection
//! (connect, write, read, retry on a stale keep-alive connection), its completion
//! or failure, and the timeouts. The schedule half (phases, timers, arrivals) is in
//! the parent module.

use std::cmp::Reverse;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;

use mio::net::TcpStream;
use mio::{Interest, Token};

use super::{ModeState, Req, Worker};
use crate::http::{Feed, HttpError, Response};
use crate::metrics::record_us;

impl Worker {
    pub(super) fn begin(&mut self, j: usize, start_us: u64, path: String, class: Option<u8>) {
        let bytes = self.request_bytes(&path);
        let a = &mut self.agents[j];
        a.req = Some(Req {
            start_us,
            class,
            retried: false,
        });
        a.wbuf = bytes;
        a.wpos = 0;
        a.reader.start(false);
        self.inflight += 1;
        if self.agents[j].sock.is_some() && self.agents[j].connected {
            // Nothing can be readable before the request is out: write only.
            self.write_some(j);
        } else {
            self.connect(j);
        }
    }

    fn connect(&mut self, j: usize) {
        self.close(j);
        self.rec.connections += 1;
        match TcpStream::connect(self.addr) {
            Ok(mut s) => {
                // No TCP_NODELAY: each request leaves in one write, so Nagle never holds it.
                if self
                    .poll
                    .registry()
                    .register(&mut s, Token(j), Interest::READABLE | Interest::WRITABLE)
                    .is_err()
                {
                    let now = self.now_us();
                    self.fail(j, "connect", now);
                    return;
                }
                let a = &mut self.agents[j];
                a.sock = Some(s);
                a.connected = false;
                a.reqs_on_conn = 0;
            }
            Err(_) => {
                let now = self.now_us();
                self.fail(j, "connect", now);
            }
        }
    }

    pub(super) fn close(&mut self, j: usize) {
        let a = &mut self.agents[j];
        if let Some(mut s) = a.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        a.connected = false;
        a.reqs_on_conn = 0;
    }

    /// A readiness event for agent `j`; `readable` says whether reading can make
    /// progress (edge-triggered: a later readable edge arrives as its own event).
    pub(super) fn on_ready(&mut self, j: usize, readable: bool) {
        let a = &self.agents[j];
        let Some(s) = a.sock.as_ref() else { return };
        if !a.connected {
            // A non-blocking connect finished when the socket has no error and a peer.
            let up = match s.take_error() {
                Ok(None) => match s.peer_addr() {
                    Ok(_) => Some(true),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
                    Err(_) => Some(false),
                },
                Ok(Some(_)) | Err(_) => Some(false),
            };
            match up {
                None => return,
                Some(true) => self.agents[j].connected = true,
                Some(false) => {
                    let now = self.now_us();
                    if self.agents[j].req.is_some() {
                        self.fail(j, "connect", now);
                    } else {
                        self.close(j);
                    }
                    return;
                }
            }
        }
        self.write_some(j);
        if readable {
            self.read_some(j);
        }
    }

    fn write_some(&mut self, j: usize) {
        loop {
            let a = &mut self.agents[j];
            if a.req.is_none() || a.wpos >= a.wbuf.len() || !a.connected {
                return;
            }
            let Some(s) = a.sock.as_mut() else { return };
            match s.write(&a.wbuf[a.wpos..]) {
                Ok(0) => return self.io_failed(j, io::ErrorKind::WriteZero),
                Ok(n) => a.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_failed(j, e.kind()),
            }
        }
    }

    fn read_some(&mut self, j: usize) {
        let mut buf = std::mem::take(&mut self.rbuf);
        loop {
            let a = &mut self.agents[j];
            if !a.connected {
                break;
            }
            let Some(s) = a.sock.as_mut() else { break };
            match s.read(&mut buf) {
                Ok(0) => {
                    self.on_eof(j);
                    break;
                }
                Ok(n) => {
                    if a.req.is_none() {
                        // Bytes nobody asked for: drop the connection.
                        self.close(j);
                        break;
                    }
                    match a.reader.feed(&buf[..n]) {
                        Ok(Feed::More) => {}
                        Ok(Feed::Done { response, .. }) => {
                            // Keep reading until WouldBlock even though the response is
                            // complete: readiness is edge-triggered, so a FIN that came
                            // with the response (a server closing an idle keep-alive
                            // connection) has no later event; missing it would send the
                            // next request into a lingering close and wait forever.
                            self.complete(j, response);
                        }
                        Err(e) => {
                            let now = self.now_us();
                            let kind = match e {
                                HttpError::BadHead(_)
                                | HttpError::BadChunk
                                | HttpError::BodyTooLarge => "protocol",
                                HttpError::Truncated => "truncated",
                            };
                            self.fail(j, kind, now);
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.io_failed(j, e.kind());
                    break;
                }
            }
        }
        self.rbuf = buf;
    }

    /// Retry once if a reused connection died before the response began.
    fn try_retry(&mut self, j: usize) -> bool {
        let a = &mut self.agents[j];
        let reused = a.reqs_on_conn > 0;
        match a.req.as_mut() {
            Some(r) if reused && !r.retried && a.reader.is_fresh() => {
                r.retried = true;
                a.wpos = 0;
                self.connect(j);
                true
            }
            _ => false,
        }
    }

    fn on_eof(&mut self, j: usize) {
        if self.agents[j].req.is_none() {
            self.close(j);
            return;
        }
        if self.try_retry(j) {
            return;
        }
        match self.agents[j].reader.eof() {
            Ok(resp) => self.complete(j, resp),
            Err(_) => {
                let now = self.now_us();
                self.fail(j, "truncated", now);
            }
        }
    }

    fn io_failed(&mut self, j: usize, kind: io::ErrorKind) {
        if self.agents[j].req.is_none() {
            self.close(j);
            return;
        }
        if self.try_retry(j) {
            return;
        }
        let now = self.now_us();
        let k = match kind {
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => "reset",
            io::ErrorKind::ConnectionRefused => "connect",
            _ => "io",
        };
        self.fail(j, k, now);
    }

    fn complete(&mut self, j: usize, resp: Response) {
        let now = self.now_us();
        let Some(req) = self.agents[j].req.take() else {
            return;
        };
        self.inflight -= 1;
        let rt = now.saturating_sub(req.start_us);
        *self.rec.statuses.entry(resp.status).or_default() += 1;
        self.rec.bytes += resp.bytes;
        self.rec.second(now).bytes += resp.bytes;
        match resp.status {
            200..=399 => {
                let within = self.target_us.is_some_and(|t| rt <= t);
                let sec = self.rec.second(now);
                sec.completed += 1;
                sec.within += u64::from(within);
                record_us(&mut sec.hist, rt);
                let tenth = self.rec.tenth(now);
                tenth.completed += 1;
                tenth.rts_us.push(rt);
                record_us(&mut self.rec.ok, rt);
                self.rec.completed += 1;
                if let Some(c) = req.class {
                    self.rec.by_class[usize::from(c).min(3)] += 1;
                }
                self.agents[j].completions += 1;
                self.progress.completed.fetch_add(1, Ordering::Relaxed);
            }
            503 => {
                self.rec.second(now).rejected += 1;
                self.rec.tenth(now).rejected += 1;
                record_us(&mut self.rec.rejected_rt, rt);
                self.rec.rejected += 1;
                self.progress.rejected.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.rec.second(now).errors += 1;
                self.rec.tenth(now).errors += 1;
                *self.rec.errors.entry("status").or_default() += 1;
                self.progress.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let a = &mut self.agents[j];
        a.reqs_on_conn += 1;
        let rpc = match self.mode {
            ModeState::Closed { rpc, .. } | ModeState::Open { rpc, .. } => rpc,
        };
        if resp.close || a.reqs_on_conn >= rpc {
            self.close(j);
        }
        self.after_request(j, now, (200..=399).contains(&resp.status));
    }

    pub(super) fn fail(&mut self, j: usize, kind: &'static str, now: u64) {
        if let Some(req) = self.agents[j].req.take() {
            self.inflight -= 1;
            if matches!(kind, "unfinished" | "timeout") {
                self.rec.unanswered_age_us = self
                    .rec
                    .unanswered_age_us
                    .max(now.saturating_sub(req.start_us));
            }
            *self.rec.errors.entry(kind).or_default() += 1;
            self.rec.second(now).errors += 1;
            self.rec.tenth(now).errors += 1;
            self.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.close(j);
        self.after_request(j, now, false);
    }

    /// The user of agent `j` is done with a request (`ok`: answered 2xx/3xx).
    fn after_request(&mut self, j: usize, now: u64, ok: bool) {
        if self.draining {
            self.close(j);
            return;
        }
        match &mut self.mode {
            ModeState::Closed { think_us, heap, .. } => {
                let a = &mut self.agents[j];
                if a.active {
                    let wait = match self.retry_wait_us {
                        Some(w) if !ok => w,
                        _ => *think_us,
                    };
                    let at = now + wait;
                    a.wake_at = Some(at);
                    heap.push(Reverse((at, j)));
                } else {
                    self.close(j);
                }
            }
            ModeState::Open { idle, pending, .. } => {
                if let Some((intended, class, path)) = pending.pop_front() {
                    self.begin(j, intended, path, class);
                } else {
                    idle.push(j);
                }
            }
        }
    }

    pub(super) fn check_timeouts(&mut self, now: u64) {
        for j in 0..self.agents.len() {
            let late = self.agents[j]
                .req
                .as_ref()
                .is_some_and(|r| now.saturating_sub(r.start_us) > self.timeout_us);
            if late {
                self.fail(j, "timeout", now);
            }
        }
        if let ModeState::Open { pending, .. } = &mut self.mode {
            let mut n = 0;
            while pending
                .front()
                .is_some_and(|(t, _, _)| now.saturating_sub(*t) > self.timeout_us)
            {
                if let Some((t, _, _)) = pending.pop_front() {
                    self.rec.unanswered_age_us =
                        self.rec.unanswered_age_us.max(now.saturating_sub(t));
                }
                n += 1;
            }
            if n > 0 {
                *self.rec.errors.entry("timeout").or_default() += n;
                self.rec.second(now).errors += n;
                self.rec.tenth(now).errors += n;
                self.progress.errors.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}
