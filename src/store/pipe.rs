//! [`Pipe`]: a kernel pipe a body is spliced into, so its bytes go from the
//! socket they arrived on to where they are wanted (a FUSE reply) without ever
//! being copied into this process's memory.
//!
//! What holds a pipe decides what comes before the body (a reply's header,
//! [`Pipe::prefix`]); a body that cannot be spliced whole is read back out
//! ([`Pipe::drain`]) and goes the copying way.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The most a reply (its data) takes of a pipe, and the least a pipe must
/// hold: the kernel's default `pipe-max-size`, which anyone may ask for.
pub const PIPE_BYTES: usize = 1 << 20;

pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe now.
    held: usize,
    /// Of them, this many at the front are the holder's, not the body's.
    prefix: usize,
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

impl Pipe {
    /// A non-blocking pipe that holds a reply of [`PIPE_BYTES`]. A pipe has a
    /// slot per fragment a socket gives it (up to 32 KiB on loopback, a
    /// packet's worth from a network card), and a page's worth of slots: so
    /// four times that where allowed (past `pipe-max-size` takes
    /// CAP_SYS_RESOURCE), else twice, else [`PIPE_BYTES`] (loopback's large
    /// fragments fit), or as much as the system gives ([`Pipe::capacity`]).
    pub fn new() -> io::Result<Pipe> {
        let pipe = Pipe::with_size(0)?;
        for size in [4 * PIPE_BYTES, 2 * PIPE_BYTES, PIPE_BYTES] {
            if pipe.resize(size).is_ok() {
                break;
            }
        }
        Ok(pipe)
    }

    /// A non-blocking pipe of `bytes` (rounded up to pages; 0: the system's
    /// default size).
    pub fn with_size(bytes: usize) -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors or fails.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
            return Err(last_error());
        }
        // SAFETY: descriptors just made, owned from here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let pipe = Pipe {
            read,
            write,
            held: 0,
            prefix: 0,
        };
        if bytes > 0 {
            pipe.resize(bytes)?;
        }
        Ok(pipe)
    }

    fn resize(&self, bytes: usize) -> io::Result<()> {
        let bytes = libc::c_int::try_from(bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a pipe that large"))?;
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(self.write.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) } < 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// How many bytes the pipe can hold (in pages: a splice of small fragments
    /// fills it with fewer).
    pub fn capacity(&self) -> usize {
        // SAFETY: fcntl on a descriptor we own.
        let n = unsafe { libc::fcntl(self.write.as_raw_fd(), libc::F_GETPIPE_SZ) };
        n.max(0) as usize
    }

    /// Bytes in the pipe, the prefix included.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Bytes of body in the pipe (after the prefix).
    pub fn body_len(&self) -> usize {
        self.held - self.prefix
    }

    pub fn read_fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// Puts the holder's own `bytes` at the front of an empty pipe.
    pub fn prefix(&mut self, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(self.held, 0, "a prefix goes into an empty pipe");
        self.put(bytes)?;
        self.prefix = bytes.len();
        Ok(())
    }

    /// Writes `bytes` (small: a body's first bytes that came with its head).
    pub(crate) fn put(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            // SAFETY: writing from a buffer we borrow.
            let r =
                unsafe { libc::write(self.write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
            if r < 0 {
                let e = last_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            self.held += r as usize;
            bytes = &bytes[r as usize..];
        }
        Ok(())
    }

    /// Moves up to `n` bytes from socket `from` into the pipe, without waiting
    /// (`EAGAIN` when the socket has none, or the pipe no room); 0 at its end.
    pub(crate) fn splice_from(&mut self, from: RawFd, n: usize) -> io::Result<usize> {
        // SAFETY: splice between two descriptors; no memory of ours is touched.
        let r = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                self.write.as_raw_fd(),
                std::ptr::null_mut(),
                n,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if r < 0 {
            return Err(last_error());
        }
        self.held += r as usize;
        Ok(r as usize)
    }

    /// The holder took `n` bytes out of the pipe (by a splice of its own).
    pub fn taken(&mut self, n: usize) {
        self.held -= n.min(self.held);
        self.prefix = self.prefix.saturating_sub(n);
    }

    /// Empties the pipe: the prefix is dropped and the body's bytes go into
    /// `dst` (as many as fit; the rest are dropped too); how many went. The pipe
    /// is ready for another use after.
    pub fn drain(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let mut scratch = [0u8; 4096];
        let mut got = 0;
        while self.held > 0 {
            let into: &mut [u8] = if self.prefix > 0 {
                &mut scratch[..self.prefix.min(4096)]
            } else if got < dst.len() {
                &mut dst[got..]
            } else {
                &mut scratch
            };
            // SAFETY: reading into a buffer we own.
            let r =
                unsafe { libc::read(self.read.as_raw_fd(), into.as_mut_ptr().cast(), into.len()) };
            if r < 0 {
                let e = last_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                break;
            }
            let r = r as usize;
            if self.prefix > 0 {
                self.prefix -= r;
            } else if got < dst.len() {
                got += r;
            }
            self.held -= r;
        }
        self.prefix = 0;
        Ok(got)
    }

    /// Empties the pipe, keeping nothing.
    pub fn clear(&mut self) -> io::Result<()> {
        self.drain(&mut []).map(drop)
    }
}
