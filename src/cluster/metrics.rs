//! Every metric the cluster reader exports, named in one place (prefix
//! `shoal_client_`; counters end in `_total` when exposed).

use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::route::RouterCounters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

/// A metadata request: what it was (`list`, `head`) and who answered it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetadataLabel {
    pub op: &'static str,
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub node: String,
}

/// Why a block was read from the origin instead of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    Connect,
    FirstByte,
    Stall,
    Error,
    Down,
    NoNodes,
    /// Every node of the client's zone is down.
    ZoneDown,
    /// No request slot came free within the queue-wait bound.
    Shed,
}

impl Fallback {
    /// Each, for their series at 0 from the start.
    pub const ALL: [Fallback; 8] = [
        Fallback::Connect,
        Fallback::FirstByte,
        Fallback::Stall,
        Fallback::Error,
        Fallback::Down,
        Fallback::NoNodes,
        Fallback::ZoneDown,
        Fallback::Shed,
    ];

    pub fn label(self) -> CauseLabel {
        CauseLabel {
            cause: match self {
                Fallback::Connect => "connect",
                Fallback::FirstByte => "first_byte",
                Fallback::Stall => "stall",
                Fallback::Error => "error",
                Fallback::Down => "down",
                Fallback::NoNodes => "no_nodes",
                Fallback::ZoneDown => "zone_down",
                Fallback::Shed => "shed",
            },
        }
    }
}

pub const RAM: SourceLabel = SourceLabel { source: "ram" };
pub const NODE: SourceLabel = SourceLabel { source: "node" };
pub const ORIGIN: SourceLabel = SourceLabel { source: "origin" };
/// What a metadata request is ([`ClusterMetrics::metadata`]).
pub const METADATA_OPS: [&str; 2] = ["list", "head"];

pub struct ClusterMetrics {
    /// Blocks delivered, by where they came from.
    pub blocks: Family<SourceLabel, Counter>,
    /// Bytes delivered, by where they came from.
    pub bytes: Family<SourceLabel, Counter>,
    /// Requests sent to each node.
    pub node_requests: Family<NodeLabel, Counter>,
    /// Node requests that failed (any reason), per node.
    pub node_failures: Family<NodeLabel, Counter>,
    /// Blocks read from the origin directly, by cause.
    pub fallbacks: Family<CauseLabel, Counter>,
    /// Requests retried on the next ranked node after a failure.
    pub failovers: Counter,
    /// Hedged requests sent, and how many of them answered first.
    pub hedges_sent: Counter,
    pub hedges_won: Counter,
    /// Block requests that waited on a fetch already in flight.
    pub coalesced_waits: Counter,
    /// Blocks a pinned handle refused because the object changed (412).
    pub stale: Counter,
    /// Blocks fetched ahead of reads.
    pub prefetched: Counter,
    /// Bytes in the client RAM tier, and its bound.
    pub ram_bytes: Gauge,
    pub ram_capacity_bytes: Gauge,
    /// Bytes in the client disk tier (a mount's `disk_cache`), and its bound.
    pub disk_bytes: Gauge,
    pub disk_capacity_bytes: Gauge,
    /// Spills (owner at its load limit), nodes marked down and breaker trips, as
    /// the router counted them (brought up to date before each scrape).
    pub spills: Counter,
    pub marked_down: Counter,
    pub breaker_trips: Counter,
    /// Time block fetches waited for a request slot.
    pub queue_wait: Histogram,
    /// Nodes known and nodes currently up.
    pub nodes: Gauge,
    pub nodes_up: Gauge,
    /// Nodes ranked that are of the client's zone (0: it names none, or its zone
    /// has no node and every node is ranked).
    pub zone_nodes: Gauge,
    /// Listing pages and HEADs answered, by operation and by who answered (`node`,
    /// `origin`).
    pub metadata: Family<MetadataLabel, Counter>,
    /// Listing pages and HEADs the origin answered because no node did, by cause.
    pub metadata_fallbacks: Family<CauseLabel, Counter>,
    /// Block buffers allocated because none was free, and buffers used again.
    pub buffers_allocated: Counter,
    pub buffers_reused: Counter,
}

impl Default for ClusterMetrics {
    fn default() -> Self {
        Self {
            blocks: Default::default(),
            bytes: Default::default(),
            node_requests: Default::default(),
            node_failures: Default::default(),
            fallbacks: Default::default(),
            failovers: Default::default(),
            hedges_sent: Default::default(),
            hedges_won: Default::default(),
            coalesced_waits: Default::default(),
            stale: Default::default(),
            prefetched: Default::default(),
            ram_bytes: Default::default(),
            ram_capacity_bytes: Default::default(),
            disk_bytes: Default::default(),
            disk_capacity_bytes: Default::default(),
            spills: Default::default(),
            marked_down: Default::default(),
            breaker_trips: Default::default(),
            queue_wait: Histogram::new(exponential_buckets(0.0001, 4.0, 9)),
            nodes: Default::default(),
            nodes_up: Default::default(),
            zone_nodes: Default::default(),
            metadata: Default::default(),
            metadata_fallbacks: Default::default(),
            buffers_allocated: Default::default(),
            buffers_reused: Default::default(),
        }
    }
}

