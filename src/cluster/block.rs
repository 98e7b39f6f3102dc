//! Opening one block of a version for a read: held by a tier, else its fetch,
//! joined if one is in flight, else started (one flight per block however
//! many ask). Read-ahead that must be in flight before a read can follow it
//! opens its blocks without waiting ([`ClusterReader::open_block_now`]).
//!
//! Read-ahead on a path whose nodes hold what it reads asks them for what they
//! hold only ([`Ask::Held`]): a guess at what the reader reads next never costs
//! the origin a request for bytes that no reader may ask for, so a second host
//! that reads what the first one read costs the origin nothing, however
//! differently its read-ahead guesses. A block so asked that no node holds is
//! not fetched; a read that then wants it fetches it as any read does.

use std::sync::Arc;
use std::time::Instant;

use super::error::ReadError;
use super::metrics::Fallback;
use super::reader::ClusterReader;
use crate::blocks::{Block, BlockKey, Fill, Served, Touch};
use crate::node_proto;
use crate::store::{budget, GetObject, ObjectMeta};

/// Whom a block's fetch may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The nodes, then the origin: a read, or read-ahead of a cold path.
    Any,
    /// What the nodes hold only (`x-shoal-cached-only`): read-ahead of a
    /// path the nodes hold.
    Held,
}

impl ClusterReader {
    /// Block `index` of the version `meta`: held by a tier, or its fetch (in
    /// flight already, or started now), whose bytes can be read as they arrive.
    /// Found in RAM, it is a use of the block if `touch` says.
    pub(crate) async fn open_block(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, hop): (u64, u32),
        touch: Touch,
        ask: Ask,
    ) -> Block<ReadError> {
        let (bk, len, req) = self.block_request(bucket, key, meta, (index, hop), ask);
        let me = self.clone();
        let class = budget::current();
        let block = self
            .tiers
            .open_as(bk, (), true, len, touch, move |into| {
                budget::within(class, me.fetch_block(req, index, into))
            })
            .await;
        self.count_opened(&block);
        block
    }

    /// [`Self::open_block`] with nothing to wait for: held by the RAM tier, or
    /// its fetch in flight, by the time this returns, so that whatever asks for
    /// the block next joins that fetch. Only without a disk tier: looking in
    /// one waits.
    pub(crate) fn open_block_now(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, hop): (u64, u32),
        ask: Ask,
    ) -> Block<ReadError> {
        debug_assert!(!self.tiers.has_disk(), "a disk tier is looked in first");
        let (bk, len, req) = self.block_request(bucket, key, meta, (index, hop), ask);
        let me = self.clone();
        let class = budget::current();
        // The flight looks in RAM itself, under the lock it is registered with.
        let block = self.tiers.flight(bk, (), true, len, move |into| {
            budget::within(class, me.fetch_block(req, index, into))
        });
        self.count_opened(&block);
        block
    }

    /// The tier key, length and ranged GET of block `index` of `meta`'s version,
    /// its class (a waiting read, or read-ahead) that of the running task: the
    /// node's origin budget serves it in that order, as does this process's
    /// own when it reads the origin itself.
    fn block_request(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, hop): (u64, u32),
        ask: Ask,
    ) -> (BlockKey, usize, GetObject) {
        let bk = self.key(bucket, key, &meta.etag, index);
        let len = bk.len_in(meta.size) as usize;
        let mut req = GetObject::new(bucket, key)
            .range(self.block_range(index, meta.size))
            .if_match(&meta.etag);
        node_proto::set_hop(&mut req, hop);
        node_proto::set_class(&mut req, budget::current());
        node_proto::set_cached_only(&mut req, ask == Ask::Held);
        (bk, len, req)
    }

    /// A block's fetch, in its flight's own task.
    async fn fetch_block(
        self: Arc<Self>,
        req: GetObject,
        index: u64,
        mut into: Fill<ReadError>,
    ) -> Result<(), ReadError> {
        // Bound the memory of all fetches together.
        let t0 = Instant::now();
        let permit = self.budget.slots.clone().acquire_owned();
        let permit = match self.budget.queue_wait {
            None => Some(permit.await),
            Some(limit) => tokio::time::timeout(limit, permit).await.ok(),
        };
        self.metrics.queue_wait.observe(t0.elapsed().as_secs_f64());
        let filled = match permit {
            Some(_permit) => self.fetcher.fill(&req, index, &mut into).await,
            // What the nodes do not hold is not asked of the origin.
            None if node_proto::is_cached_only(&req) => Err(node_proto::not_held(&req)),
            // Every slot is taken for longer than the bound: queueing behind
            // them would only add latency, so read the origin now.
            None => {
                self.fetcher
                    .fill_origin(&req, Fallback::Shed, &mut into)
                    .await
            }
        };
        match filled {
            Ok(source) => {
                self.fetcher.count(source, into.len());
                Ok(())
            }
            Err(e) => Err(ReadError::pinned(e, &req.bucket, &req.key)),
        }
    }

    fn count_opened(&self, block: &Block<ReadError>) {
        match block {
            Block::Held(b, _) => self.count_held(b.len()),
            Block::Arriving(_, Served::Joined) => {
                self.metrics.coalesced_waits.inc();
            }
            Block::Arriving(..) => {}
        }
    }
}
