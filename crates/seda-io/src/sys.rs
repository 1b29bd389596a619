//! The few system calls std does not offer, through rustix's safe wrappers (the
//! workspace denies `unsafe_code`): the open-files limit, `SO_REUSEPORT` listeners,
//! `sendfile`, and `preadv2(RWF_NOWAIT)` for the page-cache residency check.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use rustix::io::{Errno, ReadWriteFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, so that thousands of
/// connections do not run into the (usually 1,024) default. Returns the soft limit
/// in force afterwards (`u64::MAX` when unlimited).
pub fn raise_fd_limit() -> io::Result<u64> {
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        )?;
    }
    Ok(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}

/// Fails with `AddrInUse` if anything listens on `addr` (a fixed port), even a group
/// of `SO_REUSEPORT` listeners that a new `SO_REUSEPORT` socket would silently join
/// (two servers started on one port would split its traffic). Binds a probe socket
/// without `SO_REUSEPORT` and closes it.
pub(crate) fn check_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    Ok(())
}

/// A non-blocking listening socket with `SO_REUSEADDR` and, if `reuse_port`,
/// `SO_REUSEPORT`, so that each event loop can own a listener on the same address
/// and the kernel spreads incoming connections over them.
pub(crate) fn listener(
    addr: SocketAddr,
    reuse_port: bool,
    backlog: i32,
) -> io::Result<std::net::TcpListener> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if reuse_port {
        sockopt::set_socket_reuseport(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, backlog)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Starts a non-blocking TCP connect to `addr`: the socket is returned at once, with
/// the connection established, refused or still in progress (`EINPROGRESS`); the
/// event loop learns which from the socket's first readiness event.
pub(crate) fn connect_nonblocking(addr: SocketAddr) -> io::Result<std::net::TcpStream> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) | Err(Errno::INPROGRESS) | Err(Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(std::net::TcpStream::from(fd))
}

/// Sets `SO_SNDBUF` on a socket.
pub(crate) fn set_send_buffer(fd: impl AsFd, bytes: usize) -> io::Result<()> {
    Ok(sockopt::set_socket_send_buffer_size(fd, bytes)?)
}

/// `sendfile(out, file, &offset, count)`: bytes sent (advances `offset`).
pub(crate) fn sendfile(
    out: impl AsFd,
    file: &File,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    Ok(rustix::fs::sendfile(out, file, Some(offset), count)?)
}

/// Reads `len` bytes at `offset` of `file` only if they are already in the page
/// cache, with `preadv2(RWF_NOWAIT)` (Linux 4.14+; Flash's residency test, done the
/// modern way instead of `mincore` on a mapping).
///
/// Returns `Some(bytes)` when the whole range (or everything up to end of file) was
/// resident, `None` when reading would block on the disk, when the file system or
/// kernel does not support `RWF_NOWAIT`, or on any other error: the caller then
/// takes the helper-stage path, which reports real errors.
pub fn read_resident(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let mut iov = [io::IoSliceMut::new(&mut buf[done..])];
        match rustix::io::preadv2(file, &mut iov, offset + done as u64, ReadWriteFlags::NOWAIT) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    buf.truncate(done);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn fd_limit_reaches_the_hard_limit() {
        let soft = raise_fd_limit().unwrap();
        let hard = getrlimit(Resource::Nofile).maximum.unwrap_or(u64::MAX);
        assert_eq!(soft, hard);
    }

    #[test]
    fn resident_read_returns_data_just_written_and_stops_at_eof() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let got = read_resident(&f, 0, data.len()).expect("data just written is in the page cache");
        assert_eq!(got, data);
        let tail = read_resident(&f, 99_990, 100).expect("resident tail");
        assert_eq!(tail, &data[99_990..]);
        assert_eq!(read_resident(&f, 200_000, 10), Some(Vec::new()));
    }
}
