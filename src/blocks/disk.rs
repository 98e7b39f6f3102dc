//! The disk tier: one file per block under `data_dir/blocks/`, bounded in bytes,
//! surviving restarts.
//!
//! Each file starts with a header naming the block it holds and an xxh3 checksum of
//! its data; both are checked on every read, so a torn, corrupted or misplaced file
//! is deleted and counted, never served. Files are written to a temporary name and
//! renamed into place, so a crash leaves either the old state or the new one. At
//! start the index is rebuilt from the headers alone (oldest first, so recency
//! survives roughly), and leftover temporary files are removed.
//!
//! All methods do blocking file I/O: async callers run them on a blocking thread.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use lru::LruCache;
use xxhash_rust::xxh3::xxh3_64;

use super::{BlockCache, BlockKey, TierStats};
use crate::log_limit::{more, LogLimit};

const MAGIC: &[u8; 8] = b"SHOALBK1";
/// 2: the block size is part of the header (version 1 files are removed at start).
const VERSION: u32 = 2;
/// Fixed part: magic, version, header_len, data_len, checksum, block_size, index.
const FIXED: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8;
/// No identity is longer than this; a larger header length is corruption.
const MAX_HEADER: usize = 64 * 1024;

/// Why bytes are not the block they should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("file shorter than a block header")]
    Short,
    #[error("not a shoal block file")]
    NotBlockFile,
    #[error("block format version {0} is not {VERSION}")]
    Version(u32),
    /// Larger than the bytes at hand (or than any header may be).
    #[error("bad header length {0}")]
    HeaderLength(usize),
    #[error("header fields are malformed: {0}")]
    Fields(&'static str),
    #[error("file holds another block")]
    OtherBlock,
    #[error("data is {got} bytes, header says {want}")]
    DataLength { got: u64, want: u64 },
    #[error("checksum mismatch")]
    Checksum,
}

/// A decoded block header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: BlockKey,
    pub header_len: usize,
    pub data_len: u64,
    pub checksum: u64,
}

pub fn encode_header(key: &BlockKey, data: &[u8]) -> Vec<u8> {
    let parts = [
        key.bucket.as_bytes(),
        key.key.as_bytes(),
        key.etag.as_bytes(),
    ];
    let header_len = FIXED + parts.iter().map(|p| 4 + p.len()).sum::<usize>();
    let mut h = Vec::with_capacity(header_len);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&(header_len as u32).to_le_bytes());
    h.extend_from_slice(&(data.len() as u64).to_le_bytes());
    h.extend_from_slice(&xxh3_64(data).to_le_bytes());
    h.extend_from_slice(&key.block_size.to_le_bytes());
    h.extend_from_slice(&key.index.to_le_bytes());
    for p in parts {
        h.extend_from_slice(&(p.len() as u32).to_le_bytes());
        h.extend_from_slice(p);
    }
    h
}

/// The data of a whole block file, if the file is `key`'s block and intact. Never
/// panics, whatever the bytes.
pub fn decode_block<'a>(buf: &'a [u8], key: &BlockKey) -> Result<&'a [u8], DecodeError> {
    let h = decode_header(buf)?;
    if &h.key != key {
        return Err(DecodeError::OtherBlock);
    }
    let data = &buf[h.header_len..];
    if data.len() as u64 != h.data_len {
        return Err(DecodeError::DataLength {
            got: data.len() as u64,
            want: h.data_len,
        });
    }
    if xxh3_64(data) != h.checksum {
        return Err(DecodeError::Checksum);
    }
    Ok(data)
}

/// Decodes a header from the start of `buf`. Never panics, whatever the bytes.
pub fn decode_header(buf: &[u8]) -> Result<Header, DecodeError> {
    if buf.len() < FIXED {
        return Err(DecodeError::Short);
    }
    if &buf[..8] != MAGIC {
        return Err(DecodeError::NotBlockFile);
    }
    let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
    if u32_at(8) != VERSION {
        return Err(DecodeError::Version(u32_at(8)));
    }
    let header_len = u32_at(12) as usize;
    if !(FIXED..=MAX_HEADER).contains(&header_len) || header_len > buf.len() {
        return Err(DecodeError::HeaderLength(header_len));
    }
    let data_len = u64_at(16);
    let checksum = u64_at(24);
    let block_size = u64_at(32);
    let index = u64_at(40);
    let mut at = FIXED;
    let mut parts = Vec::with_capacity(3);
    for _ in 0..3 {
        if at + 4 > header_len {
            return Err(DecodeError::Fields("header ends inside a field length"));
        }
        let n = u32_at(at) as usize;
        at += 4;
        if n > header_len - at {
            return Err(DecodeError::Fields("header field runs past the header"));
        }
        let s = std::str::from_utf8(&buf[at..at + n])
            .map_err(|_| DecodeError::Fields("header field is not UTF-8"))?;
        parts.push(s);
        at += n;
    }
    if at != header_len {
        return Err(DecodeError::Fields(
            "header length does not match its fields",
        ));
    }
    Ok(Header {
        key: BlockKey::new(parts[0], parts[1], parts[2], block_size, index),
        header_len,
        data_len,
        checksum,
    })
}

