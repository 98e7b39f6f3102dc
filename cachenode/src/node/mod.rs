//! The node: which version a request means, then that version's blocks from RAM,
//! disk or one fetch.
//!
//! [`Node`] holds four things, each its own type: the caching [`Rules`], the
//! known object [`versions::Versions`], the tier pipeline ([`shoal::blocks::Tiers`]:
//! RAM, disk, one flight per missing block), and the [`fetch::Source`] a missing
//! block comes from (the origin, or on a gateway its owner node). A cold read,
//! end to end: `api::objects::get` asks [`Node::resolve_pinned`] or
//! [`Node::resolve_for`] for the version (known, else one HEAD or block-0 fetch in
//! flight), then [`Node::read`] (`read.rs`) streams its range: each node block is
//! opened on the tiers, which either hold it or start (or join) its fetch in a
//! task of its own; the fetch is one ranged GET of the block with `If-Match`
//! whose chunks land in a growing block that every asker streams from its first
//! byte; a cut body is resumed from where it stopped; the tiers keep the block
//! once it is whole. A small read deep in a cold block also asks the origin for
//! just its bytes. Listing pages and missing keys are kept in the
//! [`MetadataCache`] for askers that accept them. Purges drop versions, blocks and
//! the metadata they touch here; the fan-out passes them on.

mod ask;
mod error;
mod fetch;
mod handback;
mod joined;
mod own_headers;
mod peer;
mod peer_clients;
mod peer_meta;
mod pinned;
mod read;
mod stop;
mod version_log;
mod versions;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use shoal::blocks::{BlockKey, DiskTier, Tiers};
use shoal::node_proto::Purge;
use shoal::store::budget::Class;
use shoal::store::{ObjectMeta, ObjectStore};

pub use crate::access::trace::PeerRole;
pub use crate::metadata_cache::{Answer, Listed, MetadataCache, MetadataStats};
pub use ask::only_if_cached;
pub use error::NodeError;
pub use fetch::Upstream;
pub use handback::{HandbackError, Handed, Taken};
pub use own_headers::OWN_HEADERS;
pub use peer::Peers;
pub use peer_clients::PeerClients;
pub use read::{BlockStream, SyncStream};

use crate::fanout::Fanout;
use crate::metrics::{KindLabel, Metrics};
use crate::rules::{Policy, Rules};
use versions::{Asked, Fresh, Versions};

pub struct NodeOptions {
    pub block_size: u64,
    pub revalidate_after: Duration,
    pub max_age: Duration,
    pub ram_bytes: u64,
    pub disk: Option<(std::path::PathBuf, u64)>,
    /// The caching rules; keys no rule sizes get `block_size` blocks.
    pub rules: Vec<shoal::config::CacheRule>,
    /// How the RAM and disk tiers give blocks up.
    pub evicting: shoal::blocks::Evicting,
    /// A gateway's cluster: misses go to owners through it.
    pub upstream: Option<Upstream>,
    /// A node that knows its cluster: misses of blocks it owns are asked of
    /// their runner-up first.
    pub peers: Option<Peers>,
    /// Requests per origin read, the first included (a cut body is resumed).
    pub origin_attempts: u32,
    /// The metadata cache: the longest an answer is kept, and its byte bound.
    pub metadata_ttl: Duration,
    pub metadata_size: u64,
}

/// A request as it arrived: how many nodes it passed through, and how old
/// metadata its asker accepts (`x-shoal-metadata-ttl`, within the node's bound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Via {
    pub hop: u32,
    pub accept: Option<Duration>,
    /// Answer from RAM or disk only, never asking the origin or another node
    /// (`only-if-cached`).
    pub cached_only: bool,
    /// Asked by another node (`only-if-cached`), which judges this one by how
    /// soon its answer starts: the headers go out at once, before the bytes
    /// of a block still on its way, which then stream as they arrive.
    pub acknowledge: bool,
    /// What the asker wants the bytes for (`x-shoal-class`): the class of the
    /// origin requests a miss makes.
    pub class: Class,
    /// The oldest metadata the asker takes at all (`Cache-Control: max-age`,
    /// `no-cache`): a bound under every other, so that a refresh is answered
    /// by the origin now and what it answers replaces what is kept.
    pub max_age: Option<Duration>,
}

