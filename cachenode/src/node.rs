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
use shoal::cluster::ClusterReader;
use shoal::s3::{ByteRange, GetObject, ObjectMeta, S3Client, S3Error};

use crate::metrics::{self, KindLabel, Metrics};
use crate::rules::{Policy, Rules};

/// One block wanted: of which version, cut at which size, and (if known) the
/// object's size.
struct Want {
    bucket: String,
    key: String,
    etag: String,
    index: u64,
    bs: u64,
    size: Option<u64>,
}

/// Blocks fetched ahead of the one being sent.
const PREFETCH: usize = 4;
/// Longest a request waits on a block fetch someone else started.
const WAIT_LIMIT: Duration = Duration::from_secs(120);
/// Object versions remembered; past this the map is cleared (it is only a cache).
const META_ENTRIES: usize = 100_000;

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

/// Where a gateway sends its misses: each block's owner, through the cluster reader
/// (with its failover, hedging, breaker and origin fallback).
pub struct Upstream {
    pub reader: Arc<ClusterReader>,
    /// Requests that already passed this many nodes are never forwarded again.
    pub hop_limit: u32,
    /// This node's id in the cluster, when its listen address names it: its own
    /// blocks go to the origin instead of to itself.
    pub self_id: Option<String>,
}

impl Upstream {
    fn owns(&self, bucket: &str, key: &str, at: u64) -> bool {
        let Some(me) = &self.self_id else {
            return false;
        };
        let block = shoal::route::BlockId {
            bucket,
            key,
            index: at / self.reader.block_size(),
        };
        // Only the owner matters: the best of one, not a full ranking, per miss.
        let set = self.reader.router().membership().current();
        set.top_k(&block, 1)
            .first()
            .is_some_and(|&i| set.nodes()[i].id == *me)
    }
}

/// A request as it arrived: how many nodes it passed through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Via {
    pub hop: u32,
}

pub struct Node {
    origin: S3Client,
    ram: Arc<dyn BlockCache>,
    disk: Arc<dyn BlockCache>,
    disk_tier: Option<Arc<DiskTier>>,
    /// Keyed by block and by whether the fetch goes upstream, so that a forwarded
    /// request that comes back to this node never waits on its own forward.
    blocks: Coalescer<(BlockKey, bool), (Bytes, ObjectMeta)>,
    /// Keyed by where the answer comes from (0 origin, 1 owner's block 0, 2
    /// owner's HEAD), for the same reason as `blocks`.
    heads: Coalescer<(String, String, Option<String>, u8), ObjectMeta>,
    metas: Mutex<HashMap<(String, String), (ObjectMeta, Instant)>>,
    revalidate_after: Duration,
    max_age: Duration,
    rules: Rules,
    upstream: Option<Upstream>,
    pub metrics: Metrics,
}

