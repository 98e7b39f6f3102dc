//! The RAM tier: sharded, bounded in bytes, evicting by a [`policy`].
//!
//! Sharding keeps lock hold times short when many readers hit at once. The byte
//! budget is the whole tier's, not a slice per shard: blocks land in shards by
//! their hash, unevenly, and shards of equal slices overflowed (a tier of 256
//! blocks in 16 shards refetched an eighth of a 192-block file read twice). An
//! insert past the budget evicts its own shard's victims first, which with
//! hashed keys are about the whole tier's, and the others' in turn when its own
//! holds nothing else. A shard holds at least [`BLOCKS_PER_SHARD`] blocks'
//! worth: a policy's queues within a shard of two blocks would order nothing.
//!
//! [`policy`]: super::policy

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;

use super::policy::{Evicting, Eviction};
use super::{BlockCache, BlockKey, TierStats};

/// Enough shards that many readers rarely meet on one lock.
const MAX_SHARDS: u64 = 16;
/// Blocks a shard is sized for at least (see the module's doc).
pub const BLOCKS_PER_SHARD: u64 = 64;

type Shard = Box<dyn Eviction<BlockKey, Bytes>>;

pub struct RamTier {
    shards: Vec<Mutex<Shard>>,
    capacity: u64,
    /// Bytes held by all shards together (changed under the shard's lock).
    used: AtomicU64,
    /// The shard the next eviction past the inserter's own tries first, so
    /// that the others give way in turn.
    next_victim: AtomicUsize,
    evictions: AtomicU64,
}

impl RamTier {
    /// A tier of at most `capacity` bytes for blocks of up to `block` bytes: a
    /// shard per [`BLOCKS_PER_SHARD`] such blocks, at most 16.
    pub fn for_blocks(capacity: u64, block: u64, evicting: &Evicting) -> RamTier {
        let shards = (capacity / block.max(1) / BLOCKS_PER_SHARD).clamp(1, MAX_SHARDS);
        RamTier::new(capacity, shards as usize, evicting)
    }

    /// A tier of at most `capacity` bytes in `shards` shards (at least one).
    pub fn new(capacity: u64, shards: usize, evicting: &Evicting) -> RamTier {
        let shards = shards.max(1);
        let per_shard = Evicting {
            small_floor: evicting.small_floor / shards as u64,
            ..evicting.clone()
        };
        RamTier {
            shards: (0..shards)
                .map(|_| Mutex::new(per_shard.build(capacity / shards as u64)))
                .collect(),
            capacity,
            used: AtomicU64::new(0),
            next_victim: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn shard_of(&self, key: &BlockKey) -> usize {
        (key.digest() as usize) % self.shards.len()
    }

    fn over(&self) -> bool {
        self.used.load(Relaxed) > self.capacity
    }

    /// Drops shard `s`'s least recently used block if it holds more than
    /// `spare` (the block just put there is its most recently used); whether
    /// it did.
    fn evict_from(&self, s: &mut Shard, spare: usize) -> bool {
        if s.len() <= spare {
            return false;
        }
        let Some((_, v)) = s.pop_victim() else {
            return false;
        };
        self.used.fetch_sub(v.len() as u64, Relaxed);
        self.evictions.fetch_add(1, Relaxed);
        true
    }
}

impl BlockCache for RamTier {
    fn get(&self, key: &BlockKey) -> Option<Bytes> {
        self.shards[self.shard_of(key)]
            .lock()
            .unwrap()
            .get(key)
            .cloned()
    }

    fn peek(&self, key: &BlockKey) -> Option<Bytes> {
        self.shards[self.shard_of(key)]
            .lock()
            .unwrap()
            .peek(key)
            .cloned()
    }

    fn insert(&self, key: BlockKey, data: Bytes) {
        let len = data.len() as u64;
        if len > self.capacity {
            return;
        }
        let home = self.shard_of(&key);
        {
            let mut s = self.shards[home].lock().unwrap();
            self.used.fetch_add(len, Relaxed);
            if let Some(old) = s.insert(key, data, len) {
                self.used.fetch_sub(old.len() as u64, Relaxed);
            }
            while self.over() && self.evict_from(&mut s, 1) {}
        }
        // Its own shard holds nothing older: the others give way in turn, one
        // block and one lock at a time, until a full round finds none to give.
        let mut fruitless = 0;
        while self.over() && fruitless < self.shards.len() {
            let i = self.next_victim.fetch_add(1, Relaxed) % self.shards.len();
            let spare = usize::from(i == home);
            if self.evict_from(&mut self.shards[i].lock().unwrap(), spare) {
                fruitless = 0;
            } else {
                fruitless += 1;
            }
        }
    }

    fn forget(&self, key: &BlockKey) {
        if let Some(v) = self.shards[self.shard_of(key)].lock().unwrap().remove(key) {
            self.used.fetch_sub(v.len() as u64, Relaxed);
        }
    }

    fn held(&self) -> Vec<(BlockKey, Bytes)> {
        // Shard by shard, what each would keep longest first; interleaved so
        // the best of every shard come before the rest of any (keys hash
        // evenly).
        let shards: Vec<Vec<(BlockKey, Bytes)>> = self
            .shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap();
                s.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            })
            .collect();
        let longest = shards.iter().map(Vec::len).max().unwrap_or(0);
        let mut all = Vec::with_capacity(shards.iter().map(Vec::len).sum());
        for i in 0..longest {
            all.extend(shards.iter().filter_map(|s| s.get(i).cloned()));
        }
        all
    }

    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64 {
        let mut removed = 0;
        for s in &self.shards {
            let mut s = s.lock().unwrap();
            let picked: Vec<BlockKey> = s
                .iter()
                .filter(|(k, _)| gone(k))
                .map(|(k, _)| k.clone())
                .collect();
            for k in picked {
                if let Some(v) = s.remove(&k) {
                    self.used.fetch_sub(v.len() as u64, Relaxed);
                    removed += 1;
                }
            }
        }
        removed
    }