impl Via {
    /// `age`, within the asker's `max-age`.
    pub fn bounded(&self, age: Duration) -> Duration {
        self.max_age.map_or(age, |m| age.min(m))
    }
}

pub struct Node {
    rules: Rules,
    versions: Versions,
    /// Flights are kept apart by whether the fetch goes upstream, so that a
    /// forwarded request that comes back to this node never waits on its own
    /// forward.
    tiers: Tiers<bool, NodeError>,
    source: Arc<fetch::Source>,
    /// The disk tier, for its index scan's progress.
    disk_tier: Option<Arc<DiskTier>>,
    /// Where the disk tier's files are, if it has one.
    disk_dir: Option<std::path::PathBuf>,
    /// Listing pages and missing keys.
    pub metadata: MetadataCache,
    pub metrics: Arc<Metrics>,
}

impl Node {
    pub fn new(origin: Arc<dyn ObjectStore>, o: NodeOptions) -> std::io::Result<Node> {
        let metrics = Arc::new(Metrics::default());
        let disk = match &o.disk {
            Some((dir, bytes)) if *bytes > 0 => {
                let tier =
                    Arc::new(DiskTier::open_unindexed(dir, *bytes)?.evicting(o.evicting.clone()));
                index_in_background(tier.clone(), metrics.clone())?;
                Some(tier)
            }
            _ => None,
        };
        let versions = Versions::new(o.revalidate_after, o.max_age);
        let versions = match &o.disk {
            Some((dir, bytes)) if *bytes > 0 => match version_log::VersionLog::open(dir, o.max_age)
            {
                Ok((log, restored)) => {
                    tracing::info!(versions = restored.len(), "object versions read back");
                    versions.with_log(log, restored)
                }
                // A read-only or full disk still serves its blocks; a restart
                // then forgets their versions, as before the log.
                Err(e) => {
                    tracing::warn!("cannot keep object versions in {}: {e}", dir.display());
                    versions
                }
            },
            _ => versions,
        };
        let largest = o
            .rules
            .iter()
            .filter_map(|r| r.block_size)
            .fold(o.block_size, u64::max);
        Ok(Node {
            tiers: Tiers::evicting(
                o.ram_bytes,
                largest,
                disk.clone()
                    .map(|d| d as Arc<dyn shoal::blocks::BlockCache>),
                &o.evicting,
            ),
            disk_tier: disk,
            versions,
            disk_dir: o.disk.as_ref().filter(|d| d.1 > 0).map(|d| d.0.clone()),
            rules: Rules::new(o.rules, o.block_size),
            metadata: MetadataCache::new(o.metadata_ttl, o.metadata_size),
            source: Arc::new(fetch::Source {
                origin,
                attempts: o.origin_attempts.max(1),
                upstream: o.upstream,
                peers: o.peers,
                metrics: metrics.clone(),
            }),
            metrics,
        })
    }

    /// What the rules say of `bucket/key`.
    pub fn policy(&self, bucket: &str, key: &str) -> Policy {
        self.rules.policy(bucket, key)
    }

    /// The runner-ups this node asks before the origin, if it knows its cluster.
    pub fn peers(&self) -> Option<&Peers> {
        self.source.peers.as_ref()
    }

    fn block_key(bucket: &str, key: &str, etag: &str, index: u64, bs: u64) -> BlockKey {
        BlockKey::new(bucket, key, etag, bs, index)
    }

