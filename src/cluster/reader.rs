//! [`ClusterReader`] (shared by every handle) and [`Handle`] (one pinned version).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::metrics::{self, ClusterMetrics};
use crate::cache::{BlockCache, BlockKey, Coalescer, Joined, NoCache, RamTier};
use crate::config::{ClusterConfig, RetryPolicy};
use crate::route::{Membership, Router, SystemClock};
use crate::s3::{ByteRange, GetObject, ObjectMeta, S3Client, S3ClientOptions, S3Error};

/// The S3 client for node `id` of `cluster`: the cluster's credentials and
/// deadlines, no retries (failover, or the caller, is the retry), `Range` unsigned
/// so the node can widen it.
pub fn node_client(
    cluster: &ClusterConfig,
    region: &str,
    id: &str,
    pool_idle_per_host: usize,
) -> S3Client {
    let scheme = if cluster.tls { "https" } else { "http" };
    S3Client::new(S3ClientOptions {
        endpoint: url::Url::parse(&format!("{scheme}://{id}"))
            .expect("a canonical node id is a URL authority"),
        region: region.to_owned(),
        addressing: crate::config::Addressing::Path,
        credentials: cluster.credentials.clone(),
        timeouts: cluster.timeouts,
        retry: RetryPolicy {
            max_attempts: 1,
            base: Duration::from_millis(1),
            max: Duration::from_millis(1),
        },
        sign_range: false,
        pool_idle_per_host,
    })
    .expect("node client builds like the origin client")
}

/// How a reader is shaped beyond the cluster config.
#[derive(Clone, Debug)]
pub struct ReaderOptions {
    /// Client RAM tier, shared by all handles (0 = none).
    pub ram_bytes: u64,
    /// Blocks being fetched at once across all handles: bounds in-flight memory to
    /// this many cluster blocks. Defaults to 4 read windows.
    pub max_inflight_blocks: Option<usize>,
    /// Longest a fetch waits for an in-flight slot before it reads the origin
    /// instead (`None`: it waits, which is backpressure for a mount; a gateway sheds).
    pub queue_wait: Option<Duration>,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            ram_bytes: 256 << 20,
            max_inflight_blocks: None,
            queue_wait: None,
        }
    }
}

pub struct ClusterReader {
    pub(crate) router: Arc<Router>,
    pub(crate) origin: S3Client,
    cluster: ClusterConfig,
    clients: Mutex<HashMap<String, S3Client>>,
    ram: Arc<dyn BlockCache>,
    flights: Coalescer<BlockKey, (Bytes, ObjectMeta)>,
    inflight: Arc<Semaphore>,
    inflight_limit: usize,
    queue_wait: Option<Duration>,
    pub metrics: ClusterMetrics,
    pub(crate) started: Instant,
    pub(crate) last_log: AtomicU64,
    /// Objects seen to change recently: the next open asks the origin first, since
    /// nodes may still hold the old version's ETag for `revalidate_after`.
    changed: Mutex<HashMap<(String, String), Instant>>,
    _refresh: Option<tokio::task::JoinHandle<()>>,
}

impl ClusterReader {
    /// A reader over `cluster` (or none: straight to the origin) that falls back to
    /// `origin`. Must be called inside a tokio runtime (DNS membership refreshes in
    /// the background).
    pub fn new(
        origin: S3Client,
        cluster: Option<&ClusterConfig>,
        opts: ReaderOptions,
    ) -> Arc<ClusterReader> {
        let cluster = cluster.cloned().unwrap_or_else(ClusterConfig::standalone);
        let membership = Membership::from_config(&cluster);
        Self::with_membership(origin, cluster, membership, opts)
    }

