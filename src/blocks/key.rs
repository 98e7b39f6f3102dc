//! [`BlockKey`]: which bytes a cached block holds.

use std::sync::Arc;

/// Identity of a cached block: of which object version, cut at which size, which
/// one. Cheap to clone (the strings are shared).
///
/// The block size is part of the identity: a node restarted with another
/// `block_size`, or a rule giving some keys their own, must never take a block cut
/// to another size for its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub bucket: Arc<str>,
    pub key: Arc<str>,
    /// Without quotes.
    pub etag: Arc<str>,
    pub block_size: u64,
    /// `offset / block_size`.
    pub index: u64,
}

impl BlockKey {
    pub fn new(bucket: &str, key: &str, etag: &str, block_size: u64, index: u64) -> Self {
        Self {
            bucket: bucket.into(),
            key: key.into(),
            etag: etag.into(),
            block_size,
            index,
        }
    }

    /// The object bytes this block holds: `start..end` (the last block of an
    /// object may end sooner).
    pub fn start(&self) -> u64 {
        self.index * self.block_size
    }

    /// How many bytes this block holds of an object of `size` bytes (none past
    /// its end).
    pub fn len_in(&self, size: u64) -> u64 {
        (self.start() + self.block_size)
            .min(size)
            .saturating_sub(self.start())
    }

    /// A stable 128-bit digest of the identity, for file names.
    pub fn digest(&self) -> u128 {
        let mut buf = Vec::with_capacity(40 + self.bucket.len() + self.key.len() + self.etag.len());
        for part in [
            self.bucket.as_bytes(),
            self.key.as_bytes(),
            self.etag.as_bytes(),
        ] {
            buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
            buf.extend_from_slice(part);
        }
        buf.extend_from_slice(&self.block_size.to_le_bytes());
        buf.extend_from_slice(&self.index.to_le_bytes());
        xxhash_rust::xxh3::xxh3_128(&buf)
    }

    pub fn same_object(&self, bucket: &str, key: &str) -> bool {
        &*self.bucket == bucket && &*self.key == key
    }
}
