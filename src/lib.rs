//! shoal: mount an S3 bucket read-only and serve its reads from a cluster of cache nodes.
//!
//! This crate is what `shoal-node`, `shoal-mount`, the `shoal` CLI and any
//! embedding service share.
//!
//! # Layout
//!
//! Each module only uses the ones above it in this list:
//!
//! - [`net`]: how HTTP clients leave the host (proxy, trusted roots).
//! - [`aws`]: AWS's credential and region chains (their providers over shoal's
//!   own HTTP client), endpoint names, the environment they read.
//! - [`store`]: the I/O seam. [`store::ObjectStore`] is anything that answers S3's
//!   reads; [`store::s3::S3Client`] is the real one, with option types of its own,
//!   and an in-memory store and a fault-injecting wrapper are its doubles (for
//!   tests of code built on the library).
//! - [`config`]: the one TOML schema, validated once into typed sections that
//!   convert into the store's options.
//! - [`node_proto`]: shoal's own protocol between readers and nodes on top of S3
//!   (hop and cached-only headers, the not-cached answer, purges).
//! - [`blocks`]: block identity, the RAM and disk tiers, single flight, and the
//!   tier pipeline (RAM, disk, one fetch, fill) both the node and the reader use.
//! - [`route`]: which node owns a block (rendezvous hashing, normative) and this
//!   client's live view of each node.
//! - [`cluster`]: the cluster reader: blocks from their owners with failover,
//!   hedging and origin fallback.
//! - [`exposition`]: `/metrics` in the format the scraper asks for.
//! - [`notify`]: telling systemd a service is ready; [`log_limit`]: log lines that
//!   repeat at most once per interval; [`fd_limit`]: room for many connections;
//!   [`heap`]: an allocator that keeps no more than the blocks need.

pub mod aws;
pub mod blocks;
pub mod cluster;
pub mod config;
pub mod exposition;
pub mod fd_limit;
pub mod formats;
pub mod heap;
pub mod log_limit;
pub mod net;
pub mod node_proto;
pub mod notify;
pub mod route;
pub mod scope;
pub mod store;

/// Completes the region chain at a program's start where only the instance
/// metadata can (AWS's own endpoint, no region named): a second at most when there
/// is no metadata service. The network I/O is [`aws::region`]'s; the decision and
/// the change are the config's.
pub async fn settle_region(cfg: &mut config::Config) {
    let Some(network) = cfg.region_from_instance().cloned() else {
        return;
    };
    let deadline = std::time::Duration::from_secs(1);
    if let Some(r) = aws::region::from_instance_metadata(&network, deadline).await {
        cfg.set_instance_region(r);
    }
}
