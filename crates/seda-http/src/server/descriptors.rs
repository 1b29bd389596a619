//! How Haboob shares the open-files limit: what it holds, what it keeps free, and
//! what is left for connections (issue 29.4: under `ulimit -n 256`,
//! `max_connections 256` was accepted while the server held 11; it ran out of
//! descriptors before its own cap, and a new client waited in the kernel's queue
//! instead of getting the `503`).
//!
//! ```text
//! limit >= held + reserve + listeners * max_connections
//! ```
//!
//! Each listener (the plain one, and the TLS one if configured) takes up to
//! `max_connections`; a TLS connection counts from its accept, handshake included.
//!
//! - `held`: descriptors open once the listeners and event loops are bound
//!   ([`seda_io::Descriptors`], measured: whatever the process already had, the
//!   listeners, the epoll instances or io_uring eventfds, the wakers);
//! - `reserve`: per event loop of each listener [`seda_io::LOOP_RESERVE`] (a connection accepted
//!   over the cap to be told `503`; the ring an io_uring loop opens as it starts);
//!   [`FILES_IN_FLIGHT`] files the miss path opens at once and
//!   [`PageCache::OPEN_FILES`] large files the path cache keeps open; 3 for the
//!   admin listener (its socket, the connection it serves, the one that wakes it at
//!   stop); per proxy route, an upstream connection for each request it may have in
//!   flight (at most one per client connection) and its idle ones; [`SLACK`] for an
//!   agent listener, a log file, a library's descriptor.
//!
//! With the reserve kept, a connection over `max_connections` can always be
//! accepted and refused, and a file can always be opened for a connection already
//! taken. What the reserve cannot foresee (a connection holding many streamed files
//! in its pipeline) is answered `503` if `open` fails for want of descriptors, never
//! a `404`.

use crate::cache::PageCache;

use super::budget::DescriptorBudget;
use super::config::{ServerConfig, ServerError};

/// Most threads of CacheMiss's pool (each holds at most one file it is opening).
/// Defined here, a leaf, so that the budget does not import `server/mod.rs`.
pub(crate) const CACHE_MISS_THREADS: usize = 16;

/// Files the miss path may hold open at once: CacheMiss's pool at most (each thread
/// opens one file at a time; the file helper reads files already open).
pub(crate) const FILES_IN_FLIGHT: u64 = CACHE_MISS_THREADS as u64;

/// Descriptors for what the server does not count itself.
pub(crate) const SLACK: u64 = 8;

/// The descriptors `cfg` keeps free beside its connections (module docs).
pub(crate) fn reserve(cfg: &ServerConfig) -> u64 {
    let loops = cfg.event_loops as u64 * seda_io::LOOP_RESERVE * listeners(cfg);
    let files = FILES_IN_FLIGHT + PageCache::OPEN_FILES as u64;
    let admin = if cfg.admin_listen.is_some() { 3 } else { 0 };
    let proxies: u64 = cfg
        .proxies
        .iter()
        .map(|r| {
            let clients = cfg.max_connections as u64 * listeners(cfg);
            let in_flight = (r.max_in_flight as u64).min(clients);
            let idle = (r.max_idle * r.upstreams.len()) as u64;
            in_flight + idle
        })
        .sum();
    loops + files + admin + proxies + SLACK
}

/// Listeners that take connections: the plain one, and the TLS one if any.
fn listeners(cfg: &ServerConfig) -> u64 {
    1 + u64::from(cfg.tls.is_some())
}

/// The budget of `cfg` now (call once the listeners are bound).
pub(crate) fn budget(cfg: &ServerConfig) -> std::io::Result<DescriptorBudget> {
    let now = seda_io::Descriptors::now()?;
    Ok(DescriptorBudget {
        limit: now.limit,
        held: now.open,
        reserve: reserve(cfg),
        wanted: cfg.max_connections as u64,
        listeners: listeners(cfg),
    })
}

impl ServerConfig {
    /// The open-files check of [`super::Server::start`], made ahead (`seda serve
    /// --check`): raises the limit to the hard limit as the sockets do at start, and
    /// refuses a `max_connections` that will not fit beside the reserve
    /// ([`ServerError::Descriptors`], with the figures). What the server holds is
    /// counted now, before its listeners and loops exist: a configuration within a
    /// few descriptors of the limit may pass here and be refused at start.
    pub fn check_descriptors(&self) -> Result<(), ServerError> {
        seda_io::raise_fd_limit().map_err(ServerError::Io)?;
        let b = budget(self).map_err(ServerError::Io)?;
        if b.fits() {
            Ok(())
        } else {
            Err(ServerError::Descriptors(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_counts_loops_files_admin_and_proxies() {
        let base = ServerConfig {
            event_loops: 2,
            admin_listen: None,
            ..ServerConfig::default()
        };
        let files = FILES_IN_FLIGHT + PageCache::OPEN_FILES as u64;
        assert_eq!(reserve(&base), 2 * seda_io::LOOP_RESERVE + files + SLACK);
        let admin = ServerConfig {
            admin_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..base.clone()
        };
        assert_eq!(reserve(&admin), reserve(&base) + 3);
        let route = crate::ProxyRoute::new("/api", &["http://127.0.0.1:1"]).unwrap();
        let per_route = (route.max_in_flight.min(100) + route.max_idle) as u64;
        let proxied = ServerConfig {
            max_connections: 100,
            proxies: vec![route],
            ..base.clone()
        };
        assert_eq!(reserve(&proxied), reserve(&base) + per_route);
    }
}
