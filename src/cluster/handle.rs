//! [`Handle`]: one object version, open for reading, and the ways a reader opens
//! one.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt, TryStreamExt};

use super::block::Ask;
use super::error::ReadError;
use super::reader::ClusterReader;
use super::visits::Visits;
use crate::blocks::{Part, Served, Touch};
use crate::store::{budget, ObjectMeta};

impl ClusterReader {
    /// Opens `bucket/key` pinned to one version: `known` (from a listing or an
    /// earlier HEAD), or whatever the first block's answer says.
    pub async fn open(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
    ) -> Result<Handle, ReadError> {
        self.open_hop(bucket, key, known, None, 0).await
    }

    /// [`Self::open`] for a gateway forwarding a request that already passed
    /// through `hops` nodes: its node requests carry `hops + 1`. Without `known`,
    /// the version is learned through the cluster, pinned to `if_match` if given.
    pub async fn open_forwarded(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
        if_match: Option<&str>,
        hops: u32,
    ) -> Result<Handle, ReadError> {
        self.open_hop(bucket, key, known, if_match, hops + 1).await
    }

    /// [`Self::open`] of a version known already: nothing is asked, so the
    /// handle is there at once.
    pub fn open_known(self: &Arc<Self>, bucket: &str, key: &str, meta: ObjectMeta) -> Handle {
        self.handle(bucket, key, meta, 0)
    }

    async fn open_hop(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        known: Option<ObjectMeta>,
        if_match: Option<&str>,
        hop: u32,
    ) -> Result<Handle, ReadError> {
        let meta = match known {
            Some(m) => m,
            None => self.learn(bucket, key, hop, if_match).await?,
        };
        Ok(self.handle(bucket, key, meta, hop))
    }

    fn handle(self: &Arc<Self>, bucket: &str, key: &str, meta: ObjectMeta, hop: u32) -> Handle {
        Handle::new(HandleInner {
            reader: self.clone(),
            bucket: bucket.into(),
            key: key.into(),
            meta,
            hop,
            stale: Default::default(),
            let_go_below: Default::default(),
            warming: Default::default(),
            held_run: Default::default(),
            visits: Default::default(),
        })
    }
}

pub(crate) struct HandleInner {
    pub reader: Arc<ClusterReader>,
    pub bucket: Arc<str>,
    pub key: Arc<str>,
    pub meta: ObjectMeta,
    /// Sent with every node request of this handle (0 = none).
    pub hop: u32,
    pub stale: AtomicBool,
    /// Blocks below this one were handed over whole to the page cache (or are
    /// before one that was): fetching them ahead would fetch them again.
    pub let_go_below: std::sync::atomic::AtomicU64,
    /// Blocks whose owners were asked to have them ready and have not answered
    /// yet ([`Handle::warm`]).
    pub warming: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// Answers in a row to those asks, and to this handle's reads from nodes,
    /// that said the node held what was asked for.
    pub held_run: std::sync::atomic::AtomicU32,
    /// Which of this handle's reads count a use of their block.
    pub(super) visits: std::sync::Mutex<Visits>,
}

/// What a read got: the buffers its bytes are in, and whether it waited for
/// any of them to arrive.
#[derive(Default)]
pub struct Parts {
    pub parts: Vec<Bytes>,
    pub waited: bool,
}

/// One object version, open for reading. Cheap to clone.
#[derive(Clone)]
pub struct Handle(Arc<HandleInner>);

impl Handle {
    pub(crate) fn new(inner: HandleInner) -> Handle {
        Handle(Arc::new(inner))
    }

    pub fn meta(&self) -> &ObjectMeta {
        &self.0.meta
    }

    pub fn bucket(&self) -> &str {
        &self.0.bucket
    }

    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// The object changed since open: every later read fails.
    pub fn is_stale(&self) -> bool {
        self.0.stale.load(Relaxed)
    }

