//! The tier pipeline: a block from RAM, else from disk, else from one fetch that
//! every concurrent asker shares, after which it is kept in both tiers.
//!
//! The node and the cluster reader both read blocks through here; what differs
//! between them is only the fetch (the origin, an owner node, the cluster). A
//! fetch is one flight: it runs in a task of its own (an asker that goes away does
//! not cancel it for the others), it writes the block's bytes into a [`Growing`]
//! block (a buffer from the tiers' pool) that every asker can read from its first
//! byte as they arrive (cut-through) or wait for whole, and the tiers get the
//! block (that same buffer) only once the fetch says it is complete. A fetch that
//! fails ends every asker's read with its error; one whose task dies ends them
//! with [`FlightError::Lost`], never a hang. Disk I/O runs on blocking threads,
//! in this file only. Each answer says which tier served it ([`Served`]) so the
//! caller counts it in its own metrics.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::flight::FlightError;
use super::growing::{Filler, Growing};
use super::pool::{BufferPool, PoolStats};
use super::{BlockCache, BlockKey, DiskFailures, Evicting, NoCache, RamTier, TierStats};

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

/// Whether finding a block in the RAM tier counts a use of it for the tier's
/// eviction policy. A reader that takes a block in many small reads uses it
/// once, not once per read: counted per read, every block a scan passes over
/// would look read again and be kept before blocks that are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    Use,
    /// More of a use counted already, or only a look.
    Peek,
}

/// A block being fetched, as its askers read it.
pub type Arriving<E> = Arc<Growing<FlightError<E>>>;

/// What a fetch writes a block with.
pub type Fill<E> = Filler<FlightError<E>>;

/// What an asker gets: the block a tier holds, or the fetch bringing it.
pub enum Block<E> {
    Held(Bytes, Served),
    /// `Served::Fetched` for the asker that started the fetch, else `Joined`.
    Arriving(Arriving<E>, Served),
}

impl<E: Clone + Send + Sync + 'static> Block<E> {
    /// The whole block, once it is all here.
    pub async fn whole(self) -> Result<(Bytes, Served), FlightError<E>> {
        match self {
            Block::Held(b, s) => Ok((b, s)),
            Block::Arriving(g, s) => Ok((g.whole().await?, s)),
        }
    }

    /// Bytes `lo..hi` of the block (clamped to it) as soon as they are here.
    pub async fn part(self, lo: usize, hi: usize) -> Result<Part, FlightError<E>> {
        match self {
            Block::Held(b, served) => {
                let hi = hi.min(b.len());
                Ok(Part {
                    bytes: b.slice(lo.min(hi)..hi),
                    served,
                    waited: false,
                })
            }
            Block::Arriving(g, served) => {
                let waited = g.len() < hi as u64 && !g.is_done();
                g.until(hi as u64).await?;
                let hi = hi.min(g.len() as usize);
                Ok(Part {
                    bytes: g.slice(lo.min(hi), hi),
                    served,
                    waited,
                })
            }
        }
    }
}

/// Some bytes of a block, and how they came.
pub struct Part {
    pub bytes: Bytes,
    pub served: Served,
    /// Whether the asker waited for them to arrive.
    pub waited: bool,
}

type InFlight<L, E> = Arc<Mutex<HashMap<(BlockKey, L), Arriving<E>>>>;

/// RAM and disk tiers with single-flight fetches. `L` separates flights for the
/// same block that must not join each other (a node's fetch from the origin and
/// its forward to an owner that may come back to it).
pub struct Tiers<L, E: Clone> {
    ram: Arc<dyn BlockCache>,
    disk: Option<Arc<dyn BlockCache>>,
    inflight: InFlight<L, E>,
    /// Where fetched blocks are written: buffers of the block size, used again
    /// once the tiers and every reader are done with them.
    pool: BufferPool,
    /// Blocks on their way to disk. A flight's readers are done before its disk
    /// write, so without a bound a disk slower than the network would queue
    /// blocks without end; past this many a flight ends only once a write slot
    /// is free, and its readers wait for the disk.
    disk_queue: Arc<tokio::sync::Semaphore>,
    /// Fetched blocks not yet written to disk: queued for a write slot or being
    /// written.
    to_disk: Arc<AtomicUsize>,
}

/// Disk writes queued at most (see [`Tiers::disk_queue`]).
pub const DISK_QUEUE: usize = 8;
/// Unused block buffers a pool keeps. A buffer is allocated only when none is
/// idle, so idle ones never raise the peak (the tiers plus the blocks in flight
/// at once); they keep that peak resident after a burst, so that the next burst
/// (a read-ahead window opening, a RAM tier evicting as many blocks as it takes)
/// finds its buffers. A mount's in-flight budget is 64 blocks by default.
pub const IDLE_BUFFERS: usize = 64;