    fn stats(&self) -> TierStats {
        let blocks = self.shards.iter().map(|s| s.lock().unwrap().len() as u64);
        TierStats {
            blocks: blocks.sum(),
            used_bytes: self.used.load(Relaxed),
            capacity_bytes: self.capacity,
            evictions: self.evictions.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::policy::PolicyKind;

    #[test]
    fn never_exceeds_its_bound() {
        let t = RamTier::new(10 * 1024, 4, &Evicting::default());
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
    fn a_tier_holds_its_whole_budget_however_its_blocks_fall_in_shards() {
        let mb = 1u64 << 20;
        // In least recently used order, so that the newest stays (S3-FIFO
        // gives up a new block before ones read again).
        let t = RamTier::new(16 * mb, 16, &Evicting::by(PolicyKind::Lru));
        let key = |i| BlockKey::new("b", "k", "e", mb, i);
        for i in 0..16u64 {
            t.insert(key(i), Bytes::from(vec![0u8; mb as usize]));
        }
        // Sixteen blocks never fall one in each of sixteen shards by hash alone.
        let per_shard: Vec<usize> = t.shards.iter().map(|s| s.lock().unwrap().len()).collect();
        assert!(per_shard.iter().any(|&n| n > 1), "{per_shard:?}");
        let s = t.stats();
        assert_eq!((s.blocks, s.evictions), (16, 0), "{s:?}");
        assert!((0..16).all(|i| t.get(&key(i)).is_some()));
        // One more evicts one, and the newest stays.
        t.insert(key(16), Bytes::from(vec![0u8; mb as usize]));
        let s = t.stats();
        assert_eq!(
            (s.blocks, s.evictions, s.used_bytes),
            (16, 1, 16 * mb),
            "{s:?}"
        );
        assert!(t.get(&key(16)).is_some());
    }

    #[test]
    fn a_block_alone_in_its_shard_makes_room_in_the_others() {
        // Two shards, room for three blocks: three of one shard are all held
        // (not half the budget's worth), and a fourth in the other shard, where
        // it is alone, evicts the oldest of the first.
        let t = RamTier::new(3 * 100, 2, &Evicting::default());
        let key = |i| BlockKey::new("b", "k", "e", 100, i);
        let in_shard = |n| -> Vec<u64> {
            (0..)
                .filter(|&i| t.shard_of(&key(i)) == n)
                .take(3)
                .collect()
        };
        let (zero, one) = (in_shard(0), in_shard(1));
        let (a, b, c, d) = (zero[0], zero[1], zero[2], one[0]);
        for i in [a, b, c] {
            t.insert(key(i), Bytes::from(vec![1u8; 100]));
        }
        assert_eq!(t.stats().blocks, 3);
        t.insert(key(d), Bytes::from(vec![1u8; 100]));
        let s = t.stats();
        assert_eq!((s.blocks, s.evictions, s.used_bytes), (3, 1, 300), "{s:?}");
        assert!(t.get(&key(a)).is_none());
        assert!([b, c, d].iter().all(|&i| t.get(&key(i)).is_some()));
    }

    #[test]
    fn inserts_from_many_threads_keep_to_the_budget_and_its_count() {
        let t = std::sync::Arc::new(RamTier::new(10 * 1024, 4, &Evicting::default()));
        let threads: Vec<_> = (0..4u64)
            .map(|n| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let k = BlockKey::new("b", "k", "e", 700, n * 10_000 + i % 50);
                        t.insert(k.clone(), Bytes::from(vec![0u8; 700]));
                        if i % 7 == 0 {
                            t.forget(&k);
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let s = t.stats();
        assert!(s.used_bytes <= 10 * 1024, "{s:?}");
        // The count kept beside the shards is what they hold.
        assert_eq!(s.used_bytes, s.blocks * 700, "{s:?}");
    }

    #[test]
    fn a_small_tier_still_holds_its_blocks() {
        // 4 MiB of 1 MiB blocks: 16 shards of 256 KiB would hold none.
        let t = RamTier::for_blocks(4 << 20, 1 << 20, &Evicting::default());
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
        let t = RamTier::new(1 << 20, 2, &Evicting::default());
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
