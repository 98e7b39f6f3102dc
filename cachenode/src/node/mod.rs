//! The node's read path: object versions, then blocks from RAM, disk or the origin.
//!
//! A ranged GET becomes whole node blocks. Each block goes through the tier
//! pipeline ([`shoal::blocks::Tiers`]): RAM, else disk, else one coalesced fetch,
//! after which it is kept in both tiers. The fetch is an origin GET widened to the
//! whole block with `If-Match` (so the bytes are of the version asked for), or, on a
//! gateway, the block's owner node ([`fetch`]). Blocks stream out in order as they
//! arrive, a few fetched ahead. [`versions`] decides which version a request
//! means; [`invalidate`] drops what changed.

mod cut_through;
mod error;
mod fetch;
pub mod invalidate;
mod versions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt};
use shoal::blocks::{BlockKey, DiskTier, Served, Tiers};
use shoal::store::s3::S3Client;
use shoal::store::ObjectMeta;

pub use error::NodeError;
pub use fetch::Upstream;

use crate::metrics::{self, Metrics};
use crate::rules::{Policy, Rules};

/// Blocks fetched ahead of the one being sent.
const PREFETCH: usize = 4;
/// Reads up to this long inside one block the tiers lack, starting at least
/// [`SIDE_READ_DEPTH`] into it, are asked of the origin on their own beside the
/// block's fetch ([`Node::side_read`]). Nearer the block's start the block's own
/// bytes come about as soon (256 KiB is 2.6 ms at 100 MB/s, against tens of ms
/// of first byte), and a second origin request is not worth it.
const SIDE_READ_MAX: u64 = 256 << 10;
const SIDE_READ_DEPTH: u64 = 256 << 10;
/// Longest a request waits on a block fetch someone else started.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

pub struct NodeOptions {
    pub block_size: u64,
    pub revalidate_after: Duration,
    pub max_age: Duration,
    pub ram_bytes: u64,
    pub disk: Option<(std::path::PathBuf, u64)>,
    /// The caching rules; keys no rule sizes get `block_size` blocks.
    pub rules: Vec<shoal::config::CacheRule>,
    /// A gateway's cluster: misses go to owners through it.
    pub upstream: Option<Upstream>,
}

/// A request as it arrived: how many nodes it passed through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Via {
    pub hop: u32,
}

pub struct Node {
    origin: S3Client,
    /// Flights are kept apart by whether the fetch goes upstream, so that a
    /// forwarded request that comes back to this node never waits on its own
    /// forward.
    tiers: Tiers<bool, NodeError>,
    versions: versions::Versions,
    rules: Rules,
    upstream: Option<Upstream>,
    /// Cold blocks being fetched, readable while they arrive.
    growing: Mutex<HashMap<BlockKey, Arc<shoal::blocks::Growing<NodeError>>>>,
    pub metrics: Arc<Metrics>,
}

