//! Answers, one type per kind of operation (as `fuser`'s are), so a request can
//! only be answered with what its operation returns: a READ with data, a LOOKUP
//! with an entry. Each may move to any thread or task and be sent later. Data
//! goes out as the buffers it is in (one `writev`: the header and every chunk, no
//! copy in user space) or from a pipe (`splice`). An answer dropped unsent is
//! `EIO`, so no request ever waits forever on a lost reply.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::abi::{self, FileAttr, Out};
use super::channel::Channel;

/// The one answer owed to one request, untyped: what every typed reply holds.
struct Reply {
    unique: u64,
    chan: Arc<Channel>,
    /// Answers not yet sent, across the session: a planned handover waits for
    /// this to reach zero.
    pending: Arc<AtomicUsize>,
    sent: bool,
}

impl Reply {
    fn write(&mut self, error: i32, parts: &[&[u8]]) {
        let len = abi::OUT_HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut iov = Vec::with_capacity(parts.len() + 1);
        let h = header(self.unique, error, len);
        iov.push(IoSlice::new(&h));
        iov.extend(
            parts
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| IoSlice::new(p)),
        );
        if let Err(e) = self.chan.send(&iov) {
            // ENOENT: the request was interrupted or its caller is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!("FUSE reply not delivered: {e}");
            }
        }
        self.answered();
    }

    fn answered(&mut self) {
        self.sent = true;
        self.pending.fetch_sub(1, Relaxed);
    }

    fn send(mut self, error: i32, parts: &[&[u8]]) {
        self.write(error, parts);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.sent {
            self.write(libc::EIO, &[]);
        }
    }
}

/// `fuse_out_header` of an answer of `len` bytes in all.
fn header(unique: u64, error: i32, len: usize) -> [u8; abi::OUT_HEADER] {
    let mut h = Out::default();
    h.u32(len as u32).i32(-error).u64(unique);
    h.0.try_into().expect("the header is 16 bytes")
}

macro_rules! typed {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub struct $name(Reply);

        impl $name {
            pub(crate) fn new(unique: u64, chan: Arc<Channel>, pending: Arc<AtomicUsize>) -> Self {
                pending.fetch_add(1, Relaxed);
                $name(Reply { unique, chan, pending, sent: false })
            }

            /// Fails the operation with `errno`.
            pub fn error(self, errno: i32) {
                self.0.send(errno, &[]);
            }
        }
    )*};
}

typed! {
    /// The answer to an operation that returns nothing (RELEASE, FLUSH, ACCESS...).
    ReplyEmpty;
    /// A LOOKUP's answer: the inode's attributes, and how long both may be cached.
    ReplyEntry;
    /// A GETATTR's answer.
    ReplyAttr;
    /// An OPEN's or OPENDIR's answer: the handle and how it is read.
    ReplyOpen;
    /// A READ's answer: bytes, from buffers or from a pipe.
    ReplyData;
    /// A READDIR's or READDIRPLUS's answer, built in a [`DirBuf`].
    ReplyDir;
    /// A STATFS's answer.
    ReplyStatfs;
    /// A GETXATTR's or LISTXATTR's answer: a size, or the bytes.
    ReplyXattr;
}

impl ReplyEmpty {
    pub fn ok(self) {
        self.0.send(0, &[]);
    }
}

impl ReplyEntry {
    pub fn entry(self, attr: &FileAttr, ttl: Duration) {
        let mut o = Out::default();
        abi::entry_out(&mut o, attr, ttl);
        self.0.send(0, &[&o.0]);
    }
}

impl ReplyAttr {
    /// `fuse_attr_out`.
    pub fn attr(self, attr: &FileAttr, ttl: Duration) {
        let mut o = Out::default();
        o.u64(ttl.as_secs()).u32(ttl.subsec_nanos()).u32(0);
        attr.write(&mut o);
        self.0.send(0, &[&o.0]);
    }
}

impl ReplyOpen {
    /// The handle, `FOPEN_*` flags, and a passthrough backing file's id.
    pub fn opened(self, fh: u64, flags: u32, backing: Option<u32>) {
        let mut o = Out::default();
        let flags = flags | backing.map_or(0, |_| abi::fopen::PASSTHROUGH);
        o.u64(fh).u32(flags).i32(backing.map_or(0, |id| id as i32));
        self.0.send(0, &[&o.0]);
    }
}

