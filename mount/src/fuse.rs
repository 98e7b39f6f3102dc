//! The FUSE adapter: each kernel request goes to [`Fs`] on the shared tokio
//! runtime with its reply moved into the task, so the reader threads never wait
//! on the network. Nothing here decides anything about S3.

use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use shoal::store::pipe::Pipe;

use crate::fs::{Attr, Fs, FsError, Kind, PipeOut, ReadOut};
use crate::kernel::abi::init;
use crate::kernel::{
    Channel, DirBuf, FileAttr, Header, Negotiated, ReplyAttr, ReplyData, ReplyDir, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Spliced, Wants,
};
use crate::metrics::MountMetrics;
use crate::passthrough::{BackingId, Open};
use crate::pipes::Pipes;
use crate::replies::Replies;

/// FUSE requests carry at most this much: 256 pages, the kernel's limit here.
pub const MAX_REQUEST: u32 = 1 << 20;

/// What this filesystem asks of the kernel at INIT.
pub fn wants(passthrough: bool) -> Wants {
    // ASYNC_DIO: an asynchronous direct read (aio, io_uring) of several
    // requests' size sends them all at once (a plain pread sends them one
    // after another); DIRECT_IO_ALLOW_MMAP: files opened with direct I/O can
    // still be mapped.
    let mut flags = init::ASYNC_READ
        | init::ASYNC_DIO
        | init::DIRECT_IO_ALLOW_MMAP
        | init::DO_READDIRPLUS
        | init::READDIRPLUS_AUTO
        | init::PARALLEL_DIROPS
        | init::MAX_PAGES;
    // Files the disk tier holds whole are read by the kernel itself.
    if passthrough {
        flags |= init::PASSTHROUGH;
    }
    Wants {
        flags,
        // The kernel grants at most 128 KiB here; the mount raises the device's
        // read_ahead_kb after mounting instead.
        max_readahead: MAX_REQUEST,
        // Background (readahead) requests outstanding: enough for a read window
        // of 1 MiB requests across a few readers; congestion starts at 3/4.
        max_background: 64,
        congestion_threshold: 48,
        max_pages: (MAX_REQUEST / 4096) as u16,
    }
}

pub struct FuseFs {
    fs: Arc<Fs>,
    rt: tokio::runtime::Handle,
    metrics: Arc<MountMetrics>,
    chan: Arc<Channel>,
    pipes: Arc<Pipes>,
    replies: Replies,
}

impl FuseFs {
    pub fn new(
        fs: Arc<Fs>,
        rt: tokio::runtime::Handle,
        metrics: Arc<MountMetrics>,
        chan: Arc<Channel>,
        agreed: &Negotiated,
        replies: Option<u64>,
    ) -> Self {
        if fs.has_disk() {
            if !agreed.passthrough() {
                tracing::warn!("this kernel offers no FUSE passthrough: files in the disk tier are read through the mount");
            }
            fs.set_passthrough(agreed.passthrough());
        }
        fs.set_ranges_direct(agreed.direct_io_mmap());
        Self {
            fs,
            rt,
            metrics,
            chan,
            // An idle pipe per reply that may be in the making.
            pipes: Arc::new(Pipes::new(
                replies.map_or(crate::pipes::IDLE, |b| (b / MAX_REQUEST as u64) as usize),
            )),
            replies: Replies::new(replies),
        }
    }

