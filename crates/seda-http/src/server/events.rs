//! The events Haboob's stages exchange, and the request they carry. A leaf: it
//! imports no stage, so every stage imports it and no two files import each other.
//!
//! ```text
//! sock-io ──SocketEvent──> HttpParse ──Job──> HttpRecv ──PageEvent::Lookup──> PageCache
//!    PageCache ──Miss──> CacheMiss ──PageEvent::Resolved──> PageCache
//!    HttpParse ──DynJob──> handler:<name>
//!    every stage that settles a request ──SendEvent──> HttpSend
//! ```
//!
//! The behaviour of [`HttpRequest`] (its accessors) lives in `request.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use seda::Sink;

use super::answer::Answer;
use super::conn::Exchange;
use crate::cache::{FileInfo, Target};
use crate::handler::{HandlerRegistration, Request};
use crate::policy_slot::PolicySlot;
use crate::proto::{RequestHead, Status};

/// A request on its way through the stages, with the slot of its response. The
/// request is boxed: an event is moved several times per hop, and 32 bytes move
/// cheaper than 300.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) ex: Exchange,
    pub(crate) req: Box<HttpRequest>,
}

/// A parsed request, owned. HttpParse splits each request's head off the
/// connection's buffer as a shared [`Bytes`] (no copy) and keeps the parsed
/// [`RequestHead`], whose pieces are ranges of it; the body, if read, is another
/// `Bytes`.
#[derive(Debug)]
pub(crate) struct HttpRequest {
    /// The head's bytes.
    pub(super) raw: Bytes,
    pub(super) head: RequestHead,
    /// The body (empty when none was read).
    pub(super) body: Bytes,
    pub(super) peer: SocketAddr,
    /// The dynamic handler the path belongs to, if any (decided once, by HttpParse,
    /// which must know whether the body is read or discarded).
    pub(crate) route: Option<Arc<Route>>,
}

/// One dynamic handler mounted at a prefix, with its stage's sink.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) reg: HandlerRegistration,
    /// The stage's name (`handler:NAME`), shared: the access log names the stage
    /// of each request without an allocation.
    pub(crate) stage: Arc<str>,
    /// The stage's admission policy, replaceable on reload.
    pub(crate) policy: Arc<PolicySlot>,
    pub(crate) sink: Sink<DynJob>,
}

/// A request for a dynamic handler.
#[derive(Debug)]
pub(crate) struct DynJob {
    pub(crate) ex: Exchange,
    pub(crate) req: Request,
}

/// An answer on its way out, to HttpSend.
#[derive(Debug)]
pub(crate) struct SendEvent {
    pub(crate) ex: Exchange,
    pub(crate) answer: Answer,
}

/// Events of the PageCache stage.
#[derive(Debug)]
pub(crate) enum PageEvent {
    /// Look a static request up.
    Lookup(Job),
    /// CacheMiss (or the file helper) settled a miss.
    Resolved { job: Job, found: Found },
}

/// What the miss path found.
#[derive(Debug)]
pub(crate) enum Found {
    /// The file's bytes, read: cache them.
    Page { info: Arc<FileInfo>, body: Bytes },
    /// A translation that needs no page: a streamed file, a redirect, an error.
    Target(Target),
    /// Reading failed.
    Failed(Status),
    /// The process is out of descriptors (`EMFILE`, `ENFILE`): a `503` with
    /// `Retry-After`, and nothing cached (the file is there).
    OutOfDescriptors,
}

/// A request PageCache could not answer, for CacheMiss.
#[derive(Debug)]
pub(crate) struct Miss {
    pub(crate) job: Job,
    /// The file, when the translation was cached and only the page was missing.
    pub(crate) file: Option<Arc<FileInfo>>,
}
