//! The disk tier: one file per block under `data_dir/blocks/`, bounded in bytes,
//! surviving restarts.
//!
//! Each file starts with a header naming the block it holds and an xxh3 checksum of
//! its data; both are checked on every read, so a torn, corrupted or misplaced file
//! is deleted and counted, never served. Files are written to a temporary name and
//! renamed into place, so a crash leaves either the old state or the new one.
//!
//! A tier serves as soon as it is open: the index is rebuilt from the headers
//! alone by a scan that runs beside it ([`DiskTier::index`]), and a block it has
//! not reached yet is read from its file by name when asked for ([`demand`]).
//! Until the scan is done the tier never evicts (its index is partial) and
//! writes a block only if it fits whatever the files not yet read hold; a purge
//! meanwhile is applied to what the scan finds ([`index`]).
//!
//! All methods do blocking file I/O: async callers run them on a blocking thread.

mod demand;
mod format;
mod index;
mod layout;
mod scan;
#[cfg(test)]
mod tests;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::policy::Eviction;
use super::{BlockCache, BlockKey, Evicting, TierStats};
use crate::log_limit::{more, LogLimit};
pub use format::{decode_block, decode_header, encode_header, DecodeError, Header};
pub use index::{IndexProgress, Purge};
pub use layout::block_path;
use layout::{filesystem_size, filesystem_used};

/// Each indexed block's file size, in the order the policy gives them up.
type Index = Box<dyn Eviction<BlockKey, u64>>;

struct State {
    index: Index,
    bytes: u64,
    /// Bytes of block files being written: room is kept for them, so writes
    /// side by side never hold more than the tier between them.
    writing: u64,
    /// While the index scan runs: what is known of it, and the most bytes the
    /// files it has not read yet can hold (counted as used, so writes stay
    /// within the tier whatever they turn out to be).
    indexing: Option<index::Indexing>,
    unscanned: u64,
}

pub struct DiskTier {
    dir: PathBuf,
    evicting: Evicting,
    /// `disk_size`, or less once the disk has filled below it.
    capacity: AtomicU64,
    state: Mutex<State>,
    evictions: AtomicU64,
    checksum_failures: AtomicU64,
    read_failures: AtomicU64,
    write_failures: AtomicU64,
    /// A full, read-only or unreadable disk fails every block: one line a minute.
    read_log: LogLimit,
    write_log: LogLimit,
    opened: SystemTime,
    /// Block files the scan has read; files removed on demand as it would.
    scanned: AtomicU64,
    removed_on_demand: AtomicU64,
    stop_scan: AtomicBool,
    /// Whether a scan is running; told when it ends.
    scanning: Mutex<bool>,
    scan_ended: Condvar,
}

/// What has gone wrong on disk since the tier opened. A failure never fails a
/// read: the block comes from the origin (or RAM) instead.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DiskFailures {
    /// Block files whose bytes were not the block (dropped).
    pub checksum: u64,
    /// Block files that could not be read (I/O errors, permissions).
    pub read: u64,
    /// Blocks that could not be written (disk full, read-only, permissions).
    pub write: u64,
}

/// Why a block file could not be served.
enum ReadFailure {
    Io(io::Error),
    Bad(DecodeError),
}

/// What opening a disk tier found.
#[derive(Debug, Default, Clone)]
pub struct DiskStats {
    pub blocks: u64,
    pub bytes: u64,
    /// Temporary, unreadable or foreign files deleted.
    pub removed: u64,
    pub took: Duration,
}

impl DiskTier {
    /// Opens (creating if needed) the tier under `data_dir/blocks`, rebuilding the
    /// index from the files there before it returns.
    pub fn open(data_dir: &Path, capacity: u64) -> io::Result<(DiskTier, DiskStats)> {
        let tier = Self::open_unindexed(data_dir, capacity)?;
        let stats = tier.index()?;
        Ok((tier, stats))
    }

