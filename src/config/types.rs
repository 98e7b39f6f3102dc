//! The validated config: what programs read, already checked (nothing downstream
//! checks it again).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::defaults;
use super::{CredentialMode, Credentials};
pub use crate::net::{Network, Proxy};
pub use crate::store::s3::{
    Addressing, RequestOptions, RetryPolicy, SseCustomerKey, Throttling, Timeouts,
};

#[derive(Clone, Debug)]
pub struct OriginConfig {
    pub endpoint: url::Url,
    pub region: String,
    pub region_source: crate::aws::region::RegionSource,
    /// Set when the endpoint is AWS's (the config names none): its host follows the
    /// region, and a bucket found in another region is followed.
    pub aws: Option<crate::aws::endpoint::AwsEndpoint>,
    pub addressing: Addressing,
    pub credentials: CredentialMode,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    pub network: Network,
    pub request: RequestOptions,
    /// What this process may ask of the origin, and how long a throttled
    /// request keeps trying.
    pub throttling: Throttling,
}

impl OriginConfig {
    /// An S3 client of this origin.
    pub fn client(&self) -> Result<crate::store::s3::S3Client, crate::store::StoreError> {
        crate::store::s3::S3Client::new(self.client_options())
    }

    /// What an S3 client of this origin is built from.
    pub fn client_options(&self) -> crate::store::s3::S3ClientOptions {
        crate::store::s3::S3ClientOptions {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            addressing: self.addressing,
            credentials: self.credentials.clone(),
            timeouts: self.timeouts,
            retry: self.retry,
            sign_range: true,
            pool_idle_per_host: 64,
            network: self.network.clone(),
            request: self.request.clone(),
            aws: self.aws,
            throttling: Some(self.throttling),
        }
    }

