//! [`Handles`]: open files and open directories, by handle number.
//!
//! A file handle pins the version its open saw and reads it through the cluster
//! reader, fetching ahead what its reads run into ([`Readahead`]). A
//! directory handle holds one listing, read end to end, so every entry is seen
//! exactly once even if the cache refreshes meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use shoal::cluster::{Handle, Readahead};

use super::{DirEntry, Kind};

pub(super) struct OpenFile {
    pub handle: Handle,
    pub ino: u64,
    pub ra: Mutex<Readahead>,
    /// Opened through the page cache (not `direct_io`): what its reads return
    /// is kept by the kernel.
    pub page_cache: bool,
    /// Counted among [`Handles::streams`].
    pub streaming: std::sync::atomic::AtomicBool,
}

/// An open directory: its inode and the listing it reads.
pub(super) type OpenDir = (u64, Arc<Vec<DirEntry>>);

/// Where an open file's data may be kept by the kernel.
#[derive(Debug)]
pub struct Opened {
    pub fh: u64,
    /// Its version's ETag.
    pub etag: String,
    /// The whole file from the mount's disk tier, verified: the kernel may read it
    /// directly (passthrough).
    pub backing: Option<std::fs::File>,
    /// The version is the one the page cache holds: keep it.
    pub keep_cache: bool,
    /// Another version is open through the page cache: bypass it.
    pub direct_io: bool,
}

/// One entry of an open directory, `.` and `..` included.
#[derive(Debug, Clone)]
pub struct DirItem {
    pub ino: u64,
    /// The offset of the entry after this one.
    pub next: u64,
    pub kind: Kind,
    pub name: String,
}

pub(super) struct Handles {
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, OpenDir>>,
    next: AtomicU64,
    /// Open files whose reads are a sequential run now: they share the
    /// blocks that may be fetched ahead.
    streams: AtomicUsize,
}

impl Handles {
    pub fn new() -> Handles {
        Handles {
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            streams: AtomicUsize::new(0),
        }
    }

    /// A fresh handle number, files and directories alike.
    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Relaxed)
    }

    /// New handles are numbered after `last` (a predecessor's).
    pub fn resume_after(&self, last: u64) {
        self.next.fetch_max(last + 1, Relaxed);
    }

    pub fn add_file(&self, fh: u64, f: OpenFile) {
        self.files.lock().unwrap().insert(fh, Arc::new(f));
    }

    pub fn file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        self.files.lock().unwrap().get(&fh).cloned()
    }

    pub fn remove_file(&self, fh: u64) {
        let gone = self.files.lock().unwrap().remove(&fh);
        if let Some(f) = gone {
            self.stream(&f, false);
        }
    }

    /// Open files reading sequentially now (at least one: the caller's).
    pub fn streams(&self) -> u64 {
        self.streams.load(Relaxed).max(1) as u64
    }

    /// Whether file `f`'s reads are a sequential run now.
    pub fn stream(&self, f: &OpenFile, is: bool) {
        match (f.streaming.swap(is, Relaxed), is) {
            (false, true) => drop(self.streams.fetch_add(1, Relaxed)),
            (true, false) => drop(self.streams.fetch_sub(1, Relaxed)),
            _ => {}
        }
    }

    pub fn open_files(&self) -> usize {
        self.files.lock().unwrap().len()
    }

    pub fn add_dir(&self, fh: u64, d: OpenDir) {
        self.dirs.lock().unwrap().insert(fh, d);
    }

    pub fn dir(&self, fh: u64) -> Option<OpenDir> {
        self.dirs.lock().unwrap().get(&fh).cloned()
    }

    pub fn remove_dir(&self, fh: u64) {
        self.dirs.lock().unwrap().remove(&fh);
    }
}