    pub fn with_membership(
        origin: S3Client,
        cluster: ClusterConfig,
        membership: Arc<Membership>,
        opts: ReaderOptions,
    ) -> Arc<ClusterReader> {
        let refresh = membership.spawn_refresh();
        let router = Arc::new(Router::new(&cluster, membership, Arc::new(SystemClock)));
        let ram: Arc<dyn BlockCache> = if opts.ram_bytes > 0 {
            Arc::new(RamTier::new(opts.ram_bytes, 16))
        } else {
            Arc::new(NoCache)
        };
        let limit = opts
            .max_inflight_blocks
            .unwrap_or(cluster.read_window * 4)
            .max(1);
        Arc::new(ClusterReader {
            router,
            origin,
            cluster,
            clients: Mutex::new(HashMap::new()),
            ram,
            flights: Coalescer::default(),
            inflight: Arc::new(Semaphore::new(limit)),
            inflight_limit: limit,
            queue_wait: opts.queue_wait,
            metrics: ClusterMetrics::default(),
            started: Instant::now(),
            last_log: AtomicU64::new(u64::MAX),
            changed: Mutex::new(HashMap::new()),
            _refresh: refresh,
        })
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    pub fn block_size(&self) -> u64 {
        self.cluster.block_size
    }

    pub fn read_window(&self) -> usize {
        self.cluster.read_window
    }

    /// Blocks being fetched right now (at most the in-flight budget).
    pub fn inflight_blocks(&self) -> usize {
        self.inflight_limit - self.inflight.available_permits()
    }

    pub fn inflight_limit(&self) -> usize {
        self.inflight_limit
    }

    pub fn ram_stats(&self) -> crate::cache::TierStats {
        self.ram.stats()
    }

    /// Brings the gauges up to date (call before a scrape).
    pub fn refresh_gauges(&self) {
        let s = self.ram.stats();
        self.metrics.ram_bytes.set(s.used_bytes as i64);
        self.metrics.ram_capacity_bytes.set(s.capacity_bytes as i64);
        self.metrics
            .spills
            .set(self.router.counters.spills.load(Relaxed) as i64);
        self.metrics
            .marked_down
            .set(self.router.counters.marked_down.load(Relaxed) as i64);
        self.metrics
            .breaker_trips
            .set(self.router.counters.breaker_trips.load(Relaxed) as i64);
        let nodes = self.router.nodes();
        self.metrics.nodes.set(nodes.len() as i64);
        self.metrics
            .nodes_up
            .set(nodes.iter().filter(|n| !self.router.is_down(n)).count() as i64);
    }

    /// The S3 client for one node: cluster credentials, node deadlines, no retries
    /// (failover is the retry), `Range` unsigned so the node can widen it.
    pub(crate) fn node_client(&self, id: &str) -> S3Client {
        let mut clients = self.clients.lock().unwrap();
        if let Some(c) = clients.get(id) {
            return c.clone();
        }
        let c = node_client(&self.cluster, &self.origin.options().region, id, 64);
        clients.insert(id.to_owned(), c.clone());
        c
    }

    fn block_range(&self, index: u64, size: u64) -> ByteRange {
        let bs = self.cluster.block_size;
        ByteRange::span(index * bs, ((index + 1) * bs).min(size))
    }

    /// Opens `bucket/key` pinned to one version: `known` (from a listing or an
    /// earlier HEAD), or whatever the first block's answer says.
    pub async fn open(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
    ) -> Result<Handle, S3Error> {
        self.open_hop(bucket, key, known, None, 0).await
    }

    /// [`Self::open`] for a gateway forwarding a request that already passed
    /// through `hops` nodes: its node requests carry `hops + 1`. Without `known`,
    /// the version is learned through the cluster, pinned to `if_match` if given.
    pub async fn open_forwarded(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
        if_match: Option<&str>,
        hops: u32,
    ) -> Result<Handle, S3Error> {
        self.open_hop(bucket, key, known, if_match, hops + 1).await
    }

    async fn open_hop(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
        if_match: Option<&str>,
        hop: u32,
    ) -> Result<Handle, S3Error> {
        let meta = match known {
            Some(m) => m,
            None => self.learn(bucket, key, hop, if_match).await?,
        };
        Ok(Handle(Arc::new(HandleInner {
            reader: self.clone(),
            bucket: bucket.into(),
            key: key.into(),
            meta,
            hop,
            stale: AtomicBool::new(false),
        })))
    }

    /// The version of `bucket/key` as the owner of its block 0 knows it, for a
    /// gateway's HEAD that already passed `hops` nodes: no block moves, unlike
    /// [`Self::open_forwarded`]. The origin answers when the owner cannot.
    pub async fn head_forwarded(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        hops: u32,
    ) -> Result<ObjectMeta, S3Error> {
        let mut req = GetObject::new(bucket, key);
        req.if_match = if_match.map(str::to_owned);
        let block = crate::route::BlockId {
            bucket,
            key,
            index: 0,
        };
        let cause = match self.router.pick(&block) {
            Ok(pick) => {
                let client = self.node_client(pick.node.id());
                let _inflight = self.router.begin(&pick.node);
                self.metrics
                    .node_requests
                    .get_or_create(&metrics::NodeLabel {
                        node: pick.node.id().to_owned(),
                    })
                    .inc();
                let mut hreq = req.clone();
                hreq.hop = hops + 1;
                match client.head_object(&hreq).await {
                    Ok(meta) => {
                        self.router.success(&pick.node);
                        return Ok(meta);
                    }
                    Err(e) if e.is_answer() => return Err(e),
                    Err(e) => {
                        if matches!(e.cause(), S3Error::Connect { .. }) {
                            self.router.mark_down(&pick.node);
                        }
                        super::metrics::Fallback::Error
                    }
                }
            }
            Err(crate::route::state::NoNode::Empty) => super::metrics::Fallback::NoNodes,
            Err(crate::route::state::NoNode::AllDown) => super::metrics::Fallback::Down,
        };
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        self.origin.head_object(&req).await
    }

    /// Learns size and ETag by fetching block 0 through the cluster (keeping it).
    async fn learn(
        &self,
        bucket: &str,
        key: &str,
        hop: u32,
        if_match: Option<&str>,
    ) -> Result<ObjectMeta, S3Error> {
        let id = (bucket.to_owned(), key.to_owned());
        let changed = self.changed.lock().unwrap().remove(&id).is_some();
        let head = || {
            let mut req = GetObject::new(bucket, key);
            req.if_match = if_match.map(str::to_owned);
            req
        };
        if changed {
            return self.origin.head_object(&head()).await;
        }
        let bs = self.cluster.block_size;
        let mut req = GetObject::new(bucket, key).range(ByteRange::From {
            first: 0,
            last: Some(bs - 1),
        });
        req.hop = hop;
        req.if_match = if_match.map(str::to_owned);
        match self.routed(req, 0).await {
            Ok((bytes, meta, source)) => {
                self.count(source, bytes.len());
                self.ram
                    .insert(BlockKey::new(bucket, key, &meta.etag, 0), bytes);
                Ok(meta)
            }
            // An empty object has no byte 0.
            Err(S3Error::InvalidRange { .. }) => self.origin.head_object(&head()).await,
            Err(e) => Err(e),
        }
    }

    /// Block `index` of the version `meta`: RAM tier, a fetch in flight, or a new one.
    pub(crate) async fn block(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
        hop: u32,
    ) -> Result<Bytes, S3Error> {
        let bk = BlockKey::new(bucket, key, &meta.etag, index);
        if let Some(b) = self.ram.get(&bk) {
            self.metrics.blocks.get_or_create(&metrics::RAM).inc();
            self.metrics
                .bytes
                .get_or_create(&metrics::RAM)
                .inc_by(b.len() as u64);
            return Ok(b);
        }
        let me = self.clone();
        let mut req = GetObject::new(bucket, key)
            .range(self.block_range(index, meta.size))
            .if_match(&meta.etag);
        req.hop = hop;
        let bk2 = bk.clone();
        let fetch = async move {
            // Bound the memory of all fetches together.
            let t0 = Instant::now();
            let permit = me.inflight.clone().acquire_owned();
            let permit = match me.queue_wait {
                None => Some(permit.await),
                Some(limit) => tokio::time::timeout(limit, permit).await.ok(),
            };
            me.metrics.queue_wait.observe(t0.elapsed().as_secs_f64());
            let (bytes, meta, source) = match permit {
                Some(_permit) => me.routed(req, index).await?,
                // Every slot is taken for longer than the bound: queueing behind
                // them would only add latency, so read the origin now.
                None => me.read_origin(&req, super::metrics::Fallback::Shed).await?,
            };
            me.count(source, bytes.len());
            me.ram.insert(bk2, bytes.clone());
            Ok((bytes, meta))
        };
        let (r, joined) = self.flights.run(bk, fetch).await;
        if joined == Joined::Follower {
            self.metrics.coalesced_waits.inc();
        }
        let (bytes, got) = r?;
        if got.etag != meta.etag {
            // A node or the origin ignored If-Match: never join bytes of two versions.
            return Err(S3Error::PreconditionFailed {
                bucket: bucket.into(),
                key: key.into(),
            });
        }
        Ok(bytes)
    }

    /// Forgets cached blocks of an object (it changed); the next open of it asks
    /// the origin for its version.
    pub fn invalidate(&self, bucket: &str, key: &str) {
        self.ram.remove_object(bucket, key);
        let mut changed = self.changed.lock().unwrap();
        changed.retain(|_, at| at.elapsed() < Duration::from_secs(60));
        changed.insert((bucket.to_owned(), key.to_owned()), Instant::now());
    }
}

struct HandleInner {
    reader: Arc<ClusterReader>,
    bucket: Arc<str>,
    key: Arc<str>,
    meta: ObjectMeta,
    /// Sent with every node request of this handle (0 = none).
    hop: u32,
    stale: AtomicBool,
}

/// One object version, open for reading. Cheap to clone.
#[derive(Clone)]
pub struct Handle(Arc<HandleInner>);

impl Handle {
    pub fn meta(&self) -> &ObjectMeta {
        &self.0.meta
    }

