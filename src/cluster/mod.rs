//! The cluster reader: object bytes from the cache cluster, never failing a read the
//! origin would serve and never stalling one.
//!
//! A read is split into cluster blocks ([`handle`]). Each block comes from the
//! client RAM tier, else from a fetch already in flight, else from its owner node
//! (ranked by [`crate::route`]) with `If-Match` on the pinned ETag ([`block`]). A
//! node that fails to connect is marked down and the next ranked node asked, once;
//! a slow one is hedged to the next node within the hedge budget; when no node
//! answers in time the block comes straight from the origin, counted by cause
//! ([`fetch`]). Every request to a node goes through one path with its deadlines
//! ([`call`]). Listings and HEADs take the same routes to their owners
//! ([`metadata`]). Up to `read_window` blocks are in flight per stream, and all fetches
//! together hold at most a fixed budget of blocks in memory. How far a handle's
//! reader is fetched ahead follows its reads ([`Readahead`]: the mount's and the
//! Python filesystem's).
//!
//! Embedding: build a [`ClusterReader`], `open` an object, read from the [`Handle`].
//! Nodes and the origin are [`crate::store::ObjectStore`]s, so a test gives it
//! doubles ([`ReaderParts`]).

mod block;
mod call;
mod error;
mod fetch;
mod handle;
mod metadata;
pub mod metrics;
mod nodes;
mod piped;
mod readahead;
mod reader;
#[cfg(test)]
mod tests;
mod visits;

pub use error::ReadError;
pub use handle::{Handle, Parts};
pub use metadata::ClusterMetadata;
pub use metrics::{ClusterMetrics, Fallback};
pub use nodes::{Nodes, S3Nodes};
pub use piped::Piped;
pub use readahead::Readahead;
pub use reader::{ClusterReader, ReaderOptions, ReaderParts, Warmed};
