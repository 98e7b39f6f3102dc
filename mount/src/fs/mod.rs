//! The filesystem, as async functions over inode numbers: no FUSE types here, so it
//! is tested without a kernel ([`crate::fuse`] only forwards to it).
//!
//! Namespace: directories are `ListObjectsV2` pages with delimiter `/` under the
//! mount's prefix, cached for `metadata_ttl`; a prefix with keys under it is an
//! implicit directory; a `dir/` marker object is the directory itself; a key that
//! is both a file and a prefix shows the directory. Keys that cannot be POSIX names
//! are skipped and counted. Inode numbers are stable for the life of the mount.
//!
//! Reads: an open file pins the version (ETag) it saw, through the cluster reader.
//! Sequential reads grow a read-ahead window from one cluster block, doubling to
//! `read_window`; a random read resets it. Entries visited in listing order (files
//! opened, directories opened) have the entries after them fetched ahead: a file's
//! first block, a directory's listing ([`walk`]).

mod error;
pub mod names;
mod walk;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use shoal::cache::Coalescer;
use shoal::cluster::{ClusterReader, Handle};
use shoal::s3::{GetObject, ListRequest, ObjectMeta, S3Client, S3Error};

pub use error::FsError;

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

struct Inode {
    /// Path under the prefix: `""` for the root, `a/b/` for a directory, `a/b` for a file.
    path: String,
    kind: Kind,
    size: u64,
    etag: String,
    mtime: SystemTime,
    /// When size/ETag were last learned from the origin.
    fetched: Instant,
    /// The version whose bytes the kernel page cache may hold for this inode. The
    /// page cache is per inode, not per handle: a handle pinned to another version
    /// reads around it (direct I/O).
    page_version: Option<String>,
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: Kind,
}

struct Listing {
    entries: Arc<Vec<DirEntry>>,
    fetched: Instant,
}

struct OpenFile {
    handle: Handle,
    ino: u64,
    ra: Mutex<Readahead>,
}

/// Per-handle sequential detection.
#[derive(Default)]
struct Readahead {
    /// Where the next sequential read would start.
    next: u64,
    /// Blocks to keep fetched ahead (0 until a read is seen as sequential).
    window: u64,
    /// Blocks below this index were already asked for.
    fetched_until: u64,
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
    origin: S3Client,
    reader: Arc<ClusterReader>,
    inodes: Mutex<Inodes>,
    dirs: Mutex<HashMap<u64, Listing>>,
    /// Listings in flight: a walker's own listing joins one fetched ahead for it.
    listing_flights: Coalescer<u64, Arc<Vec<DirEntry>>>,
    negative: Mutex<HashMap<(u64, String), Instant>>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    /// Visit order per directory inode, for read-ahead across its entries.
    walks: Mutex<HashMap<u64, walk::DirWalk>>,
    /// Whether files can be fetched ahead: only into a client RAM tier.
    fetch_blocks: bool,
    next_fh: AtomicU64,
    mounted_at: SystemTime,
    pub stats: FsStats,
}

struct Inodes {
    by_ino: HashMap<u64, Inode>,
    by_path: HashMap<String, u64>,
    next: u64,
}

/// Where an open file's data may be kept by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub fh: u64,
    /// The version is the one the page cache holds: keep it.
    pub keep_cache: bool,
    /// Another version is open through the page cache: bypass it.
    pub direct_io: bool,
}

