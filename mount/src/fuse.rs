//! The FUSE adapter: forwards each kernel request to [`Fs`] on the shared tokio
//! runtime, with the reply moved into the task, so FUSE threads never wait on the
//! network. Nothing here decides anything about S3.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use crate::fs::{Attr, DirItem, Fs, FsError, Kind};
use crate::metrics::MountMetrics;
use crate::passthrough::Open;

/// FUSE requests carry at most this much: 256 pages, the kernel's limit here.
/// fuser derives `max_pages` from max(`max_write`, `max_readahead`), so a read-only
/// mount still sets `max_write` to get 1 MiB reads.
const MAX_REQUEST: u32 = 1 << 20;
/// Background (readahead) requests the kernel may have outstanding: enough for a
/// read window of 1 MiB requests across a few readers; congestion starts at 3/4.
const MAX_BACKGROUND: u16 = 64;
const CONGESTION_THRESHOLD: u16 = 48;

pub struct FuseFs {
    fs: Arc<Fs>,
    rt: tokio::runtime::Handle,
    ttl: Duration,
    metrics: Arc<MountMetrics>,
}

impl FuseFs {
    pub fn new(fs: Arc<Fs>, rt: tokio::runtime::Handle, metrics: Arc<MountMetrics>) -> Self {
        let ttl = fs.options().metadata_ttl;
        Self {
            fs,
            rt,
            ttl,
            metrics,
        }
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: if a.kind == Kind::Dir { 2 } else { 1 },
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        // Large I/O hint: cp and friends size their buffers from it.
        blksize: MAX_REQUEST,
        flags: 0,
    }
}

impl FuseFs {
    /// Runs `f` on the runtime and records how long the operation took.
    fn spawn<F>(&self, op: &'static str, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let m = self.metrics.clone();
        let t = Instant::now();
        self.rt.spawn(async move {
            f.await;
            m.observe_op(op, t.elapsed());
        });
    }
}

impl FuseFs {
    /// Hands the entries of open directory `fh` from `offset` on to `add` (with
    /// their attributes if `attrs`), until it says the reply is full (`true`).
    /// `readdir` and `readdirplus` both list through here.
    fn each_entry(
        &self,
        fh: FileHandle,
        offset: u64,
        attrs: bool,
        mut add: impl FnMut(&DirItem, Option<&Attr>) -> bool,
    ) -> Result<(), Errno> {
        let items = self.fs.dir_items(fh.0, offset).map_err(|e| errno(&e))?;
        for d in items {
            let attr = attrs.then(|| self.fs.getattr_cached(d.ino).ok()).flatten();
            if add(&d, attr.as_ref()) {
                break;
            }
        }
        Ok(())
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_REQUEST);
        // The kernel grants at most 128 KiB here; the mount raises the device's
        // read_ahead_kb after mounting instead.
        let _ = config.set_max_readahead(MAX_REQUEST);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(CONGESTION_THRESHOLD);
        let _ = config.add_capabilities(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS
                | InitFlags::FUSE_ASYNC_READ,
        );
        // Files the disk tier holds whole are read by the kernel itself; the
        // backing files sit on a plain filesystem (stack depth 1).
        if self.fs.has_disk() {
            let on = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !on {
                tracing::warn!("this kernel offers no FUSE passthrough: files in the disk tier are read through the mount");
            }
            self.fs.set_passthrough(on);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str().map(str::to_owned) else {
            return reply.error(Errno::ENOENT);
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.spawn("lookup", async move {
            match fs.lookup(parent.0, &name).await {
                Ok(a) => reply.entry(&ttl, &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.spawn("getattr", async move {
            match fs.getattr(ino.0).await {
                Ok(a) => reply.attr(&ttl, &file_attr(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY
            || flags.0 & (libc::O_TRUNC | libc::O_CREAT) != 0
        {
            return reply.error(Errno::EROFS);
        }
        let (fs, metrics) = (self.fs.clone(), self.metrics.clone());
        self.spawn("open", async move {
            match fs.open(ino.0).await {
                Ok(o) => {
                    let how = match &o.backing {
                        Some(file) => fs
                            .passthrough
                            .open(ino.0, o.fh, &o.etag, || reply.open_backing(file)),
                        None if fs.passthrough.open_cached(ino.0, o.fh) => Open::Cached,
                        None => Open::Retry,
                    };
                    match how {
                        Open::Backed(id) => {
                            metrics.passthrough_opens.inc();
                            return reply.opened_passthrough(
                                FileHandle(o.fh),
                                FopenFlags::empty(),
                                &id,
                            );
                        }
                        // The inode holds another version's backing file, and the
                        // path has a new inode now: ESTALE makes the kernel look
                        // the path up again and open that.
                        Open::Retry => {
                            fs.release(o.fh);
                            return reply.error(Errno::ESTALE);
                        }
                        Open::Cached => {}
                    }
                    // Keep the page cache only when the version is the one it holds;
                    // bypass it when another version is open through it.
                    let f = if o.direct_io {
                        FopenFlags::FOPEN_DIRECT_IO
                    } else if o.keep_cache {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    reply.opened(FileHandle(o.fh), f)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        self.spawn("read", async move {
            match fs.read(fh.0, offset, size).await {
                Ok(b) => reply.data(&b),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.release(fh.0);
        self.fs.passthrough.release(fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fs = self.fs.clone();
        self.spawn("opendir", async move {
            match fs.opendir(ino.0).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.each_entry(fh, offset, false, |d, _| {
            reply.add(INodeNo(d.ino), d.next, file_type(d.kind), &d.name)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.ttl;
        match self.each_entry(fh, offset, true, |d, attr| match attr {
            // Attributes come from the listing: no HEAD per file.
            Some(a) => reply.add(
                INodeNo(d.ino),
                d.next,
                &d.name,
                &ttl,
                &file_attr(a),
                Generation(0),
            ),
            None => false,
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // An object store has no fixed size; report a large, empty-looking volume
        // so tools that check free space do not refuse to read.
        reply.statfs(
            1 << 40,
            1 << 40,
            1 << 40,
            1 << 32,
            1 << 32,
            MAX_REQUEST,
            255,
            MAX_REQUEST,
        );
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is ever written, so there is nothing to flush.
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    // Everything that would change the bucket: read-only.
    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _r: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _l: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _f: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _f: i32,
        reply: fuser::ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }
}
