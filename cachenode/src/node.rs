//! The node's read path: object versions, then blocks from RAM, disk or the origin.
//!
//! A ranged GET becomes whole node blocks. Each block comes from the RAM tier, else
//! the disk tier, else one coalesced origin GET (widened to the whole block, with
//! `If-Match` so the bytes are of the version asked for), after which it is kept in
//! both tiers. Blocks stream out in order as they arrive, a few fetched ahead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt};
use shoal::cache::{BlockCache, BlockKey, Coalescer, DiskTier, Joined, NoCache, RamTier};
use shoal::s3::{ByteRange, GetObject, ObjectMeta, S3Client, S3Error};

use crate::metrics::{self, KindLabel, Metrics};

/// Blocks fetched ahead of the one being sent.
const PREFETCH: usize = 4;
/// Longest a request waits on a block fetch someone else started.
const WAIT_LIMIT: Duration = Duration::from_secs(120);
/// Object versions remembered; past this the map is cleared (it is only a cache).
const META_ENTRIES: usize = 100_000;

pub struct NodeOptions {
    pub block_size: u64,
    pub revalidate_after: Duration,
    pub ram_bytes: u64,
    pub disk: Option<(std::path::PathBuf, u64)>,
}

pub struct Node {
    origin: S3Client,
    ram: Arc<dyn BlockCache>,
    disk: Arc<dyn BlockCache>,
    disk_tier: Option<Arc<DiskTier>>,
    blocks: Coalescer<BlockKey, (Bytes, ObjectMeta)>,
    heads: Coalescer<(String, String, Option<String>), ObjectMeta>,
    metas: Mutex<HashMap<(String, String), (ObjectMeta, Instant)>>,
    block_size: u64,
    revalidate_after: Duration,
    pub metrics: Metrics,
}

impl Node {
    pub fn new(origin: S3Client, o: NodeOptions) -> std::io::Result<Node> {
        let metrics = Metrics::default();
        let (disk, disk_tier): (Arc<dyn BlockCache>, _) = match &o.disk {
            Some((dir, bytes)) if *bytes > 0 => {
                let (tier, stats) = DiskTier::open(dir, *bytes)?;
                tracing::info!(
                    blocks = stats.blocks,
                    bytes = stats.bytes,
                    removed = stats.removed,
                    "disk tier index rebuilt in {:?}",
                    stats.took
                );
                metrics
                    .disk_index_rebuild_seconds
                    .set(stats.took.as_secs_f64());
                metrics.disk_blocks_at_start.set(stats.blocks as i64);
                metrics
                    .disk_files_removed_at_start
                    .set(stats.removed as i64);
                let tier = Arc::new(tier);
                (tier.clone(), Some(tier))
            }
            _ => (Arc::new(NoCache), None),
        };
        let ram: Arc<dyn BlockCache> = if o.ram_bytes > 0 {
            Arc::new(RamTier::new(o.ram_bytes, 16))
        } else {
            Arc::new(NoCache)
        };
        Ok(Node {
            origin,
            ram,
            disk,
            disk_tier,
            blocks: Coalescer::default(),
            heads: Coalescer::default(),
            metas: Mutex::new(HashMap::new()),
            block_size: o.block_size,
            revalidate_after: o.revalidate_after,
            metrics,
        })
    }

    pub fn origin(&self) -> &S3Client {
        &self.origin
    }

