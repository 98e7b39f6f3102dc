//! [`Namespace`]: directories and names. The inode table, listings (cached for
//! `metadata_ttl`, one in flight per directory however many ask), lookups,
//! attributes, and the negative cache, all learned from the metadata source: the
//! cluster (each listing page and HEAD from its owner node, which shares it with
//! every other mount) or the origin.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use shoal::blocks::Flights;
use shoal::store::{GetObject, ListRequest, ObjectMeta, ObjectStore, StoreError};

use super::inodes::{Inodes, Listed};
use super::{names, Attr, DirEntry, FsError, FsOptions, FsStats, Kind};
use crate::passthrough::Passthrough;

struct Listing {
    entries: Arc<Vec<DirEntry>>,
    fetched: Instant,
}

/// The index of `name` in a listing: listings are sorted by name (see `list_dir`).
pub(super) fn find_entry(entries: &[DirEntry], name: &str) -> Option<usize> {
    entries.binary_search_by(|e| e.name.as_str().cmp(name)).ok()
}

pub(super) struct Namespace {
    opts: Arc<FsOptions>,
    /// Where listings and attributes come from.
    source: Arc<dyn ObjectStore>,
    pub inodes: Inodes,
    dirs: Mutex<HashMap<u64, Listing>>,
    /// Listings in flight: a walker's own listing joins one fetched ahead for it.
    flights: Flights<u64, Arc<Vec<DirEntry>>, FsError>,
    negative: Mutex<HashMap<(u64, String), Instant>>,
    /// Which inodes the kernel reads through backing files: a version change on
    /// one of them moves the path to a new inode.
    passthrough: Arc<Passthrough>,
    stats: Arc<FsStats>,
}

impl Namespace {
    pub fn new(
        opts: Arc<FsOptions>,
        source: Arc<dyn ObjectStore>,
        passthrough: Arc<Passthrough>,
        stats: Arc<FsStats>,
        journal: Option<Arc<crate::journal::Journal>>,
    ) -> Namespace {
        Namespace {
            opts,
            source,
            inodes: Inodes::new(SystemTime::now(), journal),
            dirs: Mutex::new(HashMap::new()),
            flights: Flights::default(),
            negative: Mutex::new(HashMap::new()),
            passthrough,
            stats,
        }
    }

    pub fn full_key(&self, path: &str) -> String {
        format!("{}{path}", self.opts.prefix)
    }

    pub fn getattr_cached(&self, ino: u64) -> Result<Attr, FsError> {
        self.inodes.attr(ino, &self.opts)
    }

