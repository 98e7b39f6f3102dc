//! Reads whose bytes never enter this process: a range a reader wants once (it
//! goes on into a cache of its own, the kernel's page cache) is spliced from the
//! node's socket into a pipe, and from there the reader's caller splices it on
//! (a FUSE reply). Only when no tier holds its block or is fetching it: a block
//! already here is replied from, and one on its way is waited for.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use super::error::ReadError;
use super::handle::Handle;
use super::reader::ClusterReader;
use crate::blocks::{Buffer, Growing, Touch};
use crate::node_proto;
use crate::store::pipe::Pipe;
use crate::store::seen::cache_statuses;
use crate::store::{ByteRange, GetObject, ObjectMeta};

/// Answers in a row that found the block held after which [`Handle::warm`]
/// asks only every [`PROBE_EVERY`]th block, then every second such, fourth
/// and eighth as more are found held (a file the nodes hold is asked a few
/// dozen times per GiB, not once per block).
const HELD_RUN: u32 = 8;
const PROBE_EVERY: u64 = 8;

/// Every how many blocks one is asked, after `run` answers in a row found
/// theirs held (every one before [`HELD_RUN`]).
fn probe_every(run: u32) -> u64 {
    match run.checked_sub(HELD_RUN) {
        None => 1,
        Some(past) => PROBE_EVERY << past.min(3),
    }
}

/// What a piped read came to.
#[derive(Debug)]
pub enum Piped {
    /// The bytes are in the pipe, after its prefix: this many, and whether the
    /// node was still getting them ready when they were asked for (read-ahead
    /// was not far enough ahead).
    Spliced { len: usize, waited: bool },
    /// They could not all go into the pipe (it filled, a body broke off, no node
    /// answered): here they are, read; the pipe is empty.
    Read(Bytes),
    /// A tier holds the block or is fetching it, or the read spans blocks: read
    /// it the usual way. The pipe is untouched.
    Declined,
}

impl Handle {
    /// Bytes `start..start+len` (clamped to the object) into `pipe`, if they lie
    /// in one block that no tier holds or is fetching.
    pub async fn read_piped(
        &self,
        start: u64,
        len: u64,
        pipe: &mut Pipe,
    ) -> Result<Piped, ReadError> {
        let h = self.inner();
        let end = start.saturating_add(len).min(h.meta.size);
        let bs = h.reader.block_size();
        if start >= end || start / bs != (end - 1) / bs {
            return Ok(Piped::Declined);
        }
        if self.is_stale() {
            return Err(self.stale_error());
        }
        let waited = h.warming.lock().unwrap().contains(&(start / bs));
        let r = h
            .reader
            .piped(&h.bucket, &h.key, &h.meta, (start, end), h.hop, pipe)
            .await
            .map(|p| match p {
                Piped::Spliced { len, .. } => Piped::Spliced { len, waited },
                p => p,
            });
        self.note_stale(r).await
    }

    /// Has blocks `first..first+count` made ready on their owner nodes, fetching
    /// nothing here: read-ahead for a reader whose bytes are spliced, so that
    /// they come from a node's RAM when asked for. Each owner is asked for its
    /// block's first byte (a node fetches a block whole for any range of it).
    /// Once [`HELD_RUN`] answers in a row said the node held the block already,
    /// fewer blocks are asked ([`probe_every`]): a warm path is not asked for
    /// what it has, and the first block found missing starts asking again.
    pub fn warm(&self, first: u64, count: u64) {
        let h = self.inner();
        let bs = h.reader.block_size();
        let last = h.meta.size.div_ceil(bs);
        if self.is_stale() || first >= last {
            return;
        }
        for i in first..(first + count).min(last) {
            if i % probe_every(h.held_run.load(Relaxed)) != 0 {
                continue;
            }
            if !h.warming.lock().unwrap().insert(i) {
                continue;
            }
            let me = self.clone();
            h.reader.metrics.prefetched.inc();
            tokio::spawn(async move {
                let h = me.inner();
                let held = h
                    .reader
                    .warm_ahead(&h.bucket, &h.key, &h.meta, i, h.hop)
                    .await;
                h.warming.lock().unwrap().remove(&i);
                match held {
                    Some(true) => drop(h.held_run.fetch_add(1, Relaxed)),
                    Some(false) => h.held_run.store(0, Relaxed),
                    None => {}
                }
            });
        }
    }
}