/// Raises `c` to `total`, a count kept elsewhere that only grows.
pub fn catch_up(c: &Counter, total: u64) {
    let now = c.get();
    if total > now {
        c.inc_by(total - now);
    }
}

impl ClusterMetrics {
    /// Copies the router's own counts into the exported counters.
    pub fn catch_up_router(&self, r: &RouterCounters) {
        catch_up(&self.spills, r.spills.load(Relaxed));
        catch_up(&self.marked_down, r.marked_down.load(Relaxed));
        catch_up(&self.breaker_trips, r.breaker_trips.load(Relaxed));
    }

    /// Every series whose label values are known, at 0: sources, causes,
    /// metadata ops, and (again at each scrape, as membership changes) the
    /// nodes ranked now.
    fn zero_known(&self) {
        use crate::exposition::zeroed;
        for f in [&self.blocks, &self.bytes] {
            zeroed(f, [RAM, NODE, ORIGIN]);
        }
        let causes = Fallback::ALL.map(Fallback::label);
        zeroed(&self.fallbacks, causes.clone());
        zeroed(&self.metadata_fallbacks, causes);
        for op in METADATA_OPS {
            let sources = [NODE, ORIGIN].map(|s| MetadataLabel {
                op,
                source: s.source,
            });
            zeroed(&self.metadata, sources);
        }
    }

    /// Each of `nodes` (the ranked ones) a series of the per-node families.
    pub fn zero_nodes<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) {
        for node in nodes {
            let l = NodeLabel {
                node: node.to_owned(),
            };
            crate::exposition::zeroed(&self.node_requests, [l.clone()]);
            crate::exposition::zeroed(&self.node_failures, [l]);
        }
    }

    pub fn register(&self, r: &mut Registry) {
        self.zero_known();
        let p = r.sub_registry_with_prefix("shoal_client");
        crate::register_metrics!(p,
            "blocks" => self.blocks, "Blocks delivered, by source";
            "bytes" => self.bytes, "Bytes delivered, by source";
            "node_requests" => self.node_requests, "Requests sent (blocks, listings, HEADs), per node";
            "node_failures" => self.node_failures, "Requests that failed, per node";
            "fallbacks" => self.fallbacks, "Blocks read from the origin directly, by cause";
            "failovers" => self.failovers, "Requests retried on the next ranked node";
            "hedges_sent" => self.hedges_sent, "Hedged requests sent";
            "hedges_won" => self.hedges_won, "Hedged requests that answered first";
            "coalesced_waits" => self.coalesced_waits, "Block requests that joined a fetch in flight";
            "stale" => self.stale, "Reads refused because the object changed";
            "prefetched" => self.prefetched, "Blocks fetched ahead of reads (or, for spliced reads, asked of their owners ahead)";
            "ram_bytes" => self.ram_bytes, "Bytes in the client RAM tier";
            "ram_capacity_bytes" => self.ram_capacity_bytes, "Bound of the client RAM tier";
            "disk_bytes" => self.disk_bytes, "Bytes in the client disk tier";
            "disk_capacity_bytes" => self.disk_capacity_bytes, "Bound of the client disk tier";
            "spills" => self.spills, "Blocks sent past an owner at its load limit";
            "marked_down" => self.marked_down, "Times a node was marked down";
            "breaker_trips" => self.breaker_trips, "Times a node's breaker opened after consecutive failures";
            "queue_wait_seconds" => self.queue_wait, "Time block fetches waited for a request slot";
            "nodes" => self.nodes, "Nodes in the current membership";
            "nodes_up" => self.nodes_up, "Nodes not marked down";
            "zone_nodes" => self.zone_nodes, "Nodes ranked that are of the client's zone (0: it names none, or its zone has no node and every node is ranked)";
            "metadata_requests" => self.metadata, "Listing pages and HEADs answered, by operation and source";
            "metadata_fallbacks" => self.metadata_fallbacks, "Listing pages and HEADs read from the origin directly, by cause";
            "block_buffers_allocated" => self.buffers_allocated, "Block buffers allocated because none was free to use again";
            "block_buffers_reused" => self.buffers_reused, "Block buffers used again for a new block";
        );
    }
}