    /// What is known of an object, if it may still be used; a rule's `ttl` that
    /// ran out drops the object here.
    async fn known_fresh(
        &self,
        bucket: &str,
        key: &str,
        policy: &Policy,
    ) -> Option<(ObjectMeta, Duration)> {
        match self.versions.fresh(bucket, key, policy.ttl) {
            Fresh::Known(meta, age) => Some((meta, age)),
            Fresh::Expired => {
                self.metrics.expired.inc();
                self.purge_object(bucket, key).await;
                None
            }
            Fresh::Unknown => None,
        }
    }

    /// Passes `e` on; when it says the version asked for is gone (412, 404), what
    /// is cached of the object goes too.
    async fn gone_if(&self, bucket: &str, key: &str, e: NodeError) -> NodeError {
        if e.says_gone() {
            self.purge_object(bucket, key).await;
        }
        e
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
        let trusted = self.trusted(via);
        let counted = !reading && via.accept.is_some();
        let known = self.known_fresh(bucket, key, &policy).await;
        if let Some((meta, age)) = known.clone() {
            match if_match {
                // A version is immutable: a known ETag needs no revalidation.
                Some(e) if e == meta.etag => return Ok(meta),
                None if age < trusted => {
                    if counted {
                        self.metrics.metadata_request("head", "hit");
                    }
                    return Ok(meta);
                }
                _ => {}
            }
        }
        if counted {
            self.metrics.metadata_request("head", "miss");
        }
        if via.cached_only {
            return Err(NodeError::NotCached);
        }
        let forward = self.source.forwards(via, bucket, key, 0);
        if known.is_some() {
            crate::access::trace::revalidated();
        }
        // The origin's HEAD is counted where it is asked: a runner-up may
        // answer first.
        if forward {
            self.metrics.origin_request("cluster_head");
        }
        let asked = match (forward, reading) {
            (false, _) => Asked::Origin,
            (true, true) => Asked::OwnerBlock,
            (true, false) => Asked::OwnerHead,
        };
        let learned = self
            .versions
            .learn(&self.source, (bucket, key), if_match, via, asked);
        match shoal::store::budget::within(via.class, learned).await {
            Ok(meta) => Ok(meta),
            Err(e) => Err(self.gone_if(bucket, key, e).await),
        }
    }

    /// The version `etag` of an object, if this node knows it already.
    pub fn known(&self, bucket: &str, key: &str, etag: &str) -> Option<ObjectMeta> {
        self.versions.known(bucket, key, etag)
    }

    /// How long a known version answers a request without revalidation: an
    /// asker that takes metadata older than `revalidate_after` takes a version
    /// known that long.
    fn trusted(&self, via: Via) -> Duration {
        self.versions.trusted(via)
    }

    /// The latest version of an object, if known recently enough to answer `via`
    /// without asking the origin.
    pub fn known_for(&self, bucket: &str, key: &str, via: Via) -> Option<ObjectMeta> {
        self.known_aged(bucket, key, via).map(|(meta, _)| meta)
    }

    /// [`Self::known_for`], with how long ago the origin confirmed it.
    pub fn known_aged(&self, bucket: &str, key: &str, via: Via) -> Option<(ObjectMeta, Duration)> {
        match self
            .versions
            .fresh(bucket, key, self.policy(bucket, key).ttl)
        {
            Fresh::Known(meta, age) if age < self.trusted(via) => Some((meta, age)),
            _ => None,
        }
    }

    /// The version `etag` of an object, if known, with how long ago the origin
    /// confirmed it: a version named is good at any age (versions never change).
    pub fn known_version_aged(
        &self,
        bucket: &str,
        key: &str,
        etag: &str,
    ) -> Option<(ObjectMeta, Duration)> {
        match self
            .versions
            .fresh(bucket, key, self.policy(bucket, key).ttl)
        {
            Fresh::Known(meta, age) if meta.etag == etag => Some((meta, age)),
            _ => None,
        }
    }

