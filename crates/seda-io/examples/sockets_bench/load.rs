//! The load generator: a child process (this program with `--load`) whose mio
//! threads play the clients of SEDA Fig. 11, and its start and stop.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::{ACK, BURST, CLIENT_THREADS, SETUP_LIMIT};

struct Client {
    stream: TcpStream,
    /// Bytes of the current burst still to send; 0 while waiting for the answer.
    left: u64,
    /// Bytes of the answer received so far.
    acked: usize,
    connected: bool,
}

impl Client {
    /// Sends until the burst is done or the socket is full.
    fn pump(&mut self, payload: &[u8]) -> io::Result<()> {
        while self.left > 0 {
            let n = (self.left as usize).min(payload.len());
            match self.stream.write(&payload[..n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => self.left -= k as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn drain(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut buf = [0u8; 256];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.acked += n;
                    while self.acked >= ACK {
                        self.acked -= ACK;
                        self.left += BURST;
                    }
                    self.pump(payload)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn client_thread(
    addr: SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicU64>,
) -> io::Result<()> {
    let payload = vec![b'p'; 64 * 1024];
    let mut poll = Poll::new()?;
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let mut stream = TcpStream::connect(addr)?;
        poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        clients.push(Client {
            stream,
            left: BURST,
            acked: 0,
            connected: false,
        });
    }
    let mut events = Events::with_capacity(1024);
    let mut errors = 0usize;
    let mut first_error = None;
    while !stop.load(Relaxed) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))?;
        for ev in events.iter() {
            let Some(c) = clients.get_mut(ev.token().0) else {
                continue;
            };
            if !c.connected && ev.is_writable() {
                if c.stream.peer_addr().is_err() {
                    continue;
                }
                c.connected = true;
                let _ = c.stream.set_nodelay(true);
                ready.fetch_add(1, Relaxed);
            }
            let r = if ev.is_readable() {
                c.drain(&payload)
            } else {
                Ok(())
            };
            let r = r.and_then(|()| {
                if ev.is_writable() {
                    c.pump(&payload)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                errors += 1;
                first_error.get_or_insert(e);
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
    if errors > 0 {
        let e = first_error.map_or_else(String::new, |e| format!(" (first: {e})"));
        eprintln!("  client thread: {errors} connections failed{e}");
    }
    Ok(())
}

/// The generator's process: opens `n` connections to `addr` over two threads, prints
/// `ready K` (K connected) once all are up or [`SETUP_LIMIT`] passed, and runs until
/// its stdin closes.
pub(crate) fn load_main(addr: SocketAddr, n: usize) -> io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicU64::new(0));
    let threads = CLIENT_THREADS.min(n.max(1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let k = n / threads + usize::from(t < n % threads);
            let (stop, ready) = (stop.clone(), ready.clone());
            std::thread::spawn(move || client_thread(addr, k, stop, ready))
        })
        .collect();
    let deadline = Instant::now() + SETUP_LIMIT;
    while (ready.load(Relaxed) as usize) < n
        && Instant::now() < deadline
        && !handles.iter().any(|h| h.is_finished())
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("ready {}", ready.load(Relaxed));
    io::stdout().flush()?;
    // The parent closes our stdin to stop us.
    let _ = io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Relaxed);
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("  client thread failed: {e}"),
            Err(_) => eprintln!("  client thread panicked"),
        }
    }
    Ok(())
}

/// Starts the generator process and waits for its `ready` line.
pub(crate) fn start_load(addr: SocketAddr, clients: usize) -> io::Result<(Child, usize)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--load", &addr.to_string(), &clients.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(SETUP_LIMIT + Duration::from_secs(10));
    let connected = line
        .ok()
        .and_then(|l| l.strip_prefix("ready ")?.trim().parse::<usize>().ok());
    match connected {
        Some(k) => Ok((child, k)),
        None => {
            stop_load(child);
            Err(io::Error::other("the load generator did not get ready"))
        }
    }
}

/// Closes the generator's stdin, which stops it; kills it if it lingers.
pub(crate) fn stop_load(mut child: Child) {
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("  the load generator did not stop; killing it");
    let _ = child.kill();
    let _ = child.wait();
}
