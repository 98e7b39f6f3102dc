//! `[cluster]`: the nodes, routing, deadlines, hedging, breaker and budgets.

use crate::config::raw::{RawCluster, RawNodeEntry};
use crate::config::{
    canonical_node_id, defaults, BreakerConfig, ClusterConfig, ClusterMode, CredentialMode,
    HedgeConfig, KubeService, Membership, Network, NodeSpec, Proxy, Timeouts,
};

use super::{Validator, R};

impl Validator<'_> {
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

    /// `cluster.kubernetes` and the keys that go with it.
    fn kube_service(&self, c: &RawCluster) -> R<Option<KubeService>> {
        let Some(name) = &c.kubernetes else {
            for (key, v) in [
                ("cluster.kubernetes_port", c.kubernetes_port.is_some()),
                ("cluster.kubernetes_api", c.kubernetes_api.is_some()),
                (
                    "cluster.kubernetes_token_file",
                    c.kubernetes_token_file.is_some(),
                ),
                ("cluster.kubernetes_ca_file", c.kubernetes_ca_file.is_some()),
            ] {
                if v {
                    return Err(self.err(key, "only applies with cluster.kubernetes"));
                }
            }
            return Ok(None);
        };
        let label = |s: &str| {
            (1..=63).contains(&s.len())
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        let (namespace, service) = name
            .split_once('/')
            .filter(|(n, s)| label(n) && label(s))
            .ok_or_else(|| {
                self.err(
                    "cluster.kubernetes",
                    format!("{name:?} is not NAMESPACE/SERVICE (two names of a-z, 0-9 and '-')"),
                )
            })?;
        const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
        let api = match &c.kubernetes_api {
            Some(a) => {
                let u = url::Url::parse(a)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                    .ok_or_else(|| {
                        self.err(
                            "cluster.kubernetes_api",
                            format!("{a:?} is not an http(s) URL"),
                        )
                    })?;
                u.as_str().trim_end_matches('/').to_owned()
            }
            // In a pod: the API server's Service, from the variables kubelet sets.
            None => {
                let host = self
                    .env
                    .var("KUBERNETES_SERVICE_HOST")
                    .unwrap_or_else(|| "kubernetes.default.svc".into());
                let port = self
                    .env
                    .var("KUBERNETES_SERVICE_PORT")
                    .unwrap_or_else(|| "443".into());
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                format!("https://{host}:{port}")
            }
        };
        Ok(Some(KubeService {
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            port: c.kubernetes_port.clone(),
            api,
            token_file: c
                .kubernetes_token_file
                .clone()
                .unwrap_or_else(|| format!("{SA}/token"))
                .into(),
            ca_file: match &c.kubernetes_ca_file {
                Some(f) => Some(f.into()),
                None if c.kubernetes_api.is_none() => Some(format!("{SA}/ca.crt").into()),
                None => None,
            },
        }))
    }

    /// A node's entry in its Service's slices, `POD_IP:PORT`, when `node.id` is
    /// not given: the slices list pods by address, and a node must know which
    /// one is itself (to own its blocks, and not to ask or purge itself).
    pub(super) fn pod_node_id(&self, listen: std::net::SocketAddr) -> R<Option<String>> {
        if !listen.ip().is_unspecified() {
            return Ok(None);
        }
        let Some(ip) = self.env.var("POD_IP").filter(|v| !v.trim().is_empty()) else {
            return Err(self.err(
                "node.id",
                "a node under cluster.kubernetes listening on every address needs its own address: set node.id, or POD_IP (status.podIP from the downward API)",
            ));
        };
        let ip: std::net::IpAddr = ip
            .trim()
            .parse()
            .map_err(|_| self.err("node.id", format!("POD_IP {ip:?} is not an IP address")))?;
        let id = std::net::SocketAddr::new(ip, listen.port()).to_string();
        canonical_node_id(&id)
            .map(Some)
            .map_err(|m| self.err("node.id", m))
    }

    pub(super) fn cluster(&self, c: RawCluster) -> R<ClusterConfig> {
        let kube = self.kube_service(&c)?;
        if kube.is_some() && (c.nodes.is_some() || c.dns.is_some()) {
            return Err(self.err(
                "cluster.kubernetes",
                "give one of nodes, dns and kubernetes, not several",
            ));
        }
        let membership = match (c.nodes, c.dns) {
            _ if kube.is_some() => Membership::Kubernetes(kube.expect("checked")),
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
                    "no nodes, no dns name and no kubernetes Service: a [cluster] needs one of them",
                ));
            }
        };
        if c.refresh.is_some() && !matches!(membership, Membership::Dns { .. }) {
            return Err(self.err("cluster.refresh", "only applies with dns"));
        }
        let block_size = c.block_size.map_or(defaults::CLUSTER_BLOCK_SIZE, |s| s.0);
        if !(4096..=(1 << 30)).contains(&block_size) {
            return Err(self.err(
                "cluster.block_size",
                format!("{block_size} is out of range 4KiB..=1GiB"),
            ));
        }
        let read_window = self.read_window(c.read_window.unwrap_or(defaults::READ_WINDOW))?;
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
        if matches!(credentials, CredentialMode::Chain { .. }) {
            return Err(self.err(
                "cluster.credentials.profile",
                "cluster credentials are the keys the nodes' [auth] accepts: write them (or their _env forms)",
            ));
        }
        let network = Network {
            proxy: self.proxy("cluster.proxy", c.proxy, Proxy::Off)?,
            ca_bundle: self.ca_bundle("cluster.ca_bundle", c.ca_bundle)?,
        };
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
            network,
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
}
