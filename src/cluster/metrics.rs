//! Every metric the cluster reader exports, named in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
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
    /// Spills (owner at its load limit), nodes marked down, from the router.
    pub spills: Gauge,
    pub marked_down: Gauge,
    /// Times a node's breaker opened after consecutive failures.
    pub breaker_trips: Gauge,
    /// Time block fetches waited for a request slot.
    pub queue_wait: prometheus_client::metrics::histogram::Histogram,
    /// Nodes known and nodes currently up.
    pub nodes: Gauge,
    pub nodes_up: Gauge,
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
            spills: Default::default(),
            marked_down: Default::default(),
            breaker_trips: Default::default(),
            queue_wait: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.0001, 4.0, 9),
            ),
            nodes: Default::default(),
            nodes_up: Default::default(),
        }
    }
}

impl ClusterMetrics {
    pub fn register(&self, r: &mut Registry) {
        let p = r.sub_registry_with_prefix("shoal_client");
        p.register("blocks", "Blocks delivered, by source", self.blocks.clone());
        p.register("bytes", "Bytes delivered, by source", self.bytes.clone());
        p.register(
            "node_requests",
            "Block requests sent, per node",
            self.node_requests.clone(),
        );
        p.register(
            "node_failures",
            "Block requests that failed, per node",
            self.node_failures.clone(),
        );
        p.register(
            "fallbacks",
            "Blocks read from the origin directly, by cause",
            self.fallbacks.clone(),
        );
        p.register(
            "failovers",
            "Requests retried on the next ranked node",
            self.failovers.clone(),
        );
        p.register(
            "hedges_sent",
            "Hedged requests sent",
            self.hedges_sent.clone(),
        );
        p.register(
            "hedges_won",
            "Hedged requests that answered first",
            self.hedges_won.clone(),
        );
        p.register(
            "coalesced_waits",
            "Block requests that joined a fetch in flight",
            self.coalesced_waits.clone(),
        );
        p.register(
            "stale",
            "Reads refused because the object changed",
            self.stale.clone(),
        );
        p.register(
            "prefetched",
            "Blocks fetched ahead of reads",
            self.prefetched.clone(),
        );
        p.register(
            "ram_bytes",
            "Bytes in the client RAM tier",
            self.ram_bytes.clone(),
        );
        p.register(
            "ram_capacity_bytes",
            "Bound of the client RAM tier",
            self.ram_capacity_bytes.clone(),
        );
        p.register(
            "spills",
            "Blocks sent past an owner at its load limit",
            self.spills.clone(),
        );
        p.register(
            "marked_down",
            "Times a node was marked down",
            self.marked_down.clone(),
        );
        p.register(
            "breaker_trips",
            "Times a node's breaker opened after consecutive failures",
            self.breaker_trips.clone(),
        );
        p.register(
            "queue_wait_seconds",
            "Time block fetches waited for a request slot",
            self.queue_wait.clone(),
        );
        p.register(
            "nodes",
            "Nodes in the current membership",
            self.nodes.clone(),
        );
        p.register("nodes_up", "Nodes not marked down", self.nodes_up.clone());
    }
}
