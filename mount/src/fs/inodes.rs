//! The inode table: a stable number per path for the life of the mount (across the
//! daemons that serve it: each new inode is journaled before the kernel learns
//! of it), with what is known of each file's version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use shoal::store::ObjectMeta;

use super::{Attr, FsError, FsOptions, Kind, ROOT};
use crate::journal::{Journal, Record, State};

pub(super) struct Inode {
    /// Path under the prefix: `""` for the root, `a/b/` for a directory, `a/b` for a file.
    pub path: String,
    pub kind: Kind,
    pub size: u64,
    pub etag: String,
    pub mtime: SystemTime,
    /// When it was last learned from the origin (a file's size and ETag, a
    /// directory's being there), as old as the listing it came in; never, for
    /// an inode a successor took over (it asks again first).
    pub fetched: Option<Instant>,
    /// The version whose bytes the kernel page cache may hold for this inode. The
    /// page cache is per inode, not per handle: a handle pinned to another version
    /// reads around it (direct I/O).
    pub page_version: Option<String>,
    /// Listed in an archive class (GLACIER, DEEP_ARCHIVE): its version is never
    /// taken on trust, so each open asks whether it is restored.
    pub archived: bool,
}

impl Inode {
    /// What is known of a file's version, if it is fresh enough to pin.
    pub fn fresh_meta(&self, ttl: Duration) -> Option<ObjectMeta> {
        let fresh = self.fetched.is_some_and(|f| f.elapsed() < ttl)
            && !self.etag.is_empty()
            && !self.archived;
        fresh.then(|| ObjectMeta {
            size: self.size,
            etag: self.etag.clone(),
            last_modified: Some(self.mtime),
            ..Default::default()
        })
    }
}

/// An entry of a listing page, as [`Inodes::intern_all`] takes it.
pub(super) struct Listed<'a> {
    pub path: String,
    pub kind: Kind,
    /// A file's size, ETag and time.
    pub meta: Option<(u64, &'a str, Option<SystemTime>)>,
    pub archived: bool,
}

pub(super) struct Table {
    pub by_ino: HashMap<u64, Inode>,
    pub by_path: HashMap<String, u64>,
    next: u64,
}

pub(super) struct Inodes {
    table: Mutex<Table>,
    journal: Option<Arc<Journal>>,
    /// Implicit directories have no time of their own: the mount's.
    mounted_at: SystemTime,
}

impl Inodes {
    pub fn new(mounted_at: SystemTime, journal: Option<Arc<Journal>>) -> Inodes {
        let root = Inode {
            path: String::new(),
            kind: Kind::Dir,
            size: 0,
            etag: String::new(),
            mtime: mounted_at,
            fetched: Some(Instant::now()),
            page_version: None,
            archived: false,
        };
        Inodes {
            journal,
            table: Mutex::new(Table {
                by_ino: HashMap::from([(ROOT, root)]),
                by_path: HashMap::from([(String::new(), ROOT)]),
                next: ROOT + 1,
            }),
            mounted_at,
        }
    }

    /// Runs `f` on the table, under its lock.
    pub fn with<T>(&self, f: impl FnOnce(&Table) -> T) -> T {
        f(&self.table.lock().unwrap())
    }

    /// Gives `path` a fresh inode if its file's version is no longer `etag` and
    /// `keep(old ino)` says its inode must stay as it is (a passthrough backing
    /// file pins the old version to it); the old inode lives on for its handles.
    pub fn renumber_if_changed(&self, path: &str, etag: &str, keep: impl Fn(u64) -> bool) {
        let mut t = self.table.lock().unwrap();
        let Some(&old) = t.by_path.get(path) else {
            return;
        };
        let changed = t
            .by_ino
            .get(&old)
            .is_some_and(|n| !n.etag.is_empty() && n.etag != etag);
        if changed && keep(old) {
            t.by_path.remove(path);
        }
    }

    /// The inode for `path`, created on first sight; updates file attributes.
    /// `seen`: when the source had it so (a node's cached listing is older
    /// than its answer).
    pub fn intern(
        &self,
        path: &str,
        kind: Kind,
        meta: Option<(u64, &str, Option<SystemTime>)>,
        seen: Instant,
    ) -> u64 {
        let mut t = self.table.lock().unwrap();
        let mut new = Vec::new();
        let ino = self.intern_in(&mut t, path, kind, meta, seen, &mut new);
        if let Some(j) = &self.journal {
            j.append_all(&new);
        }
        ino
    }

