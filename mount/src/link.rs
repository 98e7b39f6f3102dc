//! The link between a mount's keeper and the process serving it: a sequenced
//! packet socket pair, one message per packet, descriptors passed with
//! `SCM_RIGHTS` (the FUSE device and the journal go to the server; a compacted
//! journal comes back).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// What the keeper and its server say to each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Server: config, credentials and the bucket check are done; it can serve.
    Prepared,
    /// Server: it cannot serve, and why.
    Failed(String),
    /// Keeper: here are the device and the journal (with them), and how to start.
    Take(Start),
    /// Server: its compacted journal (with it); the keeper keeps that one now.
    Journal,
    /// Keeper: the compacted journal is kept.
    JournalKept,
    /// Server: it is reading requests.
    Serving,
    /// Keeper: take no more requests, answer those taken, and exit.
    Stop,
    /// Server: every request it took is answered; it exits now.
    Drained,
    /// Server: the kernel ended the connection (an unmount).
    Unmounted,
}

/// How a server takes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new mount: the kernel's INIT comes first.
    New,
    /// Its predecessor died: take over, and have the kernel send again what
    /// the dead one took.
    AfterCrash,
    /// Its predecessor is handing over: take over once it has drained.
    Handover,
}

impl Msg {
    fn encode(&self) -> String {
        match self {
            Msg::Prepared => "prepared".into(),
            Msg::Failed(why) => format!("failed {why}"),
            Msg::Take(Start::New) => "take new".into(),
            Msg::Take(Start::AfterCrash) => "take after-crash".into(),
            Msg::Take(Start::Handover) => "take handover".into(),
            Msg::Journal => "journal".into(),
            Msg::JournalKept => "journal-kept".into(),
            Msg::Serving => "serving".into(),
            Msg::Stop => "stop".into(),
            Msg::Drained => "drained".into(),
            Msg::Unmounted => "unmounted".into(),
        }
    }

    fn decode(s: &str) -> Option<Msg> {
        let (word, rest) = s.split_once(' ').unwrap_or((s, ""));
        Some(match (word, rest) {
            ("prepared", _) => Msg::Prepared,
            ("failed", why) => Msg::Failed(why.to_owned()),
            ("take", "new") => Msg::Take(Start::New),
            ("take", "after-crash") => Msg::Take(Start::AfterCrash),
            ("take", "handover") => Msg::Take(Start::Handover),
            ("journal", _) => Msg::Journal,
            ("journal-kept", _) => Msg::JournalKept,
            ("serving", _) => Msg::Serving,
            ("stop", _) => Msg::Stop,
            ("drained", _) => Msg::Drained,
            ("unmounted", _) => Msg::Unmounted,
            _ => return None,
        })
    }
}

/// One end of the link.
pub struct Link {
    fd: OwnedFd,
}

impl Link {
    /// A connected pair: (keeper's end, server's end).
    pub fn pair() -> io::Result<(Link, Link)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair fills two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: two descriptors just made, owned from here.
        Ok(unsafe {
            (
                Link {
                    fd: OwnedFd::from_raw_fd(fds[0]),
                },
                Link {
                    fd: OwnedFd::from_raw_fd(fds[1]),
                },
            )
        })
    }

    pub fn from_fd(fd: OwnedFd) -> Link {
        Link { fd }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Another descriptor of the same end (one thread sends, another receives).
    pub fn try_clone(&self) -> io::Result<Link> {
        Ok(Link {
            fd: self.fd.try_clone()?,
        })
    }

    /// The descriptor, to be inherited by a child (close-on-exec cleared).
    pub fn into_inheritable(self) -> io::Result<OwnedFd> {
        // SAFETY: clearing FD_CLOEXEC on a descriptor we own.
        if unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.fd)
    }

    pub fn send(&self, m: &Msg, fds: &[RawFd]) -> io::Result<()> {
        let text = m.encode();
        let iov = [io::IoSlice::new(text.as_bytes())];
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(self.raw(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
            .map(drop)
            .map_err(io::Error::from)
    }

    /// The next message and the descriptors that came with it; `None` when the
    /// other end has closed (its process ended).
    pub fn recv(&self) -> io::Result<Option<(Msg, Vec<OwnedFd>)>> {
        let mut buf = vec![0u8; 64 << 10];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let (n, fds) = loop {
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(
                self.raw(),
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
        let text = String::from_utf8_lossy(&buf[..n]);
        match Msg::decode(&text) {
            Some(m) => Ok(Some((m, fds))),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown message {text:?}"),
            )),
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
        a.send(&Msg::Take(Start::AfterCrash), &[f.as_raw_fd()])
            .unwrap();
        a.send(&Msg::Failed("bucket \"x\" does not exist".into()), &[])
            .unwrap();
        let (m, fds) = b.recv().unwrap().unwrap();
        assert_eq!(m, Msg::Take(Start::AfterCrash));
        assert_eq!(fds.len(), 1);
        let (m, fds) = b.recv().unwrap().unwrap();
        assert_eq!(m, Msg::Failed("bucket \"x\" does not exist".into()));
        assert!(fds.is_empty());
        drop(a);
        assert!(b.recv().unwrap().is_none());
    }
}
