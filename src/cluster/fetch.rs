//! One block from the cluster: owner, failover, hedge, origin fallback.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::metrics::{self, Fallback, NodeLabel};
use super::reader::ClusterReader;
use crate::route::state::NoNode;
use crate::route::{BlockId, NodeHandle};
use crate::s3::{Deadline, GetObject, ObjectMeta, S3Error};

/// Where a block came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Node,
    Origin,
}

pub(crate) type Fetched = (Bytes, ObjectMeta, Source);

fn cause_of(e: &S3Error) -> Fallback {
    match e.cause() {
        S3Error::Connect { .. }
        | S3Error::Timeout {
            deadline: Deadline::Connect,
            ..
        } => Fallback::Connect,
        S3Error::Timeout {
            deadline: Deadline::FirstByte,
            ..
        } => Fallback::FirstByte,
        S3Error::Timeout {
            deadline: Deadline::Stall,
            ..
        } => Fallback::Stall,
        _ => Fallback::Error,
    }
}

impl ClusterReader {
    /// Fetches `req` (one block range of `bucket/key`, block `index`) through the
    /// cluster, falling back to the origin.
    pub(crate) async fn routed(&self, req: GetObject, index: u64) -> Result<Fetched, S3Error> {
        let block = BlockId {
            bucket: &req.bucket,
            key: &req.key,
            index,
        };
        let pick = match self.router.pick(&block) {
            Ok(p) => p,
            Err(NoNode::Empty) => return self.read_origin(&req, Fallback::NoNodes).await,
            Err(NoNode::AllDown) if self.router.membership().zone().is_some() => {
                return self.read_origin(&req, Fallback::ZoneDown).await
            }
            Err(NoNode::AllDown) => return self.read_origin(&req, Fallback::Down).await,
        };
        let hedge_delay = self.router.hedge_delay(&pick.node);
        let mut next = pick.alternates.into_iter();
        let mut running = FuturesUnordered::new();
        running.push(self.attempt(pick.node, req.clone(), false));
        // One more node at most: a hedge or a failover, whichever comes first.
        let mut extra_used = false;
        let mut hedge_considered = false;
        let hedge = tokio::time::sleep(hedge_delay);
        tokio::pin!(hedge);
        let mut last = Fallback::Error;
        loop {
            tokio::select! {
                Some((node, hedged, r)) = running.next() => match r {
                    Ok((bytes, meta)) => {
                        self.router.success(&node);
                        if hedged {
                            self.metrics.hedges_won.inc();
                        }
                        return Ok((bytes, meta, Source::Node));
                    }
                    Err(e) if e.is_answer() => return Err(e),
                    // A hedge found the block cold: keep waiting for the owner, which
                    // is fetching it; a second origin fetch would only add load.
                    Err(e) if hedged && e.is_not_cached() => {
                        if running.is_empty() {
                            break;
                        }
                    }
                    Err(e) => {
                        self.metrics.node_failures.get_or_create(&NodeLabel { node: node.id().to_owned() }).inc();
                        last = cause_of(&e);
                        if matches!(last, Fallback::Connect | Fallback::FirstByte) {
                            self.router.mark_down(&node);
                        } else if matches!(
                            e.cause(),
                            S3Error::Server { .. } | S3Error::Throttled { .. } | S3Error::Protocol { .. }
                        ) {
                            // It answers, but with failures: the breaker's business. A
                            // reset connection (a node restarting) is not counted.
                            self.router.failure(&node);
                        }
                        self.log_failure(&node, &e);
                        if !extra_used {
                            if let Some(n) = next.next() {
                                extra_used = true;
                                self.metrics.failovers.inc();
                                running.push(self.attempt(n, req.clone(), false));
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
                        if self.router.allow_hedge() {
                            next.next();
                            extra_used = true;
                            self.metrics.hedges_sent.inc();
                            let mut hedge_req = req.clone();
                            hedge_req.cached_only = true;
                            running.push(self.attempt(n, hedge_req, true));
                        }
                    }
                },
                else => break,
            }
        }
        self.read_origin(&req, last).await
    }

    async fn attempt(
        &self,
        node: NodeHandle,
        req: GetObject,
        hedged: bool,
    ) -> (NodeHandle, bool, Result<(Bytes, ObjectMeta), S3Error>) {
        let client = self.node_client(node.id());
        let _inflight = self.router.begin(&node);
        self.metrics
            .node_requests
            .get_or_create(&NodeLabel {
                node: node.id().to_owned(),
            })
            .inc();
        let t0 = Instant::now();
        let r = async {
            let resp = client.get_object(&req).await?;
            self.router.observe(&node, t0.elapsed());
            let meta = resp.meta.clone();
            Ok((resp.collect().await?, meta))
        }
        .await;
        (node, hedged, r)
    }

    pub(crate) async fn read_origin(
        &self,
        req: &GetObject,
        cause: Fallback,
    ) -> Result<Fetched, S3Error> {
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        let mut req = req.clone();
        req.hop = 0;
        req.cached_only = false;
        let (meta, bytes) = self.origin.get_bytes(&req).await?;
        Ok((bytes, meta, Source::Origin))
    }

    /// Logs a node failure, at most one line per second: a dead node must not flood.
    fn log_failure(&self, node: &NodeHandle, e: &S3Error) {
        let now = self.started.elapsed().as_secs();
        if self.last_log.swap(now, Relaxed) != now {
            tracing::warn!(node = %node.id(), "block request failed, trying elsewhere: {e}");
        }
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
