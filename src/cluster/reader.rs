//! [`ClusterReader`]: what every handle shares (router, node stores, origin, RAM
//! tier, in-flight budget); a read's blocks go through it ([`super::block`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;

use super::call::NodeCalls;
use super::error::ReadError;
use super::fetch::Fetcher;
use super::metrics::{self, ClusterMetrics, Fallback};
use super::nodes::{Nodes, S3Nodes};
use crate::blocks::{BlockKey, Buffer, Growing, Tiers, Touch};
use crate::config::ClusterConfig;
use crate::log_limit::LogLimit;
use crate::node_proto;
use crate::route::{Clock, Membership, Router, TokioClock};
use crate::store::s3::S3Client;
use crate::store::{ByteRange, GetObject, ObjectMeta, ObjectStore, StoreError};

/// How a reader is shaped beyond the cluster config.
#[derive(Clone)]
pub struct ReaderOptions {
    /// Client RAM tier, shared by all handles (0 = none).
    pub ram_bytes: u64,
    /// A disk tier under the RAM tier (a mount's own), filled by reads and
    /// read-ahead.
    pub disk: Option<Arc<dyn crate::blocks::BlockCache>>,
    /// Blocks being fetched at once across all handles: bounds in-flight memory to
    /// this many cluster blocks. Defaults to 8 read windows: the most a sequential
    /// reader's adaptive read-ahead may grow to.
    pub max_inflight_blocks: Option<usize>,
    /// Longest a fetch waits for an in-flight slot before it reads the origin
    /// instead (`None`: it waits, which is backpressure for a mount; a gateway sheds).
    pub queue_wait: Option<Duration>,
    /// How the RAM tier gives blocks up.
    pub evicting: crate::blocks::Evicting,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            ram_bytes: 256 << 20,
            disk: None,
            max_inflight_blocks: None,
            queue_wait: None,
            evicting: Default::default(),
        }
    }
}

/// Everything a reader is built from, for embedders and tests that bring their own
/// stores; [`ClusterReader::new`] makes these from a config.
pub struct ReaderParts {
    pub origin: Arc<dyn ObjectStore>,
    /// Requests per origin read (a body cut off midway is resumed).
    pub origin_attempts: u32,
    pub cluster: ClusterConfig,
    pub membership: Arc<Membership>,
    pub nodes: Arc<dyn Nodes>,
    pub clock: Arc<dyn Clock>,
}

pub struct ClusterReader {
    /// Owners, failover, hedging, and the origin behind them.
    pub(super) fetcher: Fetcher,
    cluster: ClusterConfig,
    /// The client's RAM tier (and a mount's disk tier), with one flight per block.
    pub(super) tiers: Tiers<(), ReadError>,
    pub(super) budget: Budget,
    pub metrics: Arc<ClusterMetrics>,
    /// Objects seen to change recently: the next open asks the origin first, since
    /// nodes may still hold the old version's ETag for `revalidate_after`.
    changed: Mutex<HashMap<(String, String), Instant>>,
    _refresh: Option<tokio::task::JoinHandle<()>>,
}

