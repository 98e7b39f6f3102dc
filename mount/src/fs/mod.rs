//! The filesystem, as async functions over inode numbers: no FUSE types here, so it
//! is tested without a kernel ([`crate::fuse`] only forwards to it).
//!
//! - [`inodes`]: the inode table (paths, attributes, the page-cache version).
//! - [`namespace`]: directories are `ListObjectsV2` pages with delimiter `/` under
//!   the mount's prefix, cached for `metadata_ttl` and fetched once however many
//!   ask; a prefix with keys under it is an implicit directory; a `dir/` marker
//!   object is the directory itself; a key that is both a file and a prefix shows
//!   the directory. Keys that cannot be POSIX names are skipped and counted.
//!   Lookups without a listing, and a negative cache.
//! - [`handles`]: open files pin the version (ETag) they saw and read through the
//!   cluster reader; open directories read one listing end to end.
//! - [`readahead`]: sequential reads grow a window from one cluster block, doubling
//!   to `read_window`; a random read resets it.
//! - [`walk`]: entries visited in listing order (files opened, directories opened)
//!   have the entries after them fetched ahead: a file's first block, a
//!   directory's listing.
//! - [`error`]: errno, in one place.

mod error;
mod handles;
mod inodes;
pub mod names;
mod namespace;
mod readahead;
mod walk;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use shoal::blocks::Flights;
use shoal::cluster::ClusterReader;
use shoal::store::{ListRequest, ObjectStore, StoreError};

pub use error::FsError;
pub use handles::{DirItem, Opened};

pub const ROOT: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// What `stat` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Clone, Debug)]
pub struct FsOptions {
    pub bucket: String,
    /// Key prefix the mount shows, empty or ending in `/`.
    pub prefix: String,
    pub metadata_ttl: Duration,
    pub negative_ttl: Duration,
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u16,
    pub dir_mode: u16,
    /// Most entries of a directory walked in order fetched ahead (a file's first
    /// block, a directory's listing; 0: none).
    pub prefetch_files: usize,
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: Kind,
}

#[derive(Default, Debug)]
pub struct FsStats {
    pub skipped_names: AtomicU64,
    pub listings: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub readahead_blocks: AtomicU64,
    pub prefetched_files: AtomicU64,
    pub prefetched_listings: AtomicU64,
    pub stale_reads: AtomicU64,
}

pub struct Fs {
    opts: FsOptions,
    /// Where listings and attributes come from: the reader's origin.
    origin: Arc<dyn ObjectStore>,
    reader: Arc<ClusterReader>,
    inodes: inodes::Inodes,
    dirs: Mutex<HashMap<u64, namespace::Listing>>,
    /// Listings in flight: a walker's own listing joins one fetched ahead for it.
    listing_flights: Flights<u64, Arc<Vec<DirEntry>>, FsError>,
    negative: Mutex<HashMap<(u64, String), Instant>>,
    files: Mutex<HashMap<u64, Arc<handles::OpenFile>>>,
    /// Open directory handles: one listing each, read end to end, so every entry
    /// is seen exactly once even if the cache refreshes meanwhile.
    open_dirs: Mutex<HashMap<u64, handles::OpenDir>>,
    /// Visit order per directory inode, for read-ahead across its entries.
    walks: Mutex<HashMap<u64, walk::DirWalk>>,
    /// Whether files can be fetched ahead: only into a client RAM tier.
    fetch_blocks: bool,
    next_fh: AtomicU64,
    /// The mount's own disk tier, when it has one: what it holds whole is
    /// handed to the kernel as a passthrough backing file.
    disk: Option<Arc<shoal::blocks::FileTier>>,
    /// Which inodes the kernel reads through backing files (shared with the FUSE
    /// adapter, which registers them).
    pub passthrough: crate::passthrough::Passthrough,
    /// Archived objects someone tried to open, each logged once.
    archived_told: Mutex<std::collections::HashSet<String>>,
    pub stats: FsStats,
}

impl Fs {
    pub fn new(
        opts: FsOptions,
        reader: Arc<ClusterReader>,
        disk: Option<Arc<shoal::blocks::FileTier>>,
    ) -> Fs {
        Fs {
            disk,
            passthrough: Default::default(),
            opts,
            origin: reader.origin().clone(),
            fetch_blocks: reader.ram_stats().capacity_bytes > 0,
            reader,
            inodes: inodes::Inodes::new(SystemTime::now()),
            dirs: Mutex::new(HashMap::new()),
            archived_told: Mutex::new(Default::default()),
            listing_flights: Flights::default(),
            negative: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            open_dirs: Mutex::new(HashMap::new()),
            walks: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            stats: FsStats::default(),
        }
    }

    /// Whether the mount has a disk tier whose whole files can be passed through.
    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// What the kernel said at init about passthrough.
    pub fn set_passthrough(&self, on: bool) {
        self.passthrough.set(on);
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    pub fn reader(&self) -> &Arc<ClusterReader> {
        &self.reader
    }

    fn full_key(&self, path: &str) -> String {
        format!("{}{path}", self.opts.prefix)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Relaxed)
    }

    /// Checks that the bucket (and prefix) can be listed: the mount's first request.
    pub async fn check_access(&self) -> Result<(), StoreError> {
        self.origin
            .list_page(&ListRequest {
                bucket: self.opts.bucket.clone(),
                prefix: self.opts.prefix.clone(),
                delimiter: Some("/".into()),
                max_keys: Some(1),
                ..Default::default()
            })
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests;
