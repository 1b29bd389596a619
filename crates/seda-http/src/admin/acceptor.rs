//! The accepting thread of the admin and agent listeners: binds, hands each
//! connection to a callback, and stops when dropped.
//!
//! Invariant: after [`Acceptor`] is dropped (or [`Acceptor::stop`] returns) the
//! callback is never called again and the listening socket is closed.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread::JoinHandle;
use std::time::Duration;

/// A thread accepting connections on one address.
pub(super) struct Acceptor {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Binds `addr` (the error names it) and calls `on_conn` with every accepted
    /// connection, on a thread called `name`.
    pub(super) fn start(
        addr: SocketAddr,
        name: &str,
        mut on_conn: impl FnMut(TcpStream) + Send + 'static,
    ) -> io::Result<Acceptor> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let local_addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.load(SeqCst) {
                        return;
                    }
                    match stream {
                        Ok(stream) => on_conn(stream),
                        // Out of descriptors or a connection reset before accept:
                        // pause rather than spin.
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })?;
        Ok(Acceptor {
            local_addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and waits for the thread.
    pub(super) fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.stop.store(true, SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.local_addr, Duration::from_millis(200));
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shut();
        }
    }
}
