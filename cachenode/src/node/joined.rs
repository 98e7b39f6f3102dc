//! A cached-only ask of a block this node is fetching right now is answered
//! from that fetch as its bytes arrive, not with 504 at once; an owner-fill ask
//! ([`super::ask::OWNER_FILL`]) of a block this node owns is answered as its own
//! readers are, fetching the block if nothing has yet. A hot object read cold
//! by many readers is spilled to other nodes while its owner fetches it, or
//! before its owner's readers get to it; those nodes ask the owner first
//! ([`super::peer`]), and without this every one of them would go to the origin
//! for a block the owner is about to hold.
//!
//! Any other ask only ever waits on a fetch already in flight: it starts no
//! fetch and asks no one. What keeps two fetches from waiting on each other: a
//! fetch that is asking another node for its block ([`Asking`]) is waited on
//! only by asks of the block's owner, and an owner's fetch asks only its
//! runner-ups, which then have no fetch to offer but one of their own from the
//! origin.
//!
//! An ask is judged by the node asked, not by the origin behind it: a node's
//! ask is acknowledged at once (its headers, before the fetch's first byte),
//! and the asker's `node.peer_fill_timeout` measures that; the body streams as
//! the fetch brings it, judged as any read from a node is. Only a fetch that is
//! itself asking another node (its owner's, waiting on a runner-up) is waited
//! on for its first bytes first, at most `node.peer_fill_timeout`: acknowledged
//! at once, two nodes that each think they own a block could each wait on the
//! other's body. A hedge (`x-shoal-cached-only`) races the owner on the bytes
//! and is answered from a fetch only once its first bytes are in.

use std::collections::HashSet;
use std::sync::Mutex;

use shoal::blocks::BlockKey;
use shoal::store::ObjectMeta;

use super::{Node, Via};

/// Blocks this node is asking another node for now.
#[derive(Default)]
pub struct Asking(Mutex<HashSet<BlockKey>>);

/// A block in [`Asking`] until dropped.
pub struct Asked<'a> {
    set: &'a Asking,
    bk: BlockKey,
}

impl Asking {
    /// Notes `bk` as asked of another node until the guard drops.
    pub fn enter(&self, bk: &BlockKey) -> Asked<'_> {
        self.0.lock().unwrap().insert(bk.clone());
        Asked {
            set: self,
            bk: bk.clone(),
        }
    }

    pub fn contains(&self, bk: &BlockKey) -> bool {
        self.0.lock().unwrap().contains(bk)
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.set.0.lock().unwrap().remove(&self.bk);
    }
}

impl Node {
    /// Whether a request (its `headers`) for the block holding byte `at` of
    /// `bucket/key` is an owner-fill ask this node answers as its own reader's:
    /// it owns the block, as its view of the cluster ranks it, and keeps what
    /// it fetches.
    pub fn fills_as_owner(
        &self,
        headers: &http::HeaderMap,
        bucket: &str,
        key: &str,
        at: u64,
    ) -> bool {
        let Some(peers) = &self.source.peers else {
            return false;
        };
        super::ask::owner_fill(headers)
            && self.policy(bucket, key).cache
            && peers.owns_at(bucket, key, at)
    }

    /// The fetch of `bk` in flight that a cached-only ask may be answered from:
    /// any fetch of a block this node owns, else one that is not asking another
    /// node.
    fn joinable(&self, bk: &BlockKey) -> Option<shoal::blocks::Arriving<super::NodeError>> {
        let peers = self.source.peers.as_ref()?;
        // The lane of this node's own fetches (not a gateway's forwards).
        let arriving = self.tiers.arriving(bk, &false)?;
        (peers.owns(bk) || !peers.asking.contains(bk)).then_some(arriving)
    }

    /// Whether a cached-only ask (`via`) may be answered from `arriving`, this
    /// node's fetch of `bk`, before its first bytes: a node's ask of a fetch
    /// that is not itself asking another node.
    fn acknowledged(&self, bk: &BlockKey, via: Via) -> bool {
        via.acknowledge
            && self
                .source
                .peers
                .as_ref()
                .is_some_and(|p| !p.asking.contains(bk))
    }

    /// Waits, at most `node.peer_fill_timeout`, for the first bytes of this
    /// node's fetch of `bk` in flight, if a cached-only ask (`via`) may join it
    /// ([`Self::joinable`]) and is not answered at once
    /// ([`Self::acknowledged`]). A fetch that fails or starts later leaves the
    /// block missing, and the ask is answered 504.
    pub(super) async fn join_fetch(&self, bk: &BlockKey, via: Via) {
        let (Some(peers), Some(arriving)) = (&self.source.peers, self.joinable(bk)) else {
            return;
        };
        if self.acknowledged(bk, via) {
            self.metrics.cached_only_joins.inc();
            return;
        }
        let started = tokio::time::timeout(peers.timeout, arriving.started()).await;
        if matches!(started, Ok(Ok(()))) {
            self.metrics.cached_only_joins.inc();
        }
    }

    /// Whether a cached-only ask (`via`) of `start..end` of `meta`'s version
    /// can be answered: every block held, or arriving in a fetch the ask may
    /// join that has started or that answers it at once.
    pub async fn held_or_arriving(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (start, end): (u64, u64),
        via: Via,
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
            let arriving = self
                .joinable(&bk)
                .is_some_and(|g| !g.is_empty() || self.acknowledged(&bk, via));
            if !arriving && !self.tiers.cached(&bk).await {
                return false;
            }
        }
        true
    }
}
