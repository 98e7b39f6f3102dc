//! A disk tier that keeps each object version in one file, its blocks at their own
//! offsets: what a mount keeps on its reader's disk, so that a file held whole
//! can be handed to the kernel as a FUSE passthrough backing file, read with no
//! daemon in the way.
//!
//! Per version (bucket, key, ETag, block size), under `dir/objects/HH/ID`:
//! `ID.data`, sparse, bytes at their offsets; `ID.idx`, a header naming the
//! version, then fixed-size records appended as blocks land (index, length, xxh3
//! of the bytes; a length of 0 drops a block), each with its own checksum so a
//! torn last record is cut off at start. A block is appended to the index only
//! after its bytes are written, so a crash (or SIGKILL) loses at most the blocks
//! in flight. Every block read is checked against its checksum; a bad one is
//! dropped and counted, never served.
//!
//! A version whose every block is here is verified once, whole (all checksums),
//! and stamped with its data file's identity (length, inode, mtime, ctime); a file
//! whose identity still matches its stamp is handed out whole
//! ([`FileTier::whole`]). Anything that writes to the file changes its ctime and
//! so forces the next check to read it all again.
//!
//! Bounded in bytes, evicting whole versions least recently used. Blocking I/O:
//! async callers run it on a blocking thread.

mod index;
mod reopen;
mod whole;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;
use lru::LruCache;
use xxhash_rust::xxh3::xxh3_64;

use super::{BlockCache, BlockKey, DiskFailures, TierStats};
use crate::log_limit::{more, LogLimit};

use index::{header, id_of, record, Version, RECORD};

struct State {
    versions: LruCache<u128, Version>,
    bytes: u64,
}

pub struct FileTier {
    dir: PathBuf,
    capacity: u64,
    state: Mutex<State>,
    evictions: AtomicU64,
    checksum_failures: AtomicU64,
    read_failures: AtomicU64,
    write_failures: AtomicU64,
    log: LogLimit,
    /// Inserts one at a time: a new version's index file is created once, and
    /// eviction never deletes a file another insert is writing.
    writing: Mutex<()>,
}

impl FileTier {
    fn path_of(&self, id: u128) -> PathBuf {
        self.dir
            .join(format!("{:02x}", (id >> 120) as u8))
            .join(format!("{id:032x}"))
    }

    fn append(&self, id: u128, rec: [u8; RECORD]) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .append(true)
            .open(self.path_of(id).with_extension("idx"))?;
        f.write_all(&rec)
    }

    /// Drops least recently used versions until `room` more bytes fit.
    fn evict(&self, s: &mut State, room: u64) {
        while s.bytes + room > self.capacity {
            let Some((id, v)) = s.versions.pop_lru() else {
                break;
            };
            s.bytes -= v.bytes;
            let p = self.path_of(id);
            let _ = fs::remove_file(p.with_extension("idx"));
            let _ = fs::remove_file(p.with_extension("data"));
            self.evictions.fetch_add(v.blocks.len() as u64, Relaxed);
        }
    }

    fn failed(&self, what: &str, e: &dyn std::fmt::Display) {
        if let Some(n) = self.log.event() {
            tracing::warn!("mount disk tier: {what}: {e}{}", more(n));
        }
    }

    /// Forgets block `index` of version `id` (a bad or unreadable one).
    fn drop_block(&self, id: u128, index: u64) {
        let mut s = self.state.lock().unwrap();
        if let Some(v) = s.versions.peek_mut(&id) {
            if let Some((len, _)) = v.blocks.remove(&index) {
                v.bytes -= len;
                v.stamp = None;
                s.bytes -= len;
            }
        }
        drop(s);
        let _ = self.append(id, record(index, [0; 4]));
    }

    pub fn failures(&self) -> DiskFailures {
        DiskFailures {
            checksum: self.checksum_failures.load(Relaxed),
            read: self.read_failures.load(Relaxed),
            write: self.write_failures.load(Relaxed),
        }
    }

    fn write_block(
        &self,
        id: u128,
        v_new: Option<Version>,
        key: &BlockKey,
        data: &[u8],
        sum: u64,
    ) -> io::Result<()> {
        let p = self.path_of(id);
        if let Some(v) = &v_new {
            fs::create_dir_all(p.parent().expect("versions live in a subdirectory"))?;
            let mut idx = File::create(p.with_extension("idx"))?;
            idx.write_all(&header(v))?;
        }
        let data_file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(p.with_extension("data"))?;
        data_file.write_all_at(data, key.index * key.block_size)?;
        self.append(id, record(key.index, [data.len() as u64, sum, 0, 0]))
    }
}

