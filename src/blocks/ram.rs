//! The RAM tier: sharded LRU, bounded in bytes.
//!
//! Sharding keeps lock hold times short when many readers hit at once; each shard
//! owns an equal slice of the byte budget. A block larger than a shard's slice is
//! not cached (it would evict the whole shard for one entry), so a tier made for
//! blocks of a given size ([`RamTier::for_blocks`]) has no more shards than it
//! has room for such blocks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;
use lru::LruCache;

use super::{BlockCache, BlockKey, TierStats};

/// Enough shards that many readers rarely meet on one lock.
const MAX_SHARDS: u64 = 16;

struct Shard {
    lru: LruCache<BlockKey, Bytes>,
    bytes: u64,
}

pub struct RamTier {
    shards: Vec<Mutex<Shard>>,
    per_shard: u64,
    capacity: u64,
    evictions: AtomicU64,
}

impl RamTier {
    /// A tier of at most `capacity` bytes for blocks of up to `block` bytes: as
    /// many shards as hold one such block each, at most 16.
    pub fn for_blocks(capacity: u64, block: u64) -> RamTier {
        let shards = (capacity / block.max(1)).clamp(1, MAX_SHARDS);
        RamTier::new(capacity, shards as usize)
    }

    /// A tier of at most `capacity` bytes in `shards` shards (at least one).
    pub fn new(capacity: u64, shards: usize) -> RamTier {
        let shards = shards.max(1);
        RamTier {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        lru: LruCache::unbounded(),
                        bytes: 0,
                    })
                })
                .collect(),
            per_shard: capacity / shards as u64,
            capacity,
            evictions: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<Shard> {
        &self.shards[(key.digest() as usize) % self.shards.len()]
    }
}

impl BlockCache for RamTier {
    fn get(&self, key: &BlockKey) -> Option<Bytes> {
        self.shard(key).lock().unwrap().lru.get(key).cloned()
    }

    fn insert(&self, key: BlockKey, data: Bytes) {
        let len = data.len() as u64;
        if len > self.per_shard {
            return;
        }
        let mut s = self.shard(&key).lock().unwrap();
        if let Some(old) = s.lru.put(key, data) {
            s.bytes -= old.len() as u64;
        }
        s.bytes += len;
        while s.bytes > self.per_shard {
            match s.lru.pop_lru() {
                Some((_, v)) => {
                    s.bytes -= v.len() as u64;
                    self.evictions.fetch_add(1, Relaxed);
                }
                None => break,
            }
        }
    }

    fn forget(&self, key: &BlockKey) {
        let mut s = self.shard(key).lock().unwrap();
        if let Some(v) = s.lru.pop(key) {
            s.bytes -= v.len() as u64;
        }
    }

    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        let mut removed = 0;
        for s in &self.shards {
            let mut s = s.lock().unwrap();
            let picked: Vec<BlockKey> = s
                .lru
                .iter()
                .filter(|(k, _)| gone(k))
                .map(|(k, _)| k.clone())
                .collect();
            for k in picked {
                if let Some(v) = s.lru.pop(&k) {
                    s.bytes -= v.len() as u64;
                    removed += 1;
                }
            }
        }
        removed
    }

    fn stats(&self) -> TierStats {
        let (mut used, mut blocks) = (0, 0);
        for s in &self.shards {
            let s = s.lock().unwrap();
            used += s.bytes;
            blocks += s.lru.len() as u64;
        }
        TierStats {
            used_bytes: used,
            capacity_bytes: self.capacity,
            blocks,
            evictions: self.evictions.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_exceeds_its_bound() {
        let t = RamTier::new(10 * 1024, 4);
        for i in 0..1000u64 {
            t.insert(
                BlockKey::new("b", "k", "e", 700, i),
                Bytes::from(vec![0u8; 700]),
            );
            assert!(t.stats().used_bytes <= 10 * 1024);
        }
        assert!(t.stats().evictions > 900);
        // The most recent blocks are still there.
        assert!(t.get(&BlockKey::new("b", "k", "e", 700, 999)).is_some());
        assert!(t.get(&BlockKey::new("b", "k", "e", 700, 0)).is_none());
    }

    #[test]
    fn a_small_tier_still_holds_its_blocks() {
        // 4 MiB of 1 MiB blocks: 16 shards of 256 KiB would hold none.
        let t = RamTier::for_blocks(4 << 20, 1 << 20);
        for i in 0..6u64 {
            t.insert(
                BlockKey::new("b", "k", "e", 1 << 20, i),
                Bytes::from(vec![0u8; 1 << 20]),
            );
        }
        let s = t.stats();
        assert!(s.blocks >= 3 && s.used_bytes <= 4 << 20, "{s:?}");
        assert!(t.get(&BlockKey::new("b", "k", "e", 1 << 20, 5)).is_some());
    }

    #[test]
    fn removes_by_object_and_prefix() {
        let t = RamTier::new(1 << 20, 2);
        for k in ["a/x", "a/y", "b/z"] {
            t.insert(BlockKey::new("b", k, "e1", 1, 0), Bytes::from_static(b"1"));
            t.insert(BlockKey::new("b", k, "e2", 1, 1), Bytes::from_static(b"2"));
        }
        assert_eq!(t.remove(&|k| k.same_object("b", "a/x")), 2);
        assert_eq!(t.remove(&|k| k.key.starts_with("a/")), 2);
        let one = BlockKey::new("b", "b/z", "e1", 1, 0);
        t.forget(&one);
        assert!(t.get(&one).is_none());
        assert!(t.get(&BlockKey::new("b", "b/z", "e2", 1, 1)).is_some());
        t.insert(one.clone(), Bytes::from_static(b"1"));
        assert_eq!(t.stats().blocks, 2);
        assert_eq!(t.stats().used_bytes, 2);
    }
}
