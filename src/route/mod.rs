//! Routing: which node serves a block.
//!
//! [`placement`] is pure rendezvous hashing (the normative part: every client must
//! agree). [`membership`] keeps the current node set (static, from DNS, or from a Service's EndpointSlices).
//! [`state`] is this client's live view of each node (in-flight load, down marks,
//! latency) and turns a ranking into the node one request goes to.

pub mod kube;
pub mod membership;
pub mod placement;
pub mod state;

pub use membership::{Membership, Resolver, SystemResolver};
pub use placement::{list_page_key, BlockId, Candidate, NodeSet, PlacedNode, SEED};
pub use state::{
    Clock, NodeHandle, Pick, Router, RouterCounters, SystemClock, TestClock, TokioClock,
};
