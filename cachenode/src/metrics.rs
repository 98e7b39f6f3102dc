//! Every metric the node exports, named in one place (prefix `shoal_node_`;
//! counters end in `_total` when exposed). The gateway's cluster reader adds its
//! own (`shoal_client_`, see `shoal::cluster::metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use shoal::blocks::{DiskFailures, TierStats};
use shoal::cluster::metrics::catch_up;

use crate::access::limits::Limit;
use crate::access::RefusalLabel;

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

/// What a request to the origin is for ([`Metrics::origin_request`]).
const ORIGIN_KINDS: [&str; 7] = [
    "block",
    "range",
    "head",
    "list",
    "bucket",
    "object",
    "cluster_head",
];
/// Which ops the metadata cache and its runner-up asks count.
const METADATA_OPS: [&str; 2] = ["list", "head"];
/// What the metadata cache did for a listing or a HEAD.
const METADATA_RESULTS: [&str; 3] = ["hit", "miss", "coalesced"];

/// What the node knows at start that labels its series.
pub struct Known<'a> {
    /// The keys of `[auth]` (none without authentication).
    pub keys: &'a [shoal::config::AuthKey],
    /// A gateway's hop limit: its misses are forwarded with hop counts below it.
    pub hop_limit: Option<u32>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetadataLabel {
    pub op: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

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
    /// Blocks evicted, by tier (brought up to date from the tiers at scrape time).
    pub evictions: Family<TierLabel, Counter>,
    /// Disk blocks that failed their checksum and were dropped.
    pub checksum_failures: Counter,
    /// Block buffers allocated because none was free, and buffers used again.
    pub buffers_allocated: Counter,
    pub buffers_reused: Counter,
    /// Disk blocks that could not be read (served from the origin instead).
    pub disk_read_failures: Counter,
    /// Blocks the disk tier could not write (full, read-only, permissions).
    pub disk_write_failures: Counter,
    /// Fetched blocks on their way to the disk tier.
    pub disk_writes: Gauge,
    /// Client connections open now, and those refused at `node.max_connections`.
    pub connections_open: Gauge,
    pub connections_refused: Counter,
    /// Connections closed for sending headers too slowly or for idling.
    pub connections_timed_out: Counter,
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
    /// The index scan at start, which the node serves beside: block files read
    /// so far, and 1 once it is done (the three gauges above are set then).
    pub disk_index_blocks: Gauge,
    pub disk_index_done: Gauge,
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
    /// Origin credentials fetched from the AWS chain, and refreshes forced by an
    /// expired-token answer.
    pub credential_fetches: Counter,
    pub expired_token_retries: Counter,
    /// Listings and HEADs asked with a metadata TTL, by operation (list, head)
    /// and result (hit, miss, coalesced).
    pub metadata_requests: Family<MetadataLabel, Counter>,
    /// The metadata cache: entries, bytes held, bound, evictions.
    pub metadata_entries: Gauge,
    pub metadata_bytes: Gauge,
    pub metadata_capacity_bytes: Gauge,
    pub metadata_evictions: Counter,
    /// Object answers by what the cache did (their `Cache-Status`).
    pub cache_status: Family<CacheLabel, Counter>,
    /// Requests refused before they ran, by key and reason (scope, unsigned,
    /// requests, bytes).
    pub refusals: Family<crate::access::RefusalLabel, Counter>,
    /// Requests admitted, by the key they were signed with.
    pub key_requests: Family<KeyLabel, Counter>,
    /// Access-log lines dropped because the writer fell behind.
    pub access_log_dropped: Counter,
    /// Misses of owned blocks asked of their runner-up node first, by result
    /// (hit, miss, timeout, error), and the bytes the hits brought.
    pub peer_fills: Family<ResultLabel, Counter>,
    pub peer_fill_bytes: Counter,
    /// Misses of blocks owned by another node (spills, hedges, failovers)
    /// asked of their owner first, by result, and the bytes the hits brought.
    /// A family of its own: the runner-up's series keep their names.
    pub owner_fills: Family<ResultLabel, Counter>,
    pub owner_fill_bytes: Counter,
    /// Only-if-cached asks of blocks (owner and runner-up fills, hedges)
    /// answered from this node's fetch in flight as it arrived.
    pub cached_only_joins: Counter,
    /// Owner-fill asks of blocks this node owns, answered as its own readers'
    /// requests are (a block it lacks fetched, once for every asker).
    pub owner_fill_asks: Counter,
    /// Misses of owned listing pages and HEADs asked of their runner-up node
    /// first, by op (list, head) and result.
    pub peer_metadata_fills: Family<MetadataLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabel {
    pub key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabel {
    pub status: &'static str,
}

impl Metrics {
    /// One request sent to the origin (or, `cluster_*`, to an owner node), also
    /// noted on the request it was made for.
    /// What the cache did for an object answer: counted, and noted on the request.
    pub fn cache_outcome(&self, o: crate::access::trace::Outcome) {
        self.cache_status
            .get_or_create(&CacheLabel { status: o.name() })
            .inc();
        crate::access::trace::outcome(o);
    }

    pub fn origin_request(&self, kind: &'static str) {
        debug_assert!(
            ORIGIN_KINDS.contains(&kind),
            "{kind} is not in ORIGIN_KINDS"
        );
        self.origin_requests
            .get_or_create(&KindLabel { kind })
            .inc();
        if kind.starts_with("cluster") {
            crate::access::trace::forwarded();
        } else {
            crate::access::trace::origin_request();
        }
    }

    /// One ask of another node for a block (`role`: its runner-up or its
    /// owner), by result; also noted on the request.
    pub fn peer_fill(
        &self,
        role: crate::access::trace::PeerRole,
        result: crate::access::trace::PeerFill,
    ) {
        let family = match role {
            crate::access::trace::PeerRole::RunnerUp => &self.peer_fills,
            crate::access::trace::PeerRole::Owner => &self.owner_fills,
        };
        family
            .get_or_create(&ResultLabel {
                result: result.name(),
            })
            .inc();
        crate::access::trace::peer_fill(result);
    }

    /// Block bytes another node sent instead of the origin.
    pub fn peer_fill_bytes(&self, role: crate::access::trace::PeerRole, n: u64) {
        match role {
            crate::access::trace::PeerRole::RunnerUp => self.peer_fill_bytes.inc_by(n),
            crate::access::trace::PeerRole::Owner => self.owner_fill_bytes.inc_by(n),
        };
    }

    /// One ask of a listing page's or HEAD's runner-up (`op`: list, head), by
    /// result; also noted on the request, as a block's is.
    pub fn peer_metadata_fill(&self, op: &'static str, result: crate::access::trace::PeerFill) {
        self.peer_metadata_fills
            .get_or_create(&MetadataLabel {
                op,
                result: result.name(),
            })
            .inc();
        crate::access::trace::peer_fill(result);
    }

    pub fn metadata_request(&self, op: &'static str, result: &'static str) {
        debug_assert!(METADATA_OPS.contains(&op) && METADATA_RESULTS.contains(&result));
        self.metadata_requests
            .get_or_create(&MetadataLabel { op, result })
            .inc();
    }

    /// Brings the metadata cache's levels and counts up to date.
    pub fn metadata(&self, s: &crate::metadata_cache::MetadataStats) {
        self.metadata_entries.set(s.entries as i64);
        self.metadata_bytes.set(s.used_bytes as i64);
        self.metadata_capacity_bytes.set(s.capacity_bytes as i64);
        catch_up(&self.metadata_evictions, s.evictions);
    }

    /// What opening the disk tier found.
    pub fn disk_opened(&self, s: &shoal::blocks::DiskStats) {
        self.disk_index_rebuild_seconds.set(s.took.as_secs_f64());
        self.disk_blocks_at_start.set(s.blocks as i64);
        self.disk_files_removed_at_start.set(s.removed as i64);
    }

    /// How far the disk tier's index scan has come.
    pub fn disk_index(&self, p: shoal::blocks::IndexProgress) {
        self.disk_index_blocks.set(p.read as i64);
        self.disk_index_done.set(p.done as i64);
    }

    /// Brings the tier levels and counts up to date.
    pub fn tiers(
        &self,
        ram: &TierStats,
        disk: &TierStats,
        failures: DiskFailures,
        disk_writes: usize,
        pool: shoal::blocks::PoolStats,
    ) {
        self.disk_writes.set(disk_writes as i64);
        catch_up(&self.buffers_allocated, pool.allocated);
        catch_up(&self.buffers_reused, pool.reused);
        for (label, s) in [(RAM, ram), (DISK, disk)] {
            self.cache_bytes
                .get_or_create(&label)
                .set(s.used_bytes as i64);
            self.cache_capacity_bytes
                .get_or_create(&label)
                .set(s.capacity_bytes as i64);
            catch_up(&self.evictions.get_or_create(&label), s.evictions);
        }
        catch_up(&self.checksum_failures, failures.checksum);
        catch_up(&self.disk_read_failures, failures.read);
        catch_up(&self.disk_write_failures, failures.write);
        let c = shoal::aws::credentials::stats();
        catch_up(&self.credential_fetches, c.fetches);
        catch_up(&self.expired_token_retries, c.forced);
    }

    /// Every series of a labelled family whose label values the node knows,
    /// at 0 from the start; a family whose values are not known in advance
    /// (requests by status) is on the page with no series until its first.
    fn zero_known(&self, known: &Known) {
        use crate::access::trace::{Outcome, PeerFill};
        use shoal::exposition::zeroed;
        zeroed(&self.bytes_served, [RAM, DISK, ORIGIN]);
        for f in [&self.hits, &self.misses, &self.evictions] {
            zeroed(f, [RAM, DISK]);
        }
        for f in [&self.cache_bytes, &self.cache_capacity_bytes] {
            zeroed(f, [RAM, DISK]);
        }
        let kinds = |ks: &[&'static str]| {
            ks.iter()
                .map(|&kind| KindLabel { kind })
                .collect::<Vec<_>>()
        };
        zeroed(&self.origin_requests, kinds(&ORIGIN_KINDS));
        zeroed(&self.invalidations, kinds(&["local", "fanout"]));
        zeroed(&self.fanout_batches, kinds(&["ok", "failed"]));
        zeroed(&self.warmed_blocks, kinds(&["ok", "failed"]));
        let writes = crate::access::write_kind::Kind::ALL.map(|k| k.label());
        zeroed(&self.writes, kinds(&writes));
        zeroed(
            &self.cache_status,
            Outcome::ALL.map(|o| CacheLabel { status: o.name() }),
        );
        let results = PeerFill::ALL.map(|r| ResultLabel { result: r.name() });
        zeroed(&self.peer_fills, results.clone());
        zeroed(&self.owner_fills, results);
        for op in METADATA_OPS {
            zeroed(
                &self.metadata_requests,
                METADATA_RESULTS.map(|result| MetadataLabel { op, result }),
            );
            let fills = PeerFill::ALL.map(|r| MetadataLabel {
                op,
                result: r.name(),
            });
            zeroed(&self.peer_metadata_fills, fills);
        }
        if let Some(limit) = known.hop_limit {
            zeroed(&self.forwarded, (0..limit).map(|hop| HopLabel { hop }));
        }
        if !known.keys.is_empty() {
            let refusal = |key: &str, reason| RefusalLabel {
                key: key.to_owned(),
                reason,
            };
            zeroed(&self.refusals, [refusal("", "unsigned")]);
            for k in known.keys {
                let key = &k.credentials.access_key_id;
                zeroed(&self.key_requests, [KeyLabel { key: key.clone() }]);
                let limits = &k.limits;
                let reasons = std::iter::once("scope")
                    .chain(limits.requests.map(|_| Limit::Requests.name()))
                    .chain(limits.bytes.map(|_| Limit::Bytes.name()));
                zeroed(&self.refusals, reasons.map(|r| refusal(key, r)));
            }
        }
    }

    pub fn register(&self, r: &mut Registry, known: &Known) {
        self.zero_known(known);
        self.build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.start_time_seconds.set(now as i64);
        let p = r.sub_registry_with_prefix("shoal_node");
        shoal::register_metrics!(p,
            "build_info" => self.build_info, "Always 1; the label is the node's version";
            "start_time_seconds" => self.start_time_seconds, "Unix time the node started";
            "requests" => self.requests, "HTTP requests answered, by method and status";
            "bytes_served" => self.bytes_served, "Body bytes served, by the tier the block came from";
            "hits" => self.hits, "Block lookups that found the block, by tier";
            "misses" => self.misses, "Block lookups that missed, by tier";
            "origin_requests" => self.origin_requests, "Requests sent to the origin, by kind";
            "origin_bytes" => self.origin_bytes, "Body bytes received from the origin";
            "coalesced_waits" => self.coalesced_waits, "Block requests that waited on a fetch in flight";
            "evictions" => self.evictions, "Blocks evicted, by tier";
            "checksum_failures" => self.checksum_failures, "Disk blocks dropped for a bad checksum";
            "block_buffers_allocated" => self.buffers_allocated, "Block buffers allocated because none was free to use again";
            "block_buffers_reused" => self.buffers_reused, "Block buffers used again for a new block";
            "disk_read_failures" => self.disk_read_failures, "Disk blocks that could not be read, fetched instead";
            "disk_write_failures" => self.disk_write_failures, "Blocks the disk tier could not write (full, read-only, permissions)";
            "disk_writes" => self.disk_writes, "Fetched blocks on their way to the disk tier (past 8, fetches wait for the disk)";
            "connections_open" => self.connections_open, "Client connections open";
            "connections_refused" => self.connections_refused, "Connections refused at node.max_connections";
            "connections_timed_out" => self.connections_timed_out, "Connections closed for slow headers or idling";
            "cache_bytes" => self.cache_bytes, "Bytes held, by tier";
            "cache_capacity_bytes" => self.cache_capacity_bytes, "Byte bound, by tier";
            "purges" => self.purges, "Purge requests served";
            "disk_index_rebuild_seconds" => self.disk_index_rebuild_seconds, "Time to rebuild the disk tier index at start";
            "disk_blocks_at_start" => self.disk_blocks_at_start, "Blocks found on disk at start";
            "disk_files_removed_at_start" => self.disk_files_removed_at_start, "Temporary or unreadable block files removed at start";
            "disk_index_blocks" => self.disk_index_blocks, "Block files the disk tier's index scan has read (the node serves meanwhile)";
            "disk_index_done" => self.disk_index_done, "1 once the disk tier's index scan is done";
            "uncached_requests" => self.uncached_requests, "Requests passed through to the origin uncached (rules)";
            "expired_objects" => self.expired, "Objects whose cached blocks expired under a rule's ttl";
            "hop_requests" => self.hop_requests, "Requests that arrived from another node";
            "hop_limited" => self.hop_limited, "Misses not forwarded because the request was at the hop limit";
            "owned_misses" => self.owned_misses, "Misses of blocks a gateway owns itself, fetched from the origin";
            "forwarded" => self.forwarded, "Misses forwarded to owners, by the hop count they arrived with";
            "cluster_fetches" => self.cluster_fetches, "Blocks fetched through the cluster (gateway misses)";
            "cluster_bytes" => self.cluster_bytes, "Bytes fetched through the cluster (gateway misses)";
            "invalidations" => self.invalidations, "Invalidations applied, by source (local, fanout)";
            "fanout_batches" => self.fanout_batches, "Invalidation batches sent to other nodes, by result";
            "fanout_queued" => self.fanout_queued, "Invalidations waiting to be sent";
            "writes" => self.writes, "Writes forwarded to the origin, by kind";
            "warmed_blocks" => self.warmed_blocks, "Blocks warmed on their owners after a write, by result";
            "warms_done" => self.warms_done, "Writes whose warming finished";
            "credential_fetches" => self.credential_fetches, "Origin credentials fetched from the AWS chain (first and refreshes)";
            "expired_token_retries" => self.expired_token_retries, "Requests sent again after the origin said the token expired";
            "metadata_requests" => self.metadata_requests, "Listings and HEADs asked with a metadata TTL, by operation and result";
            "metadata_entries" => self.metadata_entries, "Listing pages and missing keys held";
            "metadata_bytes" => self.metadata_bytes, "Bytes held by the metadata cache";
            "metadata_capacity_bytes" => self.metadata_capacity_bytes, "Bound of the metadata cache";
            "metadata_evictions" => self.metadata_evictions, "Metadata entries evicted for room";
            "cache_status" => self.cache_status, "Object answers by what the cache did (hit, miss, stale, bypass), as their Cache-Status says";
            "key_requests" => self.key_requests, "Requests admitted, by the key they were signed with";
            "refusals" => self.refusals, "Requests refused before they ran, by key and reason";
            "access_log_dropped" => self.access_log_dropped, "Access-log lines dropped for a writer behind";
            "peer_fills" => self.peer_fills, "Misses of owned blocks asked of their runner-up node (only-if-cached) first, by result";
            "peer_fill_bytes" => self.peer_fill_bytes, "Block bytes brought from runner-up nodes instead of the origin";
            "owner_fills" => self.owner_fills, "Misses of blocks another node owns (spills, hedges, failovers) asked of their owner (only-if-cached) first, by result";
            "owner_fill_bytes" => self.owner_fill_bytes, "Block bytes brought from owner nodes instead of the origin";
            "cached_only_joins" => self.cached_only_joins, "Only-if-cached asks of blocks answered from this node's fetch in flight as it arrived";
            "owner_fill_asks" => self.owner_fill_asks, "Owner-fill asks of blocks this node owns, answered as its own reads (a missing block fetched once for every asker)";
            "peer_metadata_fills" => self.peer_metadata_fills, "Misses of owned listing pages and HEADs asked of their runner-up node (only-if-cached) first, by op and result";
        );
    }
}
