//! [`Channel`]: one FUSE connection's `/dev/fuse` file descriptor, and the calls
//! made on it: a request read (woken by a [`Stop`] as well as by the kernel), a
//! reply written whole from several buffers, notifications, and the `ioctl`s that
//! clone the device and register passthrough backing files.
//!
//! The descriptor may be shared with other processes (the keeper that holds the
//! connection across daemons): it is made non-blocking, so a reader that was told
//! to stop never sits inside a `read` that has already taken a request.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::abi;

pub struct Channel {
    fd: OwnedFd,
}

/// What waiting for a request came to.
pub enum Received {
    /// A request of this many bytes is in the buffer.
    Request(usize),
    /// The reader was told to stop.
    Stopped,
    /// The filesystem was unmounted (or the connection aborted).
    Gone,
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

impl Channel {
    pub fn new(fd: OwnedFd) -> io::Result<Channel> {
        let raw = fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(last_error());
        }
        Ok(Channel { fd })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A new descriptor of this connection with a queue of its own
    /// (`FUSE_DEV_IOC_CLONE`): the requests a reader takes through it end with
    /// `ECONNABORTED` if that reader dies, instead of waiting for a reply forever.
    pub fn clone_dev(&self) -> io::Result<Channel> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?;
        let mut src: u32 = self.raw() as u32;
        // SAFETY: FUSE_DEV_IOC_CLONE takes a pointer to the source descriptor.
        if unsafe { libc::ioctl(dev.as_raw_fd(), abi::DEV_IOC_CLONE as libc::Ioctl, &mut src) } < 0
        {
            return Err(last_error());
        }
        Channel::new(dev.into())
    }

    /// Waits for the next request (or `stop`) and reads it into `buf`. A
    /// request already queued is read without waiting (no `poll` first: under
    /// load there nearly always is one).
    pub fn receive(&self, buf: &mut [u8], stop: &Stop) -> io::Result<Received> {
        loop {
            if stop.is_set() {
                return Ok(Received::Stopped);
            }
            // SAFETY: reading into a buffer we own.
            let r = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
            if r >= 0 {
                return Ok(Received::Request(r as usize));
            }
            match last_error().raw_os_error() {
                Some(libc::EAGAIN) => {}
                // Interrupted before we took it.
                Some(libc::EINTR) | Some(libc::ENOENT) => continue,
                Some(libc::ENODEV) => return Ok(Received::Gone),
                _ => return Err(last_error()),
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = last_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if fds[1].revents != 0 {
                return Ok(Received::Stopped);
            }
            if fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0
                && fds[0].revents & libc::POLLIN == 0
            {
                return Ok(Received::Gone);
            }
            // Readable (or another reader took it first): read again.
        }
    }

    /// Writes one reply (or notification) from `parts`, whole.
    pub fn send(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
        // SAFETY: IoSlice is ABI-compatible with iovec.
        let r = unsafe {
            libc::writev(
                self.raw(),
                parts.as_ptr().cast(),
                parts.len().min(libc::c_int::MAX as usize) as libc::c_int,
            )
        };
        if r < 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Writes one reply of `len` bytes, whole in pipe `from`, by splicing it.
    pub fn splice(&self, from: RawFd, len: usize) -> io::Result<usize> {
        // SAFETY: splice between two descriptors; no memory of ours is touched.
        let r = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                self.raw(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        if r < 0 {
            return Err(last_error());
        }
        Ok(r as usize)
    }

    /// Asks the kernel to send again every request some reader took and never
    /// answered (`FUSE_NOTIFY_RESEND`): a daemon that died took them with it.
    pub fn notify_resend(&self) -> io::Result<()> {
        let mut h = abi::Out::default();
        h.u32(abi::OUT_HEADER as u32).i32(abi::NOTIFY_RESEND).u64(0);
        self.send(&[IoSlice::new(&h.0)])
    }

    /// Registers `file` as a passthrough backing file; returns its id.
    pub fn open_backing(&self, file: BorrowedFd<'_>) -> io::Result<u32> {
        #[repr(C)]
        struct BackingMap {
            fd: i32,
            flags: u32,
            padding: u64,
        }
        let map = BackingMap {
            fd: file.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: FUSE_DEV_IOC_BACKING_OPEN takes a pointer to a fuse_backing_map.
        let id = unsafe { libc::ioctl(self.raw(), abi::DEV_IOC_BACKING_OPEN as libc::Ioctl, &map) };
        if id < 0 {
            return Err(last_error());
        }
        Ok(id as u32)
    }

    /// Drops backing file `id` (once no open file uses it).
    pub fn close_backing(&self, id: u32) {
        // SAFETY: FUSE_DEV_IOC_BACKING_CLOSE takes a pointer to the id.
        unsafe { libc::ioctl(self.raw(), abi::DEV_IOC_BACKING_CLOSE as libc::Ioctl, &id) };
    }
}

impl AsFd for Channel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Tells readers blocked in [`Channel::receive`] to stop; once set it stays set.
pub struct Stop {
    fd: OwnedFd,
    set: std::sync::atomic::AtomicBool,
}

impl Stop {
    pub fn new() -> io::Result<Stop> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: a descriptor just made, owned from here.
        Ok(Stop {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            set: Default::default(),
        })
    }

    fn is_set(&self) -> bool {
        self.set.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn stop(&self) {
        self.set.store(true, std::sync::atomic::Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: an 8-byte write to an eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}
