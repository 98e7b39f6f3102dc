//! A cached-only ask of a block this node is fetching right now is answered
//! from that fetch once it lands, not with 504 at once. A hot object read cold
//! by many readers is spilled to other nodes while its owner fetches it; those
//! nodes ask the owner first ([`super::peer`]), and without this every one of
//! them would go to the origin for a block the owner is about to hold.
//!
//! An ask only ever waits on a fetch already in flight: it starts no fetch and
//! asks no one. What keeps two fetches from waiting on each other: a fetch that
//! is asking another node for its block ([`Asking`]) is waited on only by asks
//! of the block's owner, and an owner's fetch asks only its runner-up, which
//! then has no fetch to offer but one of its own from the origin. The wait is
//! bounded by `node.peer_fill_timeout`, as long as the asker waits for an answer
//! before it goes to the origin itself.

use std::collections::HashSet;
use std::sync::Mutex;

use shoal::blocks::BlockKey;

use super::Node;

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
    /// Waits, at most `node.peer_fill_timeout`, for this node's fetch of `bk`
    /// in flight to land: any fetch of a block this node owns, else one that is
    /// not asking another node. A fetch that fails or takes longer leaves the
    /// block missing, and the ask is answered 504.
    pub(super) async fn join_fetch(&self, bk: &BlockKey) {
        let Some(peers) = &self.source.peers else {
            return;
        };
        // The lane of this node's own fetches (not a gateway's forwards).
        let Some(arriving) = self.tiers.arriving(bk, &false) else {
            return;
        };
        if peers.asking.contains(bk) && !peers.owns(bk) {
            return;
        }
        let landed = tokio::time::timeout(peers.timeout, arriving.whole()).await;
        if matches!(landed, Ok(Ok(_))) {
            self.metrics.cached_only_joins.inc();
        }
    }
}
