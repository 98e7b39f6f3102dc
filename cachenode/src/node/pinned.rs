//! A request pinned to a version (`If-Match`) that this node does not know
//! yet: the block it starts in is fetched at once, and the version is known
//! from that fetch's answer (its headers), which saves a HEAD's round trip (what
//! a cold small file costs). On a node that knows its cluster, the node that
//! answers the object's HEAD (the owner of its block 0, which a reader of the
//! object asked first) is asked too, and whichever answers first says what the
//! version is: an owner asked for a block by another node answers at once, not
//! at the origin's first byte ([`super::joined`]).

use std::sync::Arc;

use shoal::blocks::Block;
use shoal::store::ObjectMeta;

use super::{Node, NodeError, Via};

impl Node {
    /// Like [`Self::resolve`] for a request pinned to `etag` that starts in node
    /// block `index`: when the version is not known yet, that block is fetched
    /// with `If-Match` (it lands in the tiers for the read) and the version is
    /// taken from its answer, or from the node that answers the object's HEAD
    /// if that knows it sooner.
    pub async fn resolve_pinned(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        etag: &str,
        index: u64,
        via: Via,
    ) -> Result<ObjectMeta, NodeError> {
        let policy = self.policy(bucket, key);
        if via.cached_only && policy.cache {
            let bk = Node::block_key(bucket, key, etag, index, policy.block_size);
            self.join_fetch(&bk, via).await;
        }
        if let Some((meta, _)) = self.known_fresh(bucket, key, &policy).await {
            if meta.etag == etag {
                return Ok(meta);
            }
        }
        if !policy.cache || self.source.upstream.is_some() || via.cached_only {
            return self.resolve(bucket, key, Some(etag), via).await;
        }
        let bk = Node::block_key(bucket, key, etag, index, policy.block_size);
        let me = self.clone();
        // The object's size is what this fetch learns: room for a whole block.
        let len = policy.block_size as usize;
        let asker = crate::access::trace::current();
        let block = self
            .tiers
            .flight(bk.clone(), false, true, len, move |mut into| async move {
                // Known from the answer's headers on: asks of this block from
                // other nodes may join the fetch before its body is in.
                let learn = |meta: &ObjectMeta| me.versions.remember(&bk.bucket, &bk.key, meta);
                let fetched = me.source.node_block(&bk, None, &mut into, &learn);
                let fetched = shoal::store::budget::within(via.class, fetched);
                crate::access::trace::scope(asker, fetched).await.map(drop)
            });
        let started = async {
            match &block {
                Block::Held(..) => Ok(()),
                Block::Arriving(g, _) => g.started().await,
            }
        };
        let told = async {
            match &self.source.peers {
                Some(p) => p.version(bucket, key, etag, &self.metrics).await,
                None => None,
            }
        };
        // Whichever says first; the fetch goes on in its own task either way.
        let fetched = tokio::select! {
            r = started => r,
            Some((meta, age)) = told => {
                self.versions.remember_aged(bucket, key, &meta, age);
                return Ok(meta);
            }
        };
        match fetched {
            Ok(()) => match self.versions.known(bucket, key, etag) {
                Some(meta) => Ok(meta),
                // Joined a block fetch that learned nothing, or forgotten since.
                None => self.resolve(bucket, key, Some(etag), via).await,
            },
            Err(e) => match NodeError::from(e) {
                // Past the end (or an empty object): the HEAD path answers exactly.
                NodeError::Origin(shoal::store::StoreError::InvalidRange { .. }) => {
                    self.resolve(bucket, key, Some(etag), via).await
                }
                e => Err(self.gone_if(bucket, key, e).await),
            },
        }
    }
}
