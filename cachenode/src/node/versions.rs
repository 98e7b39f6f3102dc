//! Which version of an object a request means.
//!
//! A request pinned with `If-Match` names it (versions are immutable, so a known
//! ETag needs no revalidation). Otherwise the latest version learned within
//! `revalidate_after` is served, else the origin (or, on a gateway, the owner of
//! the object's block 0) is asked again. Whatever is known is trusted for at most
//! `max_age`, and a rule's `ttl` expires it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal::blocks::Flights;
use shoal::store::{GetObject, ObjectMeta, StoreError};

use super::{Node, NodeError, Via};
use crate::metrics::KindLabel;
use crate::rules::Policy;

/// Object versions remembered; past this the map is cleared (it is only a cache).
const META_ENTRIES: usize = 100_000;

/// Where a version is learned from. Flights are kept apart by it, for the reason
/// block flights are kept apart by lane.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) enum Source {
    Origin,
    /// The owner of block 0, by fetching it (a GET follows anyway).
    OwnerBlock,
    /// The owner of block 0, by a HEAD (no block moves).
    OwnerHead,
}

type HeadKey = (String, String, Option<String>, Source);

/// What is known of one object.
#[derive(Clone)]
pub(super) struct Known {
    pub meta: ObjectMeta,
    /// When the origin last confirmed this version (revalidation, `max_age`).
    pub checked: Instant,
    /// When this version was first learned, which its blocks are no older than: a
    /// rule's `ttl` runs from here, however often the version is confirmed.
    pub since: Instant,
}

pub(super) struct Versions {
    pub metas: Mutex<HashMap<(String, String), Known>>,
    pub heads: Flights<HeadKey, ObjectMeta, NodeError>,
    pub revalidate_after: Duration,
    pub max_age: Duration,
}

impl Node {
    /// What is known of an object, if it may still be used: a rule's `ttl` expires
    /// it (blocks too), `max_age` bounds how long any version is trusted.
    async fn known_fresh(
        &self,
        bucket: &str,
        key: &str,
        policy: &Policy,
    ) -> Option<(ObjectMeta, Duration)> {
        let id = (bucket.to_owned(), key.to_owned());
        let known = self.versions.metas.lock().unwrap().get(&id).cloned()?;
        if policy.ttl.is_some_and(|ttl| known.since.elapsed() >= ttl) {
            self.metrics.expired.inc();
            self.purge_object(bucket, key).await;
            return None;
        }
        let age = known.checked.elapsed();
        (age < self.versions.max_age).then_some((known.meta, age))
    }

    /// Passes `e` on; when it says the version asked for is gone (412, 404), what
    /// is cached of the object goes too.
    pub(super) async fn gone_if(&self, bucket: &str, key: &str, e: NodeError) -> NodeError {
        if e.says_gone() {
            self.purge_object(bucket, key).await;
        }
        e
    }

    /// Notes that the origin (or an owner) confirmed `meta` just now.
    fn remember(&self, bucket: &str, key: &str, meta: &ObjectMeta) {
        let mut metas = self.versions.metas.lock().unwrap();
        if metas.len() >= META_ENTRIES {
            metas.clear();
        }
        let now = Instant::now();
        let id = (bucket.to_owned(), key.to_owned());
        let since = match metas.get(&id) {
            Some(k) if k.meta.etag == meta.etag => k.since,
            _ => now,
        };
        metas.insert(
            id,
            Known {
                meta: meta.clone(),
                checked: now,
                since,
            },
        );
    }

    /// The version to serve: the one named by `if_match`, or the latest one known
    /// within `revalidate_after`, else whatever the origin (or, on a gateway, the
    /// block's owner) says now.
    pub async fn resolve(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        via: Via,
    ) -> Result<ObjectMeta, NodeError> {
        self.resolve_for(bucket, key, if_match, via, true).await
    }