impl Node {
    pub fn new(origin: S3Client, o: NodeOptions) -> std::io::Result<Node> {
        let metrics = Arc::new(Metrics::default());
        let disk = match &o.disk {
            Some((dir, bytes)) if *bytes > 0 => {
                let (tier, stats) = DiskTier::open(dir, *bytes)?;
                tracing::info!(
                    blocks = stats.blocks,
                    bytes = stats.bytes,
                    removed = stats.removed,
                    "disk tier index rebuilt in {:?}",
                    stats.took
                );
                metrics.disk_opened(&stats);
                Some(tier)
            }
            _ => None,
        };
        let largest = o
            .rules
            .iter()
            .filter_map(|r| r.block_size)
            .fold(o.block_size, u64::max);
        Ok(Node {
            origin,
            tiers: Tiers::new(
                o.ram_bytes,
                largest,
                disk.map(|d| Arc::new(d) as Arc<dyn shoal::blocks::BlockCache>),
            ),
            versions: versions::Versions {
                metas: Mutex::new(HashMap::new()),
                heads: Default::default(),
                revalidate_after: o.revalidate_after,
                max_age: o.max_age,
            },
            rules: Rules::new(o.rules, o.block_size),
            upstream: o.upstream,
            growing: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// What the rules say of `bucket/key`.
    pub fn policy(&self, bucket: &str, key: &str) -> Policy {
        self.rules.policy(bucket, key)
    }

    pub fn origin(&self) -> &S3Client {
        &self.origin
    }

    fn block_key(bucket: &str, key: &str, etag: &str, index: u64, bs: u64) -> BlockKey {
        BlockKey::new(bucket, key, etag, bs, index)
    }

    /// Whether every node block of `start..end` is in RAM or on disk now.
    pub async fn cached(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        start: u64,
        end: u64,
    ) -> bool {
        if end <= start {
            return true;
        }
        let policy = self.policy(bucket, key);
        if !policy.cache {
            return false;
        }
        let bs = policy.block_size;
        for i in start / bs..=(end - 1) / bs {
            let bk = Self::block_key(bucket, key, &meta.etag, i, bs);
            if !self.tiers.cached(&bk).await {
                return false;
            }
        }
        true
    }

    /// One whole node block of `meta`'s version.
    pub async fn block(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
        bs: u64,
        via: Via,
    ) -> Result<Bytes, NodeError> {
        let bk = Self::block_key(bucket, key, &meta.etag, index, bs);
        let forward = self.forwards(via, bucket, key, index * bs);
        let fill = self.policy(bucket, key).cache;
        let mut tries = 0;
        loop {
            tries += 1;
            let fetch = self.clone().fetch(bk.clone(), meta.clone(), forward, via);
            let waited = tokio::time::timeout(
                WAIT_LIMIT,
                self.tiers.get_or_fetch(bk.clone(), forward, fill, fetch),
            )
            .await
            .map_err(|_| NodeError::WaitedTooLong(WAIT_LIMIT))?;
            match waited {
                Ok((b, served)) => {
                    self.count(served, b.len());
                    return Ok(b);
                }
                Err(e) => {
                    let e = NodeError::from(e);
                    // A follower whose leader failed for a passing reason fetches
                    // afresh once.
                    if tries < 2 && e.is_retryable() {
                        continue;
                    }
                    return Err(self.gone_if(bucket, key, e).await);
                }
            }
        }
    }

    /// Counts where a block came from.
    fn count(&self, served: Served, bytes: usize) {
        let m = &self.metrics;
        let has_disk = self.tiers.has_disk();
        let tier = match served {
            Served::Ram => metrics::RAM,
            Served::Disk => metrics::DISK,
            Served::Fetched | Served::Joined => metrics::ORIGIN,
        };
        if served != Served::Ram {
            m.misses.get_or_create(&metrics::RAM).inc();
        }
        if has_disk && matches!(served, Served::Fetched | Served::Joined) {
            m.misses.get_or_create(&metrics::DISK).inc();
        }
        if matches!(served, Served::Ram | Served::Disk) {
            m.hits.get_or_create(&tier).inc();
        }
        if served == Served::Joined {
            m.coalesced_waits.inc();
        }
        m.bytes_served.get_or_create(&tier).inc_by(bytes as u64);
    }

    /// Bytes `start..end` of `meta`'s version as a stream of slices of whole blocks,
    /// a cold block's bytes as they arrive (cut-through). The first block is
    /// started before this returns, so an error about the object (412, 404) is an
    /// answer rather than a cut-off body.
    pub async fn read(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        start: u64,
        end: u64,
        via: Via,
    ) -> Result<SyncStream<cut_through::BlockStream>, NodeError> {
        let bs = self.policy(bucket, key).block_size;
        let (first, last) = if end > start {
            (start / bs, (end - 1) / bs)
        } else {
            (1, 0)
        };
        if first == last && end - start <= SIDE_READ_MAX && start >= first * bs + SIDE_READ_DEPTH {
            let side = self
                .side_read(bucket, key, meta, (first, bs), (start, end), via)
                .await?;
            if let Some(s) = side {
                return Ok(SyncStream::new(s));
            }
        }
        let head = if first <= last {
            Some(self.block_stream(bucket, key, meta, first, bs, via).await?)
        } else {
            None
        };
        // The part of block `index` in `start..end`, taken from its chunks.
        let clip = move |index: u64, s: cut_through::BlockStream| {
            let off = index * bs;
            let lo = start.saturating_sub(off);
            let hi = end - off;
            s.scan(0u64, move |at, c| {
                // Past the range: stop here rather than wait out the block.
                if *at >= hi {
                    return std::future::ready(None);
                }
                let out = c.map(|c| {
                    let (c_lo, c_hi) = (*at, *at + c.len() as u64);
                    *at = c_hi;
                    let (a, b) = (lo.clamp(c_lo, c_hi), hi.clamp(c_lo, c_hi));
                    c.slice((a - c_lo) as usize..(b - c_lo) as usize)
                });
                std::future::ready(Some(out))
            })
            .filter(|c| std::future::ready(!matches!(c, Ok(b) if b.is_empty())))
        };
        let me = self.clone();
        let (bucket, key, meta) = (bucket.to_owned(), key.to_owned(), meta.clone());
        let rest = stream::iter(first + 1..=last)
            .map(move |i| {
                let (me, bucket, key, meta) =
                    (me.clone(), bucket.clone(), key.clone(), meta.clone());
                async move {
                    me.block_stream(&bucket, &key, &meta, i, bs, via)
                        .await
                        .map(|s| (i, s))
                }
            })
            .buffered(PREFETCH)
            .flat_map(move |r| -> cut_through::BlockStream {
                match r {
                    Ok((i, s)) => Box::pin(clip(i, s)),
                    Err(e) => Box::pin(stream::once(async { Err(e) })),
                }
            });
        let head = stream::iter(head.map(move |s| clip(first, s))).flatten();
        Ok(SyncStream::new(Box::pin(head.chain(rest))))
    }

    /// Brings the tier gauges and counters up to date (called before each scrape).
    pub fn refresh_gauges(&self) {
        if let Some(u) = &self.upstream {
            u.reader.refresh_gauges();
        }
        self.metrics.tiers(
            &self.tiers.ram_stats(),
            &self.tiers.disk_stats(),
            self.tiers.disk_failures(),
        );
    }
}

/// s3s wants `Sync` body streams; a stream polled from one task at a time is safely
/// shared behind a mutex.
pub struct SyncStream<S>(std::sync::Mutex<std::pin::Pin<Box<S>>>);

impl<S> SyncStream<S> {
    pub fn new(s: S) -> Self {
        Self(std::sync::Mutex::new(Box::pin(s)))
    }
}

impl<S: Stream> Stream for SyncStream<S> {
    type Item = S::Item;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.lock().unwrap().as_mut().poll_next(cx)
    }
}