    pub fn bucket(&self) -> &str {
        &self.0.bucket
    }

    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// The object changed since open: every later read fails.
    pub fn is_stale(&self) -> bool {
        self.0.stale.load(Relaxed)
    }

    fn stale_error(&self) -> S3Error {
        S3Error::PreconditionFailed {
            bucket: self.0.bucket.to_string(),
            key: self.0.key.to_string(),
        }
    }

    async fn block(&self, index: u64) -> Result<Bytes, S3Error> {
        if self.is_stale() {
            return Err(self.stale_error());
        }
        let h = &self.0;
        match h
            .reader
            .block(&h.bucket, &h.key, &h.meta, index, h.hop)
            .await
        {
            Err(e @ S3Error::PreconditionFailed { .. }) => {
                if !h.stale.swap(true, Relaxed) {
                    h.reader.metrics.stale.inc();
                    h.reader.invalidate(&h.bucket, &h.key);
                    tracing::warn!(bucket = %h.bucket, key = %h.key, "object changed while open: reads of this handle now fail");
                }
                Err(e)
            }
            r => r,
        }
    }

    /// Bytes `start..end` (clamped to the object) as a stream of chunks, with up to
    /// `read_window` blocks in flight, in order.
    pub fn stream(
        &self,
        start: u64,
        end: u64,
    ) -> impl Stream<Item = Result<Bytes, S3Error>> + Send + 'static {
        let size = self.0.meta.size;
        let end = end.min(size);
        let bs = self.0.reader.block_size();
        // Half-open block range; empty when there is nothing to read.
        let blocks = if start < end {
            start / bs..(end - 1) / bs + 1
        } else {
            0..0
        };
        let me = self.clone();
        stream::iter(blocks)
            .map(move |i| {
                let me = me.clone();
                async move {
                    let b = me.block(i).await?;
                    let off = i * bs;
                    let lo = start.saturating_sub(off) as usize;
                    let hi = ((end - off) as usize).min(b.len());
                    Ok(b.slice(lo..hi))
                }
            })
            .buffered(self.0.reader.read_window())
    }

