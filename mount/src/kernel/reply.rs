//! [`Reply`]: the one answer to one request, which may move to any thread or task
//! and be sent later. Data goes out as the buffers it is in (one `writev`: the
//! header and every chunk, no copy in user space). A reply dropped unsent answers
//! `EIO`, so no request ever waits forever on a lost reply.

use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::abi::{self, FileAttr, Out};
use super::channel::Channel;
use shoal::store::pipe::Pipe;

pub struct Reply {
    unique: u64,
    chan: Arc<Channel>,
    /// Answers not yet sent, across the session: a planned handover waits for
    /// this to reach zero.
    pending: Arc<AtomicUsize>,
    sent: bool,
}

impl Reply {
    pub(super) fn new(unique: u64, chan: Arc<Channel>, pending: Arc<AtomicUsize>) -> Reply {
        pending.fetch_add(1, Relaxed);
        Reply {
            unique,
            chan,
            pending,
            sent: false,
        }
    }

    fn send(mut self, error: i32, parts: &[&[u8]]) {
        self.write(error, parts);
    }

    fn write(&mut self, error: i32, parts: &[&[u8]]) {
        let len = abi::OUT_HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut h = Out::default();
        h.u32(len as u32).i32(-error).u64(self.unique);
        let mut iov = Vec::with_capacity(parts.len() + 1);
        iov.push(IoSlice::new(&h.0));
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

    /// Readies empty `pipe` for a reply of `n` bytes of data: the header goes in
    /// first, the data is to follow.
    pub fn head_pipe(&self, pipe: &mut Pipe, n: usize) -> std::io::Result<()> {
        let mut h = Out::default();
        h.u32((abi::OUT_HEADER + n) as u32).i32(0).u64(self.unique);
        pipe.prefix(&h.0)
    }

    /// Sends the reply [`Self::head_pipe`] began, its data now in `pipe` too,
    /// spliced to the device (the bytes are not read into this process). If the
    /// kernel takes no reply from a pipe, it goes out as a copy.
    pub fn piped(mut self, pipe: &mut Pipe) {
        let len = pipe.held();
        match self.chan.splice(pipe.read_fd(), len) {
            Ok(n) if n == len => pipe.taken(n),
            // Interrupted, or its caller is gone: nobody to answer.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => drop(pipe.clear()),
            r => {
                if let Err(e) = r {
                    tracing::debug!("FUSE reply not spliced: {e}");
                }
                // The device takes a reply whole or not at all: what is still
                // in the pipe goes out the copying way.
                let mut data = vec![0u8; len];
                return match pipe.drain(&mut data) {
                    Ok(n) if n + abi::OUT_HEADER == len => self.write(0, &[&data[..n]]),
                    // Gone with a failed splice: the read can only fail.
                    _ => {
                        let _ = pipe.clear();
                        self.write(libc::EIO, &[]);
                    }
                };
            }
        }
        self.answered();
    }

    pub fn error(self, errno: i32) {
        self.send(errno, &[]);
    }

    pub fn ok(self) {
        self.send(0, &[]);
    }

    /// A lookup's answer.
    pub fn entry(self, attr: &FileAttr, ttl: Duration) {
        let mut o = Out::default();
        abi::entry_out(&mut o, attr, ttl);
        self.send(0, &[&o.0]);
    }

    /// A getattr's answer (`fuse_attr_out`).
    pub fn attr(self, attr: &FileAttr, ttl: Duration) {
        let mut o = Out::default();
        o.u64(ttl.as_secs()).u32(ttl.subsec_nanos()).u32(0);
        attr.write(&mut o);
        self.send(0, &[&o.0]);
    }

    /// An open's answer: the handle, `FOPEN_*` flags, and a passthrough backing
    /// file's id.
    pub fn open(self, fh: u64, flags: u32, backing: Option<u32>) {
        let mut o = Out::default();
        let flags = flags | backing.map_or(0, |_| abi::fopen::PASSTHROUGH);
        o.u64(fh).u32(flags).i32(backing.map_or(0, |id| id as i32));
        self.send(0, &[&o.0]);
    }

    /// A read's answer, from the buffers the bytes are in.
    pub fn data(self, parts: &[Bytes]) {
        let slices: Vec<&[u8]> = parts.iter().map(|b| &b[..]).collect();
        self.send(0, &slices);
    }

    /// A small answer already laid out (a directory buffer, statfs, xattr sizes).
    pub fn bytes(self, b: &[u8]) {
        self.send(0, &[b]);
    }

    /// `fuse_statfs_out` for a volume of `blocks` blocks of `bsize` bytes.
    pub fn statfs(self, blocks: u64, files: u64, bsize: u32, namelen: u32) {
        let mut o = Out::default();
        o.u64(blocks).u64(blocks).u64(blocks).u64(files).u64(files);
        o.u32(bsize).u32(namelen).u32(bsize).u32(0).zeros(24);
        self.send(0, &[&o.0]);
    }

    /// `fuse_getxattr_out`: how large an attribute (or list) would be.
    pub fn xattr_size(self, size: u32) {
        let mut o = Out::default();
        o.u32(size).u32(0);
        self.send(0, &[&o.0]);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.sent {
            self.write(libc::EIO, &[]);
        }
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

    pub fn send(self, reply: Reply) {
        reply.bytes(&self.out.0);
    }
}