    /// Uses `region` (found after the config was read, from instance metadata):
    /// AWS's endpoint moves with it.
    pub fn set_region(&mut self, region: String, source: crate::aws::region::RegionSource) {
        if let Some(aws) = self.aws.filter(|a| !a.overridden) {
            self.endpoint = aws.url(&region);
        }
        self.region = region;
        self.region_source = source;
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// Canonical `host:port`: the routing identity.
    pub id: String,
    pub weight: f64,
    pub zone: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Membership {
    Static(Vec<NodeSpec>),
    /// A name re-resolved every `refresh`; every address gets `port`.
    Dns {
        host: String,
        port: u16,
        refresh: Duration,
    },
    /// The ready endpoints of a Kubernetes Service's EndpointSlices, with their
    /// zones, watched through the API.
    Kubernetes(KubeService),
}

/// A Service whose EndpointSlices list the nodes, and how to reach the API.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeService {
    pub namespace: String,
    pub service: String,
    /// The port's name in the slices; `None`: the slice's only (or first) port.
    pub port: Option<String>,
    /// `https://HOST:PORT` of the API server.
    pub api: String,
    /// A bearer token, read again at every (re)connection: kubelet rotates it.
    pub token_file: std::path::PathBuf,
    /// The API server's CA (none: the system's roots, or plain `http://`).
    pub ca_file: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HedgeConfig {
    pub factor: f64,
    pub floor: Duration,
    /// Largest share of requests that may be hedged.
    pub budget: f64,
}

#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub membership: Membership,
    pub zone: Option<String>,
    pub block_size: u64,
    pub read_window: usize,
    pub load_limit: usize,
    pub load_factor: Option<f64>,
    pub down_for: Duration,
    pub hedge: HedgeConfig,
    pub timeouts: Timeouts,
    pub tls: bool,
    /// Node-to-node traffic: no proxy unless `cluster.proxy` names one; trusted
    /// roots for `tls`.
    pub network: Network,
    /// What the nodes' `[auth]` expects; anonymous when the nodes run `mode = "none"`.
    pub credentials: CredentialMode,
    /// For a node with a `[cluster]`: forward misses to owners, or not.
    pub mode: ClusterMode,
    /// Forwarded requests carry their hop count; none past this is forwarded again.
    pub hop_limit: u32,
    /// Nodes that own no blocks but get invalidations (other gateways).
    pub peers: Vec<String>,
    pub breaker: BreakerConfig,
    pub peer_concurrency: usize,
    pub peer_queue_wait: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterMode {
    /// A miss goes to the block's owner: one copy per block cluster-wide.
    Strong,
    /// Every node fetches its own misses from the origin; only invalidations are
    /// shared.
    Eventual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    pub failures: u32,
    pub cooldown: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Forward PUT, multipart uploads and DELETE to the origin.
    pub writes: bool,
    /// After a PUT, have each block fetched by its owner.
    pub warm_on_write: bool,
}

/// One caching rule: what to do with keys (`bucket/key`) that match `pattern`.
#[derive(Clone, Debug)]
pub struct CacheRule {
    pub pattern: String,
    pub matcher: globset::GlobMatcher,
    pub cache: bool,
    /// Node block size (the widening unit) for matching keys.
    pub block_size: Option<u64>,
    /// How long what is cached of a matching key may be served before the origin is
    /// asked again.
    pub ttl: Option<Duration>,
    /// How old a cached listing of a matching prefix (`bucket/prefix`) a plain S3
    /// client may be answered with (`None`: listings pass through verbatim).
    pub list_ttl: Option<Duration>,
    /// Matching keys' blocks stay out of eviction within `cache.pin_share`.
    pub pin: bool,
}

impl ClusterConfig {
    /// No nodes: every read goes to the origin (a plain S3 mount), with the design's
    /// defaults for everything else.
    pub fn standalone() -> ClusterConfig {
        ClusterConfig {
            membership: Membership::Static(Vec::new()),
            zone: None,
            block_size: defaults::CLUSTER_BLOCK_SIZE,
            read_window: defaults::READ_WINDOW,
            load_limit: defaults::LOAD_LIMIT,
            load_factor: None,
            down_for: defaults::DOWN_FOR,
            hedge: HedgeConfig {
                factor: defaults::HEDGE_FACTOR,
                floor: defaults::HEDGE_FLOOR,
                budget: defaults::HEDGE_BUDGET,
            },
            timeouts: Timeouts {
                connect: defaults::NODE_CONNECT_TIMEOUT,
                first_byte: defaults::NODE_FIRST_BYTE_TIMEOUT,
                stall: defaults::NODE_STALL_TIMEOUT,
            },
            tls: false,
            network: Network {
                proxy: Proxy::Off,
                ca_bundle: None,
            },
            credentials: CredentialMode::Anonymous,
            mode: ClusterMode::Strong,
            hop_limit: defaults::HOP_LIMIT,
            peers: Vec::new(),
            breaker: BreakerConfig {
                failures: defaults::BREAKER_FAILURES,
                cooldown: defaults::BREAKER_COOLDOWN,
            },
            peer_concurrency: defaults::PEER_CONCURRENCY,
            peer_queue_wait: defaults::PEER_QUEUE_WAIT,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub ram_size: u64,
    pub disk_size: u64,
    pub data_dir: Option<PathBuf>,
    /// The longest a node keeps a listing page or a missing key's HEAD; each
    /// request says how old an answer it accepts within that.
    pub metadata_ttl: Duration,
    /// The bound of a node's metadata cache, in bytes (0: nothing is kept).
    pub metadata_size: u64,
    /// How every tier (RAM and disk) gives blocks up.
    pub policy: crate::blocks::policy::PolicyKind,
    /// The share of each tier blocks of pinned rules may hold, in thousandths.
    pub pin_share_per_mille: u64,
}

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub listen: SocketAddr,
    pub block_size: u64,
    pub revalidate_after: Duration,
    pub shutdown_timeout: Duration,
    pub zone: Option<String>,
    /// Base domains for virtual-hosted requests (`bucket.DOMAIN/key`); path-style
    /// requests always work.
    pub domains: Vec<String>,
    pub max_age: Duration,
    /// This node's entry in `[cluster] nodes` (`host:port`), when its listen
    /// address does not name it (`0.0.0.0`, a DNS name in the list).
    pub id: Option<String>,
    /// A client must send a request's headers within this long of the node
    /// waiting for them (so it also closes keep-alive connections idle that long).
    pub header_read_timeout: Duration,
    /// A connection on which nothing moves for this long is closed (a client that
    /// stopped reading its response or sending its body).
    pub idle_timeout: Duration,
    /// Client connections open at once; more are refused (logged once a minute).
    pub max_connections: usize,
    /// Where one JSON line per request goes (reopened on SIGUSR1).
    pub access_log: Option<PathBuf>,
    /// On a node with a `[cluster]`: how long a miss waits for the node it
    /// asks first (the block's runner-up, or its owner) to acknowledge the ask
    /// before the origin is asked (zero: never asked). The node asked answers
    /// at once, before the bytes of a block it is still fetching: this judges
    /// whether it is there, never the origin's latency; the body is then held
    /// to `cluster.first_byte_timeout` and `cluster.stall_timeout`.
    pub peer_fill_timeout: Duration,
    /// On SIGTERM, how long the node may take writing the blocks it holds only
    /// in RAM to its disk tier before it exits (zero: none written).
    pub stop_flush_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct MountConfig {
    /// `BUCKET[/PREFIX]`
    pub source: Option<String>,
    pub mountpoint: Option<PathBuf>,
    pub metadata_ttl: Duration,
    pub negative_ttl: Duration,
    /// Entries fetched ahead of a directory walked in listing order (0: off).
    pub prefetch_files: usize,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub file_mode: u32,
    pub dir_mode: u32,
    pub allow_other: bool,
    /// The mount's own disk tier: a directory and its byte bound. Files held
    /// whole there are read through FUSE passthrough.
    pub disk_cache: Option<(PathBuf, u64)>,
    /// Where listings and HEADs go.
    pub metadata: MetadataSource,
    /// Bytes bound for the page cache go from a node's socket to the kernel
    /// through a pipe, never into the mount's memory.
    pub splice_reads: bool,
}

/// Where a mount's listings and HEADs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataSource {
    /// To their owner nodes, which cache and coalesce them; the origin answers
    /// when no node does.
    Cluster,
    /// To the origin, every mount for itself.
    Origin,
}

impl std::str::FromStr for MetadataSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cluster" => Ok(MetadataSource::Cluster),
            "origin" => Ok(MetadataSource::Origin),
            _ => Err(format!("{s:?} is not \"cluster\" or \"origin\"")),
        }
    }
}

#[derive(Clone, Debug)]
pub enum AuthConfig {
    /// SigV4 (header or presigned) with one of these keys.
    SigV4 {
        keys: Vec<AuthKey>,
        max_skew: Duration,
    },
    /// No authentication: asked for explicitly with `mode = "none"`.
    None,
}

/// One key a node accepts.
#[derive(Clone, Debug)]
pub struct AuthKey {
    pub credentials: Credentials,
    /// Its `allow` list; `None` when it has none (read and list everything).
    pub allow: Option<crate::scope::Scope>,
    pub limits: KeyLimits,
}

/// A key's rates: token buckets that refill at the rate and hold the burst.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyLimits {
    /// Requests per second, and how many may come at once.
    pub requests: Option<(f64, f64)>,
    /// Response bytes per second, and how many may go at once.
    pub bytes: Option<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}
