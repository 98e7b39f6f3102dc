//! Configuration: one TOML schema shared by `shoal-node`, `shoal-mount` and embedders.
//!
//! [`raw`] mirrors the file; this module turns it, once, into validated types that
//! nothing downstream re-checks. Every error names the file, the key and what is wrong.
//! A file may hold only the sections its program needs; programs ask for the
//! sections they require with [`Config::origin`] and friends.

mod credentials;
mod error;
pub mod raw;
pub mod units;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use credentials::{CredentialMode, Credentials, Env, ProcessEnv};
pub use error::ConfigError;
use raw::*;

/// Defaults, each with its reason.
pub mod defaults {
    use std::time::Duration;
    /// One routing unit: large enough that per-request overhead is small against
    /// S3's first-byte latency, small enough that a 1 GiB file spreads over a cluster.
    pub const CLUSTER_BLOCK_SIZE: u64 = 1 << 20;
    /// What a node caches and widens to; equal to the cluster block by default so a
    /// routed block is exactly one node block.
    pub const NODE_BLOCK_SIZE: u64 = 1 << 20;
    /// Blocks in flight per read: 8 MiB ahead keeps a 1 GB/s stream busy at ~8 ms RTT.
    pub const READ_WINDOW: usize = 8;
    pub const LOAD_LIMIT: usize = 256;
    pub const DOWN_FOR: Duration = Duration::from_secs(5);
    pub const DNS_REFRESH: Duration = Duration::from_secs(10);
    /// Hedge when a node takes 3x its usual time to first byte.
    pub const HEDGE_FACTOR: f64 = 3.0;
    /// Never hedge sooner than this: loopback estimates are tiny and noisy.
    pub const HEDGE_FLOOR: Duration = Duration::from_millis(20);
    /// At most 10% extra requests from hedging, so a slow cluster is not doubled.
    pub const HEDGE_BUDGET: f64 = 0.1;
    /// Node deadlines: a node is near, so a node that cannot connect in 500 ms or
    /// answer in 2 s is better skipped for the origin.
    pub const NODE_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
    pub const NODE_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(2);
    pub const NODE_STALL_TIMEOUT: Duration = Duration::from_secs(1);
    /// Origin deadlines: S3 first bytes are tens of ms, with a long tail.
    pub const ORIGIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
    pub const ORIGIN_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(15);
    pub const ORIGIN_STALL_TIMEOUT: Duration = Duration::from_secs(10);
    pub const ORIGIN_MAX_ATTEMPTS: u32 = 4;
    pub const RETRY_BASE: Duration = Duration::from_millis(50);
    pub const RETRY_MAX: Duration = Duration::from_secs(2);
    pub const REVALIDATE_AFTER: Duration = Duration::from_secs(1);
    /// The backstop behind invalidation: past it, what a node knows of an object is
    /// checked with the origin again however it was learned (a node that missed a
    /// purge serves nothing stale for longer).
    pub const MAX_AGE: Duration = Duration::from_secs(3600);
    /// A gateway forwards a client's miss once; a forwarded request is never forwarded.
    pub const HOP_LIMIT: u32 = 1;
    /// Consecutive failures that trip a node's breaker, and how long it stays open.
    pub const BREAKER_FAILURES: u32 = 3;
    pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
    /// Block requests a gateway has in flight to other nodes at once.
    pub const PEER_CONCURRENCY: usize = 64;
    /// Longest a gateway's miss waits for a peer request slot before it sheds to
    /// the origin.
    pub const PEER_QUEUE_WAIT: Duration = Duration::from_millis(100);
    pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
    pub const METADATA_TTL: Duration = Duration::from_secs(10);
    pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);
    /// Files of a directory walked in order fetched ahead: at S3's ~20 ms first
    /// byte, 32 files in flight read small files ~30x faster than one at a time.
    pub const PREFETCH_FILES: usize = 32;
    pub const NODE_RAM: u64 = 1 << 30;
    pub const MOUNT_RAM: u64 = 256 << 20;
    pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `https://endpoint/bucket/key`
    Path,
    /// `https://bucket.endpoint/key`
    Virtual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    /// Longest gap between two body chunks.
    pub stall: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

