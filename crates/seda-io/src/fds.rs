//! Descriptor accounting, the same for every socket backend: what the process holds,
//! what its open-files limit is, and what the socket layer keeps free beside its
//! connections.
//!
//! A server that lets its connections take every descriptor the limit allows fails
//! in the worst way at the limit: `accept` gets `EMFILE`, so new clients wait in the
//! kernel's queue (seconds, then a timeout) instead of getting the server's refusal,
//! and a file it must open for a client it already took fails. An application sizes
//! `max_connections` so that
//!
//! ```text
//! limit >= held + reserve + max_connections
//! ```
//!
//! where `held` is [`Descriptors::open`] once the listeners are bound, and the reserve
//! counts [`LOOP_RESERVE`] per event loop plus what the application itself opens as
//! it works (files, outbound connections, an admin listener).

use std::io;

use rustix::io::Errno;

/// Descriptors the socket layer may need per event loop beyond the ones open once
/// its listeners are bound: one to accept a connection over `max_connections` and
/// send it the refusal, and one the io_uring backend opens when its loop starts (its
/// ring). The epoll backend opens nothing then; the count is the larger of the two.
pub const LOOP_RESERVE: u64 = 2;

/// The process's descriptors now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Descriptors {
    /// Open now (`/proc/self/fd`).
    pub open: u64,
    /// The soft `RLIMIT_NOFILE` (`ulimit -n`); `u64::MAX` when unlimited.
    pub limit: u64,
}

impl Descriptors {
    /// Counts the open descriptors and reads the limit (not raised: see
    /// [`raise_fd_limit`](crate::raise_fd_limit)).
    pub fn now() -> io::Result<Descriptors> {
        // The directory's own descriptor is among the entries while it is read.
        let entries = std::fs::read_dir("/proc/self/fd")?.count() as u64;
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        Ok(Descriptors {
            open: entries.saturating_sub(1),
            limit,
        })
    }

    /// Descriptors the limit leaves once `reserve` more are kept free.
    pub fn available(&self, reserve: u64) -> u64 {
        self.limit.saturating_sub(self.open).saturating_sub(reserve)
    }
}

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) is out of
/// descriptors: a temporary condition (a 503 with `Retry-After` for a client), not
/// a missing file.
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    e.raw_os_error()
        .is_some_and(|n| n == Errno::MFILE.raw_os_error() || n == Errno::NFILE.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_opened_and_closed() {
        let before = Descriptors::now().unwrap();
        assert!(before.open >= 3, "stdio at least: {before:?}");
        assert!(before.limit > before.open);
        let files: Vec<_> = (0..50).map(|_| tempfile::tempfile().unwrap()).collect();
        let during = Descriptors::now().unwrap();
        // Other tests of this binary open and close descriptors meanwhile: the fifty
        // are at least visible as long as they are open.
        assert!(during.open >= 50, "{during:?}");
        drop(files);
        assert_eq!(
            before.available(10),
            before.limit - before.open - 10,
            "{before:?}"
        );
        assert_eq!(
            Descriptors {
                open: 10,
                limit: 12
            }
            .available(5),
            0
        );
    }

    #[test]
    fn out_of_descriptors_is_told_from_not_found() {
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(
            Errno::MFILE.raw_os_error()
        )));
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(
            Errno::NFILE.raw_os_error()
        )));
        assert!(!is_out_of_descriptors(&io::Error::from(
            io::ErrorKind::NotFound
        )));
    }
}
