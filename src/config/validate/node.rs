//! What a node reads: `[node]`, `[cache]`, `[auth]` and `[tls]`.

use std::path::PathBuf;

use crate::config::raw::{RawAuth, RawAuthKey, RawCache, RawCredentials, RawNode, RawTls};
use crate::config::{
    canonical_node_id, defaults, AuthConfig, AuthKey, CacheConfig, CredentialMode, KeyLimits,
    NodeConfig, TlsConfig,
};
use crate::scope::Scope;

use super::{Validator, R};

impl Validator<'_> {
    pub(super) fn node(&self, n: RawNode) -> R<NodeConfig> {
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
            header_read_timeout: self.positive(
                "node.header_read_timeout",
                n.header_read_timeout
                    .map_or(defaults::HEADER_READ_TIMEOUT, |d| d.0),
            )?,
            idle_timeout: self.positive(
                "node.idle_timeout",
                n.idle_timeout.map_or(defaults::IDLE_TIMEOUT, |d| d.0),
            )?,
            max_connections: match n.max_connections {
                Some(0) => return Err(self.err("node.max_connections", "must be at least 1")),
                Some(m) if m > 1 << 20 => {
                    return Err(self.err("node.max_connections", format!("{m} is above 1048576")))
                }
                m => m.unwrap_or(defaults::MAX_CONNECTIONS),
            },
            access_log: match n.access_log {
                Some(p) if p.trim().is_empty() => {
                    return Err(self.err("node.access_log", "is empty: name a file"))
                }
                p => p.map(PathBuf::from),
            },
            peer_fill_timeout: n
                .peer_fill_timeout
                .map_or(defaults::PEER_FILL_TIMEOUT, |d| d.0),
            stop_flush_timeout: n
                .stop_flush_timeout
                .map_or(defaults::STOP_FLUSH_TIMEOUT, |d| d.0),
        })
    }

    pub(super) fn cache(&self, c: RawCache, is_node: bool) -> R<CacheConfig> {
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
        let metadata_ttl = c.metadata_ttl.map_or(defaults::METADATA_CACHE_TTL, |d| d.0);
        if metadata_ttl > crate::node_proto::MAX_METADATA_TTL {
            return Err(self.err("cache.metadata_ttl", "is longer than a day"));
        }
        let policy = match c.policy {
            Some(p) => p.parse().map_err(|e: String| self.err("cache.policy", e))?,
            None => Default::default(),
        };
        let pin_share = c.pin_share.unwrap_or(defaults::PIN_SHARE);
        if !(0.0..=1.0).contains(&pin_share) {
            return Err(self.err(
                "cache.pin_share",
                format!("{pin_share} is not a share of the tier (0 to 1)"),
            ));
        }
        Ok(CacheConfig {
            policy,
            pin_share_per_mille: (pin_share * 1000.0).round() as u64,
            ram_size,
            disk_size,
            data_dir,
            metadata_ttl,
            metadata_size: c
                .metadata_size
                .map_or(defaults::METADATA_CACHE_SIZE, |s| s.0),
        })
    }

    pub(super) fn auth(&self, a: RawAuth) -> R<AuthConfig> {
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
                for (i, k) in raw_keys.into_iter().enumerate() {
                    let section = format!("auth.keys[{i}]");
                    let key = self.auth_key(&section, k)?;
                    let id = &key.credentials.access_key_id;
                    if keys
                        .iter()
                        .any(|k: &AuthKey| k.credentials.access_key_id == *id)
                    {
                        return Err(self.err(
                            format!("{section}.access_key_id"),
                            format!("{id:?} is listed twice"),
                        ));
                    }
                    keys.push(key);
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

    /// One accepted key: its secret, its `allow` list, its limits.
    fn auth_key(&self, section: &str, k: RawAuthKey) -> R<AuthKey> {
        let raw = RawCredentials {
            access_key_id: k.access_key_id,
            access_key_id_env: k.access_key_id_env,
            secret_access_key: k.secret_access_key,
            secret_access_key_env: k.secret_access_key_env,
            ..Default::default()
        };
        let credentials = match self.credentials(section, &raw, false)? {
            Some(CredentialMode::Keys(c)) => c,
            _ => return Err(self.err(section, "needs access_key_id and secret_access_key")),
        };
        let allow = match k.allow {
            None => None,
            Some(entries) => Some(
                Scope::parse(&entries)
                    .map_err(|(i, m)| self.err(format!("{section}.allow[{i}]"), m))?,
            ),
        };
        let rate = |key: &str, v: Option<f64>| -> R<Option<f64>> {
            match v {
                Some(r) if !(r.is_finite() && r > 0.0) => Err(self.err(
                    format!("{section}.{key}"),
                    format!("{r} is not a rate above zero"),
                )),
                v => Ok(v),
            }
        };
        let rps = rate("max_requests_per_second", k.max_requests_per_second)?;
        let bps = rate(
            "max_bytes_per_second",
            k.max_bytes_per_second.map(|s| s.0 as f64),
        )?;
        let burst_requests = rate("burst_requests", k.burst_requests)?;
        let burst_bytes = rate("burst_bytes", k.burst_bytes.map(|s| s.0 as f64))?;
        let pair =
            |limit: Option<f64>, burst: Option<f64>, key: &str, floor: f64| match (limit, burst) {
                (None, Some(_)) => Err(self.err(
                    format!("{section}.burst_{key}"),
                    format!("a burst needs max_{key}_per_second beside it"),
                )),
                // A second's worth by default, and never less than one request or
                // one block's answer.
                (Some(l), b) => Ok(Some((l, b.unwrap_or(l).max(floor)))),
                (None, None) => Ok(None),
            };
        let limits = KeyLimits {
            requests: pair(rps, burst_requests, "requests", 1.0)?,
            bytes: pair(bps, burst_bytes, "bytes", 0.0)?,
        };
        Ok(AuthKey {
            credentials,
            allow,
            limits,
        })
    }

    pub(super) fn tls(&self, t: RawTls) -> R<TlsConfig> {
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