#[derive(Clone, Debug)]
pub struct OriginConfig {
    pub endpoint: url::Url,
    pub region: String,
    pub addressing: Addressing,
    pub credentials: CredentialMode,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
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
}

#[derive(Clone, Debug)]
pub enum AuthConfig {
    /// SigV4 (header or presigned) with one of these keys.
    SigV4 {
        keys: Vec<Credentials>,
        max_skew: Duration,
    },
    /// No authentication: asked for explicitly with `mode = "none"`.
    None,
}

#[derive(Clone, Debug)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A loaded, validated config.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from, for messages.
    pub file: String,
    origin: Option<OriginConfig>,
    cluster: Option<ClusterConfig>,
    pub cache: CacheConfig,
    node: Option<NodeConfig>,
    pub mount: MountConfig,
    auth: Option<AuthConfig>,
    pub tls: Option<TlsConfig>,
    pub metrics_listen: Option<SocketAddr>,
    pub gateway: GatewayConfig,
    /// In order; the first match decides. Empty: everything is cached.
    pub rules: Vec<CacheRule>,
}

impl Config {
    /// Reads and validates `path`, with secrets from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: String::new(),
            message: format!("cannot read config file: {e}"),
        })?;
        Self::parse(&text, &file, &ProcessEnv)
    }

    /// Validates TOML `text` that came from `file`.
    pub fn parse(text: &str, file: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let line = inner
                .span()
                .map(|s| {
                    format!(
                        " (line {})",
                        text[..s.start.min(text.len())].matches('\n').count() + 1
                    )
                })
                .unwrap_or_default();
            ConfigError {
                file: file.to_owned(),
                key: if key == "." { String::new() } else { key },
                message: format!("{}{line}", inner.message()),
            }
        })?;
        Validator { file, env }.config(raw)
    }

    /// A config with no sections: everything at its default.
    pub fn empty() -> Config {
        Self::parse("", "<defaults>", &ProcessEnv).expect("the empty config is valid")
    }

    fn missing(&self, section: &str) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            key: section.into(),
            message: format!("section [{section}] is required here but missing"),
        }
    }

    /// `base` with the `[origin]` of `other` (for an origin built from flags).
    pub fn with_origin_of(mut base: Config, other: &Config) -> Config {
        base.origin = other.origin.clone();
        base
    }

    pub fn origin(&self) -> Result<&OriginConfig, ConfigError> {
        self.origin.as_ref().ok_or_else(|| self.missing("origin"))
    }
    pub fn cluster(&self) -> Option<&ClusterConfig> {
        self.cluster.as_ref()
    }
    pub fn node(&self) -> Result<&NodeConfig, ConfigError> {
        self.node.as_ref().ok_or_else(|| self.missing("node"))
    }
    pub fn auth(&self) -> Result<&AuthConfig, ConfigError> {
        self.auth.as_ref().ok_or_else(|| ConfigError {
            file: self.file.clone(),
            key: "auth".into(),
            message: "section [auth] is required: list access keys, or write mode = \"none\" to run without authentication".into(),
        })
    }
}

/// Canonical node identity: lower-case host, explicit port (`[v6]:port` for IPv6).
pub fn canonical_node_id(s: &str) -> Result<String, String> {
    let s = s.trim();
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: unclosed '[' in IPv6 address"))?;
        let p = p
            .strip_prefix(':')
            .ok_or_else(|| format!("{s:?} has no port: write it as [addr]:port"))?;
        h.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{s:?}: {h:?} is not an IPv6 address"))?;
        (format!("[{}]", h.to_ascii_lowercase()), p)
    } else {
        let (h, p) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?} has no port: write it as host:port"))?;
        if h.contains(':') {
            return Err(format!("{s:?}: write an IPv6 address as [addr]:port"));
        }
        (h.to_ascii_lowercase(), p)
    };
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(format!("{s:?} is not a host:port"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
    if port == 0 {
        return Err(format!("{s:?}: port 0 cannot be dialed"));
    }
    Ok(format!("{host}:{port}"))
}

struct Validator<'a> {
    file: &'a str,
    env: &'a dyn Env,
}

