//! The node's read path: a range of one version as a stream of slices of whole
//! node blocks, each from a tier or cut through from its fetch as it arrives.
//!
//! Every block goes through [`shoal::blocks::Tiers::open`]: held, or a fetch in
//! flight (started here or joined) whose bytes stream to every asker from the
//! first one. Blocks stream out in order, a few opened ahead. A small read deep
//! in a cold block is also asked of the origin on its own (a side read), since the
//! bytes before it would have to arrive first; the block's own fetch runs to its
//! end in a task of its own and lands in the tiers whatever the reader does.
//!
//! A block's bytes are counted as served as they go out, by the tier it came
//! from: what a client was sent, not the blocks its range touched.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt};
use shoal::blocks::{Block, Served};
use shoal::store::ObjectMeta;

use super::{Node, NodeError, Via};
use crate::metrics;

pub type BlockStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, NodeError>> + Send>>;

/// Blocks opened ahead of the one being sent: at least this many, and at least
/// [`PREFETCH_BYTES`] of them, so that a request for a whole cluster block of
/// a file cached in small pages asks the origin for its pages side by side.
const PREFETCH: usize = 4;
const PREFETCH_BYTES: u64 = 1 << 20;
/// Reads up to this long inside one block the tiers lack, starting at least
/// [`SIDE_READ_DEPTH`] into it, are asked of the origin on their own beside the
/// block's fetch. Nearer the block's start the block's own bytes come about as
/// soon (256 KiB is 2.6 ms at 100 MB/s, against tens of ms of first byte), and a
/// second origin request is not worth it.
const SIDE_READ_MAX: u64 = 256 << 10;
const SIDE_READ_DEPTH: u64 = 256 << 10;
/// Longest a request waits on a block fetch someone else started.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

impl Node {
    /// Counts where a block came from (its bytes are counted as they are
    /// sent: [`Self::metered`]).
    fn count(&self, served: Served) {
        let m = &self.metrics;
        let has_disk = self.tiers.has_disk();
        let tier = tier_of(served);
        if served != Served::Ram {
            m.misses.get_or_create(&metrics::RAM).inc();
        }
        if has_disk && matches!(served, Served::Fetched | Served::Joined) {
            m.misses.get_or_create(&metrics::DISK).inc();
        }
        if matches!(served, Served::Ram | Served::Disk) {
            m.hits.get_or_create(&tier).inc();
        }
        if served == Served::Joined {
            m.coalesced_waits.inc();
        }
    }

    /// `s`, each chunk counted as served from `tier` as it goes out.
    fn metered<S>(&self, tier: metrics::TierLabel, s: S) -> BlockStream
    where
        S: Stream<Item = Result<Bytes, NodeError>> + Send + 'static,
    {
        let sent = self.metrics.bytes_served.get_or_create(&tier).clone();
        Box::pin(s.inspect(move |c| {
            if let Ok(b) = c {
                sent.inc_by(b.len() as u64);
            }
        }))
    }