    /// Runs `f` on the runtime and records how long the operation took.
    fn spawn<F>(&self, op: &'static str, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.metrics.count_op(op);
        let m = self.metrics.clone();
        let t = Instant::now();
        // Boxed: an operation's state is large, and the task moves it.
        let f = Box::pin(f);
        self.rt.spawn(async move {
            f.await;
            m.observe_op(op, t.elapsed());
        });
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    let since = a.mtime.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (kind, nlink) = match a.kind {
        Kind::File => (libc::S_IFREG, 1),
        Kind::Dir => (libc::S_IFDIR, 2),
    };
    FileAttr {
        ino: a.ino,
        size: a.size,
        blocks: a.size.div_ceil(512),
        time: (since.as_secs(), since.subsec_nanos()),
        mode: kind | a.perm as u32,
        nlink,
        uid: a.uid,
        gid: a.gid,
        // Large I/O hint: cp and friends size their buffers from it.
        blksize: MAX_REQUEST,
    }
}

fn errno(e: &FsError) -> i32 {
    e.errno()
}

impl crate::kernel::Filesystem for FuseFs {
    fn lookup(&self, h: &Header, name: &[u8], reply: ReplyEntry) {
        let Ok(name) = std::str::from_utf8(name).map(str::to_owned) else {
            self.metrics.count_op("lookup");
            return reply.error(libc::ENOENT);
        };
        let (fs, ino) = (self.fs.clone(), h.nodeid);
        self.spawn("lookup", async move {
            match fs.lookup(ino, &name).await {
                Ok(a) => reply.entry(&file_attr(&a), a.valid),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn getattr(&self, h: &Header, reply: ReplyAttr) {
        let (fs, ino) = (self.fs.clone(), h.nodeid);
        self.spawn("getattr", async move {
            match fs.getattr(ino).await {
                Ok(a) => reply.attr(&file_attr(&a), a.valid),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn open(&self, h: &Header, flags: i32, reply: ReplyOpen) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_TRUNC | libc::O_CREAT) != 0
        {
            return reply.error(libc::EROFS);
        }
        let (fs, ino) = (self.fs.clone(), h.nodeid);
        let (metrics, chan) = (self.metrics.clone(), self.chan.clone());
        self.spawn("open", async move {
            open(&fs, ino, reply, &metrics, &chan).await
        });
    }

    fn read(&self, _h: &Header, fh: u64, offset: u64, size: u32, direct: bool, reply: ReplyData) {
        let (fs, pipes, replies) = (self.fs.clone(), self.pipes.clone(), self.replies.clone());
        self.spawn("read", async move {
            // The reply's memory first: past the budget, a read waits here.
            let _lease = replies.lease(size).await;
            // A pipe only for what the page cache will keep.
            let mut pipe = if direct { None } else { pipes.take() };
            let head = |p: &mut Pipe, n: usize| p.prefix(&reply.header(n));
            let out = pipe.as_mut().map(|pipe| PipeOut { pipe, head: &head });
            match fs.read(fh, offset, size, !direct, out).await {
                Ok(ReadOut::Parts(parts)) => reply.data(&parts),
                Ok(ReadOut::Piped) => match pipe.as_mut() {
                    Some(p) => piped(reply, p),
                    None => reply.error(libc::EIO),
                },
                Err(e) => reply.error(errno(&e)),
            }
            if let Some(p) = pipe {
                pipes.give(p);
            }
        })
    }

    fn forget(&self, _h: &Header, _nlookup: u64) {
        self.metrics.count_op("forget");
    }

    fn batch_forget(&self, _h: &Header, _items: &[(u64, u64)]) {
        self.metrics.count_op("batch_forget");
    }

    fn release(&self, _h: &Header, fh: u64, reply: ReplyEmpty) {
        self.metrics.count_op("release");
        self.fs.release(fh);
        self.fs.passthrough.release(fh);
        reply.ok();
    }

    fn opendir(&self, h: &Header, reply: ReplyOpen) {
        let (fs, ino) = (self.fs.clone(), h.nodeid);
        self.spawn("opendir", async move {
            match fs.opendir(ino).await {
                Ok(fh) => reply.opened(fh, 0, None),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn readdir(&self, _h: &Header, fh: u64, offset: u64, size: u32, plus: bool, reply: ReplyDir) {
        self.metrics
            .count_op(if plus { "readdirplus" } else { "readdir" });
        let items = match self.fs.dir_items(fh, offset) {
            Ok(items) => items,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut buf = DirBuf::new(size, plus);
        for d in items {
            // Attributes come from the listing: no HEAD per file. The kernel
            // keeps the name and them for what is left of the listing's ttl.
            let Ok(a) = self.fs.getattr_cached(d.ino) else {
                continue;
            };
            let mut attr = file_attr(&a);
            attr.ino = d.ino;
            if !buf.push(d.next, &d.name, &attr, a.valid) {
                break;
            }
        }
        buf.send(reply);
    }

    fn releasedir(&self, _h: &Header, fh: u64, reply: ReplyEmpty) {
        self.metrics.count_op("releasedir");
        self.fs.releasedir(fh);
        reply.ok();
    }

    // An object store has no fixed size; report a large, empty-looking volume
    // so tools that check free space do not refuse to read.
    fn statfs(&self, _h: &Header, reply: ReplyStatfs) {
        self.metrics.count_op("statfs");
        reply.statfs(1 << 40, 1 << 32, MAX_REQUEST, 255)
    }

    // Nothing is ever written, so there is nothing to flush.
    fn flush(&self, _h: &Header, reply: ReplyEmpty) {
        self.metrics.count_op("flush");
        reply.ok()
    }

    fn getxattr(&self, _h: &Header, _size: u32, reply: ReplyXattr) {
        self.metrics.count_op("getxattr");
        reply.error(libc::ENODATA)
    }

    fn listxattr(&self, _h: &Header, size: u32, reply: ReplyXattr) {
        self.metrics.count_op("listxattr");
        match size {
            0 => reply.size(0),
            _ => reply.data(&[]),
        }
    }

    fn access(&self, _h: &Header, mask: u32, reply: ReplyEmpty) {
        self.metrics.count_op("access");
        if mask & libc::W_OK as u32 != 0 {
            reply.error(libc::EROFS)
        } else {
            reply.ok()
        }
    }
}

/// Sends a read's answer from `pipe`, which holds its header and data; what the
/// device does not take from the pipe goes out as a copy.
fn piped(reply: ReplyData, pipe: &mut Pipe) {
    let len = pipe.held();
    // SAFETY: the pipe outlives the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(pipe.read_fd()) };
    match reply.splice(fd, len) {
        Spliced::Sent => pipe.taken(len),
        Spliced::Gone => drop(pipe.clear()),
        Spliced::Refused(reply, e) => {
            tracing::debug!("FUSE reply not spliced: {e}");
            let mut data = vec![0u8; len];
            match pipe.drain(&mut data) {
                Ok(n) if n + crate::kernel::abi::OUT_HEADER == len => reply.bytes(&data[..n]),
                // Gone with a failed splice: the read can only fail.
                _ => {
                    let _ = pipe.clear();
                    reply.error(libc::EIO);
                }
            }
        }
    }
}

/// Opens inode `ino`: through a passthrough backing file when the disk tier holds
/// it whole, else through the daemon, keeping or bypassing the page cache.
async fn open(
    fs: &Arc<Fs>,
    ino: u64,
    reply: ReplyOpen,
    metrics: &MountMetrics,
    chan: &Arc<Channel>,
) {
    let o = match fs.open(ino).await {
        Ok(o) => o,
        Err(e) => return reply.error(errno(&e)),
    };
    let how = match &o.backing {
        Some(file) => fs
            .passthrough
            .open(ino, o.fh, &o.etag, || BackingId::register(chan, file)),
        None if fs.passthrough.open_cached(ino, o.fh) => Open::Cached,
        None => Open::Retry,
    };
    match how {
        Open::Backed(id) => {
            metrics.passthrough_opens.inc();
            reply.opened(o.fh, 0, Some(id.id))
        }
        // The inode holds another version's backing file, and the path has a new
        // inode now: ESTALE makes the kernel look the path up again and open that.
        Open::Retry => {
            fs.release(o.fh);
            reply.error(libc::ESTALE)
        }
        // Keep the page cache only when the version is the one it holds; bypass
        // it when another version is open through it.
        Open::Cached => {
            let f = if o.direct_io {
                crate::kernel::abi::fopen::DIRECT_IO
            } else if o.keep_cache {
                crate::kernel::abi::fopen::KEEP_CACHE
            } else {
                0
            };
            reply.opened(o.fh, f, None)
        }
    }
}
