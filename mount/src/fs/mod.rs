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
//! A file's open and reads are [`files`]'s. A read: [`Fs::read`] finds the handle,
//! moves its [`readahead`] (reads that continue the last one keep blocks in flight
//! from one up, doubling while throughput still rises, to their share of the
//! in-flight budget (the files read sequentially at once share it);
//! reads the kernel sends out of order on its threads stay one run; a file's first
//! read and any jump fetch nothing ahead, keeping the limit learned), and asks the
//! cluster reader for the bytes: slices of whole blocks for a sequential run, each
//! answered as soon as its own bytes have arrived (the reply goes out from the
//! block's buffers), just each block's part of the range for any other read. A
//! file's first read tells its directory's walk whether its files are read whole.
//! Errno lives in one place, [`error`].

mod error;
mod files;
mod handles;
mod inodes;
pub mod names;
mod namespace;
mod types;
mod walk;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use shoal::cluster::ClusterReader;

pub use error::FsError;
pub use files::{PipeOut, ReadOut};
pub use handles::{DirItem, Opened};
pub use types::*;

use crate::journal::{Journal, Record, State};
use handles::{Handles, OpenFile};
use namespace::Namespace;
use shoal::cluster::Readahead;
use walk::Walks;

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
                        streaming: Default::default(),
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