    /// Whether every node block of `start..end` is in RAM or on disk now.
    pub async fn cached(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        start: u64,
        end: u64,
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
            if !self.tiers.cached(&bk).await {
                return false;
            }
        }
        true
    }

    /// Opens node block `index` of `meta`'s version on the tiers: held, or its
    /// fetch (from the origin, or upstream on a gateway) started or joined.
    async fn open_block(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, bs): (u64, u64),
        via: Via,
    ) -> Block<NodeError> {
        let bk = Self::block_key(bucket, key, &meta.etag, index, bs);
        let forward = self.source.forwards(via, bucket, key, index * bs);
        let fill = self.policy(bucket, key).cache;
        let len = bk.len_in(meta.size) as usize;
        let (source, meta, bk2) = (self.source.clone(), meta.clone(), bk.clone());
        // A fetch started for a request is that request's, wherever it runs.
        let asker = crate::access::trace::current();
        self.tiers
            .open(bk, forward, fill, len, move |mut into| async move {
                // Held when the request was let in; gone since: still no fetch.
                if via.cached_only {
                    return Err(NodeError::NotCached);
                }
                let fetch = source.fetch(&bk2, &meta, forward, via, &mut into);
                let fetch = shoal::store::budget::within(via.class, fetch);
                crate::access::trace::scope(asker, fetch).await
            })
            .await
    }

    /// One whole node block as a stream, and the tier it comes from: from a
    /// tier at once, else cut through as it arrives. Errors about the object
    /// (412, 404) come before the stream does; a fetch someone else started
    /// that failed for a passing reason is tried afresh once.
    async fn block_stream(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, bs): (u64, u64),
        via: Via,
    ) -> Result<(BlockStream, metrics::TierLabel), NodeError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let (g, served) = match self.open_block(bucket, key, meta, (index, bs), via).await {
                Block::Held(b, served) => {
                    self.count(served);
                    return Ok((Box::pin(stream::once(async { Ok(b) })), tier_of(served)));
                }
                Block::Arriving(g, served) => (g, served),
            };
            let started = tokio::time::timeout(WAIT_LIMIT, g.started())
                .await
                .map_err(|_| NodeError::WaitedTooLong(WAIT_LIMIT))?;
            match started.map_err(NodeError::from) {
                Ok(()) => {
                    self.count(served);
                    let s = g.stream().map(|c| c.map_err(NodeError::from));
                    return Ok((Box::pin(s), tier_of(served)));
                }
                // A follower whose leader failed for a passing reason fetches
                // afresh once.
                Err(e) if tries < 2 && served == Served::Joined && e.is_retryable() => continue,
                Err(e) => return Err(self.gone_if(bucket, key, e).await),
            }
        }
    }

    /// A small read deep inside a block the tiers lack: just `start..end` from the
    /// origin beside the block's own fetch (which goes on, fills the tiers, and
    /// answers the next reader), so the answer comes at the origin's first byte.
    /// `None` when the ordinary path answers as soon: a tier holds the block, the
    /// fetch in flight already has the bytes, this node forwards its misses, or
    /// the side request failed (then the block's stream serves it).
    async fn side_read(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (index, bs): (u64, u64),
        (start, end): (u64, u64),
        via: Via,
    ) -> Result<Option<BlockStream>, NodeError> {
        if self.source.upstream.is_some() || !self.policy(bucket, key).cache || via.cached_only {
            return Ok(None);
        }
        let bk = Self::block_key(bucket, key, &meta.etag, index, bs);
        let off = bk.start();
        if let Some((b, served)) = self.tiers.lookup(&bk).await {
            self.count(served);
            let hi = ((end - off) as usize).min(b.len());
            let part = b.slice(((start - off) as usize).min(hi)..hi);
            let once = stream::once(async { Ok(part) });
            return Ok(Some(self.metered(tier_of(served), once)));
        }
        let arrived = self.tiers.arriving(&bk, &false).map(|g| g.len());
        if arrived.is_some_and(|n| off + n >= end) {
            return Ok(None);
        }
        // The block's fetch starts (or is joined) either way, in a task of its
        // own that fills the tiers whatever becomes of this request; its
        // stream is not needed when the side request answers.
        let (block, side) = tokio::join!(
            self.block_stream(bucket, key, meta, (index, bs), via),
            shoal::store::budget::within(
                via.class,
                self.source.side_read(bucket, key, meta, (start, end))
            )
        );
        drop(block?);
        Ok(side.map(|resp| {
            let me = self.clone();
            let body = resp.body.map(move |c| {
                let c = c.map_err(NodeError::from)?;
                me.metrics.origin_bytes.inc_by(c.len() as u64);
                Ok(c)
            });
            self.metered(metrics::ORIGIN, body)
        }))
    }

    /// Bytes `start..end` of `meta`'s version as a stream of slices of whole blocks,
    /// a cold block's bytes as they arrive (cut-through). The first block is
    /// started before this returns, so an error about the object (412, 404) is an
    /// answer rather than a cut-off body.
    pub async fn read(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        start: u64,
        end: u64,
        via: Via,
    ) -> Result<SyncStream<BlockStream>, NodeError> {
        let bs = self.policy(bucket, key).block_size;
        let (first, last) = if end > start {
            (start / bs, (end - 1) / bs)
        } else {
            (1, 0)
        };
        if first == last && end - start <= SIDE_READ_MAX && start >= first * bs + SIDE_READ_DEPTH {
            let side = self
                .side_read(bucket, key, meta, (first, bs), (start, end), via)
                .await?;
            if let Some(s) = side {
                return Ok(SyncStream::new(s));
            }
        }
        // Another node's ask is answered at once (its headers before the first
        // block's bytes): it judges this node by that, the body by its own
        // deadlines. Any other answer's errors about the object come first.
        let head = if first > last {
            None
        } else if via.acknowledge {
            let (me, bucket, key, meta) = (
                self.clone(),
                bucket.to_owned(),
                key.to_owned(),
                meta.clone(),
            );
            Some(Err(async move {
                me.block_stream(&bucket, &key, &meta, (first, bs), via)
                    .await
            }))
        } else {
            Some(Ok(self
                .block_stream(bucket, key, meta, (first, bs), via)
                .await?))
        };
        // The part of block `index` in `start..end`, taken from its chunks and
        // counted as it goes out.
        let me = self.clone();
        let clip = move |index: u64, (s, tier): (BlockStream, metrics::TierLabel)| {
            let off = index * bs;
            let lo = start.saturating_sub(off);
            let hi = end - off;
            let part = s
                .scan(0u64, move |at, c| {
                    // Past the range: stop here rather than wait out the block.
                    if *at >= hi {
                        return std::future::ready(None);
                    }
                    let out = c.map(|c| {
                        let (c_lo, c_hi) = (*at, *at + c.len() as u64);
                        *at = c_hi;
                        let (a, b) = (lo.clamp(c_lo, c_hi), hi.clamp(c_lo, c_hi));
                        c.slice((a - c_lo) as usize..(b - c_lo) as usize)
                    });
                    std::future::ready(Some(out))
                })
                .filter(|c| std::future::ready(!matches!(c, Ok(b) if b.is_empty())));
            me.metered(tier, part)
        };
        let me = self.clone();
        let (bucket, key, meta) = (bucket.to_owned(), key.to_owned(), meta.clone());
        let rest = stream::iter(first + 1..=last)
            .map(move |i| {
                let (me, bucket, key, meta) =
                    (me.clone(), bucket.clone(), key.clone(), meta.clone());
                async move {
                    me.block_stream(&bucket, &key, &meta, (i, bs), via)
                        .await
                        .map(|s| (i, s))
                }
            })
            .buffered(PREFETCH.max((PREFETCH_BYTES / bs) as usize));
        let clipped =
            move |r: Result<(u64, (BlockStream, metrics::TierLabel)), NodeError>| -> BlockStream {
                match r {
                    Ok((i, s)) => clip(i, s),
                    Err(e) => Box::pin(stream::once(async { Err(e) })),
                }
            };
        let head: BlockStream = match head {
            None => Box::pin(stream::empty()),
            Some(Ok(s)) => clipped(Ok((first, s))),
            Some(Err(later)) => {
                let c = clipped.clone();
                Box::pin(stream::once(later).flat_map(move |r| c(r.map(|s| (first, s)))))
            }
        };
        Ok(SyncStream::new(Box::pin(
            head.chain(rest.flat_map(clipped)),
        )))
    }
}

fn tier_of(served: Served) -> metrics::TierLabel {
    match served {
        Served::Ram => metrics::RAM,
        Served::Disk => metrics::DISK,
        Served::Fetched | Served::Joined => metrics::ORIGIN,
    }
}

/// s3s wants `Sync` body streams; a stream polled from one task at a time is safely
/// shared behind a mutex.
pub struct SyncStream<S>(std::sync::Mutex<std::pin::Pin<Box<S>>>);

impl<S> SyncStream<S> {
    pub fn new(s: S) -> Self {
        Self(std::sync::Mutex::new(Box::pin(s)))
    }
}

impl<S: Stream> Stream for SyncStream<S> {
    type Item = S::Item;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.lock().unwrap().as_mut().poll_next(cx)
    }
}
