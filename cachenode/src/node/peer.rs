//! Peer fill: a block this node misses is asked of one other node first, with
//! `Cache-Control: only-if-cached` (RFC 9111 5.2.1.7), then the origin.
//!
//! - A block it owns is asked of its runner-up, the node that would own it
//!   without this one (its owner before this node joined, or while this one was
//!   away): a block that moved to a new owner is fetched once from its old one,
//!   not again from the origin (previous-owner fill).
//! - A block it does not own (a spill under bounded load, a hedge, a failover)
//!   is asked of its owner, marked [`OWNER_FILL`] (owner fill). The owner answers
//!   it as it answers its own readers: from its tiers, or from its fetch of the
//!   block, joined or started, as the bytes arrive. A hot object so costs the
//!   origin once, however many nodes it spills to: an owner that answered only
//!   from a fetch it already ran would turn away every node that asked before
//!   its own readers got to the block, and each of those would fetch it.
//!
//! Only the owner fetches for an ask, and only as it would for its own miss
//! (its runner-ups first, unmarked): a node asked for a block it does not own,
//! or without the mark, answers from RAM or disk, or from a fetch it already
//! runs ([`super::joined`]), or 504, and never asks another node or the origin
//! for it. Asks so go no deeper than owner then runner-up, whatever each node
//! thinks the cluster is.
//!
//! The node asked acknowledges at once, before the bytes of a block it is
//! fetching are in ([`super::joined`]): `node.peer_fill_timeout` measures that
//! acknowledgement (is the node there and answering?), never the origin behind
//! it. The body is then judged as any read from a node is: its first bytes
//! within `cluster.first_byte_timeout`, no pause longer than
//! `cluster.stall_timeout`. Past either, or on any answer but the block, the
//! origin is asked as before.
//!
//! The answer is held to what an origin fetch is held to: the version pinned by
//! `If-Match` (and checked again on the answer's ETag: a copy of another version
//! is never kept), and exactly the block's bytes.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use shoal::blocks::{BlockKey, Fill};
use shoal::cluster::ClusterReader;
use shoal::store::{collect, paced_guard, GetObject, GetResponse, ObjectMeta, ObjectStore};

use super::ask::{block_get, Learn, CACHE_CONTROL, ONLY_IF_CACHED, OWNER_FILL};
use super::NodeError;
use crate::access::trace::{PeerFill, PeerRole};
use crate::metrics::Metrics;

/// How many nodes after the owner a miss of an owned block is asked of: its
/// previous owner (the runner-up), and where bounded load spills the block
/// when the owner is busy (the next ranked nodes), which may be fetching it
/// from the origin right now ([`super::joined`]).
pub const SPILL_RANKS: usize = 2;

/// The cluster as this node sees it, for asking owners and runner-ups.
pub struct Peers {
    pub reader: Arc<ClusterReader>,
    /// This node's id in the cluster: what it owns is asked of runner-ups,
    /// what it does not of owners.
    pub self_id: String,
    /// How long the node asked has to acknowledge an ask.
    pub timeout: Duration,
    /// How long an acknowledged answer's first bytes may take: a node read's
    /// first byte deadline.
    pub first_byte: Duration,
    /// Longest the answer's body may pause once it started.
    pub stall: Duration,
    /// Clients of the other nodes for listings and HEADs ([`super::peer_meta`]).
    pub clients: super::peer_clients::PeerClients,
    /// Blocks being asked of another node now ([`super::joined`]).
    pub asking: super::joined::Asking,
}

impl Peers {
    /// Whether this node owns block `bk`.
    pub fn owns(&self, bk: &BlockKey) -> bool {
        self.owns_at(&bk.bucket, &bk.key, bk.start())
    }

    /// Whether this node owns the block holding byte `at` of `bucket/key`.
    pub fn owns_at(&self, bucket: &str, key: &str, at: u64) -> bool {
        self.reader
            .ranked(bucket, key, at, 1)
            .first()
            .is_some_and(|o| *o == self.self_id)
    }

    /// The nodes to ask for block `bk` before the origin, and which they are:
    /// its owner, or when that is this node the next [`SPILL_RANKS`] of its
    /// ranking.
    fn whom(&self, bk: &BlockKey) -> (Vec<String>, PeerRole) {
        let mut ranked = self
            .reader
            .ranked(&bk.bucket, &bk.key, bk.start(), 1 + SPILL_RANKS);
        match ranked.first() {
            Some(owner) if *owner == self.self_id => {
                ranked.remove(0);
                (ranked, PeerRole::RunnerUp)
            }
            _ => {
                ranked.truncate(1);
                (ranked, PeerRole::Owner)
            }
        }
    }