    /// Attributes, refreshed from the source when older than `metadata_ttl`.
    pub async fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        if let Some(path) = self.inodes.stale_file(ino, self.opts.metadata_ttl)? {
            self.refresh_file(&path).await?;
        }
        let mut a = self.getattr_cached(ino)?;
        // A directory's attributes never change; whether it is still there is
        // its entry's question (LOOKUP), not this one's.
        if a.kind == Kind::Dir {
            a.valid = self.opts.metadata_ttl;
        }
        Ok(a)
    }

    /// The file `path` as the source has it now.
    pub async fn refresh_file(&self, path: &str) -> Result<ObjectMeta, FsError> {
        let meta = self
            .source
            .head(&GetObject::new(&self.opts.bucket, self.full_key(path)))
            .await?;
        let ino = self.intern_file(
            path,
            meta.size,
            &meta.etag,
            meta.last_modified,
            Instant::now(),
        );
        self.inodes.set_archived(ino, meta.archived().is_some());
        Ok(meta)
    }

    /// The inode of file `path` at this version. A version change on an inode the
    /// kernel reads through a passthrough backing file (which holds the old
    /// version, and which every open of that inode must share) gets the path a
    /// new inode, so the next open reads the new version.
    fn intern_file(
        &self,
        path: &str,
        size: u64,
        etag: &str,
        mtime: Option<SystemTime>,
        seen: Instant,
    ) -> u64 {
        self.inodes
            .renumber_if_changed(path, etag, |old| self.passthrough.has_backing(old));
        self.inodes
            .intern(path, Kind::File, Some((size, etag, mtime)), seen)
    }

    /// The entries of directory `ino`, from the cache or a fresh listing.
    pub async fn readdir(self: &Arc<Self>, ino: u64) -> Result<Arc<Vec<DirEntry>>, FsError> {
        if let Some(entries) = self.fresh_listing(ino) {
            return Ok(entries);
        }
        let (path, kind) = self.inodes.path(ino)?;
        if kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let me = self.clone();
        let (r, _) = self
            .flights
            .run(ino, async move {
                // A flight that ended since the check above left its listing here.
                if let Some(entries) = me.fresh_listing(ino) {
                    return Ok(entries);
                }
                let (entries, age) = me.list_dir(&path).await?;
                let entries = Arc::new(entries);
                // A page a node kept for a while is that much closer to its end.
                let now = Instant::now();
                me.dirs.lock().unwrap().insert(
                    ino,
                    Listing {
                        entries: entries.clone(),
                        fetched: now.checked_sub(age).unwrap_or(now),
                    },
                );
                Ok(entries)
            })
            .await;
        r.map_err(FsError::from)
    }

    pub fn fresh_listing(&self, ino: u64) -> Option<Arc<Vec<DirEntry>>> {
        self.dirs
            .lock()
            .unwrap()
            .get(&ino)
            .and_then(|l| (l.fetched.elapsed() < self.opts.metadata_ttl).then(|| l.entries.clone()))
    }

    /// Whether directory `ino` has had a listing (fresh or not).
    fn was_listed(&self, ino: u64) -> bool {
        self.dirs.lock().unwrap().contains_key(&ino)
    }

    /// Drops every cached listing (an object changed under one of them).
    pub fn forget_listings(&self) {
        self.dirs.lock().unwrap().clear();
    }

    /// The entries of directory `path`, and the age of its oldest page.
    async fn list_dir(&self, path: &str) -> Result<(Vec<DirEntry>, Duration), FsError> {
        let dir_key = self.full_key(path);
        let mut req = ListRequest {
            bucket: self.opts.bucket.clone(),
            prefix: dir_key.clone(),
            delimiter: Some("/".into()),
            ..Default::default()
        };
        let mut by_name: BTreeMap<String, DirEntry> = BTreeMap::new();
        // Names that are directories, on any page so far: a file of the same
        // name is not shown.
        let mut dirs: HashSet<String> = HashSet::new();
        let mut age = Duration::ZERO;
        loop {
            let page = self.source.list_page(&req).await?;
            self.stats.listings.fetch_add(1, Relaxed);
            let page_age = page.age.unwrap_or_default();
            age = age.max(page_age);
            let now = Instant::now();
            let seen = now.checked_sub(page_age).unwrap_or(now);
            // The page's entries, named first and interned together: one
            // journal write for a page's new inodes.
            let (mut page_names, mut listed): (Vec<&str>, Vec<Listed<'_>>) =
                (Vec::new(), Vec::new());
            for cp in &page.common_prefixes {
                let name = cp[dir_key.len()..].trim_end_matches('/');
                if let Some(why) = names::problem(name) {
                    self.skip(cp, why);
                    continue;
                }
                dirs.insert(name.to_owned());
                let entry = Listed {
                    path: format!("{path}{name}/"),
                    kind: Kind::Dir,
                    meta: None,
                    archived: false,
                };
                page_names.push(name);
                listed.push(entry);
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
                if dirs.contains(name) {
                    tracing::info!(key = %o.key, "key is both a file and a directory prefix; showing the directory");
                    continue;
                }
                let path = format!("{path}{name}");
                self.inodes
                    .renumber_if_changed(&path, &o.etag, |old| self.passthrough.has_backing(old));
                let entry = Listed {
                    path,
                    kind: Kind::File,
                    meta: Some((o.size, &o.etag, o.last_modified)),
                    archived: o.archived(),
                };
                page_names.push(name);
                listed.push(entry);
            }
            let inos = self.inodes.intern_all(&listed, seen);
            for ((name, e), ino) in page_names.into_iter().zip(&listed).zip(inos) {
                let entry = DirEntry {
                    name: name.to_owned(),
                    ino,
                    kind: e.kind,
                };
                by_name.insert(name.to_owned(), entry);
            }
            match page.next_continuation_token {
                Some(t) => req.continuation_token = Some(t),
                None => break,
            }
        }
        // A file listed before its same-named directory appeared on a later page.
        Ok((by_name.into_values().collect(), age))
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
    pub async fn lookup(self: &Arc<Self>, parent: u64, name: &str) -> Result<Attr, FsError> {
        if names::problem(name).is_some() {
            return Err(FsError::NotFound);
        }
        let (ppath, pkind) = self.inodes.path(parent)?;
        if pkind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        // A fresh listing of the parent answers without asking the origin. A
        // directory listed before whose listing expired (a walk's names the
        // kernel let go of) is listed again, once however many names are
        // asked, rather than probed name by name.
        let listing = match self.fresh_listing(parent) {
            Some(entries) => Some(entries),
            None if self.was_listed(parent) => Some(self.readdir(parent).await?),
            None => None,
        };
        let cached = listing.map(|entries| find_entry(&entries, name).map(|i| entries[i].ino));
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
        let dir_path = format!("{ppath}{name}/");
        let file_path = format!("{ppath}{name}");
        let probe = ListRequest {
            bucket: self.opts.bucket.clone(),
            prefix: self.full_key(&dir_path),
            max_keys: Some(1),
            ..Default::default()
        };
        let head = GetObject::new(&self.opts.bucket, self.full_key(&file_path));
        let (dir, file) = tokio::join!(self.source.list_page(&probe), self.source.head(&head));
        let dir = dir?;
        if !dir.objects.is_empty() || !dir.common_prefixes.is_empty() {
            let ino = self
                .inodes
                .intern(&dir_path, Kind::Dir, None, Instant::now());
            return self.getattr_cached(ino);
        }
        match file {
            Ok(meta) => {
                let ino = self.intern_file(
                    &file_path,
                    meta.size,
                    &meta.etag,
                    meta.last_modified,
                    Instant::now(),
                );
                self.inodes.set_archived(ino, meta.archived().is_some());
                self.getattr_cached(ino)
            }
            Err(StoreError::NoSuchKey { .. }) => {
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
}
