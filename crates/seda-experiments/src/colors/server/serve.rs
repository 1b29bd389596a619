//! Stage `serve`: the file system, state every connection shares.
//!
//! The served file (in memory, as SFS's test file sat in the buffer cache) and the
//! lease table: each read grants or renews the reading client's lease on the file
//! for [`LEASE_TERM`] (SFS keeps such leases for client cache consistency; they are
//! why N independent copies of the server would not be correct, thesis 5.2). The
//! table is mutable and shared, so this stage always runs under color 0, in both
//! colorings, and needs no lock. It hands each reply to `seal` under the
//! connection's color.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use seda::{Batch, Context, EventHandler, Runtime, RuntimeError, Sink};
use seda_io::ConnId;

use super::seal::{Reply, SealEvent};
use super::state::{ColorGuarded, Conn, Shared, stage_builder};
use crate::colors::proto::ReadRequest;

/// How long a read lease lasts.
pub const LEASE_TERM: Duration = Duration::from_secs(60);

/// What `recv` hands `serve`.
pub(super) struct ServeEvent {
    pub(super) conn: Arc<Conn>,
    pub(super) op: Op,
}

pub(super) enum Op {
    Read(ReadRequest),
    /// A malformed request: answered with this message, in order.
    Invalid(String),
    /// The connection closed: its lease ends.
    Closed,
}

/// A client's lease on the file.
struct Lease {
    expires: Instant,
    reads: u64,
}

struct FileSystem {
    file: Bytes,
    leases: HashMap<ConnId, Lease>,
}

struct Serve {
    shared: Arc<Shared>,
    fs: ColorGuarded<FileSystem>,
    seal: Sink<SealEvent>,
}

pub(super) fn build(
    rt: &Runtime,
    shared: &Arc<Shared>,
    file: Bytes,
    seal: Sink<SealEvent>,
) -> Result<Sink<ServeEvent>, RuntimeError> {
    let h = Serve {
        shared: shared.clone(),
        fs: ColorGuarded::new(FileSystem {
            file,
            leases: HashMap::new(),
        }),
        seal,
    };
    stage_builder(rt, shared, "serve", h, 1).build()
}

impl EventHandler<ServeEvent> for Serve {
    fn handle_events(&self, mut batch: Batch<'_, ServeEvent>, _cx: &Context<'_>) {
        while let Some((ServeEvent { conn, op }, meta)) = batch.next_with_meta() {
            let id = conn.id;
            let Ok(mut fs) = self.fs.enter() else {
                self.shared.overlap(id, "serve");
                continue;
            };
            let reply = match op {
                Op::Read(r) => fs.read(id, r),
                Op::Invalid(msg) => Reply::Error(msg),
                Op::Closed => {
                    fs.leases.remove(&id);
                    continue;
                }
            };
            drop(fs);
            let color = self.shared.cfg.coloring.of(id);
            if self
                .seal
                .try_enqueue_with(SealEvent { conn, reply }, meta.with_color(color))
                .is_err()
            {
                self.shared.shed(id, "seal");
            }
        }
    }
}

impl FileSystem {
    fn read(&mut self, id: ConnId, r: ReadRequest) -> Reply {
        let size = self.file.len() as u64;
        let Some(end) = r
            .offset
            .checked_add(u64::from(r.len))
            .filter(|&e| e <= size)
        else {
            return Reply::Error(format!(
                "read of {} bytes at {} is past the end of the {size}-byte file",
                r.len, r.offset
            ));
        };
        let lease = self.leases.entry(id).or_insert(Lease {
            expires: Instant::now(),
            reads: 0,
        });
        lease.expires = Instant::now() + LEASE_TERM;
        lease.reads += 1;
        Reply::Data(self.file.slice(r.offset as usize..end as usize))
    }
}
