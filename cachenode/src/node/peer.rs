//! Previous-owner fill: a block this node owns and lacks is first asked of the
//! node that would own it without this one (its owner before this node joined,
//! or while this one was away), with `Cache-Control: only-if-cached` (RFC 9111
//! 5.2.1.7). That node answers from RAM or disk, or 504, and never asks the
//! origin for it; past `node.peer_fill_timeout` without an answer, or on any
//! answer but the block, the origin is asked as before. So a block that moved
//! to a new owner is fetched once from its old one, not again from the origin.
//!
//! The answer is held to what an origin fetch is held to: the version pinned by
//! `If-Match` (and checked again on the answer's ETag: a copy of another version
//! is never kept), and exactly the block's bytes.

use std::sync::Arc;
use std::time::Duration;

use shoal::blocks::{BlockKey, Fill};
use shoal::cluster::ClusterReader;
use shoal::store::{collect, stall_guard, ObjectMeta};

use super::NodeError;
use crate::access::trace::PeerFill;
use crate::metrics::Metrics;

/// The request header and value that ask a node for its cache only.
pub const CACHE_CONTROL: &str = "cache-control";
pub const ONLY_IF_CACHED: &str = "only-if-cached";

/// Whether `headers` carry `Cache-Control: only-if-cached`.
pub fn only_if_cached(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case(ONLY_IF_CACHED))
}

/// The cluster as this node sees it, for asking runner-ups.
pub struct Peers {
    pub reader: Arc<ClusterReader>,
    /// This node's id in the cluster: only blocks it owns are asked for.
    pub self_id: String,
    /// How long the runner-up has to start answering.
    pub timeout: Duration,
    /// Longest the answer's body may pause once it started.
    pub stall: Duration,
    /// Clients of the other nodes for listings and HEADs ([`super::peer_meta`]).
    pub clients: super::peer_meta::PeerClients,
}

impl Peers {
    /// Block `bk` (of an object `size` bytes long, when known) from its runner-up,
    /// into `into`: what the runner-up said of the version when it sent the block,
    /// `None` (counted, and nothing written) when it did not.
    pub async fn fill(
        &self,
        bk: &BlockKey,
        size: Option<u64>,
        into: &mut Fill<NodeError>,
        metrics: &Metrics,
    ) -> Option<ObjectMeta> {
        if self.timeout.is_zero() || !into.is_empty() {
            return None;
        }
        let peer = self
            .reader
            .runner_up(&bk.bucket, &bk.key, bk.start(), &self.self_id)?;
        self.fill_from(&peer, self.timeout, bk, size, into, metrics)
            .await
    }

    /// [`Self::fill`] from node `peer`, which has `timeout` to start answering
    /// (a leaving node handing its blocks back, say).
    pub async fn fill_from(
        &self,
        peer: &str,
        timeout: Duration,
        bk: &BlockKey,
        size: Option<u64>,
        into: &mut Fill<NodeError>,
        metrics: &Metrics,
    ) -> Option<ObjectMeta> {
        let peer = peer.to_owned();
        let start = bk.start();
        let (mut req, want) = super::fetch::block_get(bk, size);
        shoal::store::ExtraHeaders::set_header(
            &mut req,
            CACHE_CONTROL,
            Some(ONLY_IF_CACHED.to_owned()),
        );
        // Nodes that predate `only-if-cached` know shoal's own header.
        shoal::node_proto::set_cached_only(&mut req, true);
        // A node never forwards a request that passed through another.
        shoal::node_proto::set_hop(&mut req, 1);
        let store = self.reader.node_store(&peer);
        let result = match tokio::time::timeout(timeout, store.get_range(&req)).await {
            Err(_) => Err(PeerFill::Timeout),
            Ok(Err(e)) if shoal::node_proto::is_not_cached(&e) => Err(PeerFill::Miss),
            Ok(Err(e)) => {
                tracing::debug!(peer, key = %bk.key, "runner-up fill failed: {e}");
                Err(PeerFill::Error)
            }
            Ok(Ok(mut resp)) => {
                let got_want = want.unwrap_or_else(|| bk.len_in(resp.meta.size));
                if resp.meta.etag != *bk.etag
                    || resp.start != start
                    || resp.end - resp.start != got_want
                {
                    tracing::warn!(
                        peer,
                        key = %bk.key,
                        "runner-up answered {}..{} of {:?} for {start}+{got_want} of {:?}",
                        resp.start,
                        resp.end,
                        resp.meta.etag,
                        bk.etag
                    );
                    Err(PeerFill::Error)
                } else {
                    let meta = resp.meta.clone();
                    resp.body = stall_guard(resp.body, self.stall, peer.clone());
                    match collect(resp).await {
                        Ok(b) if b.len() as u64 == got_want && into.push(&b).is_ok() => {
                            metrics.peer_fill_bytes.inc_by(b.len() as u64);
                            Ok(meta)
                        }
                        Ok(b) => {
                            tracing::warn!(peer, key = %bk.key, "runner-up sent {} bytes of {got_want}", b.len());
                            Err(PeerFill::Error)
                        }
                        Err(e) => {
                            tracing::debug!(peer, key = %bk.key, "runner-up's body failed: {e}");
                            Err(PeerFill::Error)
                        }
                    }
                }
            }
        };
        match result {
            Ok(meta) => {
                metrics.peer_fill(PeerFill::Hit);
                Some(meta)
            }
            Err(r) => {
                metrics.peer_fill(r);
                None
            }
        }
    }
}
