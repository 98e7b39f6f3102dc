//! The filesystem, as async functions over inode numbers: no FUSE types here, so it
//! is tested without a kernel ([`crate::fuse`] only forwards to it).
//!
//! [`Fs`] holds three things, each its own type, and the cluster reader:
//! - [`namespace::Namespace`]: the inode table ([`inodes`]), directories as
//!   `ListObjectsV2` pages with delimiter `/` under the mount's prefix (cached for
//!   `metadata_ttl`, one listing in flight per directory however many ask; a prefix
//!   with keys under it is an implicit directory; a `dir/` marker object is the
//!   directory itself; a key that is both a file and a prefix shows the
//!   directory; keys that cannot be POSIX names are skipped and counted),
//!   lookups without a listing, and a negative cache.
//! - [`handles::Handles`]: open files, each pinned to the version (ETag) its open
//!   saw and read through the cluster reader, and open directories, each one
//!   listing read end to end.
//! - [`walk::Walks`]: entries visited in listing order (files opened, directories
//!   opened) have the entries after them fetched ahead: a file's first block, a
//!   directory's listing.
//!
//! A read: [`Fs::read`] finds the handle, moves its [`readahead`] (reads that
//! continue the last one keep blocks in flight from one up, doubling while
//! throughput still rises, to the in-flight budget; reads the kernel sends out
//! of order on its threads stay one run; a file's first read and any jump fetch
//! nothing ahead, keeping the limit learned), and asks the cluster reader for
//! the bytes: slices of whole blocks for a sequential run, each answered as
//! soon as its own bytes have arrived (the reply goes out from the block's
//! buffers), just each block's part of the range for any other read. A file's
//! first read tells its directory's walk whether its files are read whole.
//! Errno lives in one place, [`error`].

mod error;
mod handles;
mod inodes;
pub mod names;
mod namespace;
mod readahead;
mod types;
mod walk;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use shoal::cluster::{ClusterReader, Piped};
use shoal::store::pipe::Pipe;

pub use error::FsError;
pub use handles::{DirItem, Opened};
pub use types::*;

use crate::journal::{Journal, Record, State};
use handles::{Handles, OpenFile};
use namespace::Namespace;
use readahead::Readahead;
use walk::Walks;

/// A pipe a read's bytes may be spliced into, for the kernel.
pub struct PipeOut<'a> {
    pub pipe: &'a mut Pipe,
    /// Puts what goes before `n` bytes of data into the empty pipe.
    pub head: &'a (dyn Fn(&mut Pipe, usize) -> std::io::Result<()> + Sync),
}

/// Where a read's bytes are.
pub enum ReadOut {
    /// In these buffers.
    Parts(Vec<Bytes>),
    /// In the pipe it was given, after its head.
    Piped,
}

pub struct Fs {
    opts: Arc<FsOptions>,
    ns: Arc<Namespace>,
    handles: Handles,
    walks: Walks,
    reader: Arc<ClusterReader>,
    /// The mount's own disk tier, when it has one: what it holds whole is
    /// handed to the kernel as a passthrough backing file.
    disk: Option<Arc<shoal::blocks::FileTier>>,
    /// Which inodes the kernel reads through backing files (shared with the FUSE
    /// adapter, which registers them).
    pub passthrough: Arc<crate::passthrough::Passthrough>,
    /// Files of formats read in ranges are opened with direct I/O (the kernel
    /// agreed to map such files too): see [`shoal::formats`].
    ranges_direct: std::sync::atomic::AtomicBool,
    /// Archived objects someone tried to open, each logged once.
    archived_told: Mutex<std::collections::HashSet<String>>,
    pub stats: Arc<FsStats>,
    /// What a successor needs, kept outside this process (`None`: nothing is).
    journal: Option<Arc<Journal>>,
}

impl Fs {
    /// A filesystem reading through `reader`, with `journal` keeping what a
    /// successor would need (none: the mount ends with this process).
    pub fn new(
        opts: FsOptions,
        reader: Arc<ClusterReader>,
        disk: Option<Arc<shoal::blocks::FileTier>>,
        journal: Option<Arc<Journal>>,
    ) -> Fs {
        let opts = Arc::new(opts);
        let stats = Arc::new(FsStats::default());
        let passthrough = Arc::new(crate::passthrough::Passthrough::new(journal.clone()));
        let source = if opts.metadata_via_cluster {
            reader.metadata(opts.metadata_ttl)
        } else {
            reader.origin().clone()
        };
        let ns = Arc::new(Namespace::new(
            opts.clone(),
            source,
            passthrough.clone(),
            stats.clone(),
            journal.clone(),
        ));
        Fs {
            walks: Walks::new(ns.clone(), reader.clone(), &opts, stats.clone()),
            ns,
            handles: Handles::new(),
            disk,
            passthrough,
            ranges_direct: Default::default(),
            opts,
            reader,
            archived_told: Mutex::new(Default::default()),
            stats,
            journal,
        }
    }

