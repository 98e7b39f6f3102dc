//! Turning the raw file (with the command line's values merged in) into the
//! validated types, one section a file. Every error names the file and the key,
//! or the flag when the value came from the command line.

mod cluster;
mod mount;
mod node;
mod origin;
mod rules;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::raw::{RawConfig, RawCredentials};
use super::{credentials, defaults, Config, ConfigError, CredentialMode, Env, GatewayConfig};

pub(super) struct Validator<'a> {
    pub file: &'a str,
    pub env: &'a dyn Env,
    /// Keys whose value came from a flag, and the flag.
    pub flags: HashMap<&'static str, &'static str>,
    /// `--read-window` of a reader with no `[cluster]`.
    pub standalone_read_window: Option<usize>,
}

pub(super) type R<T> = Result<T, ConfigError>;

impl Validator<'_> {
    /// An error about `key`, or about the flag that set it.
    fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let key = key.into();
        match self.flags.get(key.as_str()) {
            Some(flag) => ConfigError {
                file: "command line".into(),
                key: (*flag).into(),
                message: message.into(),
            },
            None => ConfigError {
                file: self.file.to_owned(),
                key,
                message: message.into(),
            },
        }
    }

    pub fn config(&self, raw: RawConfig) -> R<Config> {
        let mut node = raw.node.map(|n| self.node(n)).transpose()?;
        let cluster = raw.cluster.map(|c| self.cluster(c)).transpose()?;
        if let (Some(n), Some(c)) = (&mut node, &cluster) {
            if matches!(c.membership, super::Membership::Kubernetes(_)) && n.id.is_none() {
                n.id = self.pod_node_id(n.listen)?;
            }
        }
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
        let read_window = self
            .standalone_read_window
            .map(|n| self.read_window(n))
            .transpose()?;
        let cache = self.cache(raw.cache.unwrap_or_default(), node.is_some())?;
        let rules = raw
            .rules
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, r)| self.rule(i, r))
            .collect::<R<Vec<_>>>()?;
        // The largest block this program keeps in RAM: a node's blocks (a rule may
        // make them larger), else the cluster's a reader reads.
        let largest = match &node {
            Some(n) => rules
                .iter()
                .filter_map(|r| r.block_size)
                .fold(n.block_size, u64::max),
            None => cluster
                .as_ref()
                .map_or(defaults::CLUSTER_BLOCK_SIZE, |c| c.block_size),
        };
        if cache.ram_size > 0 && cache.ram_size < largest {
            return Err(self.err(
                "cache.ram_size",
                format!(
                    "{} holds no block (blocks here are {}): give at least {}, or 0 for no RAM tier",
                    bytesize::ByteSize(cache.ram_size).display().iec(),
                    bytesize::ByteSize(largest).display().iec(),
                    bytesize::ByteSize(largest).display().iec()
                ),
            ));
        }
        Ok(Config {
            file: self.file.to_owned(),
            origin: raw.origin.map(|o| self.origin(o)).transpose()?,
            cluster,
            standalone_read_window: read_window,
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
            rules,
        })
    }

    /// Blocks in flight per sequential reader.
    fn read_window(&self, n: usize) -> R<usize> {
        if n == 0 || n > 1024 {
            return Err(self.err(
                "cluster.read_window",
                format!("{n} is out of range 1..=1024"),
            ));
        }
        Ok(n)
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

    fn socket_addr(&self, key: &str, s: &str) -> R<SocketAddr> {
        s.parse().map_err(|_| {
            self.err(
                key,
                format!("{s:?} is not an address like 0.0.0.0:9000 or [::1]:9000"),
            )
        })
    }
}
