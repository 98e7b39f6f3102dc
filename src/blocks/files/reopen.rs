//! Opening the tier: its index rebuilt from the index files under `dir/objects`,
//! a torn last record cut off, and whatever has lost its other half (a data file
//! without its index, an index that does not parse or has no data) removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use lru::LruCache;

use super::index::{id_of, parse_index, Version};
use super::{FileTier, State};
use crate::blocks::DiskStats;
use crate::log_limit::LogLimit;

impl FileTier {
    /// Opens (creating if needed) the tier under `dir/objects`, rebuilding its
    /// index from the index files there.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<(FileTier, DiskStats)> {
        let started = Instant::now();
        let root = dir.join("objects");
        fs::create_dir_all(&root)?;
        let mut found: Vec<(SystemTime, u128, Version)> = Vec::new();
        let mut stats = DiskStats::default();
        for sub in fs::read_dir(&root)? {
            let sub = sub?.path();
            if !sub.is_dir() {
                continue;
            }
            for f in fs::read_dir(&sub)? {
                let path = f?.path();
                if path.extension().is_some_and(|e| e == "data") {
                    if !path.with_extension("idx").exists() {
                        let _ = fs::remove_file(&path);
                        stats.removed += 1;
                    }
                    continue;
                }
                let loaded = Self::load(&path);
                match loaded {
                    Some((mtime, id, v)) if path.with_extension("data").exists() => {
                        found.push((mtime, id, v))
                    }
                    _ => {
                        let _ = fs::remove_file(&path);
                        let _ = fs::remove_file(path.with_extension("data"));
                        stats.removed += 1;
                    }
                }
            }
        }
        found.sort_by_key(|f| f.0);
        let tier = FileTier {
            dir: root,
            capacity,
            state: Mutex::new(State {
                versions: LruCache::unbounded(),
                bytes: 0,
            }),
            evictions: AtomicU64::new(0),
            checksum_failures: AtomicU64::new(0),
            read_failures: AtomicU64::new(0),
            write_failures: AtomicU64::new(0),
            log: LogLimit::per_minute(),
            writing: Mutex::new(()),
        };
        {
            let mut s = tier.state.lock().unwrap();
            for (_, id, v) in found {
                s.bytes += v.bytes;
                stats.blocks += v.blocks.len() as u64;
                s.versions.put(id, v);
            }
            tier.evict(&mut s, 0);
            stats.bytes = s.bytes;
        }
        stats.took = started.elapsed();
        Ok((tier, stats))
    }

    fn load(path: &Path) -> Option<(SystemTime, u128, Version)> {
        if path.extension().is_none_or(|e| e != "idx") {
            return None;
        }
        let mut buf = Vec::new();
        File::open(path).ok()?.read_to_end(&mut buf).ok()?;
        let (v, good) = parse_index(&buf).ok()?;
        if good < buf.len() {
            // A torn record at the end: cut it off.
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(good as u64))
                .ok()?;
        }
        let id = id_of(&v.bucket, &v.key, &v.etag, v.block_size);
        let mtime = fs::metadata(path).and_then(|m| m.modified()).ok()?;
        Some((mtime, id, v))
    }
}
