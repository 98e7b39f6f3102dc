//! The tier pipeline: a block from RAM, else from disk, else from one fetch that
//! every concurrent asker shares, after which it is kept in both tiers.
//!
//! The node and the cluster reader both read blocks through [`Tiers::get_or_fetch`];
//! what differs between them is only the fetch (the origin, an owner node, the
//! cluster). Disk I/O runs on blocking threads, in this file only. Each answer says
//! which tier served it ([`Served`]) so the caller counts it in its own metrics.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use bytes::Bytes;

use super::flight::{FlightError, Flights, Joined};
use super::{BlockCache, BlockKey, DiskFailures, NoCache, RamTier, TierStats};

/// Where a block came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    Ram,
    Disk,
    /// This request's own fetch.
    Fetched,
    /// A fetch someone else had started.
    Joined,
}

/// What fetches a missing block: the origin, an owner node, the cluster.
pub trait Fetch<E>: Future<Output = Result<Bytes, E>> + Send + 'static {}
impl<E, F: Future<Output = Result<Bytes, E>> + Send + 'static> Fetch<E> for F {}

/// RAM and disk tiers with single-flight fetches. `L` separates flights for the
/// same block that must not join each other (a node's fetch from the origin and
/// its forward to an owner that may come back to it).
pub struct Tiers<L, E: Clone> {
    ram: Arc<dyn BlockCache>,
    disk: Option<Arc<dyn BlockCache>>,
    flights: Flights<(BlockKey, L), (Bytes, Served), E>,
}