    /// Drops every cached block and version of one object; returns blocks dropped.
    /// A version that was known and is gone takes the listings that showed it.
    pub async fn purge_object(&self, bucket: &str, key: &str) -> u64 {
        if self.versions.forget(bucket, key) {
            self.metadata.forget_key(bucket, key);
        }
        self.tiers.remove_object(bucket, key).await
    }

    /// Drops every version of one object but `etag` (an overwrite whose new
    /// version may already be warm); returns blocks dropped.
    pub async fn purge_other_versions(&self, bucket: &str, key: &str, etag: &str) -> u64 {
        self.versions.forget_unless(bucket, key, etag);
        self.tiers.remove_other_versions(bucket, key, etag).await
    }

    /// Drops everything under a prefix; returns blocks dropped.
    pub async fn purge_prefix(&self, bucket: &str, prefix: &str) -> u64 {
        self.versions.forget_prefix(bucket, prefix);
        self.tiers.remove_prefix(bucket, prefix).await
    }

    /// Applies `target` here and, if `pass_on` (it did not come from another node),
    /// queues it for every other node; returns blocks dropped here.
    pub async fn invalidate(
        &self,
        fanout: Option<&Fanout>,
        bucket: &str,
        target: Purge,
        pass_on: bool,
    ) -> u64 {
        // Listings change with any change under them, a new version included.
        match &target {
            Purge::Key(k) | Purge::KeyExcept(k, _) => self.metadata.forget_key(bucket, k),
            Purge::Prefix(p) => self.metadata.forget_prefix(bucket, p),
        }
        let n = match &target {
            Purge::Key(k) => self.purge_object(bucket, k).await,
            Purge::Prefix(p) => self.purge_prefix(bucket, p).await,
            Purge::KeyExcept(k, e) => self.purge_other_versions(bucket, k, e).await,
        };
        let kind = if pass_on { "local" } else { "fanout" };
        self.metrics
            .invalidations
            .get_or_create(&KindLabel { kind })
            .inc();
        if pass_on {
            if let Some(f) = fanout {
                f.send(bucket, target);
            }
        }
        n
    }

    /// Brings the tier gauges and counters up to date (called before each scrape).
    pub fn refresh_gauges(&self) {
        // The cluster reader (strong mode's upstream, or the peers a miss asks
        // first: the same reader) reports the membership this node routes by.
        if let Some(r) = self.source.upstream.as_ref().map(|u| &u.reader).or(self
            .source
            .peers
            .as_ref()
            .map(|p| &p.reader))
        {
            r.refresh_gauges();
        }
        self.metrics.tiers(
            &self.tiers.ram_stats(),
            &self.tiers.disk_stats(),
            self.tiers.disk_failures(),
            self.tiers.disk_writes(),
            self.tiers.pool_stats(),
        );
        self.metrics.metadata(&self.metadata.stats());
        if let Some(d) = &self.disk_tier {
            self.metrics.disk_index(d.progress());
        }
    }

    /// Stops the disk tier's index scan, if it still runs: a successor took the
    /// tier over and scans it itself.
    pub fn stop_disk_index(&self) {
        if let Some(d) = &self.disk_tier {
            d.stop_index();
        }
    }
}

/// Reads the disk tier's index on a thread of its own: the node serves
/// meanwhile, finding blocks the scan has not reached by their files' names.
fn index_in_background(tier: Arc<DiskTier>, metrics: Arc<Metrics>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("disk-index".into())
        .spawn(move || match tier.index() {
            Ok(stats) => {
                tracing::info!(
                    blocks = stats.blocks,
                    bytes = stats.bytes,
                    removed = stats.removed,
                    "disk tier index read in {:?} (served from disk meanwhile)",
                    stats.took
                );
                metrics.disk_opened(&stats);
                metrics.disk_index(tier.progress());
            }
            Err(e) => tracing::warn!(
                "disk tier index scan ended early: {e}; blocks are found by name and nothing is evicted"
            ),
        })
        .map(drop)
}
