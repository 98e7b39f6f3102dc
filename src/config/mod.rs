//! Configuration: one TOML schema shared by `shoal-node`, `shoal-mount`, the CLI and
//! embedders.
//!
//! [`raw`] mirrors the file; [`overrides`] merges a program's flags into it;
//! `validate/` turns the result, once and one section at a time, into the types of
//! [`types`] that nothing downstream re-checks. Every error names the file (or
//! the command line), the key (or the flag) and what is wrong. A file may hold only
//! the sections its program needs; programs ask for the sections they require
//! with [`Config::origin`] and friends.

mod credentials;
pub mod defaults;
mod error;
pub mod overrides;
pub mod raw;
mod types;
pub mod units;
mod validate;

use std::net::SocketAddr;
use std::path::Path;

pub use credentials::{CredentialMode, Credentials, Env, ProcessEnv};
pub use error::ConfigError;
pub use overrides::Overrides;
pub use types::*;

use raw::RawConfig;
use validate::Validator;

/// A loaded, validated config.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from, for messages.
    pub file: String,
    origin: Option<OriginConfig>,
    cluster: Option<ClusterConfig>,
    /// A read window from the command line, for a reader with no `[cluster]`.
    standalone_read_window: Option<usize>,
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
    /// How this config's tiers give blocks up: `[cache] policy`, and the
    /// blocks of `pin = true` rules (the first rule matching a key decides)
    /// kept within `[cache] pin_share`.
    pub fn evicting(&self) -> crate::blocks::Evicting {
        use crate::blocks::{policy::PinFn, BlockKey};
        let pinned = self.rules.iter().any(|r| r.pin).then(|| {
            let rules = std::sync::Arc::new(self.rules.clone());
            std::sync::Arc::new(move |k: &BlockKey| {
                let path = format!("{}/{}", k.bucket, k.key);
                rules
                    .iter()
                    .find(|r| r.matcher.is_match(&path))
                    .is_some_and(|r| r.pin)
            }) as PinFn<BlockKey>
        });
        crate::blocks::Evicting {
            policy: self.cache.policy,
            pinned,
            pin_share_per_mille: self.cache.pin_share_per_mille,
            small_floor: 0,
        }
    }

    /// Reads and validates `path`, with secrets from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, &Overrides::default())
    }

    /// Reads `path`, merges `over` into it and validates the result.
    pub fn load_with(path: &Path, over: &Overrides) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: String::new(),
            message: format!("cannot read config file: {e}"),
        })?;
        Self::parse_with(&text, &file, &ProcessEnv, over)
    }

    /// Validates TOML `text` that came from `file`.
    pub fn parse(text: &str, file: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        Self::parse_with(text, file, env, &Overrides::default())
    }

    /// Validates TOML `text` that came from `file`, with `over` merged in first.
    pub fn parse_with(
        text: &str,
        file: &str,
        env: &dyn Env,
        over: &Overrides,
    ) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let mut raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
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
        let (flags, standalone_read_window) =
            over.merge(&mut raw).map_err(|message| ConfigError {
                file: file.to_owned(),
                key: "origin".into(),
                message,
            })?;
        Validator {
            file,
            env,
            flags,
            standalone_read_window,
        }
        .config(raw)
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

    pub fn origin(&self) -> Result<&OriginConfig, ConfigError> {
        self.origin.as_ref().ok_or_else(|| self.missing("origin"))
    }

    /// Whether the region is still open where only AWS's instance metadata can
    /// settle it: nothing named one and the origin is AWS's own endpoint. Then
    /// the network it would be asked through.
    pub fn region_from_instance(&self) -> Option<&crate::net::Network> {
        let o = self.origin.as_ref()?;
        let open = o.region_source == crate::aws::region::RegionSource::Default
            && o.aws.is_some_and(|a| !a.overridden);
        open.then_some(&o.network)
    }

    /// Takes the region the instance metadata named.
    pub fn set_instance_region(&mut self, region: String) {
        if let Some(o) = self.origin.as_mut() {
            tracing::info!(region = %region, "region from the instance metadata");
            o.set_region(region, crate::aws::region::RegionSource::InstanceMetadata);
        }
    }
    pub fn cluster(&self) -> Option<&ClusterConfig> {
        self.cluster.as_ref()
    }
    /// What a reader reads through: the `[cluster]`; without one (straight to the
    /// origin) none, unless the command line gave a read window for it.
    pub fn reader_cluster(&self) -> Option<ClusterConfig> {
        self.cluster.clone().or_else(|| {
            self.standalone_read_window.map(|w| ClusterConfig {
                read_window: w,
                ..ClusterConfig::standalone()
            })
        })
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

#[cfg(test)]
mod tests;
