//! Every metric the node exports, named in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodStatus {
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

pub const RAM: TierLabel = TierLabel { tier: "ram" };
pub const DISK: TierLabel = TierLabel { tier: "disk" };
pub const ORIGIN: TierLabel = TierLabel { tier: "origin" };

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HopLabel {
    pub hop: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabel {
    pub version: &'static str,
}

#[derive(Default)]
pub struct Metrics {
    /// Always 1, labelled with the version: `shoal status` reads it.
    pub build_info: Family<VersionLabel, Gauge>,
    /// Unix time the node started, for uptime.
    pub start_time_seconds: Gauge,
    /// HTTP requests answered, by method and status.
    pub requests: Family<MethodStatus, Counter>,
    /// Body bytes served, by the tier the block came from.
    pub bytes_served: Family<TierLabel, Counter>,
    /// Block lookups that found the block, by tier.
    pub hits: Family<TierLabel, Counter>,
    /// Block lookups that did not, by tier.
    pub misses: Family<TierLabel, Counter>,
    /// Requests sent to the origin, by kind (block, head, list).
    pub origin_requests: Family<KindLabel, Counter>,
    /// Body bytes received from the origin.
    pub origin_bytes: Counter,
    /// Block requests that waited on a fetch already in flight.
    pub coalesced_waits: Counter,
    /// Blocks evicted, by tier (read from the tiers at scrape time).
    pub evictions: Family<TierLabel, Gauge>,
    /// Disk blocks that failed their checksum and were dropped.
    pub checksum_failures: Gauge,
    /// Bytes held, by tier.
    pub cache_bytes: Family<TierLabel, Gauge>,
    /// Byte bound, by tier.
    pub cache_capacity_bytes: Family<TierLabel, Gauge>,
    /// Objects or prefixes purged through the admin API.
    pub purges: Counter,
    /// How long rebuilding the disk tier's index took at start.
    pub disk_index_rebuild_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Blocks found on disk at start, and leftover or unreadable files removed.
    pub disk_blocks_at_start: Gauge,
    pub disk_files_removed_at_start: Gauge,
    /// Requests passed through to the origin uncached because of the rules.
    pub uncached_requests: Counter,
    /// Objects whose cached blocks expired under a rule's `ttl`.
    pub expired: Counter,
    /// Requests that arrived from another node (carrying a hop count).
    pub hop_requests: Counter,
    /// Misses a gateway did not forward because the request was at its hop limit.
    pub hop_limited: Counter,
    /// Misses of blocks this gateway owns itself (fetched from the origin).
    pub owned_misses: Counter,
    /// Misses a gateway forwarded, by the hop count the request arrived with.
    pub forwarded: Family<HopLabel, Counter>,
    /// Blocks a gateway fetched through the cluster, and their bytes.
    pub cluster_fetches: Counter,
    pub cluster_bytes: Counter,
    /// Invalidations applied here, by where they came from (local, fanout).
    pub invalidations: Family<KindLabel, Counter>,
    /// Invalidation batches sent to other nodes, by result (ok, failed).
    pub fanout_batches: Family<KindLabel, Counter>,
    /// Invalidations waiting to be sent.
    pub fanout_queued: Gauge,
    /// Writes forwarded to the origin, by kind (put, delete, multipart, ...).
    pub writes: Family<KindLabel, Counter>,
    /// Blocks warmed on their owners after a PUT, by result (ok, failed).
    pub warmed_blocks: Family<KindLabel, Counter>,
    /// PUTs whose warming finished (all blocks tried).
    pub warms_done: Counter,
}

impl Metrics {
    pub fn register(&self, r: &mut Registry) {
        let p = r.sub_registry_with_prefix("shoal_node");
        p.register(
            "uncached_requests",
            "Requests passed through to the origin uncached (rules)",
            self.uncached_requests.clone(),
        );
        p.register(
            "expired_objects",
            "Objects whose cached blocks expired under a rule's ttl",
            self.expired.clone(),
        );
        p.register(
            "hop_requests",
            "Requests that arrived from another node",
            self.hop_requests.clone(),
        );
        p.register(
            "hop_limited",
            "Misses not forwarded because the request was at the hop limit",
            self.hop_limited.clone(),
        );
        p.register(
            "owned_misses",
            "Misses of blocks a gateway owns itself, fetched from the origin",
            self.owned_misses.clone(),
        );
        p.register(
            "forwarded",
            "Misses forwarded to owners, by the hop count they arrived with",
            self.forwarded.clone(),
        );
        p.register(
            "cluster_fetches",
            "Blocks fetched through the cluster (gateway misses)",
            self.cluster_fetches.clone(),
        );
        p.register(
            "cluster_bytes",
            "Bytes fetched through the cluster (gateway misses)",
            self.cluster_bytes.clone(),
        );
        p.register(
            "invalidations",
            "Invalidations applied, by source (local, fanout)",
            self.invalidations.clone(),
        );
        p.register(
            "fanout_batches",
            "Invalidation batches sent to other nodes, by result",
            self.fanout_batches.clone(),
        );
        p.register(
            "fanout_queued",
            "Invalidations waiting to be sent",
            self.fanout_queued.clone(),
        );
        p.register(
            "writes",
            "Writes forwarded to the origin, by kind",
            self.writes.clone(),
        );
        p.register(
            "warmed_blocks",
            "Blocks warmed on their owners after a write, by result",
            self.warmed_blocks.clone(),
        );
        p.register(
            "warms_done",
            "Writes whose warming finished",
            self.warms_done.clone(),
        );
        self.build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.start_time_seconds.set(now as i64);
        p.register(
            "build_info",
            "Always 1; the label is the node's version",
            self.build_info.clone(),
        );
        p.register(
            "start_time_seconds",
            "Unix time the node started",
            self.start_time_seconds.clone(),
        );
        p.register(
            "requests",
            "HTTP requests answered, by method and status",
            self.requests.clone(),
        );
        p.register(
            "bytes_served",
            "Body bytes served, by the tier the block came from",
            self.bytes_served.clone(),
        );
        p.register(
            "hits",
            "Block lookups that found the block, by tier",
            self.hits.clone(),
        );
        p.register(
            "misses",
            "Block lookups that missed, by tier",
            self.misses.clone(),
        );
        p.register(
            "origin_requests",
            "Requests sent to the origin, by kind",
            self.origin_requests.clone(),
        );
        p.register(
            "origin_bytes",
            "Body bytes received from the origin",
            self.origin_bytes.clone(),
        );
        p.register(
            "coalesced_waits",
            "Block requests that waited on a fetch in flight",
            self.coalesced_waits.clone(),
        );
        p.register(
            "evictions",
            "Blocks evicted since start, by tier",
            self.evictions.clone(),
        );
        p.register(
            "checksum_failures",
            "Disk blocks dropped for a bad checksum since start",
            self.checksum_failures.clone(),
        );
        p.register(
            "cache_bytes",
            "Bytes held, by tier",
            self.cache_bytes.clone(),
        );
        p.register(
            "cache_capacity_bytes",
            "Byte bound, by tier",
            self.cache_capacity_bytes.clone(),
        );
        p.register("purges", "Purge requests served", self.purges.clone());
        p.register(
            "disk_index_rebuild_seconds",
            "Time to rebuild the disk tier index at start",
            self.disk_index_rebuild_seconds.clone(),
        );
        p.register(
            "disk_blocks_at_start",
            "Blocks found on disk at start",
            self.disk_blocks_at_start.clone(),
        );
        p.register(
            "disk_files_removed_at_start",
            "Temporary or unreadable block files removed at start",
            self.disk_files_removed_at_start.clone(),
        );
    }
}