    /// The inodes of a listing page's entries, as [`Inodes::intern`] each, with
    /// one journal write for the new ones, made before any is seen outside.
    pub fn intern_all(&self, entries: &[Listed<'_>], seen: Instant) -> Vec<u64> {
        let mut t = self.table.lock().unwrap();
        let mut new = Vec::new();
        let inos = entries
            .iter()
            .map(|e| {
                let ino = self.intern_in(&mut t, &e.path, e.kind, e.meta, seen, &mut new);
                if e.kind == Kind::File {
                    if let Some(n) = t.by_ino.get_mut(&ino) {
                        n.archived = e.archived;
                    }
                }
                ino
            })
            .collect();
        if let Some(j) = &self.journal {
            j.append_all(&new);
        }
        inos
    }

    /// [`Inodes::intern`] under the table's lock: a new inode's record goes in
    /// `new`, for the caller to journal before it lets go of the lock.
    fn intern_in(
        &self,
        t: &mut Table,
        path: &str,
        kind: Kind,
        meta: Option<(u64, &str, Option<SystemTime>)>,
        seen: Instant,
        new: &mut Vec<Record>,
    ) -> u64 {
        let ino = match t.by_path.get(path) {
            Some(i) => *i,
            None => {
                let ino = t.next;
                t.next += 1;
                if self.journal.is_some() {
                    new.push(Record::Inode {
                        ino,
                        dir: kind == Kind::Dir,
                        path: path.to_owned(),
                    });
                }
                t.by_path.insert(path.to_owned(), ino);
                t.by_ino.insert(
                    ino,
                    Inode {
                        path: path.to_owned(),
                        kind,
                        size: 0,
                        etag: String::new(),
                        mtime: self.mounted_at,
                        fetched: Some(seen),
                        page_version: None,
                        archived: false,
                    },
                );
                ino
            }
        };
        let Some(node) = t.by_ino.get_mut(&ino) else {
            return ino;
        };
        if let Some((size, etag, mtime)) = meta {
            node.size = size;
            node.etag = etag.to_owned();
            node.mtime = mtime.unwrap_or(SystemTime::UNIX_EPOCH);
            node.fetched = Some(seen);
        } else if kind == Kind::Dir {
            node.fetched = Some(seen);
        }
        ino
    }

    pub fn set_archived(&self, ino: u64, archived: bool) {
        if let Some(n) = self.table.lock().unwrap().by_ino.get_mut(&ino) {
            n.archived = archived;
        }
    }

    pub fn path(&self, ino: u64) -> Result<(String, Kind), FsError> {
        let t = self.table.lock().unwrap();
        let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
        Ok((n.path.clone(), n.kind))
    }

    pub fn by_path(&self, path: &str) -> Option<u64> {
        self.table.lock().unwrap().by_path.get(path).copied()
    }

    pub fn attr(&self, ino: u64, o: &FsOptions) -> Result<Attr, FsError> {
        let t = self.table.lock().unwrap();
        let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
        Ok(Attr {
            ino,
            kind: n.kind,
            size: n.size,
            mtime: n.mtime,
            perm: match n.kind {
                Kind::File => o.file_mode,
                Kind::Dir => o.dir_mode,
            },
            uid: o.uid,
            gid: o.gid,
            valid: n.fetched.map_or(Duration::ZERO, |f| {
                o.metadata_ttl.saturating_sub(f.elapsed())
            }),
        })
    }

    /// The path of file `ino` if its attributes are older than `ttl`.
    pub fn stale_file(&self, ino: u64, ttl: Duration) -> Result<Option<String>, FsError> {
        let t = self.table.lock().unwrap();
        let n = t.by_ino.get(&ino).ok_or(FsError::NotFound)?;
        let stale = n.fetched.is_none_or(|f| f.elapsed() >= ttl);
        Ok((n.kind == Kind::File && stale).then(|| n.path.clone()))
    }

    pub fn fresh_meta(&self, ino: u64, ttl: Duration) -> Option<ObjectMeta> {
        self.table.lock().unwrap().by_ino.get(&ino)?.fresh_meta(ttl)
    }

    /// Drops what is known of a file's version so the next open asks the origin.
    pub fn forget_version(&self, ino: u64) {
        if let Some(n) = self.table.lock().unwrap().by_ino.get_mut(&ino) {
            n.etag.clear();
        }
    }

    /// How a new handle on version `etag` of `ino` reads: `(keep_cache, direct_io)`.
    ///
    /// The first version opened owns the inode's page cache for the life of the
    /// mount; any other version reads with direct I/O. Switching the cache to a
    /// new version (kernel invalidation once no handle uses it) still let a rare
    /// read mix versions under concurrent rewrites, so it is not done: a rewritten
    /// file gives up the page cache, never consistency.
    pub fn page_cache_mode(&self, ino: u64, etag: &str) -> (bool, bool) {
        let mut t = self.table.lock().unwrap();
        let n = t.by_ino.get_mut(&ino).expect("inodes are never removed");
        match n.page_version.as_deref() {
            Some(v) if v == etag => (true, false),
            Some(_) => (false, true),
            None => {
                if let Some(j) = &self.journal {
                    j.append(&Record::PageVersion {
                        ino,
                        etag: etag.to_owned(),
                    });
                }
                n.page_version = Some(etag.to_owned());
                (false, false)
            }
        }
    }

    /// Takes over the inodes a predecessor handed the kernel: the same numbers
    /// for the same paths, the page cache's versions; what is known of each
    /// file's version is asked again before it is used.
    pub fn restore(&self, state: &State) {
        let mut t = self.table.lock().unwrap();
        for (ino, dir, path) in &state.inodes {
            t.by_path.insert(path.clone(), *ino);
            t.by_ino.insert(
                *ino,
                Inode {
                    path: path.clone(),
                    kind: if *dir { Kind::Dir } else { Kind::File },
                    size: 0,
                    etag: String::new(),
                    mtime: self.mounted_at,
                    fetched: None,
                    page_version: state.page_versions.get(ino).cloned(),
                    archived: false,
                },
            );
            t.next = t.next.max(ino + 1);
        }
    }
}