impl Fs {
    pub fn new(opts: FsOptions, origin: S3Client, reader: Arc<ClusterReader>) -> Fs {
        let mut by_ino = HashMap::new();
        by_ino.insert(
            ROOT,
            Inode {
                path: String::new(),
                kind: Kind::Dir,
                size: 0,
                etag: String::new(),
                mtime: SystemTime::now(),
                fetched: Instant::now(),
                page_version: None,
            },
        );
        Fs {
            opts,
            origin,
            fetch_blocks: reader.ram_stats().capacity_bytes > 0,
            reader,
            inodes: Mutex::new(Inodes {
                by_ino,
                by_path: HashMap::from([(String::new(), ROOT)]),
                next: ROOT + 1,
            }),
            dirs: Mutex::new(HashMap::new()),
            listing_flights: Coalescer::default(),
            negative: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            walks: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            mounted_at: SystemTime::now(),
            stats: FsStats::default(),
        }
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

    /// The inode for `path`, created on first sight; updates file attributes.
    fn intern(&self, path: &str, kind: Kind, meta: Option<(u64, &str, Option<SystemTime>)>) -> u64 {
        let mut t = self.inodes.lock().unwrap();
        let ino = match t.by_path.get(path) {
            Some(i) => *i,
            None => {
                let ino = t.next;
                t.next += 1;
                t.by_path.insert(path.to_owned(), ino);
                t.by_ino.insert(
                    ino,
                    Inode {
                        path: path.to_owned(),
                        kind,
                        size: 0,
                        etag: String::new(),
                        // Implicit directories have no time of their own: the mount's.
                        mtime: self.mounted_at,
                        fetched: Instant::now(),
                        page_version: None,
                    },
                );
                ino
            }
        };
        if let (Some((size, etag, mtime)), Some(node)) = (meta, t.by_ino.get_mut(&ino)) {
            node.size = size;
            node.etag = etag.to_owned();
            node.mtime = mtime.unwrap_or(SystemTime::UNIX_EPOCH);
            node.fetched = Instant::now();
        }
        ino
    }

    fn attr_of(&self, ino: u64, n: &Inode) -> Attr {
        Attr {
            ino,
            kind: n.kind,
            size: n.size,
            mtime: n.mtime,
            perm: match n.kind {
                Kind::File => self.opts.file_mode,
                Kind::Dir => self.opts.dir_mode,
            },
            uid: self.opts.uid,
            gid: self.opts.gid,
        }
    }

    fn inode_path(&self, ino: u64) -> Result<(String, Kind), FsError> {
        let t = self.inodes.lock().unwrap();
        let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
        Ok((n.path.clone(), n.kind))
    }

    pub fn getattr_cached(&self, ino: u64) -> Result<Attr, FsError> {
        let t = self.inodes.lock().unwrap();
        let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
        Ok(self.attr_of(ino, n))
    }

    /// Attributes, refreshed from the origin when older than `metadata_ttl`.
    pub async fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        let stale_file = {
            let t = self.inodes.lock().unwrap();
            let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
            (n.kind == Kind::File && n.fetched.elapsed() >= self.opts.metadata_ttl)
                .then(|| n.path.clone())
        };
        if let Some(path) = stale_file {
            self.refresh_file(&path).await?;
        }
        self.getattr_cached(ino)
    }

    async fn refresh_file(&self, path: &str) -> Result<ObjectMeta, FsError> {
        let meta = self
            .origin
            .head_object(&GetObject::new(&self.opts.bucket, self.full_key(path)))
            .await?;
        self.intern(
            path,
            Kind::File,
            Some((meta.size, &meta.etag, meta.last_modified)),
        );
        Ok(meta)
    }

    /// The entries of directory `ino`, from the cache or a fresh listing.
    pub async fn readdir(self: &Arc<Self>, ino: u64) -> Result<Arc<Vec<DirEntry>>, FsError> {
        if let Some(entries) = self.fresh_listing(ino) {
            return Ok(entries);
        }
        let (path, kind) = self.inode_path(ino)?;
        if kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let me = self.clone();
        let (r, _) = self
            .listing_flights
            .run(ino, async move {
                // A flight that ended since the check above left its listing here.
                if let Some(entries) = me.fresh_listing(ino) {
                    return Ok(entries);
                }
                let entries = Arc::new(me.list_dir(&path).await?);
                me.dirs.lock().unwrap().insert(
                    ino,
                    Listing {
                        entries: entries.clone(),
                        fetched: Instant::now(),
                    },
                );
                Ok(entries)
            })
            .await;
        Ok(r?)
    }

    /// Directory `ino` opened by a reader (`ls`, `find`, `tar`, `os.scandir`): a
    /// visit in its parent's walk, then its entries.
    pub async fn opendir(self: &Arc<Self>, ino: u64) -> Result<Arc<Vec<DirEntry>>, FsError> {
        let walked_into = match self.inode_path(ino) {
            Ok((path, Kind::Dir)) => self.visit(&path),
            _ => false,
        };
        if walked_into {
            self.enter(ino);
        }
        self.readdir(ino).await
    }

