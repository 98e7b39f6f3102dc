//! shoal: mount an S3 bucket read-only and serve its reads from a cluster of cache nodes.
//!
//! This crate is what `shoal-node`, `shoal-mount` and any embedding service share:
//! [`config`] (one TOML schema), [`s3`] (the S3 client), and the seams the cache
//! tiers and the cluster reader are built on ([`source`]).

pub mod cache;
pub mod cluster;
pub mod config;
pub mod notify;
pub mod route;
pub mod s3;
pub mod source;