    /// The version to serve: the one named by `if_match`, or the latest one known
    /// within `revalidate_after`, else whatever the origin says now.
    pub async fn resolve(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<ObjectMeta, S3Error> {
        let id = (bucket.to_owned(), key.to_owned());
        if let Some((meta, at)) = self.metas.lock().unwrap().get(&id) {
            match if_match {
                // A version is immutable: a known ETag needs no revalidation.
                Some(e) if e == meta.etag => return Ok(meta.clone()),
                None if at.elapsed() < self.revalidate_after => return Ok(meta.clone()),
                _ => {}
            }
        }
        let origin = self.origin.clone();
        let (b, k, m) = (
            bucket.to_owned(),
            key.to_owned(),
            if_match.map(str::to_owned),
        );
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "head" })
            .inc();
        let (r, _) = self
            .heads
            .run((b.clone(), k.clone(), m.clone()), async move {
                let mut req = GetObject::new(b, k);
                req.if_match = m;
                origin.head_object(&req).await
            })
            .await;
        let meta = r?;
        let mut metas = self.metas.lock().unwrap();
        if metas.len() >= META_ENTRIES {
            metas.clear();
        }
        metas.insert(id, (meta.clone(), Instant::now()));
        Ok(meta)
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
        let bs = self.block_size;
        for i in start / bs..=(end - 1) / bs {
            let bk = BlockKey::new(bucket, key, &meta.etag, i);
            if self.ram.get(&bk).is_some() {
                continue;
            }
            let disk = self.disk.clone();
            if !matches!(
                tokio::task::spawn_blocking(move || disk.get(&bk).is_some()).await,
                Ok(true)
            ) {
                return false;
            }
        }
        true
    }

    /// Like [`Self::resolve`] for a request pinned to `etag` that starts in node block
    /// `index`: when the version is not known yet, that block is fetched with
    /// `If-Match` and its answer supplies size and dates, saving the HEAD round trip
    /// (what a cold small file costs). The block lands in the tiers for the read.
    pub async fn resolve_pinned(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        etag: &str,
        index: u64,
    ) -> Result<ObjectMeta, S3Error> {
        if let Some((meta, _)) = self
            .metas
            .lock()
            .unwrap()
            .get(&(bucket.to_owned(), key.to_owned()))
        {
            if meta.etag == etag {
                return Ok(meta.clone());
            }
        }
        let bk = BlockKey::new(bucket, key, etag, index);
        let me = self.clone();
        let bk2 = bk.clone();
        let fetch = async move { me.fetch_from_origin(bk2, None).await };
        match self.blocks.run(bk, fetch).await.0 {
            Ok((_, meta)) => {
                let mut metas = self.metas.lock().unwrap();
                if metas.len() >= META_ENTRIES {
                    metas.clear();
                }
                metas.insert(
                    (bucket.to_owned(), key.to_owned()),
                    (meta.clone(), Instant::now()),
                );
                Ok(meta)
            }
            // Past the end (or an empty object): the HEAD path answers exactly.
            Err(S3Error::InvalidRange { .. }) => self.resolve(bucket, key, Some(etag)).await,
            Err(e) => {
                if matches!(
                    e.cause(),
                    S3Error::PreconditionFailed { .. } | S3Error::NoSuchKey { .. }
                ) {
                    self.forget_meta(bucket, key);
                }
                Err(e)
            }
        }
    }

    /// The version `etag` of an object, if this node knows it already.
    pub fn known(&self, bucket: &str, key: &str, etag: &str) -> Option<ObjectMeta> {
        let metas = self.metas.lock().unwrap();
        let (meta, _) = metas.get(&(bucket.to_owned(), key.to_owned()))?;
        (meta.etag == etag).then(|| meta.clone())
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Forgets what is known of an object version (it changed at the origin).
    pub fn forget_meta(&self, bucket: &str, key: &str) {
        self.metas
            .lock()
            .unwrap()
            .remove(&(bucket.to_owned(), key.to_owned()));
    }

    /// One whole node block of `meta`'s version.
    pub async fn block(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
    ) -> Result<Bytes, S3Error> {
        let bk = BlockKey::new(bucket, key, &meta.etag, index);
        if let Some(b) = self.ram.get(&bk) {
            self.metrics.hits.get_or_create(&metrics::RAM).inc();
            self.metrics
                .bytes_served
                .get_or_create(&metrics::RAM)
                .inc_by(b.len() as u64);
            return Ok(b);
        }
        self.metrics.misses.get_or_create(&metrics::RAM).inc();
        if self.disk_tier.is_some() {
            let (disk, k2) = (self.disk.clone(), bk.clone());
            if let Ok(Some(b)) = tokio::task::spawn_blocking(move || disk.get(&k2)).await {
                self.metrics.hits.get_or_create(&metrics::DISK).inc();
                self.metrics
                    .bytes_served
                    .get_or_create(&metrics::DISK)
                    .inc_by(b.len() as u64);
                self.ram.insert(bk, b.clone());
                return Ok(b);
            }
            self.metrics.misses.get_or_create(&metrics::DISK).inc();
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let me = self.clone();
            let (bk2, size) = (bk.clone(), meta.size);
            let fut = async move { me.fetch_from_origin(bk2, Some(size)).await };
            let joined = tokio::time::timeout(WAIT_LIMIT, self.blocks.run(bk.clone(), fut)).await;
            let (r, how) = joined.map_err(|_| S3Error::Timeout {
                endpoint: self.origin.endpoint().to_owned(),
                deadline: shoal::s3::Deadline::FirstByte,
                after: WAIT_LIMIT,
            })?;
            if how == Joined::Follower {
                self.metrics.coalesced_waits.inc();
            }
            match r {
                Ok((b, _)) => {
                    self.metrics
                        .bytes_served
                        .get_or_create(&metrics::ORIGIN)
                        .inc_by(b.len() as u64);
                    return Ok(b);
                }
                // A follower whose leader failed for a passing reason fetches afresh once.
                Err(e) if how == Joined::Follower && e.is_retryable() && tries < 2 => continue,
                Err(e) => {
                    if matches!(
                        e.cause(),
                        S3Error::PreconditionFailed { .. } | S3Error::NoSuchKey { .. }
                    ) {
                        self.forget_meta(bucket, key);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// One node block from the origin with `If-Match`, kept in both tiers. Without
    /// the object's size (`None`) the range is open-ended past the block and the
    /// answer's `Content-Range` says how long the object is.
    async fn fetch_from_origin(
        self: Arc<Self>,
        bk: BlockKey,
        size: Option<u64>,
    ) -> Result<(Bytes, ObjectMeta), S3Error> {
        let start = bk.index * self.block_size;
        let mut req = GetObject::new(&*bk.bucket, &*bk.key).if_match(&*bk.etag);
        req.range = Some(match size {
            Some(size) => ByteRange::span(start, (start + self.block_size).min(size)),
            None => ByteRange::From {
                first: start,
                last: Some(start + self.block_size - 1),
            },
        });
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "block" })
            .inc();
        let (meta, data) = self.origin.get_bytes(&req).await?;
        let want = (start + self.block_size)
            .min(meta.size)
            .saturating_sub(start);
        if data.len() as u64 != want || meta.etag != *bk.etag {
            return Err(S3Error::Protocol {
                endpoint: self.origin.endpoint().to_owned(),
                message: format!(
                    "block {} came back with {} bytes of {:?}, not {want} of {:?}",
                    bk.index,
                    data.len(),
                    meta.etag,
                    bk.etag
                ),
            });
        }
        self.metrics.origin_bytes.inc_by(data.len() as u64);
        self.ram.insert(bk.clone(), data.clone());
        if self.disk_tier.is_some() {
            let (disk, d2) = (self.disk.clone(), data.clone());
            let _ = tokio::task::spawn_blocking(move || disk.insert(bk, d2)).await;
        }
        Ok((data, meta))
    }

    /// Bytes `start..end` of `meta`'s version as a stream of slices of whole blocks.
    /// The first block is fetched before this returns, so an error about the object
    /// (412, 404) is an answer rather than a cut-off body.
    pub async fn read(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        start: u64,
        end: u64,
    ) -> Result<impl Stream<Item = Result<Bytes, S3Error>> + Send + Sync + 'static, S3Error> {
        let bs = self.block_size;
        let (first, last) = if end > start {
            (start / bs, (end - 1) / bs)
        } else {
            (1, 0)
        };
        let head = if first <= last {
            Some(self.block(bucket, key, meta, first).await?)
        } else {
            None
        };
        let slice = move |index: u64, b: Bytes| {
            let off = index * bs;
            let lo = start.saturating_sub(off) as usize;
            let hi = ((end - off) as usize).min(b.len());
            b.slice(lo..hi)
        };
        let me = self.clone();
        let (bucket, key, meta) = (bucket.to_owned(), key.to_owned(), meta.clone());
        let rest = stream::iter(first + 1..=last)
            .map(move |i| {
                let (me, bucket, key, meta) =
                    (me.clone(), bucket.clone(), key.clone(), meta.clone());
                async move { me.block(&bucket, &key, &meta, i).await.map(|b| slice(i, b)) }
            })
            .buffered(PREFETCH);
        let head = stream::iter(head.map(|b| Ok(slice(first, b))));
        Ok(SyncStream::new(head.chain(rest)))
    }

    /// Drops every cached block and version of one object; returns blocks dropped.
    pub async fn purge_object(&self, bucket: &str, key: &str) -> u64 {
        self.forget_meta(bucket, key);
        let n = self.ram.remove_object(bucket, key);
        let (disk, b, k) = (self.disk.clone(), bucket.to_owned(), key.to_owned());
        n + tokio::task::spawn_blocking(move || disk.remove_object(&b, &k))
            .await
            .unwrap_or(0)
    }

    /// Drops everything under a prefix; returns blocks dropped.
    pub async fn purge_prefix(&self, bucket: &str, prefix: &str) -> u64 {
        self.metas
            .lock()
            .unwrap()
            .retain(|(b, k), _| !(b == bucket && k.starts_with(prefix)));
        let n = self.ram.remove_prefix(bucket, prefix);
        let (disk, b, p) = (self.disk.clone(), bucket.to_owned(), prefix.to_owned());
        n + tokio::task::spawn_blocking(move || disk.remove_prefix(&b, &p))
            .await
            .unwrap_or(0)
    }

    /// Brings the tier gauges up to date (called before each scrape).
    pub fn refresh_gauges(&self) {
        for (label, tier) in [(metrics::RAM, &self.ram), (metrics::DISK, &self.disk)] {
            let s = tier.stats();
            self.metrics
                .cache_bytes
                .get_or_create(&label)
                .set(s.used_bytes as i64);
            self.metrics
                .cache_capacity_bytes
                .get_or_create(&label)
                .set(s.capacity_bytes as i64);
            self.metrics
                .evictions
                .get_or_create(&label)
                .set(s.evictions as i64);
        }
        if let Some(d) = &self.disk_tier {
            self.metrics
                .checksum_failures
                .set(d.checksum_failures() as i64);
        }
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
