//! What the filesystem speaks in: inode kinds and attributes, directory entries,
//! its options and its counters.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

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
    /// How much longer what this says is fresh (what is left of
    /// `metadata_ttl` since it was learned): how long the kernel may keep it,
    /// and the name it came with, without asking again.
    pub valid: Duration,
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
    /// Listings and HEADs go through the cluster (else to the origin).
    pub metadata_via_cluster: bool,
    /// Page-cache reads of blocks no tier here holds are spliced to the kernel.
    pub splice: bool,
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
    pub spliced_reads: AtomicU64,
    pub spliced_bytes: AtomicU64,
    pub prefetched_files: AtomicU64,
    pub prefetched_listings: AtomicU64,
    pub stale_reads: AtomicU64,
}
