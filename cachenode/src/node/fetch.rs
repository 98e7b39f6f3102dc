//! Where a missing block comes from: the origin, or on a gateway the block's owner
//! node through the cluster reader (with its failover, hedging, breaker and origin
//! fallback).

use std::sync::Arc;

use bytes::Bytes;
use shoal::blocks::BlockKey;
use shoal::cluster::ClusterReader;
use shoal::store::{ByteRange, GetObject, ObjectMeta};

use super::{Node, NodeError, Via};
use crate::metrics::{self, KindLabel};

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

impl Node {
    /// Whether a miss of `bucket/key` at byte `at`, asked `via`, goes to the
    /// cluster: not at the hop limit, and not when this node owns the block.
    pub(super) fn forwards(&self, via: Via, bucket: &str, key: &str, at: u64) -> bool {
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

    /// The fetch of block `bk` of `meta`'s version: upstream when `forward`.
    pub(super) async fn fetch(
        self: Arc<Self>,
        bk: BlockKey,
        meta: ObjectMeta,
        forward: bool,
        via: Via,
    ) -> Result<Bytes, NodeError> {
        if forward {
            self.fetch_from_cluster(&bk, &meta, via).await
        } else {
            self.fetch_from_origin(&bk, Some(meta.size))
                .await
                .map(|(b, _)| b)
        }
    }

    /// One node block from the origin with `If-Match`. Without the object's size the
    /// range is open-ended past the block and the answer's `Content-Range` says how
    /// long the object is.
    pub(super) async fn fetch_from_origin(
        &self,
        bk: &BlockKey,
        size: Option<u64>,
    ) -> Result<(Bytes, ObjectMeta), NodeError> {
        let start = bk.start();
        let mut req = GetObject::new(&*bk.bucket, &*bk.key).if_match(&*bk.etag);
        req.range = Some(match size {
            Some(size) => ByteRange::span(start, (start + bk.block_size).min(size)),
            None => ByteRange::From {
                first: start,
                last: Some(start + bk.block_size - 1),
            },
        });
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "block" })
            .inc();
        let (meta, data) = self.origin.get_bytes(&req).await?;
        check_block(bk, &meta, &data)?;
        self.metrics.origin_bytes.inc_by(data.len() as u64);
        Ok((data, meta))
    }

    /// One node block from its owner through the cluster (a gateway's miss).
    async fn fetch_from_cluster(
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
        let data = h.read(bk.start(), bk.block_size).await?;
        check_block(bk, meta, &data)?;
        self.metrics.cluster_bytes.inc_by(data.len() as u64);
        Ok(data)
    }
}

/// `data`, with `meta`, must be all of block `bk`: never a short or foreign block
/// in a tier.
fn check_block(bk: &BlockKey, meta: &ObjectMeta, data: &Bytes) -> Result<(), NodeError> {
    let start = bk.start();
    let want = (start + bk.block_size).min(meta.size).saturating_sub(start);
    if data.len() as u64 != want || meta.etag != *bk.etag {
        return Err(NodeError::BadBlock {
            index: bk.index,
            got: data.len() as u64,
            got_etag: meta.etag.clone(),
            want,
            want_etag: bk.etag.to_string(),
        });
    }
    Ok(())
}