    /// Opens the tier with an empty index, to serve at once; [`Self::index`]
    /// (on a thread of its own) reads the files there.
    pub fn open_unindexed(data_dir: &Path, capacity: u64) -> io::Result<DiskTier> {
        let dir = data_dir.join("blocks");
        fs::create_dir_all(&dir)?;
        if let Some(total) = filesystem_size(&dir).filter(|&t| t < capacity) {
            tracing::warn!(
                "disk_size ({capacity} bytes) is larger than the filesystem at {} ({total} bytes): \
                 the tier will shrink to what fits when the disk fills",
                dir.display()
            );
        }
        // The tier's files hold no more than the filesystem does; unknown, as
        // much as the tier may.
        let unscanned = filesystem_used(&dir).unwrap_or(capacity);
        let evicting = Evicting::default();
        Ok(DiskTier {
            dir,
            capacity: AtomicU64::new(capacity),
            state: Mutex::new(State {
                index: evicting.build(capacity),
                bytes: 0,
                writing: 0,
                indexing: Some(index::Indexing::default()),
                unscanned,
            }),
            evictions: AtomicU64::new(0),
            checksum_failures: AtomicU64::new(0),
            read_failures: AtomicU64::new(0),
            write_failures: AtomicU64::new(0),
            read_log: LogLimit::per_minute(),
            write_log: LogLimit::per_minute(),
            opened: SystemTime::now(),
            scanned: AtomicU64::new(0),
            removed_on_demand: AtomicU64::new(0),
            stop_scan: AtomicBool::new(false),
            scanning: Mutex::new(true),
            scan_ended: Condvar::new(),
            evicting,
        })
    }

    /// The tier, evicting as `evicting` says; before any block is indexed.
    pub fn evicting(mut self, evicting: Evicting) -> DiskTier {
        let capacity = self.capacity.load(Relaxed);
        let s = self.state.get_mut().unwrap();
        debug_assert!(
            s.index.is_empty(),
            "a policy is chosen before the index is read"
        );
        s.index = evicting.build(capacity);
        self.evicting = evicting;
        self
    }

    /// Reads every block file's header into the index (the tier serving
    /// meanwhile), then brings the tier within its capacity. `Interrupted` if
    /// [`Self::stop_index`] stopped it: the tier then goes on finding blocks by
    /// name and never evicts.
    pub fn index(&self) -> io::Result<DiskStats> {
        let started = Instant::now();
        let progress = |len: u64| {
            let mut s = self.state.lock().unwrap();
            s.unscanned = s.unscanned.saturating_sub(len);
        };
        let ctl = scan::Control {
            opened: self.opened,
            read: &self.scanned,
            stop: &self.stop_scan,
            progress: &progress,
        };
        let mut found = scan::scan(&self.dir, &ctl);
        let mut stats = DiskStats::default();
        if let Ok(found) = found.as_mut() {
            let mut s = self.state.lock().unwrap();
            let indexing = s.indexing.take().unwrap_or_default();
            let empty = self.evicting.build(self.capacity.load(Relaxed));
            let (index, bytes, gone) =
                indexing.merge(std::mem::take(&mut found.blocks), &*s.index, empty);
            for k in gone {
                let _ = fs::remove_file(self.path_of(&k));
            }
            (s.index, s.bytes, s.unscanned) = (index, bytes, 0);
            self.evict(&mut s);
            stats.blocks = s.index.len() as u64;
            stats.bytes = s.bytes;
            stats.removed = found.removed + self.removed_on_demand.load(Relaxed);
        }
        *self.scanning.lock().unwrap() = false;
        self.scan_ended.notify_all();
        stats.took = started.elapsed();
        found.map(|_| stats)
    }

    /// Stops the index scan and waits (a little) for it to end: the tier is
    /// someone else's now, so it deletes nothing more.
    pub fn stop_index(&self) {
        self.stop_scan.store(true, Relaxed);
        let running = self.scanning.lock().unwrap();
        drop(
            self.scan_ended
                .wait_timeout_while(running, Duration::from_secs(5), |r| *r),
        );
    }

