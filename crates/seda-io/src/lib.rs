//! # seda-io: asynchronous socket and file stages
//!
//! The I/O layer of SEDA (SOSP'01 section 4) on the [`seda`] runtime:
//!
//! - **Sockets** (4.1): [`Sockets::start`] runs one event loop per core as a stage
//!   (`sock-io`) that accepts, reads up to 16 KiB per connection at a time and
//!   delivers [`SocketEvent`]s to the application's sink, each colored by its
//!   connection so one connection's packets are handled serially and in order. The
//!   loops run on epoll or io_uring ([`IoBackend`], same events, bounds and counters).
//!   [`Writer`] writes from the caller's thread and queues only what the socket does
//!   not take, in a bounded per-connection queue. See [`socket`](crate::Sockets) docs
//!   for how the loops map onto stages, backpressure and shutdown.
//! - **Files** (4.2, Flash's AMPED): [`FileHelper`] runs blocking open/stat/read on a
//!   helper stage sized by the thread-pool controller; operations on one file run in
//!   order; [`read_resident`] skips the helper for data already in the page cache.
//! - **TLS** (rustls): [`TlsSockets`] binds a listener whose connections pass a
//!   `tls` stage (handshakes, decryption) before the application's; [`TlsConnWriter`]
//!   encrypts on the caller's thread; [`Link`] is one connection's output, plain or
//!   TLS. Above the socket stages, so any socket backend carries it.
//! - [`raise_fd_limit`] lifts the open-files limit to the hard limit (done by
//!   [`Sockets::start`]); [`Descriptors`] counts what the process holds against it,
//!   so that an application sizes `max_connections` with room to refuse a client
//!   and open a file at the cap ([`LOOP_RESERVE`]).
//!
//! # Flow control (for servers facing hostile clients)
//! [`Sockets::bind`] then [`BoundSockets::start`] gives the application a [`Writer`]
//! before the stage the sockets feed is built. [`Writer::pause_reading`] /
//! [`Writer::resume_reading`] (then a `Resumed` event) bound the work one connection
//! has in flight; [`BacklogAction::Pause`] (the default) stops reading a connection
//! whose output is backed up instead of closing it; [`SocketConfig::send_timeout`]
//! closes a peer that takes nothing; [`SocketConfig::refusal`] answers connections
//! over `max_connections`; [`SocketConfig::domain`] lets the loops hand events to
//! the application's stage inline. A fixed port already in use is an error that
//! names it, even when the other listener uses `SO_REUSEPORT`.
//!
//! ```no_run
//! use seda::{Batch, Context, Runtime};
//! use seda_io::{Outgoing, SocketConfig, SocketEvent, Sockets};
//!
//! let rt = Runtime::builder().build();
//! // Bound first, the sockets' writer exists before the stage that answers with
//! // it: the stage takes it in its constructor (typed wiring, nothing set later).
//! let bound = Sockets::bind(SocketConfig::default()).unwrap();
//! let writer = bound.writer();
//! let echo = rt
//!     .stage("echo", move |batch: Batch<'_, SocketEvent>, _cx: &Context<'_>| {
//!         for ev in batch {
//!             if let SocketEvent::Data { conn, bytes, .. } = ev {
//!                 let _ = writer.send(conn, Outgoing::from(bytes));
//!             }
//!         }
//!     })
//!     .build()
//!     .unwrap();
//! let sockets = bound.start(&rt, echo).unwrap();
//! rt.start().unwrap();
//! println!("echo on {}", sockets.local_addr());
//! ```
// Denied, not forbidden: the io_uring ring (`socket/uring/ring.rs`) is the one module
// that allows it, each block with its `// SAFETY:` comment.
#![deny(unsafe_code)]

mod fds;
mod file;
mod link;
mod setters;
mod socket;
mod sys;
mod tls;

pub use crate::fds::{Descriptors, LOOP_RESERVE, is_out_of_descriptors};
pub use crate::file::{
    FileConfig, FileHelper, FileOp, FileReply, FileStats, Refusal, SubmitError, read_resident,
};
pub use crate::link::Link;
pub use crate::socket::{
    BacklogAction, BoundSockets, CloseReason, ConnId, ConnState, ConnWriter, DEFAULT_STAGE,
    IoBackend, Outgoing, SocketConfig, SocketEvent, SocketHandle, SocketStats, Sockets, WriteError,
    Writer,
};
pub use crate::sys::raise_fd_limit;
pub use crate::tls::{
    BoundTls, TlsConfig, TlsConnWriter, TlsHandle, TlsKeys, TlsSockets, TlsStats, TlsWriter,
};