struct State {
    lru: LruCache<BlockKey, u64>,
    bytes: u64,
    /// Bytes of block files being written: room is kept for them, so writes
    /// side by side never hold more than the tier between them.
    writing: u64,
}

pub struct DiskTier {
    dir: PathBuf,
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
    /// index from the files there.
    pub fn open(data_dir: &Path, capacity: u64) -> io::Result<(DiskTier, DiskStats)> {
        let started = Instant::now();
        let dir = data_dir.join("blocks");
        fs::create_dir_all(&dir)?;
        if let Some(total) = filesystem_size(&dir).filter(|&t| t < capacity) {
            tracing::warn!(
                "disk_size ({capacity} bytes) is larger than the filesystem at {} ({total} bytes): \
                 the tier will shrink to what fits when the disk fills",
                dir.display()
            );
        }
        let mut found: Vec<(SystemTime, BlockKey, u64)> = Vec::new();
        let mut stats = DiskStats::default();
        for sub in fs::read_dir(&dir)? {
            let sub = sub?.path();
            if !sub.is_dir() {
                continue;
            }
            for f in fs::read_dir(&sub)? {
                let path = f?.path();
                let keep = path.extension().is_some_and(|e| e == "blk")
                    && Self::index_file(&path, &mut found).is_ok();
                if !keep {
                    let _ = fs::remove_file(&path);
                    stats.removed += 1;
                }
            }
        }
        found.sort_by_key(|f| f.0);
        let tier = DiskTier {
            dir,
            capacity: AtomicU64::new(capacity),
            state: Mutex::new(State {
                lru: LruCache::unbounded(),
                bytes: 0,
                writing: 0,
            }),
            evictions: AtomicU64::new(0),
            checksum_failures: AtomicU64::new(0),
            read_failures: AtomicU64::new(0),
            write_failures: AtomicU64::new(0),
            read_log: LogLimit::per_minute(),
            write_log: LogLimit::per_minute(),
        };
        {
            let mut s = tier.state.lock().unwrap();
            for (_, key, size) in found {
                s.bytes += size;
                s.lru.put(key, size);
            }
            tier.evict(&mut s);
            stats.blocks = s.lru.len() as u64;
            stats.bytes = s.bytes;
        }
        stats.took = started.elapsed();
        Ok((tier, stats))
    }

