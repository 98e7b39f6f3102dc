//! What a stopping process keeps: the blocks it holds only in RAM (fetched
//! blocks whose disk write is still queued, blocks the disk tier had no room
//! for or evicted while RAM kept them hot) are written to the disk tier before
//! it exits, newest first, within a deadline, so that the process that starts
//! next on the same disk serves them instead of fetching them again.

use std::hash::Hash;
use std::time::{Duration, Instant};

use super::tiers::Tiers;

/// What [`keep_on_disk`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// RAM blocks looked at (the disk tier already held most of them).
    pub looked_at: u64,
    /// Blocks handed to the disk tier (it takes only those it does not hold).
    pub written: u64,
    pub bytes: u64,
    /// Blocks left unwritten when the deadline came.
    pub left: u64,
    pub took: Duration,
}

/// Waits for the disk writes in flight, then writes every RAM block to the disk
/// tier (which skips those it holds), most recently used first and no more than
/// the disk tier's capacity, until `within` has passed. Nothing without a disk
/// tier.
pub async fn keep_on_disk<L, E>(tiers: &Tiers<L, E>, within: Duration) -> Kept
where
    L: Hash + Eq + Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    let deadline = started + within;
    let mut kept = Kept::default();
    let Some(disk) = tiers.disk() else {
        return kept;
    };
    // Fetched blocks queued for a write slot are in RAM too, and written
    // below if their turn has not come; waiting a little lets those in
    // progress finish first rather than write them twice over.
    while tiers.disk_writes() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let room = disk.stats().capacity_bytes;
    let held = tiers.ram_held();
    let mut budget = room;
    for (i, (key, data)) in held.iter().enumerate() {
        if Instant::now() >= deadline {
            kept.left = (held.len() - i) as u64;
            break;
        }
        let len = data.len() as u64;
        if len > budget {
            // More than the disk holds: what is left would only evict what
            // was just written.
            break;
        }
        budget -= len;
        kept.looked_at += 1;
        let (d, k, b) = (disk.clone(), key.clone(), data.clone());
        let wrote = tokio::task::spawn_blocking(move || {
            // A block held is skipped at no cost; one written moves the
            // tier's bytes, or its evictions when it took an equal one's room.
            let before = d.stats();
            d.insert(k, b);
            let after = d.stats();
            (after.used_bytes, after.evictions) != (before.used_bytes, before.evictions)
        })
        .await
        .unwrap_or(false);
        if wrote {
            kept.written += 1;
            kept.bytes += len;
        }
    }
    kept.took = started.elapsed();
    kept
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::blocks::{BlockCache, BlockKey, DiskTier};

    #[tokio::test]
    async fn ram_only_blocks_reach_the_disk_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let disk: Arc<dyn BlockCache> = Arc::new(disk);
        let tiers: Tiers<(), ()> = Tiers::new(1 << 20, 1000, Some(disk.clone()));
        let key = |i| BlockKey::new("b", "k", "e", 1000, i);
        // One block on disk already, three in RAM only.
        tiers.fill(key(0), Bytes::from(vec![0u8; 1000])).await;
        for i in 1..4 {
            tiers.fill(key(i), Bytes::from(vec![i as u8; 1000])).await;
        }
        disk.remove(&|k| k.index > 0);
        let kept = keep_on_disk(&tiers, Duration::from_secs(5)).await;
        assert_eq!((kept.looked_at, kept.written, kept.left), (4, 3, 0));
        drop((tiers, disk));
        let (disk, stats) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(stats.blocks, 4);
        assert_eq!(disk.get(&key(3)).unwrap(), Bytes::from(vec![3u8; 1000]));
    }

    #[tokio::test]
    async fn a_deadline_passed_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let disk: Arc<dyn BlockCache> = Arc::new(disk);
        let tiers: Tiers<(), ()> = Tiers::new(1 << 20, 1000, Some(disk.clone()));
        tiers
            .fill(
                BlockKey::new("b", "k", "e", 1000, 0),
                Bytes::from(vec![1u8; 1000]),
            )
            .await;
        disk.remove(&|_| true);
        let kept = keep_on_disk(&tiers, Duration::ZERO).await;
        assert_eq!((kept.written, kept.left), (0, 1));
    }
}