impl BlockCache for FileTier {
    fn get(&self, key: &BlockKey) -> Option<Bytes> {
        let id = id_of(&key.bucket, &key.key, &key.etag, key.block_size);
        let (len, sum) = {
            let mut s = self.state.lock().unwrap();
            *s.versions.get(&id)?.blocks.get(&key.index)?
        };
        let mut buf = vec![0u8; len as usize];
        let read = File::open(self.path_of(id).with_extension("data"))
            .and_then(|f| f.read_exact_at(&mut buf, key.index * key.block_size));
        match read {
            Ok(()) if xxh3_64(&buf) == sum => Some(Bytes::from(buf)),
            Ok(()) => {
                self.checksum_failures.fetch_add(1, Relaxed);
                self.failed(
                    "dropping a block that does not match its checksum",
                    &key.index,
                );
                self.drop_block(id, key.index);
                None
            }
            Err(e) => {
                self.read_failures.fetch_add(1, Relaxed);
                self.failed("cannot read a block, fetching it instead", &e);
                self.drop_block(id, key.index);
                None
            }
        }
    }

    fn insert(&self, key: BlockKey, data: Bytes) {
        let len = data.len() as u64;
        if len == 0 || len > self.capacity {
            return;
        }
        let id = id_of(&key.bucket, &key.key, &key.etag, key.block_size);
        let _writing = self.writing.lock().unwrap();
        let fresh = {
            let mut s = self.state.lock().unwrap();
            let had = s
                .versions
                .get(&id)
                .and_then(|v| v.blocks.get(&key.index).map(|b| b.0));
            if had == Some(len) {
                return;
            }
            // Room first; this version is the most recently used, so it stays.
            self.evict(&mut s, len);
            !s.versions.contains(&id)
        };
        let v_new = fresh.then(|| Version::of(&key));
        let sum = xxh3_64(&data);
        if let Err(e) = self.write_block(id, v_new, &key, &data, sum) {
            self.write_failures.fetch_add(1, Relaxed);
            self.failed("cannot write a block, serving without it", &e);
            return;
        }
        let mut s = self.state.lock().unwrap();
        let v = match s.versions.get_mut(&id) {
            Some(v) => v,
            None => {
                s.versions.put(id, Version::of(&key));
                s.versions.get_mut(&id).expect("just put")
            }
        };
        let old = v.blocks.insert(key.index, (len, sum)).map_or(0, |b| b.0);
        v.bytes = v.bytes + len - old;
        v.stamp = None;
        s.bytes = s.bytes + len - old;
    }

    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        let picked: Vec<(u128, u64)> = {
            let s = self.state.lock().unwrap();
            s.versions
                .iter()
                .flat_map(|(id, v)| {
                    v.blocks.keys().filter_map(move |&i| {
                        let k = BlockKey::new(&v.bucket, &v.key, &v.etag, v.block_size, i);
                        gone(&k).then_some((*id, i))
                    })
                })
                .collect()
        };
        for &(id, i) in &picked {
            self.drop_block(id, i);
        }
        picked.len() as u64
    }

    fn stats(&self) -> TierStats {
        let s = self.state.lock().unwrap();
        TierStats {
            used_bytes: s.bytes,
            capacity_bytes: self.capacity,
            blocks: s.versions.iter().map(|(_, v)| v.blocks.len() as u64).sum(),
            evictions: self.evictions.load(Relaxed),
        }
    }

    fn failures(&self) -> DiskFailures {
        FileTier::failures(self)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey::new("b", "dir/obj", "etag1", 1000, i)
    }

    fn block(i: u64, len: usize) -> Bytes {
        Bytes::from(vec![i as u8 + 1; len])
    }

    #[test]
    fn blocks_round_trip_survive_reopen_and_make_a_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = FileTier::open(dir.path(), 1 << 20).unwrap();
        // 2,500 bytes: blocks of 1000, 1000, 500.
        t.insert(key(0), block(0, 1000));
        t.insert(key(2), block(2, 500));
        assert!(
            t.whole("b", "dir/obj", "etag1", 1000, 2500).is_none(),
            "block 1 missing"
        );
        t.insert(key(1), block(1, 1000));
        assert_eq!(t.get(&key(1)).unwrap(), block(1, 1000));
        let f = t
            .whole("b", "dir/obj", "etag1", 1000, 2500)
            .expect("whole now");
        let mut all = Vec::new();
        (&f).read_to_end(&mut all).unwrap();
        assert_eq!(&all[1000..2000], &block(1, 1000)[..]);
        assert_eq!(&all[2000..], &block(2, 500)[..]);
        drop(t);
        let (t, stats) = FileTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(stats.blocks, 3);
        assert!(
            t.whole("b", "dir/obj", "etag1", 1000, 2500).is_some(),
            "stamp kept"
        );
        // Another version is another file.
        assert!(t.whole("b", "dir/obj", "etag2", 1000, 2500).is_none());
    }

    #[test]
    fn a_corrupted_block_is_dropped_and_never_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = FileTier::open(dir.path(), 1 << 20).unwrap();
        for i in 0..3 {
            t.insert(key(i), block(i, 1000));
        }
        assert!(t.whole("b", "dir/obj", "etag1", 1000, 3000).is_some());
        let id = id_of("b", "dir/obj", "etag1", 1000);
        let data = t.path_of(id).with_extension("data");
        let f = OpenOptions::new().write(true).open(&data).unwrap();
        f.write_all_at(b"XX", 1500).unwrap();
        assert!(
            t.whole("b", "dir/obj", "etag1", 1000, 3000).is_none(),
            "the change is seen"
        );
        assert!(t.get(&key(1)).is_none(), "block 1 was dropped");
        assert_eq!(t.get(&key(0)).unwrap(), block(0, 1000));
        assert_eq!(t.failures().checksum, 1);
        t.insert(key(1), block(1, 1000));
        assert!(
            t.whole("b", "dir/obj", "etag1", 1000, 3000).is_some(),
            "whole again once refetched"
        );
    }

    #[test]
    fn stays_in_bounds_evicting_whole_versions_and_cuts_torn_records() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = FileTier::open(dir.path(), 5000).unwrap();
        for v in 0..4 {
            for i in 0..2 {
                t.insert(
                    BlockKey::new("b", &format!("o{v}"), "e", 1000, i),
                    block(i, 1000),
                );
                assert!(t.stats().used_bytes <= 5000);
            }
        }
        assert!(t.stats().evictions >= 2);
        assert!(t.get(&BlockKey::new("b", "o3", "e", 1000, 1)).is_some());
        assert!(t.get(&BlockKey::new("b", "o0", "e", 1000, 0)).is_none());
        // A torn last record (a crash mid-append) is cut off at the next start.
        let id = id_of("b", "o3", "e", 1000);
        let idx = t.path_of(id).with_extension("idx");
        drop(t);
        let mut f = OpenOptions::new().append(true).open(&idx).unwrap();
        f.write_all(&[7u8; 20]).unwrap();
        let before = fs::metadata(&idx).unwrap().len();
        let (t, _) = FileTier::open(dir.path(), 5000).unwrap();
        assert!(t.get(&BlockKey::new("b", "o3", "e", 1000, 1)).is_some());
        assert_eq!(
            fs::metadata(&idx).unwrap().len(),
            before - 20,
            "the torn record is gone"
        );
    }
}