    fn index_file(path: &Path, found: &mut Vec<(SystemTime, BlockKey, u64)>) -> Result<(), String> {
        let mut f = fs::File::open(path).map_err(|e| e.to_string())?;
        let meta = f.metadata().map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096.min(meta.len() as usize)];
        f.read_exact(&mut buf).map_err(|e| e.to_string())?;
        let h = match decode_header(&buf) {
            // A long key: the header runs past the first read.
            Err(DecodeError::HeaderLength(n))
                if n <= MAX_HEADER && meta.len() as usize > buf.len() =>
            {
                let mut all = Vec::new();
                fs::File::open(path)
                    .and_then(|mut f| f.read_to_end(&mut all))
                    .map_err(|e| e.to_string())?;
                decode_header(&all).map_err(|e| e.to_string())?
            }
            r => r.map_err(|e| e.to_string())?,
        };
        if h.header_len as u64 + h.data_len != meta.len() {
            return Err("file length does not match its header".into());
        }
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((mtime, h.key, meta.len()));
        Ok(())
    }

    /// Where `key` lives on disk.
    pub fn path_of(&self, key: &BlockKey) -> PathBuf {
        let d = key.digest();
        self.dir
            .join(format!("{:02x}", (d >> 120) as u8))
            .join(format!("{d:032x}.blk"))
    }

    pub fn failures(&self) -> DiskFailures {
        DiskFailures {
            checksum: self.checksum_failures.load(Relaxed),
            read: self.read_failures.load(Relaxed),
            write: self.write_failures.load(Relaxed),
        }
    }

    fn evict(&self, s: &mut State) {
        self.evict_to(s, self.capacity.load(Relaxed));
    }

    /// Drops the oldest blocks until at most `limit` bytes are held.
    fn evict_to(&self, s: &mut State, limit: u64) {
        while s.bytes > limit {
            let Some((key, size)) = s.lru.pop_lru() else {
                break;
            };
            s.bytes -= size;
            let _ = fs::remove_file(self.path_of(&key));
            self.evictions.fetch_add(1, Relaxed);
        }
    }

    fn forget(&self, key: &BlockKey) {
        let mut s = self.state.lock().unwrap();
        if let Some(size) = s.lru.pop(key) {
            s.bytes -= size;
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
        if full {
            let mut s = self.state.lock().unwrap();
            let limit = s.bytes.min(self.capacity.load(Relaxed));
            if limit >= size {
                self.capacity.store(limit, Relaxed);
                self.evict_to(&mut s, limit - size);
                made_room = true;
            }
            room = format!("; the tier now holds at most {limit} bytes");
        }
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
        // Known to the index (and promoted in it), or not on disk at all.
        self.state.lock().unwrap().lru.get(key)?;
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
        {
            let mut s = self.state.lock().unwrap();
            // A key names one version's block: held, it holds these bytes
            // already. Written again, its old file and the new one would both
            // be on disk for a while, past the tier's bound.
            if s.lru.get(&key).is_some() {
                return;
            }
            if s.writing + size > capacity {
                return;
            }
            // Room first: on a disk that holds no more than the tier, writing
            // before evicting would fail.
            let room = capacity.saturating_sub(size + s.writing);
            self.evict_to(&mut s, room);
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
        if let Some(old) = s.lru.put(key, size) {
            s.bytes -= old;
        }
        s.bytes += size;
        self.evict(&mut s);
    }

    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        let picked: Vec<BlockKey> = {
            let s = self.state.lock().unwrap();
            s.lru
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

    fn failures(&self) -> DiskFailures {
        DiskTier::failures(self)
    }

    fn stats(&self) -> TierStats {
        let s = self.state.lock().unwrap();
        TierStats {
            used_bytes: s.bytes,
            capacity_bytes: self.capacity.load(Relaxed),
            blocks: s.lru.len() as u64,
            evictions: self.evictions.load(Relaxed),
        }
    }
}

/// The size of the filesystem holding `dir`, if it can be asked.
fn filesystem_size(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into the struct passed; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_blocks as u64 * st.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey::new("bucket", "dir/obj ü", "etag1", 1000, i)
    }

    #[test]
    fn header_round_trip_and_garbage() {
        let h = encode_header(&key(3), b"hello");
        let d = decode_header(&h).unwrap();
        assert_eq!((d.key, d.data_len, d.header_len), (key(3), 5, h.len()));
        assert!(decode_header(b"").is_err());
        assert!(decode_header(&h[..h.len() - 1]).is_err());
        let mut bad = h.clone();
        bad[12] = 0xff;
        assert!(decode_header(&bad).is_err());
    }

    #[test]
    fn survives_reopen_and_stays_in_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = DiskTier::open(dir.path(), 10_000).unwrap();
        for i in 0..30 {
            t.insert(key(i), Bytes::from(vec![i as u8; 1000]));
            assert!(t.stats().used_bytes <= 10_000);
        }
        let kept = t.stats().blocks;
        assert!(kept >= 5 && t.stats().evictions > 0);
        drop(t);
        // A leftover temporary file is cleaned at start.
        std::fs::write(dir.path().join("blocks/00/junk.1.tmp"), b"x").unwrap_or_else(|_| {
            std::fs::create_dir_all(dir.path().join("blocks/00")).unwrap();
            std::fs::write(dir.path().join("blocks/00/junk.1.tmp"), b"x").unwrap();
        });
        let (t, stats) = DiskTier::open(dir.path(), 10_000).unwrap();
        assert_eq!(stats.blocks, kept);
        assert_eq!(stats.removed, 1);
        assert_eq!(t.get(&key(29)).unwrap(), Bytes::from(vec![29u8; 1000]));
    }

    #[test]
    fn a_block_held_is_not_written_again_and_counts_as_used() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let size = (encode_header(&key(0), &[0; 1000]).len() + 1000) as u64;
        // Room for two blocks and a half.
        t.capacity.store(size * 5 / 2, Relaxed);
        t.insert(key(1), Bytes::from(vec![1u8; 1000]));
        t.insert(key(2), Bytes::from(vec![2u8; 1000]));
        let inode = std::fs::metadata(t.path_of(&key(1))).unwrap().ino();
        t.insert(key(1), Bytes::from(vec![1u8; 1000]));
        assert_eq!(std::fs::metadata(t.path_of(&key(1))).unwrap().ino(), inode);
        assert_eq!((t.stats().blocks, t.stats().used_bytes), (2, 2 * size));
        // It was used, so the third block evicts the second.
        t.insert(key(3), Bytes::from(vec![3u8; 1000]));
        assert!(t.get(&key(2)).is_none());
        assert_eq!(t.get(&key(1)).unwrap(), Bytes::from(vec![1u8; 1000]));
    }

    #[test]
    fn a_corrupt_block_is_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        t.insert(key(1), Bytes::from(vec![7u8; 4096]));
        let path = t.path_of(&key(1));
        let mut raw = std::fs::read(&path).unwrap();
        let n = raw.len();
        raw[n - 10] ^= 0xff;
        std::fs::write(&path, raw).unwrap();
        assert!(t.get(&key(1)).is_none());
        assert_eq!(t.failures().checksum, 1);
        assert!(!path.exists());
        assert_eq!(t.stats().blocks, 0);
    }
}
