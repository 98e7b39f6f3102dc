//! What every shoal test suite starts from: the real S3 origin in process, real
//! `shoal-node` and `shoal-mount` processes, their configs, S3 clients, data, and
//! the metrics they expose. Each crate's `tests/common` adds only what is its own
//! (an in-process node, say).

mod cgroup;
mod client;
mod config;
mod corpus;
mod data;
pub mod endpoint_slices;
mod kube;
mod metrics;
mod moto;
mod origin;
mod pki;
mod procs;
mod proxy;
mod wait;

pub use cgroup::{CgroupVersion, MemCgroup, MemUse};
pub use client::{client_options, node_s3_client};
pub use config::{
    cluster_toml, mount_toml, node_section, node_toml, origin_section, origin_toml, parse,
    without_auth,
};
pub use corpus::replay_corpus;
pub use data::data;
pub use endpoint_slices::{Conditions, EndpointSlicesApi, SliceEndpoint, SlicePort};
pub use kube::KubeApi;
pub use metrics::{metric, metric_or_zero, metric_required, metric_sum, scrape};
pub use moto::Moto;
pub use origin::{origin, origin_client, BUCKET};
pub use pki::PrivateCa;
pub use procs::{bin, free_addr, is_mounted, q, sh, sh_ok, signal, Mount, NodeProcess};
pub use proxy::Proxy;
pub use shoal_testorigin::aws_mock::{AwsMock, Issued, CONTAINER_TOKEN, ROLE_ARN};
pub use wait::{wait_for, wait_for_value, wait_until};

pub use shoal_testorigin::{FaultSettings, Origin, OriginOptions};

/// The key pair test nodes accept (`[auth]`) and test readers sign with.
pub const NODE_KEY: &str = "node-client";
pub const NODE_SECRET: &str = "node-client-secret-0123";