/// How many blocks all fetches together may have in flight, and how long one
/// waits for a slot before it reads the origin instead (a gateway sheds; a mount,
/// with no bound, waits: backpressure).
pub(super) struct Budget {
    pub(super) slots: Arc<Semaphore>,
    limit: usize,
    pub(super) queue_wait: Option<Duration>,
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
        let parts = ReaderParts {
            origin_attempts: origin.options().retry.max_attempts,
            nodes: Arc::new(S3Nodes::new(&cluster, &origin.options().region, 64)),
            membership: Membership::from_config(&cluster),
            origin: Arc::new(origin),
            cluster,
            clock: Arc::new(TokioClock),
        };
        Self::from_parts(parts, opts)
    }

    pub fn from_parts(p: ReaderParts, opts: ReaderOptions) -> Arc<ClusterReader> {
        let refresh = p.membership.spawn_refresh();
        let block_size = p.cluster.block_size;
        let router = Arc::new(Router::new(&p.cluster, p.membership, p.clock));
        let limit = opts
            .max_inflight_blocks
            .unwrap_or(p.cluster.read_window * 8)
            .max(1);
        let metrics = Arc::new(ClusterMetrics::default());
        Arc::new(ClusterReader {
            fetcher: Fetcher {
                calls: NodeCalls {
                    router,
                    nodes: p.nodes,
                    timeouts: p.cluster.timeouts,
                    metrics: metrics.clone(),
                    failure_log: LogLimit::new(Duration::from_secs(1)),
                    requests: Default::default(),
                },
                origin: p.origin,
                origin_attempts: p.origin_attempts,
                metrics: metrics.clone(),
            },
            cluster: p.cluster,
            // What is fetched ahead of readers waits in the RAM tier's small
            // queue for them, whatever else the tier holds.
            tiers: Tiers::evicting(
                opts.ram_bytes,
                block_size,
                opts.disk.clone(),
                &crate::blocks::Evicting {
                    small_floor: (limit as u64 + 1) * block_size,
                    ..opts.evicting.clone()
                },
            ),
            budget: Budget {
                slots: Arc::new(Semaphore::new(limit)),
                limit,
                queue_wait: opts.queue_wait,
            },
            metrics,
            changed: Mutex::new(HashMap::new()),
            _refresh: refresh,
        })
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.fetcher.calls.router
    }

    /// The origin every read falls back to.
    pub fn origin(&self) -> &Arc<dyn ObjectStore> {
        &self.fetcher.origin
    }

    /// Listings and HEADs through the cluster (each routed to its owner node,
    /// which caches and coalesces them), accepting answers up to `accept` old;
    /// the origin answers whatever no node does.
    pub fn metadata(self: &Arc<Self>, accept: Duration) -> Arc<dyn ObjectStore> {
        Arc::new(super::metadata::ClusterMetadata::new(self.clone(), accept))
    }

    pub fn block_size(&self) -> u64 {
        self.cluster.block_size
    }

    pub fn read_window(&self) -> usize {
        self.cluster.read_window
    }

    /// Blocks being fetched right now (at most the in-flight budget).
    pub fn inflight_blocks(&self) -> usize {
        self.budget.limit - self.budget.slots.available_permits()
    }

    pub fn inflight_limit(&self) -> usize {
        self.budget.limit
    }

    pub fn ram_stats(&self) -> crate::blocks::TierStats {
        self.tiers.ram_stats()
    }

    /// Brings the gauges up to date (call before a scrape).
    pub fn refresh_gauges(&self) {
        let s = self.tiers.ram_stats();
        self.metrics.ram_bytes.set(s.used_bytes as i64);
        self.metrics.ram_capacity_bytes.set(s.capacity_bytes as i64);
        let d = self.tiers.disk_stats();
        self.metrics.disk_bytes.set(d.used_bytes as i64);
        self.metrics
            .disk_capacity_bytes
            .set(d.capacity_bytes as i64);
        self.metrics.catch_up_router(&self.router().counters);
        let pool = self.tiers.pool_stats();
        metrics::catch_up(&self.metrics.buffers_allocated, pool.allocated);
        metrics::catch_up(&self.metrics.buffers_reused, pool.reused);
        let nodes = self.router().nodes();
        self.metrics.zero_nodes(nodes.iter().map(|n| n.id()));
        self.metrics.nodes.set(nodes.len() as i64);
        self.metrics
            .nodes_up
            .set(nodes.iter().filter(|n| !self.router().is_down(n)).count() as i64);
        self.metrics
            .zone_nodes
            .set(self.router().membership().zone_nodes() as i64);
    }

    pub(super) fn key(&self, bucket: &str, key: &str, etag: &str, index: u64) -> BlockKey {
        BlockKey::new(bucket, key, etag, self.cluster.block_size, index)
    }

    pub(super) fn block_range(&self, index: u64, size: u64) -> ByteRange {
        let bs = self.cluster.block_size;
        ByteRange::span(index * bs, ((index + 1) * bs).min(size))
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
    ) -> Result<ObjectMeta, StoreError> {
        let mut req = GetObject::new(bucket, key);
        req.if_match = if_match.map(str::to_owned);
        let block = crate::route::BlockId {
            bucket,
            key,
            index: 0,
        };
        let cause = match self.router().pick(&block) {
            Ok(pick) => {
                let mut hreq = req.clone();
                node_proto::set_hop(&mut hreq, hops + 1);
                match self.fetcher.calls.node_head(&pick.node, &hreq).await {
                    Ok(meta) => return Ok(meta),
                    Err(e) if e.is_answer() => return Err(e),
                    Err(_) => Fallback::Error,
                }
            }
            Err(crate::route::state::NoNode::Empty) => Fallback::NoNodes,
            Err(crate::route::state::NoNode::AllDown) => Fallback::Down,
        };
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        self.fetcher.origin.head(&req).await
    }

    /// Learns size and ETag by fetching block 0 through the cluster (keeping it).
    pub(crate) async fn learn(
        &self,
        bucket: &str,
        key: &str,
        hop: u32,
        if_match: Option<&str>,
    ) -> Result<ObjectMeta, ReadError> {
        let id = (bucket.to_owned(), key.to_owned());
        let changed = self.changed.lock().unwrap().remove(&id).is_some();
        let mut head = GetObject::new(bucket, key);
        head.if_match = if_match.map(str::to_owned);
        if changed {
            return Ok(self.fetcher.origin.head(&head).await?);
        }
        let bs = self.cluster.block_size;
        let mut req = head.clone().range(ByteRange::From {
            first: 0,
            last: Some(bs - 1),
        });
        node_proto::set_hop(&mut req, hop);
        match self.fetcher.routed(req, 0).await {
            Ok((bytes, meta, source)) => {
                self.fetcher.count(source, bytes.len());
                self.tiers
                    .fill(self.key(bucket, key, &meta.etag, 0), bytes)
                    .await;
                Ok(meta)
            }
            // An empty object has no byte 0.
            Err(StoreError::InvalidRange { .. }) => Ok(self.fetcher.origin.head(&head).await?),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn count_held(&self, bytes: usize) {
        self.metrics.blocks.get_or_create(&metrics::RAM).inc();
        self.metrics
            .bytes
            .get_or_create(&metrics::RAM)
            .inc_by(bytes as u64);
    }

    /// Bytes `start..end`, all inside block `index` of `meta`'s version, for a
    /// random read: from the RAM tier if the block is there, else just that range
    /// from the block's owner (which keeps the whole block, and cuts it through,
    /// so the bytes come at the origin's first byte plus a hop), with the same
    /// failover, hedging and origin fallback as a block. Nothing is kept here: a
    /// random reader's blocks would only crowd out a sequential reader's. A
    /// block found in RAM is used if `touch` says.
    pub(crate) async fn range(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (start, end): (u64, u64),
        hop: u32,
        touch: Touch,
    ) -> Result<Bytes, ReadError> {
        let bs = self.cluster.block_size;
        let index = start / bs;
        debug_assert!(end > start && (end - 1) / bs == index);
        if let Some((b, _)) = self
            .tiers
            .lookup_as(&self.key(bucket, key, &meta.etag, index), touch)
            .await
        {
            self.count_held(b.len());
            let off = index * bs;
            let hi = ((end - off) as usize).min(b.len());
            return Ok(b.slice(((start - off) as usize).min(hi)..hi));
        }
        let mut req = GetObject::new(bucket, key)
            .range(ByteRange::span(start, end))
            .if_match(&meta.etag);
        node_proto::set_hop(&mut req, hop);
        let _permit = self.budget.slots.clone().acquire_owned().await;
        let (got, mut into) = Growing::<()>::new(Buffer::unpooled((end - start) as usize));
        match self.fetcher.fill(&req, index, &mut into).await {
            Ok(source) => {
                self.fetcher.count(source, into.len());
                Ok(got.slice(0, into.len()))
            }
            Err(e) => Err(ReadError::pinned(e, bucket, key)),
        }
    }

    /// Lets block `index` of a version go from the RAM tier: it is kept above.
    pub(crate) fn let_go(&self, bucket: &str, key: &str, etag: &str, index: u64) {
        self.tiers.let_go(&self.key(bucket, key, etag, index), &());
    }

    /// Forgets cached blocks of an object (it changed); the next open of it asks
    /// the origin for its version.
    pub async fn invalidate(&self, bucket: &str, key: &str) {
        self.tiers.remove_object(bucket, key).await;
        let mut changed = self.changed.lock().unwrap();
        changed.retain(|_, at| at.elapsed() < Duration::from_secs(60));
        changed.insert((bucket.to_owned(), key.to_owned()), Instant::now());
    }

    /// Resolves a DNS membership once now, or waits (a few seconds at most) for
    /// a Service's slices; a static one is ready already.
    pub async fn membership_ready(&self) {
        self.router()
            .membership()
            .ready(Duration::from_secs(5))
            .await;
    }
}

impl ClusterReader {
    /// The first `k` nodes of the ranking of the cluster block holding byte `at`
    /// of `bucket/key`, its owner first, whatever the down marks and load.
    pub fn ranked(&self, bucket: &str, key: &str, at: u64, k: usize) -> Vec<String> {
        let block = crate::route::BlockId {
            bucket,
            key,
            index: at / self.cluster.block_size,
        };
        let set = self.router().membership().current();
        let top = set.top_k(&block, k);
        top.iter().map(|&i| set.nodes()[i].id.clone()).collect()
    }

    /// The node a block would have without node `me`, when `me` owns it now: the
    /// next-ranked node for the cluster block holding byte `at` of `bucket/key`
    /// (its previous owner, if `me` joined since). `None` when `me` does not own
    /// the block or has no other node.
    pub fn runner_up(&self, bucket: &str, key: &str, at: u64, me: &str) -> Option<String> {
        let block = crate::route::BlockId {
            bucket,
            key,
            index: at / self.cluster.block_size,
        };
        let set = self.router().membership().current();
        let top = set.top_k(&block, 2);
        match top.as_slice() {
            [owner, next, ..] if set.nodes()[*owner].id == me => {
                Some(set.nodes()[*next].id.clone())
            }
            _ => None,
        }
    }

    /// The store that answers for node `id`: the cluster's signed S3 client to it,
    /// with no retries. Calls made on it pass by this reader's load, latency and
    /// down marks: the caller keeps its own deadline.
    pub fn node_store(&self, id: &str) -> Arc<dyn ObjectStore> {
        self.fetcher.calls.nodes.store(id)
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

/// How long a warm's block may wait for its first byte: the owner serves
/// reads that clients wait on before it, within its origin budget.
const WARM_FIRST_BYTE: std::time::Duration = std::time::Duration::from_secs(120);

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
    ) -> Result<(Warmed, String), ReadError> {
        let block = crate::route::BlockId { bucket, key, index };
        let pick = self.router().pick(&block).map_err(|why| {
            ReadError::NoNode(match why {
                crate::route::state::NoNode::Empty => "the cluster has no nodes",
                crate::route::state::NoNode::AllDown => "every node is down",
            })
        })?;
        let mut req = GetObject::new(bucket, key)
            .range(self.block_range(index, meta.size))
            .if_match(&meta.etag)
            .first_byte_within(WARM_FIRST_BYTE);
        node_proto::set_cached_only(&mut req, true);
        // Nobody waits on a warm: the owner's origin budget serves it last.
        node_proto::set_class(&mut req, crate::store::budget::Class::Background);
        let calls = &self.fetcher.calls;
        // Both asks are patient: the owner may look the object up at the
        // origin first, as background too.
        let outcome = match calls
            .node_get_patient(&pick.node, &req, WARM_FIRST_BYTE)
            .await
        {
            Ok(_) => Warmed::AlreadyWarm,
            Err(e) if node_proto::is_not_cached(&e) => {
                node_proto::set_cached_only(&mut req, false);
                calls
                    .node_get_patient(&pick.node, &req, WARM_FIRST_BYTE)
                    .await?;
                Warmed::Fetched
            }
            Err(e) => return Err(e.into()),
        };
        Ok((outcome, pick.node.id().to_owned()))
    }
}
