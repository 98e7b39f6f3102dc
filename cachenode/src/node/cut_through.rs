//! Cold blocks streamed as they arrive ([`Growing`]): the first request for a
//! missing block starts its origin fetch in a task of its own (it finishes and
//! fills the tiers even if that request goes away), every request for the block
//! while it is in flight streams it from its first byte, and the tiers get it only
//! once it is whole and checked. A body cut off mid-block is resumed with a ranged
//! GET for the rest; if that fails, every reader's stream ends with the error, so
//! a client sees a clean failure, never a short or mixed block.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt};
use shoal::blocks::{BlockKey, Growing, Served};
use shoal::store::{ByteRange, GetObject, ObjectMeta, ObjectStore, StoreError};

use super::{Node, NodeError, Via};
use crate::metrics::KindLabel;

pub type BlockStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, NodeError>> + Send>>;

impl Node {
    /// One whole node block as a stream: from a tier at once, else cut through
    /// from the origin as it arrives. Errors about the object (412, 404) come
    /// before the stream does.
    pub(super) async fn block_stream(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
        bs: u64,
        via: Via,
    ) -> Result<BlockStream, NodeError> {
        let bk = Self::block_key(bucket, key, &meta.etag, index, bs);
        let fill = self.policy(bucket, key).cache;
        // A gateway's misses go to owners as whole blocks; uncached reads too.
        if self.forwards(via, bucket, key, index * bs) || !fill {
            let b = self.block(bucket, key, meta, index, bs, via).await?;
            return Ok(Box::pin(stream::once(async { Ok(b) })));
        }
        if let Some((b, served)) = self.tiers.lookup(&bk).await {
            self.count(served, b.len());
            return Ok(Box::pin(stream::once(async { Ok(b) })));
        }
        let (growing, leader) = {
            let mut all = self.growing.lock().unwrap();
            match all.get(&bk) {
                Some(g) => (g.clone(), false),
                None => {
                    let g: Arc<Growing<NodeError>> = Arc::default();
                    all.insert(bk.clone(), g.clone());
                    (g, true)
                }
            }
        };
        if leader {
            let (me, g, bk, meta) = (self.clone(), growing.clone(), bk.clone(), meta.clone());
            tokio::spawn(async move {
                let fetch = {
                    let (me, g, bk) = (me.clone(), g.clone(), bk.clone());
                    async move { me.fetch_streaming(&bk, meta.size, &g).await }
                };
                let r = me.tiers.fetch(bk.clone(), false, true, fetch).await;
                match r {
                    Ok((b, _)) => {
                        // Another flight for the block supplied it: hand it on whole.
                        if g.is_empty() {
                            g.push(b);
                        }
                        g.finish(Ok(()));
                    }
                    Err(e) => g.finish(Err(NodeError::from(e))),
                }
                me.growing.lock().unwrap().remove(&bk);
            });
        }
        if let Err(e) = growing.started().await {
            return Err(self.gone_if(bucket, key, e).await);
        }
        let want = (bk.start() + bs).min(meta.size).saturating_sub(bk.start());
        self.count(
            if leader {
                Served::Fetched
            } else {
                Served::Joined
            },
            want as usize,
        );
        Ok(Box::pin(growing.stream()))
    }

