//! The config file as written: serde types that mirror the TOML, checked only for
//! shape (unknown keys, wrong types, bad sizes and durations). Meaning is checked when
//! these become the types in [`super`].

use serde::Deserialize;

use super::units::{Dur, Size};

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub origin: Option<RawOrigin>,
    pub cluster: Option<RawCluster>,
    pub cache: Option<RawCache>,
    pub node: Option<RawNode>,
    pub mount: Option<RawMount>,
    pub auth: Option<RawAuth>,
    pub tls: Option<RawTls>,
    pub metrics: Option<RawMetrics>,
    pub gateway: Option<RawGateway>,
    pub rules: Option<Vec<RawRule>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    pub writes: Option<bool>,
    pub warm_on_write: Option<bool>,
}

/// One `[[rules]]` entry.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub pattern: Option<String>,
    pub cache: Option<bool>,
    pub block_size: Option<Size>,
    pub page_size: Option<Size>,
    pub ttl: Option<Dur>,
    pub list_ttl: Option<Dur>,
    pub pin: Option<bool>,
}

/// Where a key pair comes from: inline, from named environment variables, from a
/// profile of the AWS credentials file, or the standard `AWS_*` variables.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawCredentials {
    pub access_key_id: Option<String>,
    pub access_key_id_env: Option<String>,
    pub secret_access_key: Option<String>,
    pub secret_access_key_env: Option<String>,
    pub session_token: Option<String>,
    pub session_token_env: Option<String>,
    pub profile: Option<String>,
    pub anonymous: Option<bool>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawOrigin {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub addressing: Option<String>,
    pub credentials: Option<RawCredentials>,
    pub connect_timeout: Option<Dur>,
    pub first_byte_timeout: Option<Dur>,
    pub stall_timeout: Option<Dur>,
    pub max_attempts: Option<u32>,
    pub retry_base: Option<Dur>,
    pub retry_max: Option<Dur>,
    pub max_requests_per_second: Option<f64>,
    pub max_bytes_per_second: Option<Size>,
    pub max_concurrent_requests: Option<usize>,
    pub throttle_deadline: Option<Dur>,
    pub fips: Option<bool>,
    pub dual_stack: Option<bool>,
    pub proxy: Option<String>,
    pub ca_bundle: Option<String>,
    pub requester_pays: Option<bool>,
    pub expected_bucket_owner: Option<String>,
    pub sse_customer_key_env: Option<String>,
}

/// A node entry: `"host:port"` or `{ id = "host:port", weight = 2.0, zone = "a" }`.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum RawNodeEntry {
    Id(String),
    Full(RawNodeFull),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawNodeFull {
    pub id: String,
    pub weight: Option<f64>,
    pub zone: Option<String>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub nodes: Option<Vec<RawNodeEntry>>,
    pub dns: Option<String>,
    pub refresh: Option<Dur>,
    /// `NAMESPACE/SERVICE`: the nodes are the endpoints of that Service's
    /// EndpointSlices, watched.
    pub kubernetes: Option<String>,
    pub kubernetes_port: Option<String>,
    pub kubernetes_api: Option<String>,
    pub kubernetes_token_file: Option<String>,
    pub kubernetes_ca_file: Option<String>,
    pub zone: Option<String>,
    pub block_size: Option<Size>,
    pub read_window: Option<usize>,
    pub load_limit: Option<usize>,
    pub load_factor: Option<f64>,
    pub down_for: Option<Dur>,
    pub hedge_factor: Option<f64>,
    pub hedge_floor: Option<Dur>,
    pub hedge_budget: Option<f64>,
    pub connect_timeout: Option<Dur>,
    pub first_byte_timeout: Option<Dur>,
    pub stall_timeout: Option<Dur>,
    pub tls: Option<bool>,
    pub proxy: Option<String>,
    pub ca_bundle: Option<String>,
    pub credentials: Option<RawCredentials>,
    pub mode: Option<String>,
    pub hop_limit: Option<u32>,
    pub peers: Option<Vec<String>>,
    pub breaker_failures: Option<u32>,
    pub breaker_cooldown: Option<Dur>,
    pub peer_concurrency: Option<usize>,
    pub peer_queue_wait: Option<Dur>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    pub ram_size: Option<Size>,
    pub disk_size: Option<Size>,
    pub data_dir: Option<String>,
    pub metadata_ttl: Option<Dur>,
    pub metadata_size: Option<Size>,
    pub policy: Option<String>,
    pub pin_share: Option<f64>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    pub listen: Option<String>,
    pub block_size: Option<Size>,
    pub revalidate_after: Option<Dur>,
    pub shutdown_timeout: Option<Dur>,
    pub zone: Option<String>,
    pub domains: Option<Vec<String>>,
    pub max_age: Option<Dur>,
    pub id: Option<String>,
    pub header_read_timeout: Option<Dur>,
    pub idle_timeout: Option<Dur>,
    pub max_connections: Option<usize>,
    pub access_log: Option<String>,
    pub peer_fill_timeout: Option<Dur>,
    pub stop_flush_timeout: Option<Dur>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawMount {
    pub source: Option<String>,
    pub mountpoint: Option<String>,
    pub metadata_ttl: Option<Dur>,
    pub negative_ttl: Option<Dur>,
    pub prefetch_files: Option<usize>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub file_mode: Option<String>,
    pub dir_mode: Option<String>,
    pub allow_other: Option<bool>,
    pub disk_cache: Option<String>,
    pub disk_cache_size: Option<Size>,
    pub metadata: Option<String>,
    pub splice_reads: Option<bool>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub mode: Option<String>,
    pub keys: Option<Vec<RawAuthKey>>,
    pub max_skew: Option<Dur>,
}

/// One `[[auth.keys]]` entry: a key the node accepts, what it may do, how fast.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawAuthKey {
    pub access_key_id: Option<String>,
    pub access_key_id_env: Option<String>,
    pub secret_access_key: Option<String>,
    pub secret_access_key_env: Option<String>,
    pub allow: Option<Vec<String>>,
    pub max_requests_per_second: Option<f64>,
    pub max_bytes_per_second: Option<Size>,
    pub burst_requests: Option<f64>,
    pub burst_bytes: Option<Size>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: Option<String>,
    pub key: Option<String>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: Option<String>,
}
