//! A request body on its way from the client to the upstream, streamed through a
//! bounded window.
//!
//! HttpParse decodes the body as it arrives (`Content-Length` or chunked, with the
//! route's limit) and pushes it into the [`BodySender`]; the route attaches the pipe
//! to the upstream connection once it is connected ([`BodyPipe::attach`]). Until
//! then the bytes wait here; from then on they go straight to the upstream's socket.
//!
//! # Invariants
//! - The body leaves in the framing the forwarded head announced: as is for
//!   `Content-Length`, re-chunked (one chunk per push, then the last chunk) for a
//!   chunked body.
//! - At most [`WINDOW`] bytes (plus one push, at most a read chunk) wait for the
//!   upstream, here or in the upstream connection's outgoing queue: past it the
//!   client is not read ([`Writer::pause_reading`]) until the upstream has taken half
//!   ([`Writer::resume_on_drain`]), or until the pipe is attached.
//! - Once the route gives up on the body ([`BodyPipe::abandon`]: the request was
//!   refused, or failed), the rest is read and dropped, so the client's connection
//!   stays in step; once the client fails it (a bad chunk, the limit, the client
//!   gone), the upstream connection is aborted and the route answers the status.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use seda_io::{ConnId, Writer};

use super::head::{CRLF, LAST_CHUNK, chunk_header};
use crate::proto::Status;

/// Bytes of a body that may wait for the upstream.
pub(crate) const WINDOW: usize = 64 * 1024;

#[derive(Debug)]
struct Pipe {
    chunked: bool,
    /// Framed bytes not yet handed to an upstream connection.
    queue: Vec<Bytes>,
    queued: usize,
    writer: Writer,
    client: ConnId,
    /// The upstream connection the body goes to, once connected.
    upstream: Option<ConnId>,
    /// Bytes handed to an upstream connection (a retry elsewhere is impossible once
    /// any were).
    sent: u64,
    finished: bool,
    /// The client failed the body: `Some(status)` to answer, `None` inside when the
    /// client is gone.
    failed: Option<Option<Status>>,
    abandoned: bool,
    /// The client was paused for room before the pipe was attached.
    want_resume: bool,
}

/// What [`BodySender::accepting`] allows now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accept {
    /// Push up to this many bytes.
    Room(usize),
    /// The window is full: stop consuming; the client's reading is paused and will
    /// resume (a `Resumed` event) when there is room.
    Full,
    /// Nobody wants the body any more: read and drop it.
    Discard,
}

/// The route's end of a request body.
#[derive(Clone, Debug)]
pub(crate) struct BodyPipe(Arc<Mutex<Pipe>>);

/// HttpParse's end of a request body. Dropped before [`BodySender::finish`], it
/// fails the body (the client is gone).
#[derive(Debug)]
pub(crate) struct BodySender {
    pipe: Arc<Mutex<Pipe>>,
    done: bool,
}

/// A pipe for a body of `client`, `chunked` or not.
pub(crate) fn pipe(writer: Writer, client: ConnId, chunked: bool) -> (BodySender, BodyPipe) {
    let p = Arc::new(Mutex::new(Pipe {
        chunked,
        queue: Vec::new(),
        queued: 0,
        writer,
        client,
        upstream: None,
        sent: 0,
        finished: false,
        failed: None,
        abandoned: false,
        want_resume: false,
    }));
    (
        BodySender {
            pipe: Arc::clone(&p),
            done: false,
        },
        BodyPipe(p),
    )
}

impl Pipe {
    fn put(&mut self, mut bufs: Vec<Bytes>) {
        let n: usize = bufs.iter().map(Bytes::len).sum();
        match self.upstream {
            Some(up) => {
                self.sent += n as u64;
                // A failed send closes the upstream connection; its `Closed` tells
                // the route.
                let _ = self.writer.send_vectored(up, &mut bufs);
            }
            None => {
                self.queued += n;
                self.queue.append(&mut bufs);
            }
        }
    }
}

impl BodySender {
    /// How much may be pushed now (see [`Accept`]).
    pub(crate) fn accepting(&self) -> Accept {
        let mut p = self.pipe.lock();
        if p.abandoned {
            return Accept::Discard;
        }
        let waiting = p.queued + p.upstream.and_then(|u| p.writer.queued(u)).unwrap_or(0);
        if waiting < WINDOW {
            return Accept::Room(WINDOW - waiting);
        }
        p.writer.pause_reading(p.client);
        match p.upstream {
            Some(up) => p.writer.resume_on_drain(up, WINDOW / 2, p.client),
            None => p.want_resume = true,
        }
        Accept::Full
    }

    /// Pushes decoded body bytes (within [`Accept::Room`]; dropped if abandoned).
    pub(crate) fn push(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut p = self.pipe.lock();
        if p.abandoned {
            return;
        }
        let data = Bytes::copy_from_slice(data);
        let framed = if p.chunked {
            vec![chunk_header(data.len()), data, CRLF.clone()]
        } else {
            vec![data]
        };
        p.put(framed);
    }

    /// The body is complete.
    pub(crate) fn finish(mut self) {
        self.done = true;
        let mut p = self.pipe.lock();
        if p.chunked && !p.abandoned {
            p.put(vec![LAST_CHUNK.clone()]);
        }
        p.finished = true;
    }

    /// The client's body cannot be forwarded: answer `status` (or nothing, when
    /// `None`: the client is gone).
    pub(crate) fn fail(mut self, status: Option<Status>) {
        self.done = true;
        fail(&self.pipe, status);
    }
}

fn fail(pipe: &Mutex<Pipe>, status: Option<Status>) {
    let mut p = pipe.lock();
    if p.finished || p.failed.is_some() {
        return;
    }
    p.failed = Some(status);
    p.queue.clear();
    p.queued = 0;
    if let Some(up) = p.upstream.take() {
        // The upstream got part of a body that will not be completed.
        p.writer.abort(up);
    }
}

impl Drop for BodySender {
    fn drop(&mut self) {
        if !self.done {
            fail(&self.pipe, None);
        }
    }
}

impl BodyPipe {
    /// The upstream connection `up` is connected: what waited goes to it, and the
    /// rest follows as it comes.
    pub(crate) fn attach(&self, up: ConnId) {
        let mut p = self.0.lock();
        if p.abandoned || p.failed.is_some() {
            return;
        }
        p.upstream = Some(up);
        let queue = std::mem::take(&mut p.queue);
        p.queued = 0;
        if !queue.is_empty() {
            p.put(queue);
        }
        if std::mem::take(&mut p.want_resume) {
            p.writer.resume_on_drain(up, WINDOW / 2, p.client);
        }
    }

    /// The upstream connection failed before any of the body reached it: keep the
    /// body for another (a retry); `false` if some had already gone.
    pub(crate) fn detach(&self) -> bool {
        let mut p = self.0.lock();
        p.upstream = None;
        p.sent == 0
    }

    /// The route gives up on the body: the rest is dropped as it arrives.
    pub(crate) fn abandon(&self) {
        let mut p = self.0.lock();
        p.abandoned = true;
        p.upstream = None;
        p.queue.clear();
        p.queued = 0;
        if std::mem::take(&mut p.want_resume) {
            p.writer.resume_reading(p.client);
        }
    }

    /// Whether the whole body was pushed.
    pub(crate) fn is_finished(&self) -> bool {
        self.0.lock().finished
    }

    /// Whether the client failed the body, and with what answer.
    pub(crate) fn failure(&self) -> Option<Option<Status>> {
        self.0.lock().failed
    }
}
