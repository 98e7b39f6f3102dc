//! The current node set: a static list, or a DNS name re-resolved every `refresh`.
//!
//! The set is swapped atomically (readers hold an `Arc` of the set they ranked
//! with). A DNS answer with no addresses is ignored and the current set kept: a
//! resolver hiccup must not empty the cluster. With a client `zone`, only nodes of
//! that zone are kept from a static list when the list has any (a node that names
//! no zone is in none); a zone the list has no node of would leave nothing to
//! rank, and every read would go to the origin unseen, so then every node is kept.
//! A DNS name is taken to be per zone already.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::placement::NodeSet;
use crate::config::{ClusterConfig, Membership as MembershipConfig, NodeSpec};

/// Name resolution, behind a trait so tests can answer what they like.
pub trait Resolver: Send + Sync {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// The system resolver (`getaddrinfo`).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

struct Dns {
    host: String,
    port: u16,
    refresh: Duration,
    resolver: Arc<dyn Resolver>,
}

pub struct Membership {
    current: RwLock<Arc<NodeSet>>,
    dns: Option<Dns>,
    zone: Option<String>,
    /// Whether the set holds only nodes of the client's zone.
    in_zone: bool,
}

/// What a refresh did.
#[derive(Debug, PartialEq, Eq)]
pub enum Refresh {
    Unchanged,
    Changed {
        nodes: usize,
    },
    /// The answer was empty; the current set was kept.
    KeptOnEmpty,
}

impl Membership {
    pub fn from_config(cfg: &ClusterConfig) -> Arc<Membership> {
        Self::with_resolver(cfg, Arc::new(SystemResolver))
    }

    pub fn with_resolver(cfg: &ClusterConfig, resolver: Arc<dyn Resolver>) -> Arc<Membership> {
        match &cfg.membership {
            MembershipConfig::Static(nodes) => {
                let (set, in_zone) = Self::static_set(nodes, cfg.zone.as_deref());
                Arc::new(Membership {
                    current: RwLock::new(Arc::new(set)),
                    dns: None,
                    zone: cfg.zone.clone(),
                    in_zone,
                })
            }
            MembershipConfig::Dns {
                host,
                port,
                refresh,
            } => Arc::new(Membership {
                current: RwLock::new(Arc::new(NodeSet::default())),
                dns: Some(Dns {
                    host: host.clone(),
                    port: *port,
                    refresh: *refresh,
                    resolver,
                }),
                zone: cfg.zone.clone(),
                in_zone: cfg.zone.is_some(),
            }),
        }
    }

    /// A fixed set of unweighted node ids (tests, embedders).
    pub fn fixed(ids: &[String]) -> Arc<Membership> {
        Arc::new(Membership {
            current: RwLock::new(Arc::new(NodeSet::new(ids.iter().map(|i| (i.clone(), 1.0))))),
            dns: None,
            zone: None,
            in_zone: false,
        })
    }

    /// The client's zone, if it routes within one.
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    /// How many nodes of the set ranked are of the client's zone: all of them
    /// when it routes within its zone, 0 when it names none or its zone has no
    /// node and every node is ranked.
    pub fn zone_nodes(&self) -> usize {
        if self.in_zone {
            self.current().len()
        } else {
            0
        }
    }

    /// The nodes of `zone` if it has any, else every node; and which it is.
    fn static_set(nodes: &[NodeSpec], zone: Option<&str>) -> (NodeSet, bool) {
        let all = || NodeSet::new(nodes.iter().map(|n| (n.id.clone(), n.weight)));
        let Some(zone) = zone else {
            return (all(), false);
        };
        let mine: Vec<_> = nodes
            .iter()
            .filter(|n| n.zone.as_deref() == Some(zone))
            .map(|n| (n.id.clone(), n.weight))
            .collect();
        if mine.is_empty() && !nodes.is_empty() {
            tracing::warn!(
                zone,
                nodes = nodes.len(),
                "no node of the cluster is in this client's zone: ranking every node"
            );
            return (all(), false);
        }
        tracing::info!(
            zone,
            nodes = mine.len(),
            of = nodes.len(),
            "ranking the nodes of this client's zone"
        );
        (NodeSet::new(mine), true)
    }

    /// The set to rank with now.
    pub fn current(&self) -> Arc<NodeSet> {
        self.current.read().unwrap().clone()
    }

    /// Resolves the DNS name once and swaps the set if it changed.
    pub async fn refresh(&self) -> io::Result<Refresh> {
        let Some(dns) = &self.dns else {
            return Ok(Refresh::Unchanged);
        };
        let addrs = dns.resolver.resolve(&dns.host, dns.port).await?;
        if addrs.is_empty() {
            tracing::warn!(name = %dns.host, "DNS answer has no addresses; keeping the current {} nodes", self.current().len());
            return Ok(Refresh::KeptOnEmpty);
        }
        let ids: Vec<String> = addrs
            .iter()
            .map(|a| {
                crate::config::canonical_node_id(&SocketAddr::new(a.ip(), dns.port).to_string())
                    .expect("a socket address is a node id")
            })
            .collect();
        let set = NodeSet::new(ids.into_iter().map(|i| (i, 1.0)));
        let mut cur = self.current.write().unwrap();
        let same = cur
            .nodes()
            .iter()
            .map(|n| &n.id)
            .eq(set.nodes().iter().map(|n| &n.id));
        if same {
            return Ok(Refresh::Unchanged);
        }
        let nodes = set.len();
        tracing::info!(name = %dns.host, nodes, "cluster membership changed");
        *cur = Arc::new(set);
        Ok(Refresh::Changed { nodes })
    }

    /// For DNS membership: resolves now, then every `refresh` in the background for
    /// as long as the returned task lives.
    pub fn spawn_refresh(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let period = self.dns.as_ref()?.refresh;
        let me = Arc::downgrade(self);
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(m) = me.upgrade() else { return };
                if let Err(e) = m.refresh().await {
                    tracing::warn!("DNS refresh failed, keeping the current nodes: {e}");
                }
            }
        }))
    }
}
