use std::sync::Arc;

/// Identity of a cached block. Cheap to clone (the strings are shared).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub bucket: Arc<str>,
    pub key: Arc<str>,
    /// Without quotes.
    pub etag: Arc<str>,
    /// `offset / block_size` of the tier that stores it.
    pub index: u64,
}

impl BlockKey {
    pub fn new(bucket: &str, key: &str, etag: &str, index: u64) -> Self {
        Self {
            bucket: bucket.into(),
            key: key.into(),
            etag: etag.into(),
            index,
        }
    }

    /// A stable 128-bit digest of the identity, for file names.
    pub fn digest(&self) -> u128 {
        let mut buf = Vec::with_capacity(32 + self.bucket.len() + self.key.len() + self.etag.len());
        for part in [
            self.bucket.as_bytes(),
            self.key.as_bytes(),
            self.etag.as_bytes(),
        ] {
            buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
            buf.extend_from_slice(part);
        }
        buf.extend_from_slice(&self.index.to_le_bytes());
        xxhash_rust::xxh3::xxh3_128(&buf)
    }

    pub fn same_object(&self, bucket: &str, key: &str) -> bool {
        &*self.bucket == bucket && &*self.key == key
    }
}