impl<L, E> Tiers<L, E>
where
    L: Hash + Eq + Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// A RAM tier of `ram_bytes` (0: none) for blocks of up to `block` bytes, over
    /// `disk` (if any).
    pub fn new(ram_bytes: u64, block: u64, disk: Option<Arc<dyn BlockCache>>) -> Self {
        let ram: Arc<dyn BlockCache> = if ram_bytes > 0 {
            Arc::new(RamTier::for_blocks(ram_bytes, block))
        } else {
            Arc::new(NoCache)
        };
        Tiers {
            ram,
            disk,
            flights: Flights::default(),
        }
    }

    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The block if a tier holds it (a disk hit is promoted to RAM).
    pub async fn lookup(&self, key: &BlockKey) -> Option<(Bytes, Served)> {
        if let Some(b) = self.ram.get(key) {
            return Some((b, Served::Ram));
        }
        let disk = self.disk.clone()?;
        let k = key.clone();
        let b = tokio::task::spawn_blocking(move || disk.get(&k))
            .await
            .ok()??;
        self.ram.insert(key.clone(), b.clone());
        Some((b, Served::Disk))
    }

    /// Whether a tier holds the block now, fetching nothing.
    pub async fn cached(&self, key: &BlockKey) -> bool {
        self.lookup(key).await.is_some()
    }

    /// The block from a tier, else from `fetch`, run once however many ask at the
    /// same time (in lane `lane`); a fetched block is kept in both tiers when `fill`.
    pub async fn get_or_fetch(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        fetch: impl Fetch<E>,
    ) -> Result<(Bytes, Served), FlightError<E>> {
        if let Some(hit) = self.lookup(&key).await {
            return Ok(hit);
        }
        self.fetch(key, lane, fill, fetch).await
    }

    /// The block from `fetch` (joining one in flight), whatever the tiers hold: for
    /// a caller that needs what the fetch learns besides the bytes.
    pub async fn fetch(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        fetch: impl Fetch<E>,
    ) -> Result<(Bytes, Served), FlightError<E>> {
        let (ram, disk, k) = (self.ram.clone(), self.disk.clone(), key.clone());
        let flight = async move {
            // A flight that ended between the caller's lookup and this one left its
            // block in RAM: never fetch it twice.
            if let Some(b) = ram.get(&k) {
                return Ok((b, Served::Ram));
            }
            let b = fetch.await?;
            if fill {
                ram.insert(k.clone(), b.clone());
                if let Some(disk) = disk {
                    let b2 = b.clone();
                    let _ = tokio::task::spawn_blocking(move || disk.insert(k, b2)).await;
                }
            }
            Ok((b, Served::Fetched))
        };
        let (r, joined) = self.flights.run((key, lane), flight).await;
        let (b, served) = r?;
        Ok(match (joined, served) {
            (Joined::Follower, Served::Fetched) => (b, Served::Joined),
            _ => (b, served),
        })
    }

    /// Keeps `data` as `key` in both tiers.
    pub async fn fill(&self, key: BlockKey, data: Bytes) {
        self.ram.insert(key.clone(), data.clone());
        self.on_disk(move |d| d.insert(key, data)).await;
    }

    /// Drops every block of one object; returns how many.
    pub async fn remove_object(&self, bucket: &str, key: &str) -> u64 {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.remove(move |x| x.same_object(&b, &k)).await
    }

    /// Drops every version of one object but `etag`; returns blocks dropped.
    pub async fn remove_other_versions(&self, bucket: &str, key: &str, etag: &str) -> u64 {
        let (b, k, e) = (bucket.to_owned(), key.to_owned(), etag.to_owned());
        self.remove(move |x| x.same_object(&b, &k) && *x.etag != *e)
            .await
    }

    /// Drops everything under a prefix; returns blocks dropped.
    pub async fn remove_prefix(&self, bucket: &str, prefix: &str) -> u64 {
        let (b, p) = (bucket.to_owned(), prefix.to_owned());
        self.remove(move |x| *x.bucket == *b && x.key.starts_with(&p))
            .await
    }

    /// Drops the blocks `gone` picks from both tiers; returns how many.
    async fn remove(&self, gone: impl Fn(&BlockKey) -> bool + Send + Sync + 'static) -> u64 {
        let gone = Arc::new(gone);
        let g = gone.clone();
        self.ram.remove(&*gone) + self.on_disk(move |d| d.remove(&*g)).await.unwrap_or(0)
    }

    pub fn ram_stats(&self) -> TierStats {
        self.ram.stats()
    }

    pub fn disk_stats(&self) -> TierStats {
        self.disk.as_ref().map(|d| d.stats()).unwrap_or_default()
    }

    pub fn disk_failures(&self) -> DiskFailures {
        self.disk.as_ref().map(|d| d.failures()).unwrap_or_default()
    }

    /// Runs `f` on the disk tier on a blocking thread; `None` without one.
    async fn on_disk<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn BlockCache) -> T + Send + 'static,
    ) -> Option<T> {
        let disk = self.disk.clone()?;
        tokio::task::spawn_blocking(move || f(&*disk)).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::DiskTier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn key(i: u64) -> BlockKey {
        BlockKey::new("b", "k", "e", 4, i)
    }

    #[tokio::test]
    async fn ram_then_disk_then_one_fetch_then_fill() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let t: Arc<Tiers<(), String>> = Arc::new(Tiers::new(1 << 20, 4, Some(Arc::new(disk))));
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut askers = Vec::new();
        for _ in 0..8 {
            let (t, fetches) = (t.clone(), fetches.clone());
            askers.push(tokio::spawn(async move {
                t.get_or_fetch(key(1), (), true, async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Ok(Bytes::from_static(b"abcd"))
                })
                .await
            }));
        }
        let mut served = Vec::new();
        for a in askers {
            let (b, s) = a.await.unwrap().unwrap();
            assert_eq!(b, "abcd");
            served.push(s);
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(served.iter().filter(|s| **s == Served::Fetched).count(), 1);
        let never = async { Err::<Bytes, String>("must not fetch".into()) };
        let (_, s) = t.get_or_fetch(key(1), (), true, never).await.unwrap();
        assert_eq!(s, Served::Ram);
        // A fresh RAM tier over the same disk finds it there.
        drop(t);
        let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let t: Tiers<(), String> = Tiers::new(1 << 20, 4, Some(Arc::new(disk)));
        assert_eq!(t.lookup(&key(1)).await.unwrap().1, Served::Disk);
        assert_eq!(t.lookup(&key(1)).await.unwrap().1, Served::Ram);
        assert_eq!(t.remove_object("b", "k").await, 2);
        assert!(!t.cached(&key(1)).await);
        // A failed fetch keeps nothing and says why.
        let r = t
            .get_or_fetch(key(2), (), true, async { Err("origin down".to_owned()) })
            .await;
        assert_eq!(r, Err(FlightError::Failed("origin down".into())));
        assert!(!t.cached(&key(2)).await);
    }
}
