//! Open files and open directories.
//!
//! A file handle pins the version its open saw and reads it through the cluster
//! reader, fetching ahead what its reads run into ([`super::readahead`]). A
//! directory handle holds one listing, read end to end.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use shoal::cluster::Handle;

use super::readahead::Readahead;
use super::{DirEntry, Fs, FsError, Kind};

pub(super) struct OpenFile {
    handle: Handle,
    ino: u64,
    ra: Mutex<Readahead>,
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

impl Fs {
    /// Opens a file, pinning the version it has now.
    pub async fn open(self: &Arc<Self>, ino: u64) -> Result<Opened, FsError> {
        let (path, kind) = self.inodes.path(ino)?;
        if kind != Kind::File {
            return Err(FsError::IsDir);
        }
        let meta = match self.inodes.fresh_meta(ino, self.opts.metadata_ttl) {
            Some(m) => m,
            None => self.refresh_file(&path).await?,
        };
        if let Some(class) = meta.archived() {
            let key = self.full_key(&path);
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
            .open(&self.opts.bucket, &self.full_key(&path), Some(meta.clone()))
            .await?;
        self.visit(&path);
        let (keep_cache, direct_io) = self.inodes.page_cache_mode(ino, &meta.etag);
        // A file other versions of which are open through the page cache is
        // read around it, never passed through.
        let backing = match &self.disk {
            Some(disk) if !direct_io && self.passthrough.is_on() => {
                let (disk, bucket, key) =
                    (disk.clone(), self.opts.bucket.clone(), self.full_key(&path));
                let (etag, size, bs) = (meta.etag.clone(), meta.size, self.reader.block_size());
                tokio::task::spawn_blocking(move || disk.whole(&bucket, &key, &etag, bs, size))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        let fh = self.new_fh();
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
            etag: meta.etag.clone(),
            backing,
            keep_cache,
            direct_io,
        })
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
        let end = (offset + size as u64).min(f.handle.meta().size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let base = self.reader.read_window() as u64;
        let budget = self.reader.inflight_limit() as u64;
        let (ahead, sequential) = {
            let mut ra = f.ra.lock().unwrap();
            let ahead = ra.advance(offset, end, bs, base, budget, std::time::Instant::now());
            (ahead, ra.sequential())
        };
        if let Some((from, count)) = ahead {
            self.stats.readahead_blocks.fetch_add(count, Relaxed);
            f.handle.prefetch(from, count);
        }
        self.stats.reads.fetch_add(1, Relaxed);
        let read = if sequential {
            f.handle.read(offset, end - offset).await
        } else {
            f.handle.read_random(offset, end - offset).await
        };
        match read {
            Ok(b) => {
                self.stats.read_bytes.fetch_add(b.len() as u64, Relaxed);
                Ok(b)
            }
            Err(e) => {
                let err = FsError::from(e);
                if let FsError::Stale(why) = &err {
                    self.stats.stale_reads.fetch_add(1, Relaxed);
                    self.inodes.forget_version(f.ino);
                    self.forget_listings();
                    tracing::warn!(bucket = %self.opts.bucket, key = %f.handle.key(), "read refused: {why}");
                } else {
                    tracing::error!(bucket = %self.opts.bucket, key = %f.handle.key(), offset, "read failed: {err}");
                }
                Err(err)
            }
        }
    }

    pub fn release(&self, fh: u64) {
        self.files.lock().unwrap().remove(&fh);
    }

    pub fn open_files(&self) -> usize {
        self.files.lock().unwrap().len()
    }

    /// Directory `ino` opened by a reader (`ls`, `find`, `tar`, `os.scandir`): a
    /// visit in its parent's walk, then a handle on its entries.
    pub async fn opendir(self: &Arc<Self>, ino: u64) -> Result<u64, FsError> {
        let walked_into = match self.inodes.path(ino) {
            Ok((path, Kind::Dir)) => self.visit(&path),
            _ => false,
        };
        if walked_into {
            self.enter(ino);
        }
        let entries = self.readdir(ino).await?;
        let fh = self.new_fh();
        self.open_dirs.lock().unwrap().insert(fh, (ino, entries));
        Ok(fh)
    }

    /// The entries of open directory `fh` from `offset` on (0 is `.`, 1 is `..`),
    /// made as they are taken: the kernel takes a buffer's worth at a time.
    pub fn dir_items(
        &self,
        fh: u64,
        offset: u64,
    ) -> Result<impl Iterator<Item = DirItem>, FsError> {
        let (ino, entries) = self
            .open_dirs
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)?;
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
        self.open_dirs.lock().unwrap().remove(&fh);
    }
}
