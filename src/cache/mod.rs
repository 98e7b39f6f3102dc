//! Block caches: the tiers both the node and the mount keep blocks in.
//!
//! A block is identified by `(bucket, key, etag, index)` ([`BlockKey`]): with the
//! ETag in the key, a cache can never hand out bytes of another object version.
//! Tiers implement [`BlockCache`] and only ever call downward (the caller composes
//! RAM, then disk, then a fetch). [`NoCache`] switches a tier off without `Option`
//! checks everywhere. [`Coalescer`] makes concurrent misses share one fetch.

mod coalesce;
mod disk;
mod key;
mod ram;

use bytes::Bytes;

pub use coalesce::{Coalescer, Joined};
pub use disk::{decode_block, decode_header, encode_header, DiskStats, DiskTier, Header};
pub use key::BlockKey;
pub use ram::RamTier;

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
    fn get(&self, key: &BlockKey) -> Option<Bytes>;
    fn insert(&self, key: BlockKey, data: Bytes);
    /// Drops every block of `bucket`/`key` (any ETag); returns how many.
    fn remove_object(&self, bucket: &str, key: &str) -> u64;
    /// Drops the blocks of `bucket`/`key` whose ETag field `keep` refuses.
    fn remove_versions(&self, bucket: &str, key: &str, keep: &dyn Fn(&str) -> bool) -> u64;
    /// Drops every block of keys starting with `prefix` in `bucket`; returns how many.
    fn remove_prefix(&self, bucket: &str, prefix: &str) -> u64;
    fn stats(&self) -> TierStats;
}

/// A tier that holds nothing.
pub struct NoCache;

impl BlockCache for NoCache {
    fn get(&self, _: &BlockKey) -> Option<Bytes> {
        None
    }
    fn insert(&self, _: BlockKey, _: Bytes) {}
    fn remove_object(&self, _: &str, _: &str) -> u64 {
        0
    }
    fn remove_versions(&self, _: &str, _: &str, _: &dyn Fn(&str) -> bool) -> u64 {
        0
    }
    fn remove_prefix(&self, _: &str, _: &str) -> u64 {
        0
    }
    fn stats(&self) -> TierStats {
        TierStats::default()
    }
}
