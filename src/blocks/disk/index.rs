//! The index while the scan runs. The tier serves at once: a block the scan has
//! not reached is looked up by its file's name when asked for, and a block is
//! written beside files not yet read. What happens meanwhile is kept here so
//! that the scan's findings, merged at its end, count no block twice and bring
//! back none that was dropped or purged.

use std::collections::HashSet;
use std::sync::Arc;

use super::layout::OnDisk;
use crate::blocks::policy::Eviction;
use crate::blocks::BlockKey;

/// A purge, kept to apply to what the scan finds after it.
pub type Purge = Arc<dyn Fn(&BlockKey) -> bool + Send + Sync>;

/// How far the index scan has come.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IndexProgress {
    /// Block files read so far (all of them once done).
    pub read: u64,
    pub done: bool,
}

/// What happened while the scan ran.
#[derive(Default)]
pub struct Indexing {
    /// Blocks dropped (bad files, forgotten): the scan may have read them before.
    dropped: HashSet<BlockKey>,
    purges: Vec<Purge>,
}

impl Indexing {
    pub fn dropped(&mut self, key: &BlockKey) {
        self.dropped.insert(key.clone());
    }

    pub fn purge(&mut self, p: Purge) {
        self.purges.push(p);
    }

    pub fn purged(&self, key: &BlockKey) -> bool {
        self.purges.iter().any(|p| p(key))
    }

    /// The index once the scan is done: `index` (empty) given what the scan
    /// found, then what was found or written while it ran, all as blocks the
    /// tier held before blocks read after; and the blocks found that a purge meanwhile
    /// picked (their files are to go).
    pub fn merge(
        self,
        mut found: Vec<OnDisk>,
        meanwhile: &dyn Eviction<BlockKey, u64>,
        mut index: Box<dyn Eviction<BlockKey, u64>>,
    ) -> (Box<dyn Eviction<BlockKey, u64>>, u64, Vec<BlockKey>) {
        // Oldest first, so that what was used last before the stop is kept
        // longest after it (file times are all the recency a restart keeps).
        found.sort_by_key(|f| f.modified);
        let (mut bytes, mut gone, mut kept) = (0, Vec::new(), Vec::new());
        for b in found {
            if meanwhile.contains(&b.key) || self.dropped.contains(&b.key) {
                continue;
            }
            if self.purged(&b.key) {
                gone.push(b.key);
                continue;
            }
            bytes += b.len;
            kept.push((b.key, b.len, b.len));
        }
        // Then what was read or written since the start, least valued first:
        // all of it is kept before blocks read after.
        let meanwhile: Vec<_> = meanwhile.iter().collect();
        for (k, len) in meanwhile.into_iter().rev() {
            bytes += len;
            kept.push((k.clone(), *len, *len));
        }
        index.restore(kept);
        (index, bytes, gone)
    }
}
