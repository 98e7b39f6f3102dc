//! The socket a node hands over on: a sequenced packet socket, one message per
//! packet, descriptors (the listening sockets) passed with `SCM_RIGHTS`. Either
//! end of a pair the old node made before starting its successor (SIGHUP), or a
//! connection to the node's control socket (`--upgrade`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{
    accept, bind, connect, getsockopt, listen, recvmsg, sendmsg, socket, socketpair, sockopt,
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr,
};

/// One end of a handover.
pub struct Link {
    fd: OwnedFd,
}

impl Link {
    /// A connected pair: (old node's end, successor's end).
    pub fn pair() -> io::Result<(Link, Link)> {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        Ok((Link { fd: a }, Link { fd: b }))
    }

    /// The successor's end, inherited from the old node under `fd`.
    ///
    /// # Safety
    /// `fd` must be an open descriptor this process owns and nothing else uses.
    pub unsafe fn inherited(fd: RawFd) -> Link {
        // The descriptor goes no further: close it on any later exec.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        Link {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        }
    }

    /// A connection to the node listening on the control socket at `path`.
    pub fn connect(path: &Path) -> io::Result<Link> {
        let fd = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        connect(fd.as_raw_fd(), &address(path)?)?;
        Ok(Link { fd })
    }

    /// The descriptor to leave open across the successor's exec.
    pub fn inheritable(&self) -> io::Result<RawFd> {
        // SAFETY: clearing FD_CLOEXEC on a descriptor we own.
        if unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.fd.as_raw_fd())
    }

    pub fn send(&self, text: &str, fds: &[RawFd]) -> io::Result<()> {
        let iov = [io::IoSlice::new(text.as_bytes())];
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(
            self.fd.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map(drop)
        .map_err(io::Error::from)
    }

    /// The next message and the descriptors that came with it, waiting at most
    /// `limit`; `None` when the other end has closed (its process ended).
    pub fn recv_within(&self, limit: Duration) -> io::Result<Option<(String, Vec<OwnedFd>)>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = limit.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd, ours.
        match unsafe { libc::poll(&mut pfd, 1, ms) } {
            0 => return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
            n if n < 0 => return Err(io::Error::last_os_error()),
            _ => {}
        }
        let mut buf = vec![0u8; 4096];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let (n, fds) = loop {
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(
                self.fd.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(msg) => {
                    let mut fds = Vec::new();
                    for c in msg.cmsgs().map_err(io::Error::from)? {
                        if let ControlMessageOwned::ScmRights(got) = c {
                            // SAFETY: the kernel just gave us these descriptors.
                            fds.extend(got.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
                        }
                    }
                    break (msg.bytes, fds);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((String::from_utf8_lossy(&buf[..n]).into_owned(), fds)))
    }

    /// The connected process's user id.
    pub fn peer_uid(&self) -> io::Result<u32> {
        Ok(getsockopt(&self.fd, sockopt::PeerCredentials)?.uid())
    }
}

/// `@NAME` is a name in the abstract namespace: no file, gone with the process.
fn abstract_name(path: &Path) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().strip_prefix(b"@")
}

fn address(path: &Path) -> io::Result<UnixAddr> {
    Ok(match abstract_name(path) {
        Some(name) => UnixAddr::new_abstract(name)?,
        None => UnixAddr::new(path)?,
    })
}

/// The node's control socket: where `shoal-node --upgrade` finds it.
pub struct Control {
    pub path: PathBuf,
    fd: OwnedFd,
}

impl Control {
    /// Listens at `path`. A socket file left by a node that is gone is replaced;
    /// one a live node answers on is not.
    pub fn bind(path: &Path) -> io::Result<Control> {
        if abstract_name(path).is_none() && path.exists() {
            if Link::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a running node answers on it",
                ));
            }
            std::fs::remove_file(path)?;
        }
        let fd = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        // Only this user may take the node's sockets over.
        let old = unsafe { libc::umask(0o177) };
        let bound = bind(fd.as_raw_fd(), &address(path)?);
        unsafe { libc::umask(old) };
        bound?;
        listen(&fd, Backlog::new(4)?)?;
        Ok(Control {
            path: path.to_owned(),
            fd,
        })
    }

    /// The control socket its predecessor listened on, passed over.
    pub fn from_fd(path: &Path, fd: OwnedFd) -> Control {
        Control {
            path: path.to_owned(),
            fd,
        }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn try_clone(&self) -> io::Result<Control> {
        Ok(Control {
            path: self.path.clone(),
            fd: self.fd.as_fd().try_clone_to_owned()?,
        })
    }

    /// The next connection (blocking).
    pub fn accept(&self) -> io::Result<Link> {
        loop {
            match accept(self.fd.as_raw_fd()) {
                // SAFETY: accept just made it.
                Ok(fd) => {
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
                    return Ok(Link { fd });
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_descriptors_cross_and_a_closed_end_is_told() {
        let (a, b) = Link::pair().unwrap();
        let f = tempfile::tempfile().unwrap();
        a.send("offer 1 2", &[f.as_raw_fd()]).unwrap();
        let (text, fds) = b.recv_within(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(text, "offer 1 2");
        assert_eq!(fds.len(), 1);
        assert_eq!(b.peer_uid().unwrap(), unsafe { libc::geteuid() });
        drop(a);
        assert!(b.recv_within(Duration::from_secs(1)).unwrap().is_none());
    }

    #[test]
    fn a_control_socket_left_behind_is_replaced_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let c = Control::bind(&path).unwrap();
        assert!(Control::bind(&path).is_err(), "a live node answers there");
        drop(c);
        let again = Control::bind(&path).unwrap();
        let link = Link::connect(&path).unwrap();
        let there = again.accept().unwrap();
        link.send("hello", &[]).unwrap();
        let (text, _) = there.recv_within(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(text, "hello");

        let name =
            Path::new("@shoal-node-test/abstract").with_extension(std::process::id().to_string());
        let c = Control::bind(&name).unwrap();
        assert!(Control::bind(&name).is_err(), "a live node holds the name");
        drop(c);
        let _again = Control::bind(&name).unwrap();
        Link::connect(&name).unwrap();
    }
}
