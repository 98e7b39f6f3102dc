//! [`ClusterMetadata`]: listings and HEADs through the cluster, as a store.
//!
//! A listing page is routed by its identity ([`crate::route::list_page_key`]), a
//! HEAD as its object's block 0, through the same owner, failover, hedging and
//! origin fallback as a block ([`super::fetch`]). Each request says how old an
//! answer the asker accepts (`x-shoal-metadata-ttl`), so the owner may answer
//! from its metadata cache and coalesce identical requests: the fleet lists a
//! directory once, not once per reader. With no node to answer, the origin does,
//! counted by cause. An ask may also bound the answer's age whatever the TTL
//! ([`ClusterMetadata::head_within`], [`ClusterMetadata::list_page_within`]):
//! a refresh, which the owner answers from the origin now and keeps.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::fetch::Routed;
use super::metrics::{MetadataLabel, NODE, ORIGIN};
use super::ClusterReader;
use crate::node_proto;
use crate::route::{list_page_key, BlockId, NodeHandle};
use crate::store::{
    ExtraHeaders, GetObject, GetResponse, ListPage, ListRequest, ObjectMeta, ObjectStore,
    StoreError,
};

/// Listings and HEADs from the cluster, everything else from the origin.
pub struct ClusterMetadata {
    reader: Arc<ClusterReader>,
    /// How old a cached answer this asker accepts.
    accept: Duration,
}

impl ClusterMetadata {
    /// Metadata through `reader`'s cluster, accepting cached answers up to
    /// `accept` old (a mount's `metadata_ttl`).
    ///
    /// The client of each node known now is made here, when the mount starts,
    /// not on its first listing: making one loads the system's root
    /// certificates, which perf showed as a tenth of a warm walk's CPU, spent
    /// while the walker waited for its first directories.
    pub fn new(reader: Arc<ClusterReader>, accept: Duration) -> ClusterMetadata {
        let calls = &reader.fetcher.calls;
        for n in calls.router.nodes() {
            calls.nodes.store(n.id());
        }
        ClusterMetadata { reader, accept }
    }

    fn count(&self, op: &'static str, from_node: bool) {
        let source = if from_node { NODE } else { ORIGIN }.source;
        self.reader
            .metrics
            .metadata
            .get_or_create(&MetadataLabel { op, source })
            .inc();
    }

    /// `req` from `block`'s owner (`ask`: one node asked, with this asker's TTL
    /// and, when hedged, for cached answers only), else from the origin
    /// (`origin`, shoal's headers stripped); counted as `op` by where it came from.
    async fn through<R, T, F, O>(
        &self,
        op: &'static str,
        block: &BlockId<'_>,
        (req, max_age): (&R, Option<Duration>),
        ask: impl Fn(NodeHandle, R) -> F,
        origin: impl FnOnce(R) -> O,
    ) -> Result<T, StoreError>
    where
        R: Clone + ExtraHeaders,
        F: Future<Output = Result<T, StoreError>>,
        O: Future<Output = Result<T, StoreError>>,
    {
        let asked = |node, hedged| {
            let mut req = req.clone();
            node_proto::set_metadata_ttl(&mut req, self.accept);
            node_proto::set_max_age(&mut req, max_age);
            node_proto::set_cached_only(&mut req, hedged);
            ask(node, req)
        };
        match self.reader.fetcher.route(block, asked).await {
            Ok(answer) => {
                self.count(op, true);
                Ok(answer)
            }
            Err(Routed::Answer(e)) => {
                self.count(op, true);
                Err(e)
            }
            Err(Routed::Fallback(cause)) => {
                self.fell_back(op, cause);
                let mut req = req.clone();
                node_proto::strip(&mut req);
                origin(req).await
            }
        }
    }

    fn fell_back(&self, op: &'static str, cause: super::Fallback) {
        self.reader
            .metrics
            .metadata_fallbacks
            .get_or_create(&cause.label())
            .inc();
        self.count(op, false);
    }
}

impl ClusterMetadata {
    /// [`ObjectStore::head`], answered no older than `max_age` if given.
    pub async fn head_within(
        &self,
        req: &GetObject,
        max_age: Option<Duration>,
    ) -> Result<ObjectMeta, StoreError> {
        let block = BlockId {
            bucket: &req.bucket,
            key: &req.key,
            index: 0,
        };
        let (calls, origin) = (&self.reader.fetcher.calls, self.reader.origin());
        self.through(
            "head",
            &block,
            (req, max_age),
            |node, req| async move { calls.node_head(&node, &req).await },
            |req| async move { origin.head(&req).await },
        )
        .await
    }

    /// [`ObjectStore::list_page`], answered no older than `max_age` if given.
    pub async fn list_page_within(
        &self,
        req: &ListRequest,
        max_age: Option<Duration>,
    ) -> Result<ListPage, StoreError> {
        let key = list_page_key(
            &req.prefix,
            req.delimiter.as_deref().unwrap_or(""),
            req.continuation_token.as_deref().unwrap_or(""),
        );
        let block = BlockId {
            bucket: &req.bucket,
            key: &key,
            index: 0,
        };
        let (calls, origin) = (&self.reader.fetcher.calls, self.reader.origin());
        self.through(
            "list",
            &block,
            (req, max_age),
            |node, req| async move { calls.node_list(&node, &req).await },
            |req| async move { origin.list_page(&req).await },
        )
        .await
    }
}

#[async_trait::async_trait]
impl ObjectStore for ClusterMetadata {
    fn name(&self) -> &str {
        "cluster"
    }

    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        self.head_within(req, None).await
    }

    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        self.list_page_within(req, None).await
    }

    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        self.reader.origin().get_range(req).await
    }

    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        self.reader.origin().head_bucket(bucket).await
    }
}
