//! The cluster reader: object bytes from the cache cluster, never failing a read the
//! origin would serve and never stalling one.
//!
//! A read is split into cluster blocks. Each block comes from the client RAM tier,
//! else from a fetch already in flight, else from its owner node (ranked by
//! [`crate::route`]) with `If-Match` on the pinned ETag. A node that fails to
//! connect is marked down and the next ranked node asked, once; a slow one is hedged
//! to the next node within the hedge budget; when no node answers in time the block
//! comes straight from the origin, counted by cause ([`metrics::Fallback`]). Up to
//! `read_window` blocks are in flight per stream, and all fetches together hold at
//! most a fixed budget of blocks in memory.
//!
//! Embedding: build a [`ClusterReader`], `open` an object, read from the [`Handle`].

mod fetch;
pub mod metrics;
mod reader;

pub use metrics::{ClusterMetrics, Fallback};
pub use reader::{node_client, ClusterReader, Handle, ReaderOptions, Warmed};