    /// How far the index scan has come.
    pub fn progress(&self) -> IndexProgress {
        IndexProgress {
            read: self.scanned.load(Relaxed),
            done: self.state.lock().unwrap().indexing.is_none(),
        }
    }

    /// Waits until no scan runs.
    fn wait_for_scan(&self) {
        let running = self.scanning.lock().unwrap();
        drop(self.scan_ended.wait_while(running, |r| *r));
    }

    /// Where `key` lives on disk.
    pub fn path_of(&self, key: &BlockKey) -> PathBuf {
        block_path(&self.dir, key)
    }

    pub fn failures(&self) -> DiskFailures {
        DiskFailures {
            checksum: self.checksum_failures.load(Relaxed),
            read: self.read_failures.load(Relaxed),
            write: self.write_failures.load(Relaxed),
        }
    }

    fn evict(&self, s: &mut State) {
        // A partial index would evict what was used last.
        if s.indexing.is_none() {
            self.evict_to(s, self.capacity.load(Relaxed));
        }
    }

    /// Drops the policy's victims until at most `limit` bytes are held.
    fn evict_to(&self, s: &mut State, limit: u64) {
        while s.bytes > limit {
            let Some((key, size)) = s.index.pop_victim() else {
                break;
            };
            s.bytes -= size;
            let _ = fs::remove_file(self.path_of(&key));
            self.evictions.fetch_add(1, Relaxed);
        }
    }

    fn forget(&self, key: &BlockKey) {
        let mut s = self.state.lock().unwrap();
        if let Some(size) = s.index.remove(key) {
            s.bytes -= size;
        }
        if let Some(ix) = s.indexing.as_mut() {
            ix.dropped(key);
        }
        let _ = fs::remove_file(self.path_of(key));
    }

    fn read_verified(&self, key: &BlockKey) -> Result<Bytes, ReadFailure> {
        let buf = fs::read(self.path_of(key)).map_err(ReadFailure::Io)?;
        let data = decode_block(&buf, key).map_err(ReadFailure::Bad)?;
        Ok(Bytes::copy_from_slice(data))
    }

    /// A write failed: counted and logged once a minute. When the disk is full
    /// (the filesystem holds less than `disk_size`, or others fill it), the tier
    /// shrinks to what it holds now and drops its oldest blocks to make room for
    /// `size` more; true if it did, so the write is worth one more try.
    fn write_failed(&self, path: &Path, size: u64, e: io::Error) -> bool {
        self.write_failures.fetch_add(1, Relaxed);
        let full = matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT));
        let mut room = String::new();
        let mut made_room = false;
        let mut s = self.state.lock().unwrap();
        if full && s.indexing.is_none() {
            let limit = s.bytes.min(self.capacity.load(Relaxed));
            if limit >= size {
                self.capacity.store(limit, Relaxed);
                s.index.set_capacity(limit);
                self.evict_to(&mut s, limit - size);
                made_room = true;
            }
            room = format!("; the tier now holds at most {limit} bytes");
        }
        drop(s);
        if let Some(n) = self.write_log.event() {
            tracing::warn!(
                path = %path.display(),
                "disk tier cannot write a block, serving without it: {e}{room}{}",
                more(n)
            );
        }
        made_room
    }
}

impl BlockCache for DiskTier {
    fn get(&self, key: &BlockKey) -> Option<Bytes> {
        // Known to the index (and promoted in it), or not on disk at all once
        // the scan is done.
        if self.state.lock().unwrap().index.get(key).is_none() {
            return self.on_demand(key);
        }
        match self.read_verified(key) {
            Ok(b) => Some(b),
            Err(ReadFailure::Bad(why)) => {
                self.checksum_failures.fetch_add(1, Relaxed);
                tracing::warn!(path = %self.path_of(key).display(), "dropping bad block file: {why}");
                self.forget(key);
                None
            }
            Err(ReadFailure::Io(e)) => {
                // Gone from under us (deleted by hand): nothing to report. Otherwise
                // the disk is failing or unreadable; either way the block is
                // forgotten, so the next read of it goes to the origin at once.
                if e.kind() != io::ErrorKind::NotFound {
                    self.read_failures.fetch_add(1, Relaxed);
                    if let Some(n) = self.read_log.event() {
                        tracing::warn!(
                            path = %self.path_of(key).display(),
                            "disk tier cannot read a block, fetching it instead: {e}{}",
                            more(n)
                        );
                    }
                }
                self.forget(key);
                None
            }
        }
    }

