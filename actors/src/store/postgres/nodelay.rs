//! `TCP_NODELAY` on the pool's connections (decision 0061).
//!
//! sqlx 0.9.0 connects without it (sqlx issue #4335: fixed upstream, not yet
//! released). Without it, a statement larger than the socket's send buffer
//! (16 KiB at first) goes out in pieces, and Nagle's algorithm holds each next
//! piece until the server acknowledges the previous one, which the server's
//! delayed acknowledgement puts off by up to 40 ms: a batch of checkpoints, or
//! one checkpoint carrying a long tool output, waited that long on a loopback
//! connection (a local database, a pgbouncer or cloud SQL proxy sidecar).
//!
//! sqlx hands out no socket, so after a connection is made this finds the
//! process's TCP sockets connected to the database's port and sets the option
//! on each that lacks it, through a duplicate of the descriptor taken with
//! `pidfd_getfd` (Linux 5.6 and later; no unsafe code). Inspecting the duplicate
//! itself, never a descriptor number that might be reused meanwhile, means only
//! a TCP socket whose peer has that port is ever changed. Only descriptors
//! `/proc` shows as sockets are duplicated: closing a duplicate of a file would
//! release the process's POSIX record locks on it (`fcntl`), which a library
//! embedding the store (SQLite, say) may hold. Where this is not permitted (a
//! seccomp profile without `pidfd_getfd`), it says so once and the connections
//! keep Nagle's algorithm.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the "cannot set" warning was given already: once per process.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to `port`
/// that lacks it; returns how many it changed. Failing, it warns once.
pub(super) fn on_connections_to(port: u16) -> usize {
    match sockets::set_nodelay_to_port(port) {
        Ok(changed) => changed,
        Err(error) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    %error,
                    "cannot set TCP_NODELAY on PostgreSQL connections: statements over 16 KiB may wait up to 40 ms"
                );
            }
            0
        }
    }
}

#[cfg(target_os = "linux")]
mod sockets {
    use std::net::SocketAddr;
    use std::os::fd::{OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use rustix::io::Errno;
    use rustix::net::{SocketType, getpeername, sockopt};
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

    /// See [`super::on_connections_to`].
    pub(super) fn set_nodelay_to_port(port: u16) -> std::io::Result<usize> {
        let this_process = pidfd_open(getpid(), PidfdFlags::empty())?;
        let mut changed = 0;
        for entry in std::fs::read_dir("/proc/self/fd")? {
            let entry = entry?;
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<RawFd>().ok())
            else {
                continue;
            };
            if !is_socket(&entry.path()) {
                continue;
            }
            let socket = match pidfd_getfd(&this_process, fd, PidfdGetfdFlags::empty()) {
                Ok(socket) => socket,
                // Closed since the listing: nothing to do for it.
                Err(Errno::BADF) => continue,
                // Refused (a seccomp profile, no ptrace access): say so.
                Err(refused) => return Err(refused.into()),
            };
            if needs_nodelay(&socket, port) {
                sockopt::set_tcp_nodelay(&socket, true)?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Whether the descriptor `/proc/self/fd` lists at `link` is a socket (its
    /// link reads `socket:[inode]`); one closed since the listing is not.
    pub(super) fn is_socket(link: &Path) -> bool {
        std::fs::read_link(link)
            .is_ok_and(|target| target.as_os_str().as_bytes().starts_with(b"socket:"))
    }

    /// Whether `socket` is a TCP connection to `port` without `TCP_NODELAY`.
    fn needs_nodelay(socket: &OwnedFd, port: u16) -> bool {
        let stream = sockopt::socket_type(socket).is_ok_and(|kind| kind == SocketType::STREAM);
        let peer = getpeername(socket)
            .ok()
            .flatten()
            .and_then(|peer| SocketAddr::try_from(peer).ok());
        stream
            && peer.is_some_and(|peer| peer.port() == port)
            && sockopt::tcp_nodelay(socket).is_ok_and(|on| !on)
    }
}

#[cfg(not(target_os = "linux"))]
mod sockets {
    /// Not available off Linux: the connections keep Nagle's algorithm.
    pub(super) fn set_nodelay_to_port(_port: u16) -> std::io::Result<usize> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "only implemented on Linux",
        ))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use rustix::net::sockopt;

    use super::on_connections_to;
    use super::sockets::is_socket;

    #[tokio::test]
    async fn sets_nodelay_on_connections_to_the_port_and_no_others() {
        let database = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = database.local_addr().unwrap().port();
        let to_database = tokio::net::TcpStream::connect(database.local_addr().unwrap())
            .await
            .unwrap();
        let to_other = tokio::net::TcpStream::connect(other.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = database.accept().await.unwrap();
        assert!(!to_database.nodelay().unwrap());

        assert_eq!(on_connections_to(port), 1, "one socket changed");
        assert!(to_database.nodelay().unwrap());
        assert!(!to_other.nodelay().unwrap(), "another port is left alone");
        assert!(
            !sockopt::tcp_nodelay(accepted.as_fd()).unwrap(),
            "the accepting side's peer port differs"
        );
        assert_eq!(on_connections_to(port), 0, "nothing left to change");
    }

    #[tokio::test]
    async fn only_sockets_are_duplicated() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fd_link = |fd: i32| std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
        assert!(
            !is_socket(&fd_link(file.as_raw_fd())),
            "a file is left alone"
        );
        assert!(is_socket(&fd_link(listener.as_raw_fd())));
        assert!(!is_socket(&fd_link(-1)), "nor is a descriptor that is gone");
    }
}