    /// [`Self::resolve`]; `reading` says a GET follows, so a gateway may as well
    /// learn the version by fetching block 0 from its owner (a HEAD asks the owner
    /// with a HEAD and moves no block).
    pub async fn resolve_for(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        via: Via,
        reading: bool,
    ) -> Result<ObjectMeta, NodeError> {
        let policy = self.policy(bucket, key);
        if let Some((meta, age)) = self.known_fresh(bucket, key, &policy).await {
            match if_match {
                // A version is immutable: a known ETag needs no revalidation.
                Some(e) if e == meta.etag => return Ok(meta),
                None if age < self.versions.revalidate_after => return Ok(meta),
                _ => {}
            }
        }
        let forward = self.forwards(via, bucket, key, 0);
        self.metrics
            .origin_requests
            .get_or_create(&KindLabel {
                kind: if forward { "cluster_head" } else { "head" },
            })
            .inc();
        let source = match (forward, reading) {
            (false, _) => Source::Origin,
            (true, true) => Source::OwnerBlock,
            (true, false) => Source::OwnerHead,
        };
        let origin = self.origin.clone();
        let reader = self.upstream.as_ref().map(|u| u.reader.clone());
        let (b, k, m) = (
            bucket.to_owned(),
            key.to_owned(),
            if_match.map(str::to_owned),
        );
        let flight_key = (b.clone(), k.clone(), m.clone(), source);
        let learn = async move {
            match (source, reader) {
                // The owner of block 0 knows the version (and keeps block 0).
                (Source::OwnerBlock, Some(reader)) => Ok(reader
                    .open_forwarded(&b, &k, None, m.as_deref(), via.hop)
                    .await?
                    .meta()
                    .clone()),
                (Source::OwnerHead, Some(reader)) => {
                    Ok(reader.head_forwarded(&b, &k, m.as_deref(), via.hop).await?)
                }
                _ => {
                    let mut req = GetObject::new(&b, &k);
                    req.if_match = m;
                    match origin.head_object(&req).await {
                        // A HEAD's 404 has no body to say which is missing; the
                        // origin would have said NoSuchBucket to the GET.
                        Err(StoreError::NoSuchKey { .. }) => match origin.head_bucket(&b).await {
                            Err(e @ StoreError::NoSuchBucket { .. }) => Err(e.into()),
                            _ => Err(StoreError::NoSuchKey { bucket: b, key: k }.into()),
                        },
                        r => Ok(r?),
                    }
                }
            }
        };
        match self.versions.heads.run(flight_key, learn).await.0 {
            Ok(meta) => {
                self.remember(bucket, key, &meta);
                Ok(meta)
            }
            Err(e) => Err(self.gone_if(bucket, key, e.into()).await),
        }
    }

    /// Like [`Self::resolve`] for a request pinned to `etag` that starts in node block
    /// `index`: when the version is not known yet, that block is fetched with
    /// `If-Match` and its answer supplies size and dates, saving the HEAD round trip
    /// (what a cold small file costs). The block lands in the tiers for the read.
    pub async fn resolve_pinned(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        etag: &str,
        index: u64,
        via: Via,
    ) -> Result<ObjectMeta, NodeError> {
        let policy = self.policy(bucket, key);
        if let Some((meta, _)) = self.known_fresh(bucket, key, &policy).await {
            if meta.etag == etag {
                return Ok(meta);
            }
        }
        if !policy.cache || self.upstream.is_some() {
            return self.resolve(bucket, key, Some(etag), via).await;
        }
        let bk = Node::block_key(bucket, key, etag, index, policy.block_size);
        let me = self.clone();
        let bk2 = bk.clone();
        let fetch = async move {
            let (data, meta) = me.fetch_from_origin(&bk2, None).await?;
            me.remember(&bk2.bucket, &bk2.key, &meta);
            Ok(data)
        };
        match self.tiers.fetch(bk, false, true, fetch).await {
            Ok(_) => match self.known(bucket, key, etag) {
                Some(meta) => Ok(meta),
                // Joined a block fetch that learned nothing, or forgotten since.
                None => self.resolve(bucket, key, Some(etag), via).await,
            },
            Err(e) => match NodeError::from(e) {
                // Past the end (or an empty object): the HEAD path answers exactly.
                NodeError::Origin(StoreError::InvalidRange { .. }) => {
                    self.resolve(bucket, key, Some(etag), via).await
                }
                e => Err(self.gone_if(bucket, key, e).await),
            },
        }
    }

    /// The version `etag` of an object, if this node knows it already.
    pub fn known(&self, bucket: &str, key: &str, etag: &str) -> Option<ObjectMeta> {
        let metas = self.versions.metas.lock().unwrap();
        let k = metas.get(&(bucket.to_owned(), key.to_owned()))?;
        (k.meta.etag == etag && k.checked.elapsed() < self.versions.max_age).then(|| k.meta.clone())
    }

    /// Forgets what is known of an object (it changed at the origin).
    pub fn forget_meta(&self, bucket: &str, key: &str) {
        self.versions
            .metas
            .lock()
            .unwrap()
            .remove(&(bucket.to_owned(), key.to_owned()));
    }

    /// Forgets the known version of an object unless it is `etag`.
    pub(super) fn forget_meta_unless(&self, bucket: &str, key: &str, etag: &str) {
        let mut metas = self.versions.metas.lock().unwrap();
        let id = (bucket.to_owned(), key.to_owned());
        if metas.get(&id).is_some_and(|k| k.meta.etag != etag) {
            metas.remove(&id);
        }
    }

    /// Forgets every known version under a prefix.
    pub(super) fn forget_prefix(&self, bucket: &str, prefix: &str) {
        self.versions
            .metas
            .lock()
            .unwrap()
            .retain(|(b, k), _| !(b == bucket && k.starts_with(prefix)));
    }
}