    fn insert(&self, key: BlockKey, data: Bytes) {
        let header = encode_header(&key, &data);
        let size = (header.len() + data.len()) as u64;
        let capacity = self.capacity.load(Relaxed);
        if size > capacity {
            return;
        }
        // On disk but not read by the scan yet: kept, not written twice.
        if self.state.lock().unwrap().indexing.is_some() && self.adopt(&key) {
            return;
        }
        {
            let mut s = self.state.lock().unwrap();
            // A key names one version's block: held, it holds these bytes
            // already. Written again, its old file and the new one would both
            // be on disk for a while, past the tier's bound.
            if s.index.get(&key).is_some() {
                return;
            }
            if s.writing + size > capacity {
                return;
            }
            if s.indexing.is_some() {
                // No eviction on a partial index: written only if it fits
                // whatever the files not read yet hold.
                if s.bytes + s.unscanned + s.writing + size > capacity {
                    return;
                }
            } else {
                // Room first: on a disk that holds no more than the tier,
                // writing before evicting would fail.
                let room = capacity.saturating_sub(size + s.writing);
                self.evict_to(&mut s, room);
            }
            s.writing += size;
        }
        let path = self.path_of(&key);
        let tmp = path.with_extension(format!("{}.tmp", rand::random::<u32>()));
        let write = || -> io::Result<()> {
            fs::create_dir_all(path.parent().expect("block files live in a subdirectory"))?;
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&header)?;
            f.write_all(&data)?;
            drop(f);
            fs::rename(&tmp, &path)
        };
        let written = match write() {
            Ok(()) => true,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                // A full disk makes room and tries once more; anything else gives up.
                let again = self.write_failed(&path, size, e) && write().is_ok();
                if !again {
                    let _ = fs::remove_file(&tmp);
                }
                again
            }
        };
        let mut s = self.state.lock().unwrap();
        s.writing -= size;
        if !written {
            return;
        }
        if let Some(old) = s.index.insert(key, size, size) {
            s.bytes -= old;
        }
        s.bytes += size;
        self.evict(&mut s);
    }

    /// Waits for the index scan, if one runs: what it has not read is out of
    /// reach of a predicate it cannot keep (see [`Self::remove_shared`]).
    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        self.wait_for_scan();
        self.remove_indexed(gone)
    }

    /// A purge while the scan runs is kept and applied to what it finds.
    fn remove_shared(&self, gone: Purge) -> u64 {
        if let Some(ix) = self.state.lock().unwrap().indexing.as_mut() {
            ix.purge(gone.clone());
        }
        self.remove_indexed(&*gone)
    }

    fn failures(&self) -> DiskFailures {
        DiskTier::failures(self)
    }

    fn stats(&self) -> TierStats {
        let s = self.state.lock().unwrap();
        TierStats {
            used_bytes: s.bytes,
            capacity_bytes: self.capacity.load(Relaxed),
            blocks: s.index.len() as u64,
            evictions: self.evictions.load(Relaxed),
        }
    }
}

impl DiskTier {
    /// Drops the indexed blocks `gone` picks; returns how many.
    fn remove_indexed(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        let picked: Vec<BlockKey> = {
            let s = self.state.lock().unwrap();
            s.index
                .iter()
                .filter(|(k, _)| gone(k))
                .map(|(k, _)| k.clone())
                .collect()
        };
        for k in &picked {
            self.forget(k);
        }
        picked.len() as u64
    }
}
