//! [`Fetcher`]: one request through the cluster (a block, and in
//! [`super::metadata`] a listing page or a HEAD): owner, failover, hedge, origin
//! fallback.
//!
//! The owner is asked first. A failure is retried once on the next ranked node; a
//! slow owner is hedged (a cached-only request to the next node, within the hedge
//! budget) after its hedge delay; whichever answers first wins and the other is
//! dropped. Only one extra node is ever asked. When nothing answers, the origin
//! does, and the cause is counted.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::call::{cause_of, NodeCalls};
use super::metrics::{self, ClusterMetrics, Fallback};
use crate::node_proto;
use crate::route::state::NoNode;
use crate::route::{BlockId, NodeHandle};
use crate::store::{GetObject, ObjectMeta, StoreError};

/// Where a block came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Node,
    Origin,
}

pub(crate) type Fetched = (Bytes, ObjectMeta, Source);

/// What routing a request through the cluster came to, short of a node's answer.
pub(crate) enum Routed {
    /// An answer that is one wherever it comes from (a 404, a 412).
    Answer(StoreError),
    /// No node answered: the origin must, for this reason.
    Fallback(Fallback),
}

/// The nodes, and the origin every request falls back to.
pub(crate) struct Fetcher {
    pub calls: NodeCalls,
    pub origin: Arc<dyn crate::store::ObjectStore>,
    /// Requests per origin read (a body cut off midway is resumed).
    pub origin_attempts: u32,
    pub metrics: Arc<ClusterMetrics>,
}

impl Fetcher {
    /// Fetches `req` (one block range of `bucket/key`, block `index`) through the
    /// cluster, falling back to the origin.
    pub(crate) async fn routed(&self, req: GetObject, index: u64) -> Result<Fetched, StoreError> {
        let block = BlockId {
            bucket: &req.bucket,
            key: &req.key,
            index,
        };
        let ask = |node: NodeHandle, hedged: bool| {
            let mut req = req.clone();
            if hedged {
                node_proto::set_cached_only(&mut req, true);
            }
            async move { self.calls.node_get(&node, &req).await }
        };
        match self.route(&block, ask).await {
            Ok((bytes, meta)) => Ok((bytes, meta, Source::Node)),
            Err(Routed::Answer(e)) => Err(e),
            Err(Routed::Fallback(cause)) => self.read_origin(&req, cause).await,
        }
    }

    /// Asks the owner of `block` with `ask(node, hedged)` (a hedge must ask for
    /// cached answers only), failing over or hedging to the next ranked node as a
    /// block read does. Either an answer (a node's, or an error that is one) or
    /// why the origin must answer instead.
    pub(crate) async fn route<T, F>(
        &self,
        block: &BlockId<'_>,
        ask: impl Fn(NodeHandle, bool) -> F,
    ) -> Result<T, Routed>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let pick = match self.calls.router.pick(block) {
            Ok(p) => p,
            Err(NoNode::Empty) => return Err(Routed::Fallback(Fallback::NoNodes)),
            Err(NoNode::AllDown) if self.calls.router.membership().zone().is_some() => {
                return Err(Routed::Fallback(Fallback::ZoneDown))
            }
            Err(NoNode::AllDown) => return Err(Routed::Fallback(Fallback::Down)),
        };
        let hedge_delay = self.calls.router.hedge_delay(&pick.node);
        let mut next = pick.alternates.into_iter();
        let attempt = |node: NodeHandle, hedged: bool| {
            let f = ask(node, hedged);
            async move { (hedged, f.await) }
        };
        let mut running = FuturesUnordered::new();
        running.push(attempt(pick.node, false));
        // One more node at most: a hedge or a failover, whichever comes first.
        let mut extra_used = false;
        let mut hedge_considered = false;
        let hedge = tokio::time::sleep(hedge_delay);
        tokio::pin!(hedge);
        let mut last = Fallback::Error;
        loop {
            tokio::select! {
                Some((hedged, r)) = running.next() => match r {
                    Ok(answer) => {
                        if hedged {
                            self.metrics.hedges_won.inc();
                        }
                        return Ok(answer);
                    }
                    Err(e) if e.is_answer() => return Err(Routed::Answer(e)),
                    // A hedge found it cold: keep waiting for the owner, which is
                    // fetching it; a second origin request would only add load.
                    Err(e) if hedged && node_proto::is_not_cached(&e) => {
                        if running.is_empty() {
                            break;
                        }
                    }
                    Err(e) => {
                        last = cause_of(&e);
                        if !extra_used {
                            if let Some(n) = next.next() {
                                extra_used = true;
                                self.metrics.failovers.inc();
                                running.push(attempt(n, false));
                                continue;
                            }
                        }
                        if running.is_empty() {
                            break;
                        }
                    }
                },
                _ = &mut hedge, if !hedge_considered && !extra_used => {
                    hedge_considered = true;
                    if let Some(n) = next.as_slice().first().cloned() {
                        if self.calls.router.allow_hedge() {
                            next.next();
                            extra_used = true;
                            self.metrics.hedges_sent.inc();
                            running.push(attempt(n, true));
                        }
                    }
                },
                else => break,
            }
        }
        Err(Routed::Fallback(last))
    }

    pub(crate) async fn read_origin(
        &self,
        req: &GetObject,
        cause: Fallback,
    ) -> Result<Fetched, StoreError> {
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        let mut req = req.clone();
        node_proto::strip(&mut req);
        let (meta, bytes) =
            crate::store::get_bytes(&*self.origin, &req, self.origin_attempts).await?;
        Ok((bytes, meta, Source::Origin))
    }

    pub(crate) fn count(&self, source: Source, bytes: usize) {
        let label = match source {
            Source::Node => metrics::NODE,
            Source::Origin => metrics::ORIGIN,
        };
        self.metrics.blocks.get_or_create(&label).inc();
        self.metrics
            .bytes
            .get_or_create(&label)
            .inc_by(bytes as u64);
    }
}
