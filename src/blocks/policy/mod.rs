//! Which block a full tier gives up: the eviction policy, one seam for the RAM
//! tiers of nodes and mounts and for the disk tier.
//!
//! A tier keeps its own byte count and asks its policy for victims while it is
//! over its bound ([`Eviction::pop_victim`]); the policy only orders what it
//! holds. Two policies stand behind the seam:
//!
//! - [`S3Fifo`] (the default): a small FIFO that new blocks enter, a main FIFO
//!   for blocks used again while in it, and a ghost list of keys recently
//!   dropped from the small one. A block read once (a scan, a backfill, one
//!   `shoal warm` of a large prefix) leaves through the small queue without
//!   touching the main one, so it never pushes out blocks read many times.
//! - [`Lru`]: least recently used, kept for comparison (`bench/cache_policy.sh`)
//!   and for workloads whose reuse is all recency.
//!
//! [`Pinned`] wraps either: blocks a rule pins are kept out of eviction within
//! a share of the tier.

mod lru;
mod pinned;
mod s3fifo;

use std::hash::Hash;
use std::str::FromStr;

use super::BlockKey;

pub use self::lru::Lru;
pub use pinned::{PinFn, Pinned};
pub use s3fifo::S3Fifo;

/// What a tier holds, in the order it gives blocks up.
pub trait Eviction<K, V>: Send {
    /// The value of `key`, counting a use of it.
    fn get(&mut self, key: &K) -> Option<&V>;
    /// The value of `key`, without counting a use.
    fn peek(&self, key: &K) -> Option<&V>;
    fn contains(&self, key: &K) -> bool {
        self.peek(key).is_some()
    }
    /// Adds a block of `weight` bytes just fetched (or replaces one); the value
    /// it replaced.
    fn insert(&mut self, key: K, value: V, weight: u64) -> Option<V>;
    /// Adds a block the tier held before it started (found on disk): it has
    /// proven itself once already, so it is kept before blocks read since.
    fn insert_kept(&mut self, key: K, value: V, weight: u64) -> Option<V> {
        self.insert(key, value, weight)
    }
    /// Adds the blocks a tier held before it started, oldest first.
    fn restore(&mut self, oldest_first: Vec<(K, V, u64)>) {
        for (k, v, w) in oldest_first {
            self.insert_kept(k, v, w);
        }
    }
    fn remove(&mut self, key: &K) -> Option<V>;
    /// The block to give up next, taken out.
    fn pop_victim(&mut self) -> Option<(K, V)>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The tier's bound, which sizes the policy's queues.
    fn set_capacity(&mut self, bytes: u64);
    /// Everything held, what the policy would keep longest first.
    fn iter(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_>;
}

/// Which policy a tier evicts by (`[cache] policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PolicyKind {
    #[default]
    S3Fifo,
    Lru,
}

impl PolicyKind {
    /// An empty policy of this kind for a tier of `capacity` bytes.
    pub fn build<K, V>(self, capacity: u64) -> Box<dyn Eviction<K, V>>
    where
        K: Hash + Eq + Clone + Send + 'static,
        V: Send + 'static,
    {
        self.build_with_floor(capacity, 0)
    }

    /// [`Self::build`], new blocks given at least `small_floor` bytes to be
    /// read again in (see [`S3Fifo::with_floor`]).
    pub fn build_with_floor<K, V>(self, capacity: u64, small_floor: u64) -> Box<dyn Eviction<K, V>>
    where
        K: Hash + Eq + Clone + Send + 'static,
        V: Send + 'static,
    {
        match self {
            PolicyKind::S3Fifo => Box::new(S3Fifo::with_floor(capacity, small_floor)),
            PolicyKind::Lru => Box::new(Lru::new()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::S3Fifo => "s3-fifo",
            PolicyKind::Lru => "lru",
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "s3-fifo" => Ok(PolicyKind::S3Fifo),
            "lru" => Ok(PolicyKind::Lru),
            other => Err(format!(
                "is {other:?}: the policies are \"s3-fifo\" and \"lru\""
            )),
        }
    }
}

/// How a tier gives blocks up: its policy, and what it pins.
#[derive(Clone, Default)]
pub struct Evicting {
    pub policy: PolicyKind,
    /// Blocks kept out of eviction within `pin_share_per_mille` of the tier.
    pub pinned: Option<PinFn<BlockKey>>,
    pub pin_share_per_mille: u64,
    /// Bytes new blocks have at least before they may go unread again: what
    /// a reader of this tier fetches ahead of itself.
    pub small_floor: u64,
}

impl Evicting {
    pub fn by(policy: PolicyKind) -> Evicting {
        Evicting {
            policy,
            ..Evicting::default()
        }
    }

    /// An empty policy for (a shard of) a tier of `capacity` bytes.
    pub fn build<V: Send + 'static>(&self, capacity: u64) -> Box<dyn Eviction<BlockKey, V>> {
        let inner = self.policy.build_with_floor(capacity, self.small_floor);
        match &self.pinned {
            Some(pin) => Box::new(Pinned::new(
                inner,
                capacity,
                self.pin_share_per_mille,
                pin.clone(),
            )),
            None => inner,
        }
    }
}

#[cfg(test)]
mod tests;