    /// A small read deep inside a block the tiers lack: the bytes before it would
    /// have to arrive first, so just `start..end` is asked of the origin beside
    /// the block's own fetch (which goes on, fills the tiers, and answers the
    /// next reader); the answer comes at the origin's first byte. `None` when the
    /// ordinary path answers as soon: a tier holds the block, the fetch in flight
    /// already has the bytes, this node forwards its misses, or the side request
    /// failed (then the block's stream serves it).
    pub(super) async fn side_read(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, bs): (u64, u64),
        (start, end): (u64, u64),
        via: Via,
    ) -> Result<Option<BlockStream>, NodeError> {
        if self.upstream.is_some() || !self.policy(bucket, key).cache {
            return Ok(None);
        }
        let bk = Self::block_key(bucket, key, &meta.etag, index, bs);
        let off = bk.start();
        if let Some((b, served)) = self.tiers.lookup(&bk).await {
            self.count(served, b.len());
            let hi = ((end - off) as usize).min(b.len());
            let part = b.slice(((start - off) as usize).min(hi)..hi);
            return Ok(Some(Box::pin(stream::once(async { Ok(part) }))));
        }
        let arrived = self.growing.lock().unwrap().get(&bk).map(|g| g.len());
        if arrived.is_some_and(|n| off + n >= end) {
            return Ok(None);
        }
        let mut req = GetObject::new(bucket, key).if_match(&meta.etag);
        req.range = Some(ByteRange::span(start, end));
        let side = async {
            self.metrics
                .origin_requests
                .get_or_create(&KindLabel { kind: "range" })
                .inc();
            self.origin.get_range(&req).await
        };
        // The block's fetch starts (or is joined) either way; its stream is not
        // needed when the side request answers.
        let (block, side) =
            tokio::join!(self.block_stream(bucket, key, meta, index, bs, via), side);
        drop(block?);
        match side {
            Ok(resp) if resp.meta.etag == meta.etag && resp.start == start && resp.end == end => {
                let me = self.clone();
                Ok(Some(Box::pin(resp.body.map(move |c| {
                    let c = c.map_err(NodeError::from)?;
                    me.metrics.origin_bytes.inc_by(c.len() as u64);
                    Ok(c)
                }))))
            }
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::debug!(
                    bucket,
                    key,
                    start,
                    end,
                    "side read failed, the block serves it: {e}"
                );
                Ok(None)
            }
        }
    }

    /// The origin's bytes of block `bk` into `g` as they come, resuming a cut body
    /// from where it stopped; the whole block when done.
    async fn fetch_streaming(
        &self,
        bk: &BlockKey,
        size: u64,
        g: &Growing<NodeError>,
    ) -> Result<Bytes, NodeError> {
        let start = bk.start();
        let want = (start + bk.block_size).min(size).saturating_sub(start);
        let attempts = self.origin.options().retry.max_attempts.max(1);
        let mut tries = 0;
        loop {
            tries += 1;
            let got = g.len();
            let mut req = GetObject::new(&*bk.bucket, &*bk.key).if_match(&*bk.etag);
            req.range = Some(ByteRange::span(start + got, start + want));
            self.metrics
                .origin_requests
                .get_or_create(&KindLabel { kind: "block" })
                .inc();
            let cut = match self.origin.get_range(&req).await {
                Ok(resp) => {
                    if resp.meta.etag != *bk.etag || resp.start != start + got {
                        return Err(NodeError::BadBlock {
                            index: bk.index,
                            got: resp.start - start,
                            got_etag: resp.meta.etag,
                            want,
                            want_etag: bk.etag.to_string(),
                        });
                    }
                    let mut body = resp.body;
                    let mut cut = None;
                    while let Some(c) = body.next().await {
                        match c {
                            Ok(c) => {
                                self.metrics.origin_bytes.inc_by(c.len() as u64);
                                g.push(c);
                            }
                            Err(e) => {
                                cut = Some(e);
                                break;
                            }
                        }
                    }
                    cut
                }
                // Nothing of it has come yet: an answer (412, 404) ends it here.
                Err(e) if got == 0 || !e.is_retryable() => return Err(e.into()),
                Err(e) => Some(e),
            };
            let have = g.len();
            if have > want {
                return Err(NodeError::BadBlock {
                    index: bk.index,
                    got: have,
                    got_etag: bk.etag.to_string(),
                    want,
                    want_etag: bk.etag.to_string(),
                });
            }
            if have == want {
                return Ok(g.concat());
            }
            if tries >= attempts {
                return Err(NodeError::Origin(
                    cut.unwrap_or(StoreError::ShortBody { got: have, want }),
                ));
            }
            tracing::debug!(
                block = bk.index,
                have,
                want,
                "origin body cut off; resuming"
            );
        }
    }
}