/// The cache key of a block. The block size is part of the identity: a node
/// restarted with another `block_size`, or a rule giving some keys their own, must
/// never take a block cut to another size for its own.
fn block_key(bucket: &str, key: &str, etag: &str, index: u64, bs: u64) -> BlockKey {
    BlockKey::new(bucket, key, &format!("{etag}\u{0}{bs}"), index)
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
            revalidate_after: o.revalidate_after,
            max_age: o.max_age,
            rules: Rules::new(o.rules, o.block_size),
            upstream: o.upstream,
            metrics,
        })
    }

    /// What the rules say of `bucket/key`.
    pub fn policy(&self, bucket: &str, key: &str) -> Policy {
        self.rules.policy(bucket, key)
    }

    /// Whether a miss of `bucket/key` at byte `at`, asked `via`, goes to the
    /// cluster: not at the hop limit, and not when this node owns the block.
    fn forwards(&self, via: Via, bucket: &str, key: &str, at: u64) -> bool {
        match &self.upstream {
            Some(u) if u.owns(bucket, key, at) => {
                self.metrics.owned_misses.inc();
                false
            }
            Some(u) if via.hop < u.hop_limit => {
                self.metrics
                    .forwarded
                    .get_or_create(&metrics::HopLabel { hop: via.hop })
                    .inc();
                true
            }
            Some(_) => {
                self.metrics.hop_limited.inc();
                false
            }
            None => false,
        }
    }

    /// What is known of an object, if it may still be used: a rule's `ttl` expires
    /// it (blocks too), `max_age` bounds how long any version is trusted.
    async fn known_fresh(
        &self,
        bucket: &str,
        key: &str,
        policy: &Policy,
    ) -> Option<(ObjectMeta, Duration)> {
        let id = (bucket.to_owned(), key.to_owned());
        let (meta, at) = self.metas.lock().unwrap().get(&id).cloned()?;
        let age = at.elapsed();
        if policy.ttl.is_some_and(|ttl| age >= ttl) {
            self.metrics.expired.inc();
            self.purge_object(bucket, key).await;
            return None;
        }
        (age < self.max_age).then_some((meta, age))
    }

    /// Passes `e` on; when it says the version asked for is gone (412, 404), what
    /// is cached of the object goes too.
    async fn gone_if(&self, bucket: &str, key: &str, e: S3Error) -> S3Error {
        if matches!(
            e.cause(),
            S3Error::PreconditionFailed { .. } | S3Error::NoSuchKey { .. }
        ) {
            self.purge_object(bucket, key).await;
        }
        e
    }

    fn remember(&self, bucket: &str, key: &str, meta: &ObjectMeta) {
        let mut metas = self.metas.lock().unwrap();
        if metas.len() >= META_ENTRIES {
            metas.clear();
        }
        metas.insert(
            (bucket.to_owned(), key.to_owned()),
            (meta.clone(), Instant::now()),
        );
    }

    pub fn origin(&self) -> &S3Client {
        &self.origin
    }

    /// The version to serve: the one named by `if_match`, or the latest one known
    /// within `revalidate_after`, else whatever the origin (or, on a gateway, the
    /// block's owner) says now.
    pub async fn resolve(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        via: Via,
    ) -> Result<ObjectMeta, S3Error> {
        self.resolve_for(bucket, key, if_match, via, true).await
    }

    /// [`Self::resolve`]; `reading` says a GET follows, so a gateway may as well
    /// learn the version by fetching block 0 from its owner (a HEAD asks the owner
    /// with a HEAD and moves no block).
    pub async fn resolve_for(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        via: Via,
        reading: bool,
    ) -> Result<ObjectMeta, S3Error> {
        let policy = self.policy(bucket, key);
        if let Some((meta, age)) = self.known_fresh(bucket, key, &policy).await {
            match if_match {
                // A version is immutable: a known ETag needs no revalidation.
                Some(e) if e == meta.etag => return Ok(meta),
                None if age < self.revalidate_after => return Ok(meta),
                _ => {}
            }
        }
        let forward = self.forwards(via, bucket, key, 0);
        let origin = self.origin.clone();
        let (b, k, m) = (
            bucket.to_owned(),
            key.to_owned(),
            if_match.map(str::to_owned),
        );
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel {
                kind: if forward { "cluster_head" } else { "head" },
            })
            .inc();
        let upstream = self.upstream.as_ref().map(|u| u.reader.clone());
        let route: u8 = match (forward, reading) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => 2,
        };
        let (r, _) = self
            .heads
            .run((b.clone(), k.clone(), m.clone(), route), async move {
                match upstream {
                    // The owner of block 0 knows the version (and keeps block 0).
                    Some(reader) if forward && reading => reader
                        .open_forwarded(&b, &k, None, m.as_deref(), via.hop)
                        .await
                        .map(|h| h.meta().clone()),
                    Some(reader) if forward => {
                        reader.head_forwarded(&b, &k, m.as_deref(), via.hop).await
                    }
                    _ => {
                        let mut req = GetObject::new(b, k);
                        req.if_match = m;
                        origin.head_object(&req).await
                    }
                }
            })
            .await;
        match r {
            Ok(meta) => {
                self.remember(bucket, key, &meta);
                Ok(meta)
            }
            Err(e) => Err(self.gone_if(bucket, key, e).await),
        }
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
            let bk = block_key(bucket, key, &meta.etag, i, bs);
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
        via: Via,
    ) -> Result<ObjectMeta, S3Error> {
        let policy = self.policy(bucket, key);
        if let Some((meta, _)) = self.known_fresh(bucket, key, &policy).await {
            if meta.etag == etag {
                return Ok(meta);
            }
        }
        if !policy.cache || self.upstream.is_some() {
            return self.resolve(bucket, key, Some(etag), via).await;
        }
        let bk = block_key(bucket, key, etag, index, policy.block_size);
        let me = self.clone();
        let want = Want {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            etag: etag.to_owned(),
            index,
            bs: policy.block_size,
            size: None,
        };
        let fetch = async move { me.fetch_from_origin(bk.clone(), want).await };
        let bk = block_key(bucket, key, etag, index, policy.block_size);
        match self.blocks.run((bk, false), fetch).await.0 {
            Ok((_, meta)) => {
                self.remember(bucket, key, &meta);
                Ok(meta)
            }
            // Past the end (or an empty object): the HEAD path answers exactly.
            Err(S3Error::InvalidRange { .. }) => self.resolve(bucket, key, Some(etag), via).await,
            Err(e) => Err(self.gone_if(bucket, key, e).await),
        }
    }

    /// The version `etag` of an object, if this node knows it already.
    pub fn known(&self, bucket: &str, key: &str, etag: &str) -> Option<ObjectMeta> {
        let metas = self.metas.lock().unwrap();
        let (meta, at) = metas.get(&(bucket.to_owned(), key.to_owned()))?;
        (meta.etag == etag && at.elapsed() < self.max_age).then(|| meta.clone())
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
        bs: u64,
        via: Via,
    ) -> Result<Bytes, S3Error> {
        let bk = block_key(bucket, key, &meta.etag, index, bs);
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
        let forward = self.forwards(via, bucket, key, index * bs);
        let mut tries = 0;
        loop {
            tries += 1;
            let me = self.clone();
            let want = Want {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                etag: meta.etag.clone(),
                index,
                bs,
                size: Some(meta.size),
            };
            let (bk2, meta2) = (bk.clone(), meta.clone());
            let fut = async move {
                if forward {
                    me.fetch_from_cluster(bk2, want, meta2, via).await
                } else {
                    me.fetch_from_origin(bk2, want).await
                }
            };
            let joined =
                tokio::time::timeout(WAIT_LIMIT, self.blocks.run((bk.clone(), forward), fut)).await;
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
                Err(e) => return Err(self.gone_if(bucket, key, e).await),
            }
        }
    }

    /// One node block from the origin with `If-Match`, kept in both tiers. Without
    /// the object's size the range is open-ended past the block and the answer's
    /// `Content-Range` says how long the object is.
    async fn fetch_from_origin(
        self: Arc<Self>,
        bk: BlockKey,
        w: Want,
    ) -> Result<(Bytes, ObjectMeta), S3Error> {
        let start = w.index * w.bs;
        let mut req = GetObject::new(&*w.bucket, &*w.key).if_match(&*w.etag);
        req.range = Some(match w.size {
            Some(size) => ByteRange::span(start, (start + w.bs).min(size)),
            None => ByteRange::From {
                first: start,
                last: Some(start + w.bs - 1),
            },
        });
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "block" })
            .inc();
        let (meta, data) = self.origin.get_bytes(&req).await?;
        self.check_block(&w, &meta, &data)?;
        self.metrics.origin_bytes.inc_by(data.len() as u64);
        self.keep(bk, &w, data.clone()).await;
        Ok((data, meta))
    }

    /// One node block from its owner through the cluster (a gateway's miss).
    async fn fetch_from_cluster(
        self: Arc<Self>,
        bk: BlockKey,
        w: Want,
        meta: ObjectMeta,
        via: Via,
    ) -> Result<(Bytes, ObjectMeta), S3Error> {
        let up = self
            .upstream
            .as_ref()
            .expect("forwarding needs an upstream");
        self.metrics.cluster_fetches.inc();
        let start = w.index * w.bs;
        let h = up
            .reader
            .open_forwarded(&w.bucket, &w.key, Some(meta.clone()), None, via.hop)
            .await?;
        let data = h.read(start, w.bs).await?;
        self.check_block(&w, &meta, &data)?;
        self.metrics.cluster_bytes.inc_by(data.len() as u64);
        self.keep(bk, &w, data.clone()).await;
        Ok((data, meta))
    }

    fn check_block(&self, w: &Want, meta: &ObjectMeta, data: &Bytes) -> Result<(), S3Error> {
        let start = w.index * w.bs;
        let want = (start + w.bs).min(meta.size).saturating_sub(start);
        if data.len() as u64 != want || meta.etag != w.etag {
            return Err(S3Error::Protocol {
                endpoint: self.origin.endpoint().to_owned(),
                message: format!(
                    "block {} came back with {} bytes of {:?}, not {want} of {:?}",
                    w.index,
                    data.len(),
                    meta.etag,
                    w.etag
                ),
            });
        }
        Ok(())
    }

    /// Keeps a fetched block in both tiers, unless its key is not to be cached.
    async fn keep(&self, bk: BlockKey, w: &Want, data: Bytes) {
        if !self.policy(&w.bucket, &w.key).cache {
            return;
        }
        self.ram.insert(bk.clone(), data.clone());
        if self.disk_tier.is_some() {
            let disk = self.disk.clone();
            let _ = tokio::task::spawn_blocking(move || disk.insert(bk, data)).await;
        }
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
        via: Via,
    ) -> Result<impl Stream<Item = Result<Bytes, S3Error>> + Send + Sync + 'static, S3Error> {
        let bs = self.policy(bucket, key).block_size;
        let (first, last) = if end > start {
            (start / bs, (end - 1) / bs)
        } else {
            (1, 0)
        };
        let head = if first <= last {
            Some(self.block(bucket, key, meta, first, bs, via).await?)
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
                async move {
                    me.block(&bucket, &key, &meta, i, bs, via)
                        .await
                        .map(|b| slice(i, b))
                }
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

    /// Drops every version of one object but `etag` (an overwrite whose new
    /// version may already be warm); returns blocks dropped.
    pub async fn purge_other_versions(&self, bucket: &str, key: &str, etag: &str) -> u64 {
        {
            let mut metas = self.metas.lock().unwrap();
            let id = (bucket.to_owned(), key.to_owned());
            if metas.get(&id).is_some_and(|(m, _)| m.etag != etag) {
                metas.remove(&id);
            }
        }
        let version = format!("{etag}\u{0}");
        let keep = move |e: &str| e.starts_with(&version);
        let n = self.ram.remove_versions(bucket, key, &keep);
        let (disk, b, k) = (self.disk.clone(), bucket.to_owned(), key.to_owned());
        n + tokio::task::spawn_blocking(move || disk.remove_versions(&b, &k, &keep))
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
        if let Some(u) = &self.upstream {
            u.reader.refresh_gauges();
        }
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
