//! [`Source`]: where a block the tiers lack comes from. One origin fetch, a ranged
//! GET of the whole node block with `If-Match`, its body read as it arrives into
//! the tiers' growing block (straight off the socket from a plain-HTTP origin)
//! and a cut body resumed ([`shoal::store::get_into`]); or, on a gateway, the
//! block's owner node through the cluster reader (with its failover, hedging,
//! breaker and origin fallback).
//! Also the origin's other answers the node needs: HEADs, and the side read of a
//! small range deep in a cold block.

use std::sync::Arc;

use bytes::Bytes;
use shoal::blocks::{BlockKey, Fill};
use shoal::cluster::ClusterReader;
use shoal::store::{
    get_into, BodySink, ByteRange, GetObject, GetResponse, ObjectMeta, ObjectStore, StoreError,
};

use super::{NodeError, Via};
use crate::metrics::{self, Metrics};

/// Where a gateway sends its misses.
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

/// The origin (requests per read, a cut body resumed within them) and, on a
/// gateway, the cluster.
pub struct Source {
    pub origin: Arc<dyn ObjectStore>,
    /// Requests per origin read, the first included.
    pub attempts: u32,
    pub upstream: Option<Upstream>,
    /// On a node that knows the cluster: the owners of its misses, or their
    /// runner-ups when it owns them.
    pub peers: Option<super::peer::Peers>,
    pub metrics: Arc<Metrics>,
}

/// The origin's bytes of one block as they come: checked against the block asked
/// for before any is kept, counted, and written where its readers read them.
struct IntoBlock<'a> {
    bk: &'a BlockKey,
    /// The block's length, when the object's size is known.
    want: Option<u64>,
    into: &'a mut Fill<NodeError>,
    metrics: &'a Metrics,
    learn: Learn<'a>,
}

use super::ask::block_get;
pub use super::ask::Learn;

/// A [`Learn`] that keeps nothing: the version is known already.
pub fn known(_: &ObjectMeta) {}

impl BodySink for IntoBlock<'_> {
    type Error = NodeError;

    fn request(&mut self) {
        self.metrics.origin_request("block");
    }

    fn begin(&mut self, meta: &ObjectMeta, start: u64, end: u64) -> Result<(), NodeError> {
        let want = self.want.unwrap_or_else(|| self.bk.len_in(meta.size));
        if meta.etag != *self.bk.etag || start != self.bk.start() || end - start != want {
            return Err(NodeError::BadBlock {
                index: self.bk.index,
                got: end - start,
                got_etag: meta.etag.clone(),
                want,
                want_etag: self.bk.etag.to_string(),
            });
        }
        (self.learn)(meta);
        Ok(())
    }

    fn spare(&mut self) -> &mut [u8] {
        self.into.spare()
    }

    fn commit(&mut self, n: usize) {
        self.metrics.origin_bytes.inc_by(n as u64);
        self.into.commit(n);
    }
}