    /// Bytes `start..start+len` (clamped to the object), collected.
    pub async fn read(&self, start: u64, len: u64) -> Result<Bytes, S3Error> {
        let end = start.saturating_add(len).min(self.0.meta.size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let parts: Vec<Bytes> = self.stream(start, end).try_collect().await?;
        if parts.len() == 1 {
            return Ok(parts.into_iter().next().unwrap());
        }
        let mut out = bytes::BytesMut::with_capacity((end - start) as usize);
        for p in parts {
            out.extend_from_slice(&p);
        }
        Ok(out.freeze())
    }

    /// Starts fetching blocks `first..first+count` into the RAM tier without waiting.
    pub fn prefetch(&self, first: u64, count: u64) {
        let bs = self.0.reader.block_size();
        let last = self.0.meta.size.div_ceil(bs);
        for i in first..(first + count).min(last) {
            let me = self.clone();
            self.0.reader.metrics.prefetched.inc();
            tokio::spawn(async move {
                let _ = me.block(i).await;
            });
        }
    }
}

/// What warming one block found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmed {
    /// The owner already had it.
    AlreadyWarm,
    /// The owner fetched it from the origin now.
    Fetched,
}

impl ClusterReader {
    /// Makes block `index` of `meta`'s version hot on its owner node: a cached-only
    /// request first (so "already warm" is known exactly), then a normal one.
    /// Returns what happened and the node that holds it now.
    pub async fn warm_block(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
    ) -> Result<(Warmed, String), S3Error> {
        let block = crate::route::BlockId { bucket, key, index };
        let pick = self.router.pick(&block).map_err(|why| S3Error::Connect {
            endpoint: "cluster".into(),
            message: format!("no node can take the block ({why:?})"),
        })?;
        let client = self.node_client(pick.node.id());
        let _inflight = self.router.begin(&pick.node);
        let mut req = GetObject::new(bucket, key)
            .range(self.block_range(index, meta.size))
            .if_match(&meta.etag);
        req.cached_only = true;
        let outcome = match client.get_bytes(&req).await {
            Ok(_) => Warmed::AlreadyWarm,
            Err(e) if e.is_not_cached() => {
                req.cached_only = false;
                client.get_bytes(&req).await?;
                Warmed::Fetched
            }
            Err(e) => {
                if matches!(e.cause(), S3Error::Connect { .. }) {
                    self.router.mark_down(&pick.node);
                }
                return Err(e);
            }
        };
        Ok((outcome, pick.node.id().to_owned()))
    }
}

impl ClusterReader {
    /// Resolves a DNS membership once now (a static one is ready already).
    pub async fn membership_ready(&self) {
        if let Err(e) = self.router.membership().refresh().await {
            tracing::warn!("cannot resolve the cluster's DNS name: {e}");
        }
    }
}