impl ClusterReader {
    /// Whether there are nodes to splice from (a mount with no cluster, or one
    /// whose DNS names no node now, reads the origin into its RAM tier).
    pub fn has_nodes(&self) -> bool {
        !self.router().membership().current().nodes().is_empty()
    }

    /// Whether a tier here holds block `index` of `meta`'s version, or is
    /// fetching it. A look, not a use: the read that follows counts if it is
    /// one.
    pub(crate) async fn here(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
    ) -> bool {
        let bk = self.key(bucket, key, &meta.etag, index);
        self.tiers.arriving(&bk, &()).is_some()
            || self.tiers.lookup_as(&bk, Touch::Peek).await.is_some()
    }

    /// Asks block `index`'s owner for its first byte; whether its answer's
    /// `Cache-Status` says it held the block already. Nothing is asked if a
    /// tier here holds it, and nothing is known if no node answers (then the
    /// read itself will find out).
    async fn warm_ahead(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        index: u64,
        hop: u32,
    ) -> Option<bool> {
        if self.here(bucket, key, meta, index).await {
            return None;
        }
        let bs = self.block_size();
        let block = crate::route::BlockId { bucket, key, index };
        let pick = self.router().pick(&block).ok()?;
        let mut req = GetObject::new(bucket, key)
            .range(ByteRange::span(index * bs, index * bs + 1))
            .if_match(&meta.etag);
        node_proto::set_hop(&mut req, hop);
        node_proto::set_class(&mut req, crate::store::budget::Class::ReadAhead);
        let (opened, statuses) =
            cache_statuses(self.fetcher.calls.node_open(&pick.node, &req)).await;
        let mut opened = opened.ok()?;
        // Read to its end, so that the connection is kept.
        let mut byte = [0u8; 1];
        while let Ok(1..) = opened.resp.body.read(&mut byte).await {}
        Some(statuses.iter().any(|s| s.starts_with("shoal; hit")))
    }

    async fn piped(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        (start, end): (u64, u64),
        hop: u32,
        pipe: &mut Pipe,
    ) -> Result<Piped, ReadError> {
        let index = start / self.block_size();
        if self.here(bucket, key, meta, index).await {
            return Ok(Piped::Declined);
        }
        let mut req = GetObject::new(bucket, key)
            .range(ByteRange::span(start, end))
            .if_match(&meta.etag);
        node_proto::set_hop(&mut req, hop);
        let _permit = self.budget.slots.clone().acquire_owned().await;
        let want = (end - start) as usize;
        // A buffer only for bytes that do not go through the pipe.
        let mut got = None;
        let r = self
            .fetcher
            .pipe(&req, index, pipe, || {
                let (g, into) = Growing::<()>::new(Buffer::unpooled(want));
                got = Some(g);
                into
            })
            .await;
        match r {
            Ok(None) => {
                self.fetcher.count(super::fetch::Source::Node, want);
                Ok(Piped::Spliced {
                    len: want,
                    waited: false,
                })
            }
            Ok(Some((source, into))) => {
                self.fetcher.count(source, into.len());
                let got = got.expect("a filler was made");
                Ok(Piped::Read(got.slice(0, into.len())))
            }
            Err(e) => {
                // Whatever the pipe got is not the caller's.
                let _ = pipe.clear();
                Err(ReadError::pinned(e, bucket, key))
            }
        }
    }
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    #[test]
    fn blocks_are_asked_less_often_the_longer_they_are_found_held() {
        let every: Vec<u64> = [0, 7, 8, 9, 10, 11, 12, 100]
            .into_iter()
            .map(probe_every)
            .collect();
        assert_eq!(every, [1, 1, 8, 16, 32, 64, 64, 64]);
    }
}