    /// Writes `r` to the journal, if the mount keeps one.
    fn journal(&self, r: Record) {
        if let Some(j) = &self.journal {
            j.append(&r);
        }
    }

    /// Takes over what a predecessor served: its inodes, its open files (each
    /// still pinned to the version it opened) and directories (listed again),
    /// and its passthrough backing files (registered on `chan`).
    pub async fn restore(&self, state: &State, chan: &Arc<crate::kernel::Channel>) {
        self.ns.inodes.restore(state);
        self.handles.resume_after(state.last_fh());
        for (fh, (ino, meta)) in &state.files {
            let Ok((path, _)) = self.ns.inodes.path(*ino) else {
                tracing::warn!(
                    fh,
                    ino,
                    "an open file's inode is not in the state; its reads fail"
                );
                continue;
            };
            let key = self.ns.full_key(&path);
            match self
                .reader
                .open(&self.opts.bucket, &key, Some(meta.clone()))
                .await
            {
                Ok(handle) => self.handles.add_file(
                    *fh,
                    OpenFile {
                        handle,
                        ino: *ino,
                        ra: Mutex::new(Readahead::default()),
                        // What the predecessor told the kernel is not known:
                        // keep every block.
                        page_cache: false,
                    },
                ),
                Err(e) => tracing::warn!(fh, key, "cannot reopen an open file: {e}"),
            }
        }
        for (fh, ino) in &state.dirs {
            let entries = match self.ns.readdir(*ino).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(fh, ino, "cannot list an open directory again: {e}");
                    Arc::new(Vec::new())
                }
            };
            self.handles.add_dir(*fh, (*ino, entries));
        }
        self.passthrough.restore(state, chan);
    }

    /// Whether the mount has a disk tier whose whole files can be passed through.
    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// What the kernel said at init about passthrough.
    pub fn set_passthrough(&self, on: bool) {
        self.passthrough.set(on);
    }

    /// What the kernel said at init about mapping files opened with direct
    /// I/O: when it can, files of formats read in ranges are opened so. Their
    /// readers read what they need in reads of its size (a column chunk, a
    /// page); through the page cache each such read would also bring in as much
    /// again as the kernel's read-ahead (megabytes), past the chunk into
    /// columns the query never asked for, each a paid fetch from the origin.
    pub fn set_ranges_direct(&self, on: bool) {
        self.ranges_direct.store(on, Relaxed);
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    pub fn reader(&self) -> &Arc<ClusterReader> {
        &self.reader
    }

    /// The child `name` of directory `parent`.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr, FsError> {
        self.ns.lookup(parent, name).await
    }

    /// Attributes, refreshed from the origin when older than `metadata_ttl`.
    pub async fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        self.ns.getattr(ino).await
    }

    pub fn getattr_cached(&self, ino: u64) -> Result<Attr, FsError> {
        self.ns.getattr_cached(ino)
    }

    /// The entries of directory `ino`, from the cache or a fresh listing.
    pub async fn readdir(&self, ino: u64) -> Result<Arc<Vec<DirEntry>>, FsError> {
        self.ns.readdir(ino).await
    }

    /// Opens a file, pinning the version it has now.
    pub async fn open(self: &Arc<Self>, ino: u64) -> Result<Opened, FsError> {
        let (path, kind) = self.ns.inodes.path(ino)?;
        if kind != Kind::File {
            return Err(FsError::IsDir);
        }
        let meta = match self.ns.inodes.fresh_meta(ino, self.opts.metadata_ttl) {
            Some(m) => m,
            None => self.ns.refresh_file(&path).await?,
        };
        if let Some(class) = meta.archived() {
            let key = self.ns.full_key(&path);
            if self.archived_told.lock().unwrap().insert(key.clone()) {
                tracing::warn!(
                    "s3://{}/{key} is archived ({class}) and not restored: restore it first (aws s3api restore-object), then read it",
                    self.opts.bucket
                );
            }
            return Err(FsError::Denied(format!("{key} is archived ({class})")));
        }
        let handle = self
            .reader
            .open(
                &self.opts.bucket,
                &self.ns.full_key(&path),
                Some(meta.clone()),
            )
            .await?;
        self.walks.visit(&path);
        let (mut keep_cache, mut direct_io) = self.ns.inodes.page_cache_mode(ino, &meta.etag);
        // A file other versions of which are open through the page cache is
        // read around it, never passed through.
        let backing = match &self.disk {
            Some(disk) if !direct_io && self.passthrough.is_on() => {
                let (disk, bucket, key) = (
                    disk.clone(),
                    self.opts.bucket.clone(),
                    self.ns.full_key(&path),
                );
                let (etag, size, bs) = (meta.etag.clone(), meta.size, self.reader.block_size());
                tokio::task::spawn_blocking(move || disk.whole(&bucket, &key, &etag, bs, size))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        if backing.is_none()
            && self.ranges_direct.load(Relaxed)
            && shoal::formats::read_in_ranges(&path)
        {
            (keep_cache, direct_io) = (false, true);
        }
        let fh = self.handles.next();
        self.journal(Record::File {
            fh,
            ino,
            meta: meta.clone(),
        });
        self.handles.add_file(
            fh,
            OpenFile {
                handle,
                ino,
                ra: Mutex::new(Readahead::new(direct_io)),
                page_cache: !direct_io,
            },
        );
        Ok(Opened {
            fh,
            etag: meta.etag.clone(),
            backing,
            keep_cache,
            direct_io,
        })
    }

    /// `size` bytes at `offset` of open file `fh`: in `pipe`, after its head,
    /// when given one and the bytes could be spliced there; else as the buffers
    /// they are in (one per block the read touches; none at the end of the
    /// file). `cached`: the kernel keeps what it gets in its page cache (not an
    /// `O_DIRECT` reader), so its bytes may be spliced, and a whole block it
    /// takes need not stay in the RAM tier.
    pub async fn read(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        cached: bool,
        pipe: Option<PipeOut<'_>>,
    ) -> Result<ReadOut, FsError> {
        let f = self.handles.file(fh).ok_or(FsError::BadHandle)?;
        let bs = self.reader.block_size();
        let end = (offset + size as u64).min(f.handle.meta().size);
        if offset >= end {
            return Ok(ReadOut::Parts(Vec::new()));
        }
        // Bytes the page cache keeps pass through in a pipe, never into this
        // process (when no tier here holds their block). Not with a disk tier:
        // it is filled by the blocks that come through here.
        let page_cache = cached && f.page_cache;
        let pipe = pipe.filter(|_| {
            page_cache && self.opts.splice && self.disk.is_none() && self.reader.has_nodes()
        });
        let base = self.reader.read_window() as u64;
        let budget = self.reader.inflight_limit() as u64;
        let (ahead, sequential, first) = {
            let mut ra = f.ra.lock().unwrap();
            let (first, going) = (ra.is_fresh(), ra.sequential());
            let now = std::time::Instant::now();
            let ahead = ra.advance(offset, end, bs, base, budget, now);
            tracing::trace!(fh, offset, len = end - offset, ?ahead, "read");
            // Whole blocks for a run that was going before this read, or a read
            // of a block's size in one: a small read that starts a run costs its
            // bytes and one block ahead. And for reads inside the first block,
            // where a scan starts (its requests in any order): one block; not
            // with direct I/O, whose reads arrive as their reader made them (a
            // footer, then column chunks, each costing its bytes).
            let run = ra.sequential() && (going || end - offset >= bs);
            (ahead, run || (end <= bs && f.page_cache), first)
        };
        if first {
            if let Ok((path, _)) = self.ns.inodes.path(f.ino) {
                self.walks.first_read(&path, offset == 0);
            }
        }
        if let Some((from, count)) = ahead {
            self.stats.readahead_blocks.fetch_add(count, Relaxed);
            if pipe.is_some() {
                f.handle.warm(from, count);
            } else {
                f.handle.prefetch(from, count);
            }
        }
        self.stats.reads.fetch_add(1, Relaxed);
        let piped = match pipe {
            Some(out) => Some(self.read_piped(&f, offset, end, out).await),
            None => None,
        };
        let read = match piped {
            Some(Ok(Piped::Spliced { len, waited })) => {
                if waited {
                    f.ra.lock().unwrap().waited();
                }
                self.stats.read_bytes.fetch_add(len as u64, Relaxed);
                self.stats.spliced_reads.fetch_add(1, Relaxed);
                self.stats.spliced_bytes.fetch_add(len as u64, Relaxed);
                return Ok(ReadOut::Piped);
            }
            Some(Ok(Piped::Read(b))) => Ok(vec![b]),
            Some(Err(e)) => Err(e),
            Some(Ok(Piped::Declined)) | None if sequential => {
                f.handle.read_parts(offset, end - offset).await.map(|p| {
                    if p.waited {
                        f.ra.lock().unwrap().waited();
                    }
                    p.parts
                })
            }
            Some(Ok(Piped::Declined)) | None => f
                .handle
                .read_random(offset, end - offset)
                .await
                .map(|b| vec![b]),
        };
        match read {
            Ok(parts) => {
                // A whole block gone into the page cache is kept there: its
                // buffer is free again while still in the CPU's cache.
                if page_cache && offset.is_multiple_of(bs) && end - offset == bs {
                    f.handle.let_go(offset / bs);
                }
                let n: usize = parts.iter().map(Bytes::len).sum();
                self.stats.read_bytes.fetch_add(n as u64, Relaxed);
                Ok(ReadOut::Parts(parts))
            }
            Err(e) => {
                let err = FsError::from(e);
                if let FsError::Stale(why) = &err {
                    self.stats.stale_reads.fetch_add(1, Relaxed);
                    self.ns.inodes.forget_version(f.ino);
                    self.ns.forget_listings();
                    tracing::warn!(bucket = %self.opts.bucket, key = %f.handle.key(), "read refused: {why}");
                } else {
                    tracing::error!(bucket = %self.opts.bucket, key = %f.handle.key(), offset, "read failed: {err}");
                }
                Err(err)
            }
        }
    }

    /// `offset..end` through `out`'s pipe, headed for the kernel.
    async fn read_piped(
        &self,
        f: &OpenFile,
        offset: u64,
        end: u64,
        out: PipeOut<'_>,
    ) -> Result<Piped, shoal::cluster::ReadError> {
        if (out.head)(out.pipe, (end - offset) as usize).is_err() {
            let _ = out.pipe.clear();
            return Ok(Piped::Declined);
        }
        let r = f.handle.read_piped(offset, end - offset, out.pipe).await;
        if !matches!(r, Ok(Piped::Spliced { .. })) {
            let _ = out.pipe.clear();
        }
        r
    }

    pub fn release(&self, fh: u64) {
        self.handles.remove_file(fh);
        self.journal(Record::Closed { fh });
    }

    pub fn open_files(&self) -> usize {
        self.handles.open_files()
    }

    /// Directory `ino` opened by a reader (`ls`, `find`, `tar`, `os.scandir`): a
    /// visit in its parent's walk, then a handle on its entries.
    pub async fn opendir(self: &Arc<Self>, ino: u64) -> Result<u64, FsError> {
        let walked_into = match self.ns.inodes.path(ino) {
            Ok((path, Kind::Dir)) => self.walks.visit(&path),
            _ => false,
        };
        if walked_into {
            self.walks.enter(ino);
        }
        let entries = self.ns.readdir(ino).await?;
        let fh = self.handles.next();
        self.journal(Record::Dir { fh, ino });
        self.handles.add_dir(fh, (ino, entries));
        Ok(fh)
    }

    /// The entries of open directory `fh` from `offset` on (0 is `.`, 1 is `..`),
    /// made as they are taken: the kernel takes a buffer's worth at a time.
    pub fn dir_items(
        &self,
        fh: u64,
        offset: u64,
    ) -> Result<impl Iterator<Item = DirItem>, FsError> {
        let (ino, entries) = self.handles.dir(fh).ok_or(FsError::BadHandle)?;
        let end = entries.len() as u64 + 2;
        Ok((offset..end).map(move |at| {
            let (ino, kind, name) = match at {
                0 => (ino, Kind::Dir, ".".to_owned()),
                1 => (ino, Kind::Dir, "..".to_owned()),
                n => {
                    let e: &DirEntry = &entries[(n - 2) as usize];
                    (e.ino, e.kind, e.name.clone())
                }
            };
            DirItem {
                ino,
                next: at + 1,
                kind,
                name,
            }
        }))
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.remove_dir(fh);
        self.journal(Record::Closed { fh });
    }
}

#[cfg(test)]
mod tests;