    pub(super) fn inner(&self) -> &HandleInner {
        &self.0
    }

    pub(super) fn stale_error(&self) -> ReadError {
        ReadError::Stale {
            bucket: self.0.bucket.to_string(),
            key: self.0.key.to_string(),
        }
    }

    /// Whether a read of block `index` is a use of it. Asked before the read's
    /// future is first polled, in the order the reads were made.
    fn touch(&self, index: u64) -> Touch {
        self.0.visits.lock().unwrap().read(index)
    }

    /// Bytes `lo..hi` of block `index` (clamped to it), as soon as they are here.
    async fn part(
        &self,
        index: u64,
        lo: usize,
        hi: usize,
        touch: Touch,
    ) -> Result<Part, ReadError> {
        match self.part_once(index, lo, hi, touch).await {
            // Joined read-ahead that asked for what the nodes hold, and they
            // held nothing: this read fetches the block as any read does.
            Err(e) if not_held(&e) => self.part_once(index, lo, hi, touch).await,
            r => r,
        }
    }

    /// [`Self::part`] from the block's fetch as it is, whatever that may ask.
    async fn part_once(
        &self,
        index: u64,
        lo: usize,
        hi: usize,
        touch: Touch,
    ) -> Result<Part, ReadError> {
        if self.is_stale() {
            return Err(self.stale_error());
        }
        let h = &self.0;
        let block = h
            .reader
            .open_block(&h.bucket, &h.key, &h.meta, (index, h.hop), touch, Ask::Any)
            .await;
        let r = block.part(lo, hi).await.map_err(ReadError::from);
        self.note_stale(r).await
    }

    /// Marks the handle stale the first time a read finds the object changed.
    pub(super) async fn note_stale<T>(&self, r: Result<T, ReadError>) -> Result<T, ReadError> {
        let h = &self.0;
        match r {
            Err(e @ ReadError::Stale { .. }) => {
                if !h.stale.swap(true, Relaxed) {
                    h.reader.metrics.stale.inc();
                    h.reader.invalidate(&h.bucket, &h.key).await;
                    tracing::warn!(bucket = %h.bucket, key = %h.key, "object changed while open: reads of this handle now fail");
                }
                Err(e)
            }
            r => r,
        }
    }

