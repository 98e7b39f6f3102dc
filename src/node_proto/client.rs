//! The S3 client a reader or a node uses to talk to one node.

use std::time::Duration;

use crate::config::{Addressing, ClusterConfig, RequestOptions, RetryPolicy};
use crate::store::s3::{S3Client, S3ClientOptions};

/// The S3 client for node `id` of `cluster` ([`node_options`]).
pub fn node_client(
    cluster: &ClusterConfig,
    region: &str,
    id: &str,
    pool_idle_per_host: usize,
) -> S3Client {
    S3Client::new(node_options(cluster, region, id, pool_idle_per_host))
        .expect("node client builds like the origin client")
}

/// How a client of node `id` of `cluster` is shaped: the cluster's credentials and
/// deadlines, no retries (failover, or the caller, is the retry), `Range` unsigned
/// so the node can widen it.
pub fn node_options(
    cluster: &ClusterConfig,
    region: &str,
    id: &str,
    pool_idle_per_host: usize,
) -> S3ClientOptions {
    let scheme = if cluster.tls { "https" } else { "http" };
    S3ClientOptions {
        throttling: None,
        endpoint: url::Url::parse(&format!("{scheme}://{id}"))
            .expect("a canonical node id is a URL authority"),
        region: region.to_owned(),
        addressing: Addressing::Path,
        credentials: cluster.credentials.clone(),
        timeouts: cluster.timeouts,
        retry: RetryPolicy {
            max_attempts: 1,
            base: Duration::from_millis(1),
            max: Duration::from_millis(1),
        },
        sign_range: false,
        pool_idle_per_host,
        network: cluster.network.clone(),
        request: RequestOptions::default(),
        aws: None,
    }
}