    fn fresh_listing(&self, ino: u64) -> Option<Arc<Vec<DirEntry>>> {
        self.dirs
            .lock()
            .unwrap()
            .get(&ino)
            .and_then(|l| (l.fetched.elapsed() < self.opts.metadata_ttl).then(|| l.entries.clone()))
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, S3Error> {
        let dir_key = self.full_key(path);
        let mut req = ListRequest {
            bucket: self.opts.bucket.clone(),
            prefix: dir_key.clone(),
            delimiter: Some("/".into()),
            ..Default::default()
        };
        let mut by_name: std::collections::BTreeMap<String, DirEntry> =
            std::collections::BTreeMap::new();
        loop {
            let page = self.origin.list_objects_v2(&req).await?;
            self.stats.listings.fetch_add(1, Relaxed);
            for cp in &page.common_prefixes {
                let name = cp[dir_key.len()..].trim_end_matches('/');
                if let Some(why) = names::problem(name) {
                    self.skip(cp, why);
                    continue;
                }
                let child = format!("{path}{name}/");
                let ino = self.intern(&child, Kind::Dir, None);
                by_name.insert(
                    name.to_owned(),
                    DirEntry {
                        name: name.to_owned(),
                        ino,
                        kind: Kind::Dir,
                    },
                );
            }
            for o in &page.objects {
                let name = &o.key[dir_key.len()..];
                if name.is_empty() {
                    // The directory's own `dir/` marker object.
                    continue;
                }
                if let Some(why) = names::problem(name) {
                    self.skip(&o.key, why);
                    continue;
                }
                if by_name.get(name).is_some_and(|e| e.kind == Kind::Dir) {
                    tracing::info!(key = %o.key, "key is both a file and a directory prefix; showing the directory");
                    continue;
                }
                let ino = self.intern(
                    &format!("{path}{name}"),
                    Kind::File,
                    Some((o.size, &o.etag, o.last_modified)),
                );
                by_name.insert(
                    name.to_owned(),
                    DirEntry {
                        name: name.to_owned(),
                        ino,
                        kind: Kind::File,
                    },
                );
            }
            match page.next_continuation_token {
                Some(t) => req.continuation_token = Some(t),
                None => break,
            }
        }
        // A file listed before its same-named directory appeared on a later page.
        Ok(by_name.into_values().collect())
    }

    fn skip(&self, key: &str, why: &str) {
        let n = self.stats.skipped_names.fetch_add(1, Relaxed);
        if n < 100 || n.is_power_of_two() {
            tracing::warn!(
                key,
                "key skipped: not a valid file name ({why}); {} skipped so far",
                n + 1
            );
        }
    }

    /// The child `name` of directory `parent`.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr, FsError> {
        if names::problem(name).is_some() {
            return Err(FsError::NotFound);
        }
        let (ppath, pkind) = self.inode_path(parent)?;
        if pkind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        // A fresh listing of the parent answers without asking the origin.
        let cached = self
            .fresh_listing(parent)
            .map(|entries| find_entry(&entries, name).map(|i| entries[i].ino));
        match cached {
            Some(Some(ino)) => return self.getattr_cached(ino),
            Some(None) => return Err(FsError::NotFound),
            None => {}
        }
        let neg_key = (parent, name.to_owned());
        if let Some(at) = self.negative.lock().unwrap().get(&neg_key) {
            if at.elapsed() < self.opts.negative_ttl {
                return Err(FsError::NotFound);
            }
        }
        // A directory wins over a file of the same name.
        let dir_key = self.full_key(&format!("{ppath}{name}/"));
        let file_key = self.full_key(&format!("{ppath}{name}"));
        let probe = ListRequest {
            bucket: self.opts.bucket.clone(),
            prefix: dir_key,
            max_keys: Some(1),
            ..Default::default()
        };
        let head = GetObject::new(&self.opts.bucket, &file_key);
        let (dir, file) = tokio::join!(
            self.origin.list_objects_v2(&probe),
            self.origin.head_object(&head)
        );
        let dir = dir?;
        if !dir.objects.is_empty() || !dir.common_prefixes.is_empty() {
            let ino = self.intern(&format!("{ppath}{name}/"), Kind::Dir, None);
            return self.getattr_cached(ino);
        }
        match file {
            Ok(meta) => {
                let ino = self.intern(
                    &format!("{ppath}{name}"),
                    Kind::File,
                    Some((meta.size, &meta.etag, meta.last_modified)),
                );
                self.getattr_cached(ino)
            }
            Err(S3Error::NoSuchKey { .. }) => {
                let mut neg = self.negative.lock().unwrap();
                if neg.len() > 100_000 {
                    neg.clear();
                }
                neg.insert(neg_key, Instant::now());
                Err(FsError::NotFound)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Opens a file, pinning the version it has now.
    pub async fn open(self: &Arc<Self>, ino: u64) -> Result<Opened, FsError> {
        let (path, kind) = self.inode_path(ino)?;
        if kind != Kind::File {
            return Err(FsError::IsDir);
        }
        let fresh = {
            let t = self.inodes.lock().unwrap();
            let n = &t.by_ino[&ino];
            self.fresh_meta(n)
        };
        let meta = match fresh {
            Some(m) => m,
            None => self.refresh_file(&path).await?,
        };
        let handle = self
            .reader
            .open(&self.opts.bucket, &self.full_key(&path), Some(meta.clone()))
            .await?;
        self.visit(&path);
        let (keep_cache, direct_io) = self.page_cache_mode(ino, &meta.etag);
        let fh = self.next_fh.fetch_add(1, Relaxed);
        self.files.lock().unwrap().insert(
            fh,
            Arc::new(OpenFile {
                handle,
                ino,
                ra: Mutex::new(Readahead::default()),
            }),
        );
        Ok(Opened {
            fh,
            keep_cache,
            direct_io,
        })
    }

    /// Notes a visit of `path` (a file opened, a directory opened) in its parent's
    /// walk and fetches ahead what the walk runs to. Only a fresh listing of the
    /// parent counts: a visit must not cost a listing. Returns whether the visit
    /// was part of a walk.
    fn visit(self: &Arc<Self>, path: &str) -> bool {
        if self.opts.prefetch_files == 0 {
            return false;
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return false;
        }
        let (dir, name) = match path.rfind('/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => ("", path),
        };
        let Some(parent) = self.inodes.lock().unwrap().by_path.get(dir).copied() else {
            return false;
        };
        let Some(entries) = self.fresh_listing(parent) else {
            return false;
        };
        let Some(idx) = find_entry(&entries, name) else {
            return false;
        };
        self.walk_step(parent, &entries, |w, len, max, budget, cost| {
            w.opened(idx, len, max, budget, cost)
        })
    }

    /// Directory `ino` was entered from a walk in its parent: its first open in
    /// listing order continues the walk.
    fn enter(&self, ino: u64) {
        if self.opts.prefetch_files > 0 {
            self.with_walk(ino, |w| w.entered(self.opts.prefetch_files));
        }
    }

    /// Runs `f` on the walk over directory `dir`. Walks of directories nobody
    /// visits any more are dropped wholesale past a bound: losing one only
    /// restarts its detection.
    fn with_walk<T>(&self, dir: u64, f: impl FnOnce(&mut walk::DirWalk) -> T) -> T {
        let mut walks = self.walks.lock().unwrap();
        if walks.len() > 4096 && !walks.contains_key(&dir) {
            walks.clear();
        }
        f(walks.entry(dir).or_default())
    }

    /// What is known of a file's version, if it is fresh enough to pin.
    fn fresh_meta(&self, n: &Inode) -> Option<ObjectMeta> {
        (n.fetched.elapsed() < self.opts.metadata_ttl && !n.etag.is_empty()).then(|| ObjectMeta {
            size: n.size,
            etag: n.etag.clone(),
            last_modified: Some(n.mtime),
            content_type: None,
        })
    }

    /// Moves the walk over directory `dir` one step and fetches ahead the entries
    /// it runs to: the first block of files, the listing of directories. Returns
    /// whether the directory is being walked.
    fn walk_step(
        self: &Arc<Self>,
        dir: u64,
        entries: &[DirEntry],
        step: impl FnOnce(&mut walk::DirWalk, usize, usize, u64, &dyn Fn(usize) -> u64) -> Range<usize>,
    ) -> bool {
        let bs = self.reader.block_size();
        let budget = self.reader.read_window() as u64 * bs;
        let (walking, files, dirs) = {
            let t = self.inodes.lock().unwrap();
            // What an entry in the window holds once fetched: a file's first block;
            // a listing is small.
            let first_block = |i: usize| match entries[i].kind {
                Kind::File if self.fetch_blocks => {
                    t.by_ino.get(&entries[i].ino).map_or(0, |n| n.size.min(bs))
                }
                _ => 0,
            };
            let (walking, range) = self.with_walk(dir, |w| {
                let range = step(
                    w,
                    entries.len(),
                    self.opts.prefetch_files,
                    budget,
                    &first_block,
                );
                (w.walking(), range)
            });
            let mut files: Vec<(String, ObjectMeta)> = Vec::new();
            let mut dirs: Vec<u64> = Vec::new();
            for e in &entries[range] {
                match e.kind {
                    Kind::Dir => dirs.push(e.ino),
                    Kind::File if self.fetch_blocks => {
                        let Some(n) = t.by_ino.get(&e.ino) else {
                            continue;
                        };
                        if let Some(meta) = self.fresh_meta(n).filter(|m| m.size > 0) {
                            files.push((self.full_key(&n.path), meta));
                        }
                    }
                    Kind::File => {}
                }
            }
            (walking, files, dirs)
        };
        for ino in dirs {
            if self.fresh_listing(ino).is_some() {
                continue;
            }
            self.stats.prefetched_listings.fetch_add(1, Relaxed);
            let me = self.clone();
            tokio::spawn(async move {
                // The walker's own listing of it joins this one.
                let _ = me.readdir(ino).await;
            });
        }
        if !files.is_empty() {
            self.stats
                .prefetched_files
                .fetch_add(files.len() as u64, Relaxed);
            let (reader, bucket) = (self.reader.clone(), self.opts.bucket.clone());
            tokio::spawn(async move {
                for (key, meta) in files {
                    // Opening with a known version asks nobody; the block fetch is
                    // spawned, so the files are fetched side by side.
                    if let Ok(h) = reader.open(&bucket, &key, Some(meta)).await {
                        h.prefetch(0, 1);
                    }
                }
            });
        }
        walking
    }

    /// `size` bytes at `offset` of open file `fh`.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes, FsError> {
        let f = self
            .files
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)?;
        let bs = self.reader.block_size();
        let file_size = f.handle.meta().size;
        let end = (offset + size as u64).min(file_size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let last_block = (end - 1) / bs;
        let prefetch = {
            let mut ra = f.ra.lock().unwrap();
            let max = self.reader.read_window() as u64;
            // Small forward skips inside the window still count as sequential.
            let sequential = offset == ra.next
                || (offset > ra.next && offset - ra.next <= ra.window.max(1) * bs);
            ra.window = if sequential {
                (ra.window * 2).clamp(1, max)
            } else {
                0
            };
            ra.next = end;
            if ra.window == 0 {
                ra.fetched_until = last_block + 1;
                None
            } else {
                let from = ra.fetched_until.max(last_block + 1);
                let to = last_block + 1 + ra.window;
                ra.fetched_until = ra.fetched_until.max(to);
                (to > from).then_some((from, to - from))
            }
        };
        if let Some((from, count)) = prefetch {
            self.stats.readahead_blocks.fetch_add(count, Relaxed);
            f.handle.prefetch(from, count);
        }
        self.stats.reads.fetch_add(1, Relaxed);
        match f.handle.read(offset, end - offset).await {
            Ok(b) => {
                self.stats.read_bytes.fetch_add(b.len() as u64, Relaxed);
                Ok(b)
            }
            Err(e) => {
                let err = FsError::from(e);
                if let FsError::Stale(why) = &err {
                    self.stats.stale_reads.fetch_add(1, Relaxed);
                    self.forget_file(f.ino);
                    tracing::warn!(bucket = %self.opts.bucket, key = %f.handle.key(), "read refused: {why}");
                } else {
                    tracing::error!(bucket = %self.opts.bucket, key = %f.handle.key(), offset, "read failed: {err}");
                }
                Err(err)
            }
        }
    }

    /// Drops what is known of a file's version so the next open asks the origin.
    fn forget_file(&self, ino: u64) {
        let mut t = self.inodes.lock().unwrap();
        if let Some(n) = t.by_ino.get_mut(&ino) {
            n.etag.clear();
        }
        drop(t);
        self.dirs.lock().unwrap().clear();
    }

    pub fn release(&self, fh: u64) {
        self.files.lock().unwrap().remove(&fh);
    }

    /// How a new handle on version `etag` of `ino` reads: `(keep_cache, direct_io)`.
    ///
    /// The first version opened owns the inode's page cache for the life of the
    /// mount; any other version reads with direct I/O. Switching the cache to a
    /// new version (kernel invalidation once no handle uses it) still let a rare
    /// read mix versions under concurrent rewrites, so it is not done: a rewritten
    /// file gives up the page cache, never consistency.
    fn page_cache_mode(&self, ino: u64, etag: &str) -> (bool, bool) {
        let mut t = self.inodes.lock().unwrap();
        let n = t.by_ino.get_mut(&ino).expect("inodes are never removed");
        match n.page_version.as_deref() {
            Some(v) if v == etag => (true, false),
            Some(_) => (false, true),
            None => {
                n.page_version = Some(etag.to_owned());
                (false, false)
            }
        }
    }

    pub fn open_files(&self) -> usize {
        self.files.lock().unwrap().len()
    }

    /// Checks that the bucket (and prefix) can be listed: the mount's first request.
    pub async fn check_access(&self) -> Result<(), S3Error> {
        self.origin
            .list_objects_v2(&ListRequest {
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

/// The index of `name` in a listing: listings are sorted by name (see `list_dir`).
fn find_entry(entries: &[DirEntry], name: &str) -> Option<usize> {
    entries.binary_search_by(|e| e.name.as_str().cmp(name)).ok()
}

#[cfg(test)]
mod tests;