type R<T> = Result<T, ConfigError>;

impl Validator<'_> {
    fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }

    fn config(&self, raw: RawConfig) -> R<Config> {
        let node = raw.node.map(|n| self.node(n)).transpose()?;
        let cluster = raw.cluster.map(|c| self.cluster(c)).transpose()?;
        if let (Some(n), Some(c)) = (&node, &cluster) {
            if c.block_size % n.block_size != 0 {
                return Err(self.err(
                    "cluster.block_size",
                    format!(
                        "{} is not a multiple of node.block_size ({}): a routed block must cover whole node blocks",
                        c.block_size, n.block_size
                    ),
                ));
            }
        }
        let cache = self.cache(raw.cache.unwrap_or_default(), node.is_some())?;
        Ok(Config {
            file: self.file.to_owned(),
            origin: raw.origin.map(|o| self.origin(o)).transpose()?,
            cluster,
            cache,
            node,
            mount: self.mount(raw.mount.unwrap_or_default())?,
            auth: raw.auth.map(|a| self.auth(a)).transpose()?,
            tls: raw.tls.map(|t| self.tls(t)).transpose()?,
            metrics_listen: raw
                .metrics
                .and_then(|m| m.listen)
                .map(|l| self.socket_addr("metrics.listen", &l))
                .transpose()?,
            gateway: GatewayConfig {
                writes: raw.gateway.as_ref().and_then(|g| g.writes).unwrap_or(false),
                warm_on_write: raw
                    .gateway
                    .as_ref()
                    .and_then(|g| g.warm_on_write)
                    .unwrap_or(false),
            },
            rules: raw
                .rules
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(i, r)| self.rule(i, r))
                .collect::<R<Vec<_>>>()?,
        })
    }

    fn rule(&self, i: usize, r: RawRule) -> R<CacheRule> {
        let key = |k: &str| format!("rules[{i}].{k}");
        let pattern = r.pattern.ok_or_else(|| {
            self.err(
                key("pattern"),
                "every rule needs a pattern (a glob on bucket/key)",
            )
        })?;
        let matcher = globset::GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                self.err(
                    key("pattern"),
                    format!("{pattern:?} is not a glob: {}", e.kind()),
                )
            })?
            .compile_matcher();
        if r.block_size.is_some() && r.page_size.is_some() {
            return Err(self.err(key("page_size"), "write block_size or page_size, not both"));
        }
        let block_size = r.block_size.or(r.page_size).map(|s| s.0);
        if let Some(bs) = block_size {
            if !(4096..=(64 << 20)).contains(&bs) {
                return Err(self.err(
                    key(if r.page_size.is_some() {
                        "page_size"
                    } else {
                        "block_size"
                    }),
                    format!("{bs} is out of range 4KiB..=64MiB"),
                ));
            }
        }
        let cache = r.cache.unwrap_or(true);
        if !cache && (block_size.is_some() || r.ttl.is_some()) {
            return Err(self.err(
                key("cache"),
                "a rule with cache = false caches nothing: block_size and ttl do not apply",
            ));
        }
        let ttl = r.ttl.map(|d| self.positive(&key("ttl"), d.0)).transpose()?;
        Ok(CacheRule {
            pattern,
            matcher,
            cache,
            block_size,
            ttl,
        })
    }

    fn credentials(
        &self,
        section: &str,
        raw: &RawCredentials,
        default_chain: bool,
    ) -> R<Option<CredentialMode>> {
        credentials::resolve(raw, self.env, default_chain)
            .map_err(|(k, m)| self.err(format!("{section}.{k}"), m))
    }

    fn positive(&self, key: &str, d: Duration) -> R<Duration> {
        if d.is_zero() {
            return Err(self.err(key, "must be greater than zero"));
        }
        Ok(d)
    }

    fn origin(&self, o: RawOrigin) -> R<OriginConfig> {
        let region = o.region.unwrap_or_else(|| "us-east-1".into());
        if region.is_empty()
            || !region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(self.err("origin.region", format!("{region:?} is not a region name")));
        }
        let endpoint_s = o
            .endpoint
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint = url::Url::parse(&endpoint_s).map_err(|e| {
            self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} is not a URL: {e}"),
            )
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host().is_none() {
            return Err(self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} must be an http:// or https:// URL with a host"),
            ));
        }
        if endpoint.query().is_some() || endpoint.path() != "/" {
            return Err(self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} must not have a path or query"),
            ));
        }
        let addressing = match o.addressing.as_deref() {
            None | Some("path") => Addressing::Path,
            Some("virtual") => Addressing::Virtual,
            Some(other) => {
                return Err(self.err(
                    "origin.addressing",
                    format!("{other:?} is not \"path\" or \"virtual\""),
                ))
            }
        };
        let credentials = self
            .credentials("origin.credentials", &o.credentials.unwrap_or_default(), true)?
            .ok_or_else(|| {
                self.err(
                    "origin.credentials",
                    "no credentials found: give [origin.credentials] keys, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                     add a profile to ~/.aws/credentials, or write anonymous = true",
                )
            })?;
        let max_attempts = o.max_attempts.unwrap_or(defaults::ORIGIN_MAX_ATTEMPTS);
        if max_attempts == 0 || max_attempts > 20 {
            return Err(self.err(
                "origin.max_attempts",
                format!("{max_attempts} is out of range 1..=20"),
            ));
        }
        let timeouts = Timeouts {
            connect: self.positive(
                "origin.connect_timeout",
                o.connect_timeout
                    .map_or(defaults::ORIGIN_CONNECT_TIMEOUT, |d| d.0),
            )?,
            first_byte: self.positive(
                "origin.first_byte_timeout",
                o.first_byte_timeout
                    .map_or(defaults::ORIGIN_FIRST_BYTE_TIMEOUT, |d| d.0),
            )?,
            stall: self.positive(
                "origin.stall_timeout",
                o.stall_timeout
                    .map_or(defaults::ORIGIN_STALL_TIMEOUT, |d| d.0),
            )?,
        };
        let retry = RetryPolicy {
            max_attempts,
            base: o.retry_base.map_or(defaults::RETRY_BASE, |d| d.0),
            max: o.retry_max.map_or(defaults::RETRY_MAX, |d| d.0),
        };
        if retry.base > retry.max {
            return Err(self.err("origin.retry_base", "is larger than origin.retry_max"));
        }
        Ok(OriginConfig {
            endpoint,
            region,
            addressing,
            credentials,
            timeouts,
            retry,
        })
    }

    fn node_entry(&self, i: usize, e: RawNodeEntry) -> R<NodeSpec> {
        let key = format!("cluster.nodes[{i}]");
        let (id, weight, zone) = match e {
            RawNodeEntry::Id(id) => (id, 1.0, None),
            RawNodeEntry::Full(f) => (f.id, f.weight.unwrap_or(1.0), f.zone),
        };
        let id = canonical_node_id(&id).map_err(|m| self.err(&key, m))?;
        if !weight.is_finite() || weight <= 0.0 {
            return Err(self.err(
                format!("{key}.weight"),
                format!("{weight} must be a finite number greater than 0"),
            ));
        }
        Ok(NodeSpec { id, weight, zone })
    }

    fn cluster(&self, c: RawCluster) -> R<ClusterConfig> {
        let membership = match (c.nodes, c.dns) {
            (Some(_), Some(_)) => {
                return Err(self.err("cluster.dns", "give either nodes or dns, not both"))
            }
            (Some(nodes), None) => {
                if nodes.is_empty() {
                    return Err(self.err(
                        "cluster.nodes",
                        "is empty and no dns name is given: list at least one node",
                    ));
                }
                let mut specs = Vec::with_capacity(nodes.len());
                for (i, e) in nodes.into_iter().enumerate() {
                    let spec = self.node_entry(i, e)?;
                    if specs.iter().any(|s: &NodeSpec| s.id == spec.id) {
                        return Err(self.err(
                            format!("cluster.nodes[{i}]"),
                            format!("node {} is listed twice", spec.id),
                        ));
                    }
                    specs.push(spec);
                }
                Membership::Static(specs)
            }
            (None, Some(dns)) => {
                let id = canonical_node_id(&dns).map_err(|m| self.err("cluster.dns", m))?;
                let (host, port) = id.rsplit_once(':').expect("canonical ids have a port");
                Membership::Dns {
                    host: host
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_owned(),
                    port: port.parse().expect("canonical port"),
                    refresh: self.positive(
                        "cluster.refresh",
                        c.refresh.map_or(defaults::DNS_REFRESH, |d| d.0),
                    )?,
                }
            }
            (None, None) => {
                return Err(self.err(
                    "cluster.nodes",
                    "no nodes and no dns name: a [cluster] needs one of them",
                ));
            }
        };
        if c.refresh.is_some() && matches!(membership, Membership::Static(_)) {
            return Err(self.err("cluster.refresh", "only applies with dns"));
        }
        let block_size = c.block_size.map_or(defaults::CLUSTER_BLOCK_SIZE, |s| s.0);
        if !(4096..=(1 << 30)).contains(&block_size) {
            return Err(self.err(
                "cluster.block_size",
                format!("{block_size} is out of range 4KiB..=1GiB"),
            ));
        }
        let read_window = c.read_window.unwrap_or(defaults::READ_WINDOW);
        if read_window == 0 || read_window > 1024 {
            return Err(self.err(
                "cluster.read_window",
                format!("{read_window} is out of range 1..=1024"),
            ));
        }
        let load_limit = c.load_limit.unwrap_or(defaults::LOAD_LIMIT);
        if load_limit == 0 {
            return Err(self.err("cluster.load_limit", "must be at least 1"));
        }
        if let Some(f) = c.load_factor {
            if !f.is_finite() || f < 1.0 {
                return Err(self.err(
                    "cluster.load_factor",
                    format!("{f} must be a number >= 1.0"),
                ));
            }
        }
        let hedge = HedgeConfig {
            factor: c.hedge_factor.unwrap_or(defaults::HEDGE_FACTOR),
            floor: c.hedge_floor.map_or(defaults::HEDGE_FLOOR, |d| d.0),
            budget: c.hedge_budget.unwrap_or(defaults::HEDGE_BUDGET),
        };
        if !hedge.factor.is_finite() || hedge.factor < 1.0 {
            return Err(self.err(
                "cluster.hedge_factor",
                format!("{} must be a number >= 1.0", hedge.factor),
            ));
        }
        if !(0.0..=1.0).contains(&hedge.budget) {
            return Err(self.err(
                "cluster.hedge_budget",
                format!("{} must be a fraction between 0 and 1", hedge.budget),
            ));
        }
        let timeouts = Timeouts {
            connect: self.positive(
                "cluster.connect_timeout",
                c.connect_timeout
                    .map_or(defaults::NODE_CONNECT_TIMEOUT, |d| d.0),
            )?,
            first_byte: self.positive(
                "cluster.first_byte_timeout",
                c.first_byte_timeout
                    .map_or(defaults::NODE_FIRST_BYTE_TIMEOUT, |d| d.0),
            )?,
            stall: self.positive(
                "cluster.stall_timeout",
                c.stall_timeout
                    .map_or(defaults::NODE_STALL_TIMEOUT, |d| d.0),
            )?,
        };
        let credentials = self
            .credentials(
                "cluster.credentials",
                &c.credentials.unwrap_or_default(),
                false,
            )?
            .unwrap_or(CredentialMode::Anonymous);
        Ok(ClusterConfig {
            membership,
            zone: c.zone,
            block_size,
            read_window,
            load_limit,
            load_factor: c.load_factor,
            down_for: self.positive(
                "cluster.down_for",
                c.down_for.map_or(defaults::DOWN_FOR, |d| d.0),
            )?,
            hedge,
            timeouts,
            tls: c.tls.unwrap_or(false),
            credentials,
            mode: match c.mode.as_deref() {
                None | Some("strong") => ClusterMode::Strong,
                Some("eventual") => ClusterMode::Eventual,
                Some(m) => {
                    return Err(self.err(
                        "cluster.mode",
                        format!("{m:?} is not a mode: write \"strong\" or \"eventual\""),
                    ))
                }
            },
            hop_limit: c.hop_limit.unwrap_or(defaults::HOP_LIMIT),
            peers: c
                .peers
                .unwrap_or_default()
                .iter()
                .map(|p| canonical_node_id(p).map_err(|m| self.err("cluster.peers", m)))
                .collect::<R<Vec<_>>>()?,
            breaker: BreakerConfig {
                failures: match c.breaker_failures.unwrap_or(defaults::BREAKER_FAILURES) {
                    0 => return Err(self.err("cluster.breaker_failures", "must be at least 1")),
                    n => n,
                },
                cooldown: self.positive(
                    "cluster.breaker_cooldown",
                    c.breaker_cooldown
                        .map_or(defaults::BREAKER_COOLDOWN, |d| d.0),
                )?,
            },
            peer_concurrency: match c.peer_concurrency.unwrap_or(defaults::PEER_CONCURRENCY) {
                0 => return Err(self.err("cluster.peer_concurrency", "must be at least 1")),
                n => n,
            },
            peer_queue_wait: c.peer_queue_wait.map_or(defaults::PEER_QUEUE_WAIT, |d| d.0),
        })
    }

    fn cache(&self, c: RawCache, is_node: bool) -> R<CacheConfig> {
        let ram_size = c.ram_size.map_or(
            if is_node {
                defaults::NODE_RAM
            } else {
                defaults::MOUNT_RAM
            },
            |s| s.0,
        );
        let disk_size = c.disk_size.map_or(0, |s| s.0);
        let data_dir = c.data_dir.map(PathBuf::from);
        if disk_size > 0 && data_dir.is_none() {
            return Err(self.err(
                "cache.data_dir",
                "cache.disk_size is set, so a data_dir for the disk tier is needed",
            ));
        }
        Ok(CacheConfig {
            ram_size,
            disk_size,
            data_dir,
        })
    }

    fn socket_addr(&self, key: &str, s: &str) -> R<SocketAddr> {
        s.parse().map_err(|_| {
            self.err(
                key,
                format!("{s:?} is not an address like 0.0.0.0:9000 or [::1]:9000"),
            )
        })
    }

    fn node(&self, n: RawNode) -> R<NodeConfig> {
        let block_size = n.block_size.map_or(defaults::NODE_BLOCK_SIZE, |s| s.0);
        if !(4096..=(64 << 20)).contains(&block_size) {
            return Err(self.err(
                "node.block_size",
                format!("{block_size} is out of range 4KiB..=64MiB"),
            ));
        }
        Ok(NodeConfig {
            listen: self
                .socket_addr("node.listen", n.listen.as_deref().unwrap_or("0.0.0.0:9000"))?,
            block_size,
            revalidate_after: n
                .revalidate_after
                .map_or(defaults::REVALIDATE_AFTER, |d| d.0),
            shutdown_timeout: n
                .shutdown_timeout
                .map_or(defaults::SHUTDOWN_TIMEOUT, |d| d.0),
            zone: n.zone,
            domains: n.domains.unwrap_or_default(),
            max_age: self.positive("node.max_age", n.max_age.map_or(defaults::MAX_AGE, |d| d.0))?,
            id: n
                .id
                .map(|i| canonical_node_id(&i).map_err(|m| self.err("node.id", m)))
                .transpose()?,
        })
    }

    fn mode(&self, key: &str, s: Option<String>, default: u32) -> R<u32> {
        match s {
            None => Ok(default),
            Some(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| self.err(key, format!("{s:?} is not an octal mode like \"0444\""))),
        }
    }

    fn mount(&self, m: RawMount) -> R<MountConfig> {
        Ok(MountConfig {
            source: m.source,
            mountpoint: m.mountpoint.map(PathBuf::from),
            metadata_ttl: m.metadata_ttl.map_or(defaults::METADATA_TTL, |d| d.0),
            negative_ttl: m.negative_ttl.map_or(defaults::NEGATIVE_TTL, |d| d.0),
            prefetch_files: match m.prefetch_files {
                None => defaults::PREFETCH_FILES,
                Some(n) if n <= 4096 => n,
                Some(n) => {
                    return Err(self.err(
                        "mount.prefetch_files",
                        format!("{n} is out of range 0..=4096"),
                    ))
                }
            },
            uid: m.uid,
            gid: m.gid,
            file_mode: self.mode("mount.file_mode", m.file_mode, 0o444)?,
            dir_mode: self.mode("mount.dir_mode", m.dir_mode, 0o555)?,
            allow_other: m.allow_other.unwrap_or(false),
        })
    }

    fn auth(&self, a: RawAuth) -> R<AuthConfig> {
        match a.mode.as_deref() {
            Some("none") => {
                if a.keys.is_some() {
                    return Err(self.err(
                        "auth.keys",
                        "keys are listed but mode = \"none\" accepts everyone: remove one",
                    ));
                }
                Ok(AuthConfig::None)
            }
            None | Some("sigv4") => {
                let raw_keys = a.keys.unwrap_or_default();
                if raw_keys.is_empty() {
                    return Err(self.err(
                        "auth.keys",
                        "no access keys: add [[auth.keys]] entries, or write mode = \"none\" to run without authentication",
                    ));
                }
                let mut keys = Vec::new();
                for (i, k) in raw_keys.iter().enumerate() {
                    let section = format!("auth.keys[{i}]");
                    if k.anonymous.is_some() || k.profile.is_some() {
                        return Err(self.err(section, "an accepted key takes access_key_id and secret_access_key (or their _env forms) only"));
                    }
                    match self.credentials(&section, k, false)? {
                        Some(CredentialMode::Keys(c)) => keys.push(c),
                        _ => {
                            return Err(
                                self.err(section, "needs access_key_id and secret_access_key")
                            )
                        }
                    }
                }
                Ok(AuthConfig::SigV4 {
                    keys,
                    max_skew: a.max_skew.map_or(defaults::MAX_SKEW, |d| d.0),
                })
            }
            Some(other) => Err(self.err(
                "auth.mode",
                format!("{other:?} is not \"sigv4\" or \"none\""),
            )),
        }
    }

    fn tls(&self, t: RawTls) -> R<TlsConfig> {
        let cert = t
            .cert
            .ok_or_else(|| self.err("tls.cert", "is required in [tls]"))?;
        let key = t
            .key
            .ok_or_else(|| self.err("tls.key", "is required in [tls]"))?;
        Ok(TlsConfig {
            cert: PathBuf::from(cert),
            key: PathBuf::from(key),
        })
    }
}

#[cfg(test)]
mod tests;