impl Source {
    /// Whether a miss of `bucket/key` at byte `at`, asked `via`, goes to the
    /// cluster: not at the hop limit, and not when this node owns the block.
    pub fn forwards(&self, via: Via, bucket: &str, key: &str, at: u64) -> bool {
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

    /// Block `bk` of `meta`'s version into `into`: from its owner when
    /// `forward`, else from the origin.
    pub async fn fetch(
        &self,
        bk: &BlockKey,
        meta: &ObjectMeta,
        forward: bool,
        via: Via,
        into: &mut Fill<NodeError>,
    ) -> Result<(), NodeError> {
        if forward {
            let data = self.owner_block(bk, meta, via).await?;
            into.push(&data).map_err(|_| NodeError::BadBlock {
                index: bk.index,
                got: data.len() as u64,
                got_etag: meta.etag.clone(),
                want: into.remaining() as u64,
                want_etag: bk.etag.to_string(),
            })
        } else {
            self.node_block(bk, Some(meta.size), into, &known)
                .await
                .map(drop)
        }
    }

    /// Block `bk` from another node if that holds it (its owner, or its
    /// runner-up when this node owns it: [`super::peer`]), else from the origin
    /// ([`Self::origin_block`]); returns what the answer said of the version,
    /// also told to `learn` as soon as it is known.
    pub async fn node_block(
        &self,
        bk: &BlockKey,
        size: Option<u64>,
        into: &mut Fill<NodeError>,
        learn: Learn<'_>,
    ) -> Result<ObjectMeta, NodeError> {
        if let Some(p) = &self.peers {
            if let Some(meta) = p.fill(bk, size, into, (learn, &self.metrics)).await {
                return Ok(meta);
            }
        }
        self.origin_block(bk, size, into, learn).await
    }

    /// Block `bk` from the origin into `into` with `If-Match`, resumed if cut. Without
    /// the object's size the range is open-ended past the block and the answer's
    /// `Content-Range` says how long the object is; returns what the origin said
    /// of the version (told to `learn` at the answer's headers).
    pub async fn origin_block(
        &self,
        bk: &BlockKey,
        size: Option<u64>,
        into: &mut Fill<NodeError>,
        learn: Learn<'_>,
    ) -> Result<ObjectMeta, NodeError> {
        let (req, want) = block_get(bk, size);
        let mut sink = IntoBlock {
            bk,
            want,
            into,
            metrics: &self.metrics,
            learn,
        };
        let (meta, _, _) = get_into(&*self.origin, &req, self.attempts, &mut sink).await?;
        Ok(meta)
    }

    /// One node block from its owner through the cluster (a gateway's miss).
    async fn owner_block(
        &self,
        bk: &BlockKey,
        meta: &ObjectMeta,
        via: Via,
    ) -> Result<Bytes, NodeError> {
        let up = self
            .upstream
            .as_ref()
            .expect("forwarding needs an upstream");
        self.metrics.cluster_fetches.inc();
        let h = up
            .reader
            .open_forwarded(&bk.bucket, &bk.key, Some(meta.clone()), None, via.hop)
            .await?;
        let (data, seen) =
            shoal::store::seen::cache_statuses(h.read(bk.start(), bk.block_size)).await;
        let data = data?;
        if let Some(owner) = seen.first() {
            crate::access::trace::upstream(owner);
        }
        let want = bk.len_in(meta.size);
        if data.len() as u64 != want || meta.etag != *bk.etag {
            return Err(NodeError::BadBlock {
                index: bk.index,
                got: data.len() as u64,
                got_etag: meta.etag.clone(),
                want,
                want_etag: bk.etag.to_string(),
            });
        }
        self.metrics.cluster_bytes.inc_by(data.len() as u64);
        Ok(data)
    }

    /// Just `start..end` of `meta`'s version from the origin, for a small read deep
    /// in a cold block: `None` unless the origin answers with exactly that.
    pub async fn side_read(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (start, end): (u64, u64),
    ) -> Option<GetResponse> {
        let mut req = GetObject::new(bucket, key).if_match(&meta.etag);
        req.range = Some(ByteRange::span(start, end));
        self.metrics.origin_request("range");
        match self.origin.get_range(&req).await {
            Ok(r) if r.meta.etag == meta.etag && r.start == start && r.end == end => Some(r),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(
                    bucket,
                    key,
                    start,
                    end,
                    "side read failed, the block serves it: {e}"
                );
                None
            }
        }
    }

    /// The origin's HEAD of `bucket/key` (pinned to `if_match`). A HEAD's 404 has
    /// no body to say which is missing; the origin would have said NoSuchBucket
    /// to a GET, so the bucket is asked about.
    pub async fn head(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<String>,
    ) -> Result<ObjectMeta, NodeError> {
        let mut req = GetObject::new(bucket, key);
        req.if_match = if_match;
        match self.origin.head(&req).await {
            Err(StoreError::NoSuchKey { .. }) => match self.origin.head_bucket(bucket).await {
                Err(e @ StoreError::NoSuchBucket { .. }) => Err(e.into()),
                _ => Err(StoreError::NoSuchKey {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                }
                .into()),
            },
            r => Ok(r?),
        }
    }
}
