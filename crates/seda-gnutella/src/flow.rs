//! Back-pressure from the router to the peers' sockets (SEDA 4.2's "back-pressure"
//! response to overload, here down to TCP's flow control).
//!
//! The server stage hands the router one event per read. When a read finds the
//! router's queue standing ([`ReadPause::pause_at`] reads or more), the server
//! pauses reading that connection ([`seda_io::Writer::pause_reading`]): the peer's
//! further bytes wait in the kernel, and TCP slows the peer to what the router
//! routes. The router resumes every paused connection once its queue is down to
//! [`ReadPause::resume_at`] reads (at the end of a batch, and at its tick, so a
//! pause registered after the router's last batch is never left standing).
//!
//! Without it the socket loops and the server read, frame and hand on whatever the
//! peers send, and the router drops the pings and queries of reads that waited past
//! its delay bound (`router_late`): the CPU spent reading and framing those is lost
//! (a flood of 4 peers on 2 cores: 30-55 % of the messages read, 2026-11-27).
//! Measured, the pause did not pay on 2 cores (0.80-0.93x the plain loop against
//! 1.11x without it, query p90 30-37 ms: reads already queued at the server stage
//! still arrive late, and each resume leaves the router idle), so it is off by
//! default (`RouterConfig::pause_reads_at` 0); see `docs/results.md`.
//!
//! # Invariants
//! - A connection is in the paused list at most once; every connection paused is
//!   resumed by the first router batch or tick that finds the queue at or under
//!   `resume_at` after the pause was registered (resuming a closed connection is a
//!   no-op).
//! - The router's delay bound stays in force: a read that still waits past it (many
//!   connections, or one read too large) is shed as before.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::Mutex;
use seda_io::{ConnId, Writer};

/// The connections whose reading the server paused for the router.
#[derive(Debug)]
pub(crate) struct ReadPause {
    paused: Mutex<Vec<ConnId>>,
    /// Whether `paused` may be non-empty (read without the lock on every batch).
    any: AtomicBool,
    /// Router queue length (reads) at which a read pauses its connection; 0: never.
    pause_at: usize,
    /// Router queue length at which the paused connections are resumed.
    resume_at: usize,
}

impl ReadPause {
    /// Pauses at `pause_at` queued reads (0: never), resumes at `resume_at`.
    pub(crate) fn new(pause_at: usize, resume_at: usize) -> ReadPause {
        ReadPause {
            paused: Mutex::new(Vec::new()),
            any: AtomicBool::new(false),
            pause_at,
            resume_at: resume_at.min(pause_at.saturating_sub(1)),
        }
    }

    /// A read of `conn` was just queued at the router, which now holds `queued`
    /// reads: pauses `conn` if that is a standing queue. Returns whether it paused.
    pub(crate) fn after_enqueue(&self, writer: &Writer, conn: ConnId, queued: usize) -> bool {
        if self.pause_at == 0 || queued < self.pause_at {
            return false;
        }
        let mut p = self.paused.lock();
        if p.contains(&conn) {
            return false;
        }
        p.push(conn);
        self.any.store(true, Relaxed);
        writer.pause_reading(conn);
        true
    }

    /// The router's queue holds `queued` reads: resumes every paused connection if
    /// that is at or under `resume_at`. Returns how many it resumed.
    pub(crate) fn resume_if_drained(&self, writer: &Writer, queued: usize) -> usize {
        if !self.any.load(Relaxed) || queued > self.resume_at {
            return 0;
        }
        let list = {
            let mut p = self.paused.lock();
            self.any.store(false, Relaxed);
            std::mem::take(&mut *p)
        };
        for &c in &list {
            writer.resume_reading(c);
        }
        list.len()
    }
}