impl<L, E> Tiers<L, E>
where
    L: Hash + Eq + Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// A RAM tier of `ram_bytes` (0: none) for blocks of up to `block` bytes, over
    /// `disk` (if any).
    pub fn new(ram_bytes: u64, block: u64, disk: Option<Arc<dyn BlockCache>>) -> Self {
        Self::evicting(ram_bytes, block, disk, &Evicting::default())
    }

    /// [`Self::new`] with a RAM tier that evicts as `evicting` says.
    pub fn evicting(
        ram_bytes: u64,
        block: u64,
        disk: Option<Arc<dyn BlockCache>>,
        evicting: &Evicting,
    ) -> Self {
        let ram: Arc<dyn BlockCache> = if ram_bytes > 0 {
            Arc::new(RamTier::for_blocks(ram_bytes, block, evicting))
        } else {
            Arc::new(NoCache)
        };
        Tiers {
            ram,
            disk,
            inflight: Arc::default(),
            pool: BufferPool::new(block as usize, IDLE_BUFFERS),
            disk_queue: Arc::new(tokio::sync::Semaphore::new(DISK_QUEUE)),
            to_disk: Arc::default(),
        }
    }

    /// How the block buffers were used: allocated, reused, idle.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The block if a tier holds it (a disk hit is promoted to RAM).
    pub async fn lookup(&self, key: &BlockKey) -> Option<(Bytes, Served)> {
        self.lookup_as(key, Touch::Use).await
    }

    /// [`Self::lookup`], counting a use of a block in RAM only if `touch` says.
    pub async fn lookup_as(&self, key: &BlockKey, touch: Touch) -> Option<(Bytes, Served)> {
        if let Some(b) = self.ram_get(key, touch) {
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

    fn ram_get(&self, key: &BlockKey, touch: Touch) -> Option<Bytes> {
        match touch {
            Touch::Use => self.ram.get(key),
            Touch::Peek => self.ram.peek(key),
        }
    }

    /// Whether a tier holds the block now, fetching nothing.
    pub async fn cached(&self, key: &BlockKey) -> bool {
        self.lookup(key).await.is_some()
    }

    /// The fetch of `key` in lane `lane` in flight now, if any: how much of it has
    /// arrived, say.
    pub fn arriving(&self, key: &BlockKey, lane: &L) -> Option<Arriving<E>> {
        self.inflight
            .lock()
            .unwrap()
            .get(&(key.clone(), lane.clone()))
            .cloned()
    }

    /// The block from a tier, else from `fetch` (run once however many ask at the
    /// same time, in lane `lane`), which writes the block's bytes (`len` of them
    /// at most) into the growing block it is given as they come and says when it
    /// is complete; a fetched block is kept in both tiers when `fill`.
    pub async fn open<F, Fut>(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        len: usize,
        fetch: F,
    ) -> Block<E>
    where
        F: FnOnce(Fill<E>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
    {
        self.open_as(key, lane, fill, len, Touch::Use, fetch).await
    }

    /// [`Self::open`], counting a use of a block in RAM only if `touch` says.
    pub async fn open_as<F, Fut>(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        len: usize,
        touch: Touch,
        fetch: F,
    ) -> Block<E>
    where
        F: FnOnce(Fill<E>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
    {
        if let Some((b, served)) = self.lookup_as(&key, touch).await {
            return Block::Held(b, served);
        }
        self.flight_as(key, lane, fill, len, touch, fetch)
    }

    /// [`Self::open`] whatever the disk tier holds (joining a fetch in flight):
    /// for a caller that needs what the fetch learns besides the bytes.
    pub fn flight<F, Fut>(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        len: usize,
        fetch: F,
    ) -> Block<E>
    where
        F: FnOnce(Fill<E>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
    {
        self.flight_as(key, lane, fill, len, Touch::Use, fetch)
    }

    fn flight_as<F, Fut>(
        &self,
        key: BlockKey,
        lane: L,
        fill: bool,
        len: usize,
        touch: Touch,
        fetch: F,
    ) -> Block<E>
    where
        F: FnOnce(Fill<E>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
    {
        let id = (key.clone(), lane);
        let (g, filler) = {
            let mut all = self.inflight.lock().unwrap();
            if let Some(g) = all.get(&id) {
                return Block::Arriving(g.clone(), Served::Joined);
            }
            // A flight that ended between the caller's lookup and here left its
            // block in RAM (it is kept before its entry goes): never fetch it
            // twice.
            if let Some(b) = self.ram_get(&key, touch) {
                return Block::Held(b, Served::Ram);
            }
            // Its buffer is taken when its first bytes come: a fetch waiting
            // for its turn holds no memory.
            let (g, filler) = Growing::lazy(&self.pool, len);
            all.insert(id.clone(), g.clone());
            (g, filler)
        };
        // Whoever started the fetch sees the answers it gets (a gateway, its
        // owner's Cache-Status).
        // Boxed: a fetch's state is large, and the task moves it.
        let run = Box::pin(crate::store::seen::watched(
            crate::store::seen::watcher(),
            fetch(filler),
        ));
        let landing = Landing {
            id: Some(id),
            growing: g.clone(),
            inflight: self.inflight.clone(),
        };
        let (ram, disk) = (self.ram.clone(), self.disk.clone());
        let (queue, to_disk) = (self.disk_queue.clone(), self.to_disk.clone());
        tokio::spawn(async move {
            let mut landing = landing;
            match run.await {
                Ok(()) => {
                    let b = landing.growing.arrived();
                    if fill && landing.growing.keeps() {
                        ram.insert(key.clone(), b.clone());
                    }
                    let disk = disk.filter(|_| fill);
                    let slot = match &disk {
                        Some(_) => {
                            to_disk.fetch_add(1, Relaxed);
                            queue.acquire_owned().await.ok()
                        }
                        None => None,
                    };
                    // Readers are done before the disk write: it only keeps.
                    landing.end(Ok(()));
                    if let Some(disk) = disk {
                        let _ = tokio::task::spawn_blocking(move || disk.insert(key, b)).await;
                        to_disk.fetch_sub(1, Relaxed);
                    }
                    drop(slot);
                }
                Err(e) => landing.end(Err(FlightError::Failed(e))),
            }
        });
        Block::Arriving(g, Served::Fetched)
    }

    /// The block is kept elsewhere now (a kernel's page cache took it whole):
    /// the RAM tier lets it go, or never takes it if its fetch has not landed.
    /// Its buffer is then free for the next block while it is still in the
    /// CPU's cache, and the RAM tier holds what nothing else does.
    pub fn let_go(&self, key: &BlockKey, lane: &L) {
        if let Some(g) = self.arriving(key, lane) {
            g.let_go();
        }
        // After the flag: a flight that landed before it saw the flag is undone
        // here.
        self.ram.forget(key);
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
        let gone: super::Purge = Arc::new(gone);
        let g = gone.clone();
        self.ram.remove(&*gone) + self.on_disk(move |d| d.remove_shared(g)).await.unwrap_or(0)
    }

    /// The RAM tier's blocks, most recently used first.
    pub fn ram_held(&self) -> Vec<(BlockKey, Bytes)> {
        self.ram.held()
    }

    /// The disk tier, if any.
    pub fn disk(&self) -> Option<Arc<dyn BlockCache>> {
        self.disk.clone()
    }

    pub fn ram_stats(&self) -> TierStats {
        self.ram.stats()
    }

    pub fn disk_stats(&self) -> TierStats {
        self.disk.as_ref().map(|d| d.stats()).unwrap_or_default()
    }

    /// Fetched blocks on their way to the disk tier: waiting for one of the
    /// [`DISK_QUEUE`] write slots, or being written.
    pub fn disk_writes(&self) -> usize {
        self.to_disk.load(Relaxed)
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

/// How a flight ends: its askers are told, and its entry goes, whatever becomes
/// of its task (a panic or an abort tells them [`FlightError::Lost`]).
struct Landing<L: Hash + Eq, E: Clone + Send + Sync + 'static> {
    id: Option<(BlockKey, L)>,
    growing: Arriving<E>,
    inflight: InFlight<L, E>,
}

impl<L: Hash + Eq, E: Clone + Send + Sync + 'static> Landing<L, E> {
    fn end(&mut self, r: Result<(), FlightError<E>>) {
        if let Some(id) = self.id.take() {
            // Gone from the map first: a new asker after the end fetches afresh
            // (or finds the block in RAM).
            self.inflight.lock().unwrap().remove(&id);
            self.growing.finish(r);
        }
    }
}

impl<L: Hash + Eq, E: Clone + Send + Sync + 'static> Drop for Landing<L, E> {
    fn drop(&mut self) {
        self.end(Err(FlightError::Lost(
            "the fetch's task ended early".into(),
        )));
    }
}

#[cfg(test)]
#[path = "tiers_tests.rs"]
mod tests;