/// What became of a reply sent from a pipe.
pub enum Spliced {
    /// The device took it whole.
    Sent,
    /// The request was interrupted or its caller is gone: nobody to answer.
    Gone,
    /// The device took nothing: the reply is still owed, with the pipe's bytes
    /// (its header first) still in the pipe, to go out the copying way.
    Refused(ReplyData, std::io::Error),
}

impl ReplyData {
    /// The bytes read, from the buffers they are in.
    pub fn data(self, parts: &[Bytes]) {
        let slices: Vec<&[u8]> = parts.iter().map(|b| &b[..]).collect();
        self.0.send(0, &slices);
    }

    /// The bytes read, in one buffer.
    pub fn bytes(self, b: &[u8]) {
        self.0.send(0, &[b]);
    }

    /// The header of this reply carrying `n` bytes of data: what goes into a
    /// pipe before the data, for [`Self::splice`].
    pub fn header(&self, n: usize) -> [u8; abi::OUT_HEADER] {
        header(self.0.unique, 0, abi::OUT_HEADER + n)
    }

    /// Sends the reply whole from pipe `from`, which holds its [`Self::header`]
    /// and then its data, `len` bytes in all, by splicing (the bytes never
    /// enter this process). The device takes a reply whole or not at all.
    pub fn splice(mut self, from: BorrowedFd<'_>, len: usize) -> Spliced {
        match self.0.chan.splice(from.as_raw_fd(), len) {
            Ok(n) if n == len => {
                self.0.answered();
                Spliced::Sent
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.0.answered();
                Spliced::Gone
            }
            Ok(n) => Spliced::Refused(
                self,
                std::io::Error::other(format!("{n} of {len} bytes spliced")),
            ),
            Err(e) => Spliced::Refused(self, e),
        }
    }
}

impl ReplyStatfs {
    /// `fuse_statfs_out` for a volume of `blocks` blocks of `bsize` bytes.
    pub fn statfs(self, blocks: u64, files: u64, bsize: u32, namelen: u32) {
        let mut o = Out::default();
        o.u64(blocks).u64(blocks).u64(blocks).u64(files).u64(files);
        o.u32(bsize).u32(namelen).u32(bsize).u32(0).zeros(24);
        self.0.send(0, &[&o.0]);
    }
}

impl ReplyXattr {
    /// `fuse_getxattr_out`: how large the attribute (or list) would be.
    pub fn size(self, size: u32) {
        let mut o = Out::default();
        o.u32(size).u32(0);
        self.0.send(0, &[&o.0]);
    }

    /// The attribute's (or list's) bytes.
    pub fn data(self, b: &[u8]) {
        self.0.send(0, &[b]);
    }
}

/// A `READDIR` or `READDIRPLUS` answer, filled until it holds `max` bytes.
pub struct DirBuf {
    out: Out,
    max: usize,
    plus: bool,
}

impl DirBuf {
    pub fn new(max: u32, plus: bool) -> DirBuf {
        DirBuf {
            out: Out::default(),
            max: max as usize,
            plus,
        }
    }

    /// Adds an entry whose successor is at offset `next`; false once it does not
    /// fit (the kernel asks again from there).
    pub fn push(&mut self, next: u64, name: &str, attr: &FileAttr, ttl: Duration) -> bool {
        let name = name.as_bytes();
        let dirent = 24 + name.len();
        let size = (if self.plus { 128 } else { 0 }) + dirent.div_ceil(8) * 8;
        if self.out.0.len() + size > self.max {
            return false;
        }
        if self.plus {
            abi::entry_out(&mut self.out, attr, ttl);
        }
        self.out
            .u64(attr.ino)
            .u64(next)
            .u32(name.len() as u32)
            .u32(abi::dirent_type(attr.mode))
            .bytes(name)
            .align8();
        true
    }

    pub fn send(self, reply: ReplyDir) {
        reply.0.send(0, &[&self.out.0]);
    }
}