    /// Bytes `start..end` (clamped to the object) as a stream of chunks, with up to
    /// `read_window` blocks in flight, in order.
    pub fn stream(
        &self,
        start: u64,
        end: u64,
    ) -> impl Stream<Item = Result<Bytes, ReadError>> + Send + 'static {
        let size = self.0.meta.size;
        let end = end.min(size);
        let bs = self.0.reader.block_size();
        // Half-open block range; empty when there is nothing to read.
        let blocks = if start < end {
            start / bs..(end - 1) / bs + 1
        } else {
            0..0
        };
        let me = self.clone();
        stream::iter(blocks)
            .map(move |i| {
                let me = me.clone();
                let touch = me.touch(i);
                async move {
                    let b = me.part(i, 0, usize::MAX, touch).await?.bytes;
                    let off = i * bs;
                    let lo = start.saturating_sub(off) as usize;
                    let hi = ((end - off) as usize).min(b.len());
                    Ok(b.slice(lo..hi))
                }
            })
            .buffered(self.0.reader.read_window())
    }

    /// Bytes `start..start+len` (clamped to the object), collected.
    pub async fn read(&self, start: u64, len: u64) -> Result<Bytes, ReadError> {
        let end = start.saturating_add(len).min(self.0.meta.size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let parts: Vec<Bytes> = self.stream(start, end).try_collect().await?;
        if parts.len() == 1 {
            return Ok(parts.into_iter().next().unwrap());
        }
        let mut out = bytes::BytesMut::with_capacity((end - start) as usize);
        for p in parts {
            out.extend_from_slice(&p);
        }
        Ok(out.freeze())
    }

    /// Bytes `start..start+len` (clamped to the object) as the buffers they are in,
    /// one per block they touch, each handed over as soon as its bytes have
    /// arrived: a read inside a block being fetched waits for its own bytes, not
    /// for the whole block.
    pub async fn read_parts(&self, start: u64, len: u64) -> Result<Parts, ReadError> {
        self.parts(start, len, false).await
    }

    /// [`Self::read_parts`] for a reader whose reads are what it wants (direct
    /// I/O: a column chunk, a footer) and nothing more: of a block the read
    /// covers only in part, and that no tier here holds or is fetching, only
    /// the read's own bytes are asked for. What is fetched past them is what
    /// read-ahead asks for, never a whole block around a chunk's end.
    pub async fn read_exact_parts(&self, start: u64, len: u64) -> Result<Parts, ReadError> {
        self.parts(start, len, true).await
    }

    async fn parts(&self, start: u64, len: u64, exact: bool) -> Result<Parts, ReadError> {
        let end = start.saturating_add(len).min(self.0.meta.size);
        if start >= end {
            return Ok(Parts::default());
        }
        let bs = self.0.reader.block_size();
        let size = self.0.meta.size;
        let parts = (start / bs..=(end - 1) / bs).map(|i| {
            let off = i * bs;
            let lo = start.saturating_sub(off) as usize;
            let hi = (end - off).min(bs) as usize;
            let touch = self.touch(i);
            let partial = exact && (lo > 0 || (hi as u64) < bs.min(size - off));
            async move {
                if !partial {
                    return self.part(i, lo, hi, touch).await;
                }
                let h = &self.0;
                if h.reader.here(&h.bucket, &h.key, &h.meta, i).await {
                    match self.part_once(i, lo, hi, touch).await {
                        Err(e) if not_held(&e) => {}
                        r => return r,
                    }
                }
                let bytes = self
                    .range_in_block(off + lo as u64, off + hi as u64)
                    .await?;
                Ok(Part {
                    bytes,
                    served: Served::Fetched,
                    waited: true,
                })
            }
        });
        let got = self
            .noting(futures_util::future::try_join_all(parts))
            .await?;
        Ok(Parts {
            waited: got.iter().any(|p| p.waited),
            parts: got.into_iter().map(|p| p.bytes).collect(),
        })
    }

    /// Runs `read`, noting whether the nodes that answered it held what it
    /// asked for ([`Cache-Status`](crate::store::seen)): read-ahead of a path
    /// they hold asks for what they hold only ([`Ask::Held`]).
    async fn noting<T>(&self, read: impl std::future::Future<Output = T>) -> T {
        let (out, seen) = crate::store::seen::cache_statuses(read).await;
        if let Some(held) = held_by_nodes(&seen) {
            match held {
                true => drop(self.0.held_run.fetch_add(1, Relaxed)),
                false => self.0.held_run.store(0, Relaxed),
            }
        }
        out
    }

    /// Block `index` was handed over whole to a cache above this one (the
    /// kernel's page cache): the RAM tier need not keep it too.
    pub fn let_go(&self, index: u64) {
        let h = &self.0;
        h.let_go_below.fetch_max(index + 1, Relaxed);
        h.reader.let_go(&h.bucket, &h.key, &h.meta.etag, index);
    }

    /// Bytes `start..start+len` for a random reader: the part of the read inside
    /// each block it touches that the RAM tier does not hold is asked of the
    /// block's owner for just that range (cut through on the node: the origin's
    /// first byte plus a hop) instead of waiting for the whole block; a whole
    /// block it covers is read as [`read`](Self::read) reads it. A read of a few
    /// KiB across a block boundary so costs its bytes, not two blocks.
    pub async fn read_random(&self, start: u64, len: u64) -> Result<Bytes, ReadError> {
        let end = start.saturating_add(len).min(self.0.meta.size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let bs = self.0.reader.block_size();
        let parts = (start / bs..=(end - 1) / bs).map(|i| {
            let (lo, hi) = (start.max(i * bs), end.min((i + 1) * bs));
            async move {
                let whole = lo == i * bs && (hi == (i + 1) * bs || hi == self.0.meta.size);
                if whole {
                    self.read(lo, hi - lo).await
                } else {
                    self.range_in_block(lo, hi).await
                }
            }
        });
        let mut got = self
            .noting(futures_util::future::try_join_all(parts))
            .await?;
        if got.len() == 1 {
            return Ok(got.pop().unwrap());
        }
        let mut out = bytes::BytesMut::with_capacity((end - start) as usize);
        for p in got {
            out.extend_from_slice(&p);
        }
        Ok(out.freeze())
    }

    /// `start..end`, inside one block, for a random reader.
    async fn range_in_block(&self, start: u64, end: u64) -> Result<Bytes, ReadError> {
        if self.is_stale() {
            return Err(self.stale_error());
        }
        let h = &self.0;
        let touch = self.touch(start / h.reader.block_size());
        let r = h
            .reader
            .range(&h.bucket, &h.key, &h.meta, (start, end), h.hop, touch)
            .await;
        self.note_stale(r).await
    }

    /// Starts fetching blocks `first..first+count` into the RAM tier without
    /// waiting: from what the nodes hold only, when they held what this
    /// handle's reads asked for last ([`Ask::Held`]).
    pub fn prefetch(&self, first: u64, count: u64) {
        let bs = self.0.reader.block_size();
        let last = self.0.meta.size.div_ceil(bs);
        if self.is_stale() || first >= last {
            return;
        }
        let blocks = first..(first + count).min(last);
        let h = &self.0;
        let ask = match h.held_run.load(Relaxed) {
            0 => Ask::Any,
            _ => Ask::Held,
        };
        if !h.reader.tiers.has_disk() {
            // Each fetch is in flight when this returns: a read that follows,
            // a spliced one too (it goes to the node itself unless a fetch is
            // here), joins it instead of fetching the block a second time.
            for i in blocks.filter(|&i| self.fetches_ahead(i)) {
                drop(budget::within_sync(budget::Class::ReadAhead, || {
                    h.reader
                        .open_block_now(&h.bucket, &h.key, &h.meta, (i, h.hop), ask)
                }));
            }
            return;
        }
        // Looking in the disk tier first waits: each block's fetch then runs in
        // a task of its own, and starting it is enough. A block the kernel took
        // while this task waited to run is not fetched again.
        let me = self.clone();
        tokio::spawn(budget::within(budget::Class::ReadAhead, async move {
            let h = &me.0;
            for i in blocks {
                if me.fetches_ahead(i) {
                    drop(
                        h.reader
                            .open_block(&h.bucket, &h.key, &h.meta, (i, h.hop), Touch::Use, ask)
                            .await,
                    );
                }
            }
        }));
    }

    /// Whether block `i` is still to be fetched ahead (counted if so): not one
    /// the kernel has taken already, nor one this handle's reads have come
    /// to or had fetched ahead already.
    fn fetches_ahead(&self, i: u64) -> bool {
        let h = &self.0;
        let wanted = i >= h.let_go_below.load(Relaxed) && h.visits.lock().unwrap().fetches_ahead(i);
        if wanted {
            h.reader.metrics.prefetched.inc();
        }
        wanted
    }
}

/// Whether `e` says no node held a block that only what nodes hold was asked
/// for ([`Ask::Held`]).
fn not_held(e: &ReadError) -> bool {
    e.store().is_some_and(crate::node_proto::is_not_cached)
}

/// What the `Cache-Status` entries of a read's answers say: whether the nodes
/// held what it asked for (`None`: no node answered it).
fn held_by_nodes(seen: &[String]) -> Option<bool> {
    if seen.is_empty() {
        return None;
    }
    Some(seen.iter().all(|s| s.starts_with("shoal; hit")))
}
