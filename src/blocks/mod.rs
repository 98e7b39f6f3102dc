//! Blocks and the tiers that keep them, shared by the node and the mount.
//!
//! A block is identified by `(bucket, key, etag, block size, index)` ([`BlockKey`]):
//! with the ETag in the key, a tier can never hand out bytes of another object
//! version. [`ram`] and [`disk`] are the tiers, each a [`BlockCache`] that knows
//! nothing of the others; [`flight`] makes concurrent misses share one fetch;
//! [`tiers`] joins them into one pipeline (RAM, then disk, then one fetch, then
//! fill) that the node and the cluster reader both use; [`growing`] is a block
//! readable while it arrives (cut-through), written into a buffer from a
//! [`pool`] that is used again once the block is gone. [`NoCache`] switches a
//! tier off without `Option` checks everywhere.

pub mod disk;
pub mod files;
pub mod flight;
pub mod growing;
pub mod keep;
mod key;
pub mod policy;
pub mod pool;
pub mod ram;
pub mod tiers;

use bytes::Bytes;

pub use disk::{
    block_path, decode_block, decode_header, encode_header, DecodeError, DiskFailures, DiskStats,
    DiskTier, IndexProgress, Purge,
};
pub use files::FileTier;
pub use flight::{FlightError, Flights, Joined};
pub use growing::{Filler, Growing, Overflow};
pub use keep::{keep_on_disk, Kept};
pub use key::BlockKey;
pub use policy::Evicting;
pub use pool::{Buffer, BufferPool, PoolStats};
pub use ram::RamTier;
pub use tiers::{Arriving, Block, Fill, Part, Served, Tiers, Touch};

/// What a tier did since start, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TierStats {
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub blocks: u64,
    pub evictions: u64,
}

/// A bounded store of blocks.
pub trait BlockCache: Send + Sync {
    /// The block, counting a use of it for the tier's eviction policy.
    fn get(&self, key: &BlockKey) -> Option<Bytes>;
    /// The block without counting a use: more of a read already counted. A
    /// tier whose order does not follow its reads may count anyway.
    fn peek(&self, key: &BlockKey) -> Option<Bytes> {
        self.get(key)
    }
    fn insert(&self, key: BlockKey, data: Bytes);
    /// Drops every block `gone` picks; returns how many.
    fn remove(&self, gone: &dyn Fn(&BlockKey) -> bool) -> u64;
    /// [`Self::remove`] with a predicate the tier may keep: a disk tier whose
    /// index is still being read applies it to the files it finds after.
    fn remove_shared(&self, gone: Purge) -> u64 {
        self.remove(&*gone)
    }
    /// Drops one block, if held.
    fn forget(&self, key: &BlockKey) {
        self.remove(&|k| k == key);
    }
    fn stats(&self) -> TierStats;
    /// Every block held in memory, most recently used first (what a stopping
    /// node writes to disk); a tier whose blocks are files already holds none.
    fn held(&self) -> Vec<(BlockKey, Bytes)> {
        Vec::new()
    }
    /// What went wrong on disk (a disk tier's business; nothing for RAM).
    fn failures(&self) -> DiskFailures {
        DiskFailures::default()
    }
}

/// A tier that holds nothing.
pub struct NoCache;

impl BlockCache for NoCache {
    fn get(&self, _: &BlockKey) -> Option<Bytes> {
        None
    }
    fn insert(&self, _: BlockKey, _: Bytes) {}
    fn remove(&self, _: &dyn Fn(&BlockKey) -> bool) -> u64 {
        0
    }
    fn stats(&self) -> TierStats {
        TierStats::default()
    }
}