    /// Block `bk` (of an object `size` bytes long, when known) from its owner,
    /// or from its runner-up when this node owns it, into `into`: what that node
    /// said of the version when it sent the block (told to `learn` before the
    /// block's bytes are in `into`), `None` (counted, and nothing written) when
    /// it did not.
    pub async fn fill(
        &self,
        bk: &BlockKey,
        size: Option<u64>,
        into: &mut Fill<NodeError>,
        (learn, metrics): (Learn<'_>, &Metrics),
    ) -> Option<ObjectMeta> {
        if self.timeout.is_zero() || !into.is_empty() {
            return None;
        }
        let (peers, role) = self.whom(bk);
        if peers.is_empty() {
            return None;
        }
        self.fill_from(
            &peers,
            role,
            self.timeout,
            (bk, size),
            into,
            (learn, metrics),
        )
        .await
    }

    /// [`Self::fill`] from the first of nodes `peers` (`role` says which they
    /// are) to answer with the block, each of which has `timeout` to
    /// acknowledge the ask (a leaving node handing its blocks back, say).
    pub async fn fill_from(
        &self,
        peers: &[String],
        role: PeerRole,
        timeout: Duration,
        (bk, size): (&BlockKey, Option<u64>),
        into: &mut Fill<NodeError>,
        (learn, metrics): (Learn<'_>, &Metrics),
    ) -> Option<ObjectMeta> {
        let _asking = self.asking.enter(bk);
        let (mut req, want) = block_get(bk, size);
        shoal::store::ExtraHeaders::set_header(
            &mut req,
            CACHE_CONTROL,
            Some(ONLY_IF_CACHED.to_owned()),
        );
        // Nodes that predate `only-if-cached` know shoal's own header.
        shoal::node_proto::set_cached_only(&mut req, true);
        // A node never forwards a request that passed through another.
        shoal::node_proto::set_hop(&mut req, 1);
        if role == PeerRole::Owner {
            shoal::store::ExtraHeaders::set_header(&mut req, OWNER_FILL, Some("1".to_owned()));
        }
        let mut asks: FuturesUnordered<_> = peers
            .iter()
            .map(|peer| self.ask(peer, role, timeout, &req, (bk, want)))
            .collect();
        // What the fill counts as when no node sends the block: the worst of
        // their answers, a missing block being the least of them.
        let mut result = Err(PeerFill::Miss);
        while let Some(answer) = asks.next().await {
            match answer {
                Ok((peer, resp, got_want)) => {
                    // The first answer with the block wins; the others are
                    // dropped unanswered.
                    drop(asks);
                    result = self
                        .take(&peer, role, resp, (bk, got_want), into, (learn, metrics))
                        .await;
                    break;
                }
                Err(r) => result = result.map_err(|worst| worse(worst, r)),
            }
        }
        // A hit is counted where it is taken, before its bytes are readable.
        if let Err(r) = result {
            metrics.peer_fill(role, r);
        }
        result.ok()
    }

    /// The answer of node `peer` to `req` (block `bk`, `want` bytes when the
    /// object's size is known) if it is the block's: the right version and
    /// range; with the peer and how many bytes the body must have.
    async fn ask(
        &self,
        peer: &str,
        role: PeerRole,
        timeout: Duration,
        req: &GetObject,
        (bk, want): (&BlockKey, Option<u64>),
    ) -> Result<(String, GetResponse, u64), PeerFill> {
        let store = self.clients.for_blocks(peer);
        let resp = match tokio::time::timeout(timeout, store.get_range(req)).await {
            Err(_) => return Err(PeerFill::Timeout),
            Ok(Err(e)) if shoal::node_proto::is_not_cached(&e) => return Err(PeerFill::Miss),
            Ok(Err(e)) => {
                tracing::debug!(peer, ?role, key = %bk.key, "peer fill failed: {e}");
                return Err(PeerFill::Error);
            }
            Ok(Ok(resp)) => resp,
        };
        let start = bk.start();
        let got_want = want.unwrap_or_else(|| bk.len_in(resp.meta.size));
        if resp.meta.etag != *bk.etag || resp.start != start || resp.end - resp.start != got_want {
            tracing::warn!(
                peer,
                ?role,
                key = %bk.key,
                "peer answered {}..{} of {:?} for {start}+{got_want} of {:?}",
                resp.start,
                resp.end,
                resp.meta.etag,
                bk.etag
            );
            return Err(PeerFill::Error);
        }
        Ok((peer.to_owned(), resp, got_want))
    }

    /// The body of `peer`'s answer `resp` into `into`, which must be exactly
    /// the block's `got_want` bytes. The version is learned, and the hit
    /// counted, before the bytes are in `into`: a reader of them may answer
    /// its own asker at once.
    async fn take(
        &self,
        peer: &str,
        role: PeerRole,
        mut resp: GetResponse,
        (bk, got_want): (&BlockKey, u64),
        into: &mut Fill<NodeError>,
        (learn, metrics): (Learn<'_>, &Metrics),
    ) -> Result<ObjectMeta, PeerFill> {
        let meta = resp.meta.clone();
        resp.body = paced_guard(resp.body, self.first_byte, self.stall, peer.to_owned());
        match collect(resp).await {
            Ok(b) if b.len() as u64 == got_want && b.len() <= into.remaining() => {
                learn(&meta);
                metrics.peer_fill(role, PeerFill::Hit);
                metrics.peer_fill_bytes(role, b.len() as u64);
                into.push(&b).expect("checked against the room left");
                Ok(meta)
            }
            Ok(b) => {
                tracing::warn!(peer, ?role, key = %bk.key, "peer sent {} bytes of {got_want}", b.len());
                Err(PeerFill::Error)
            }
            Err(e) => {
                tracing::debug!(peer, ?role, key = %bk.key, "peer's body failed: {e}");
                Err(PeerFill::Error)
            }
        }
    }
}

/// The worse of two failed asks: an error, then a timeout, then a miss.
fn worse(a: PeerFill, b: PeerFill) -> PeerFill {
    let rank = |r: PeerFill| match r {
        PeerFill::Error => 3,
        PeerFill::Timeout => 2,
        PeerFill::Miss => 1,
        PeerFill::Hit => 0,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}
