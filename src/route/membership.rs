//! The current node set: a static list, a DNS name re-resolved every `refresh`,
//! or a Kubernetes Service's EndpointSlices, watched ([`super::kube`]).
//!
//! The set is swapped atomically (readers hold an `Arc` of the set they ranked
//! with). A DNS answer with no addresses is ignored and the current set kept: a
//! resolver hiccup must not empty the cluster. With a client `zone`, only nodes of
//! that zone are kept from a static list when the list has any (a node that names
//! no zone is in none); a zone the list has no node of would leave nothing to
//! rank, and every read would go to the origin unseen, so then every node is kept.
//! A DNS name is taken to be per zone already. EndpointSlices name each
//! endpoint's zone and are filtered as a static list is, at every change.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::placement::NodeSet;
use crate::config::{ClusterConfig, KubeService, Membership as MembershipConfig, NodeSpec};

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
    kube: Option<KubeService>,
    zone: Option<String>,
    /// Whether the set holds only nodes of the client's zone.
    in_zone: AtomicBool,
    /// Whether the source has answered once (a static list has).
    answered: tokio::sync::watch::Sender<bool>,
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
                Self::with(set, None, None, cfg.zone.clone(), in_zone, true)
            }
            MembershipConfig::Dns {
                host,
                port,
                refresh,
            } => Self::with(
                NodeSet::default(),
                Some(Dns {
                    host: host.clone(),
                    port: *port,
                    refresh: *refresh,
                    resolver,
                }),
                None,
                cfg.zone.clone(),
                cfg.zone.is_some(),
                false,
            ),
            MembershipConfig::Kubernetes(svc) => Self::with(
                NodeSet::default(),
                None,
                Some(svc.clone()),
                cfg.zone.clone(),
                false,
                false,
            ),
        }
    }

    fn with(
        set: NodeSet,
        dns: Option<Dns>,
        kube: Option<KubeService>,
        zone: Option<String>,
        in_zone: bool,
        answered: bool,
    ) -> Arc<Membership> {
        Arc::new(Membership {
            current: RwLock::new(Arc::new(set)),
            dns,
            kube,
            zone,
            in_zone: AtomicBool::new(in_zone),
            answered: tokio::sync::watch::Sender::new(answered),
        })
    }

    /// A fixed set of unweighted node ids (tests, embedders).
    pub fn fixed(ids: &[String]) -> Arc<Membership> {
        Self::with(
            NodeSet::new(ids.iter().map(|i| (i.clone(), 1.0))),
            None,
            None,
            None,
            false,
            true,
        )
    }

    /// The client's zone, if it routes within one.
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    /// How many nodes of the set ranked are of the client's zone: all of them
    /// when it routes within its zone, 0 when it names none or its zone has no
    /// node and every node is ranked.
    pub fn zone_nodes(&self) -> usize {
        if self.in_zone.load(Ordering::Relaxed) {
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

    /// Waits (at most `within`) for the source's first answer: a DNS name is
    /// resolved now, a Service's slices listed by the running watch.
    pub async fn ready(&self, within: Duration) {
        if self.dns.is_some() {
            match tokio::time::timeout(within, self.refresh()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("cannot resolve the cluster's DNS name: {e}"),
                Err(_) => tracing::warn!("the cluster's DNS name is not resolved after {within:?}"),
            }
            return;
        }
        let mut rx = self.answered.subscribe();
        if tokio::time::timeout(within, rx.wait_for(|a| *a))
            .await
            .is_err()
        {
            tracing::warn!(
                "the cluster's nodes are not known after {within:?}: reading from the origin meanwhile"
            );
        }
    }

    /// Swaps in the nodes a Service's slices list now: those of the client's zone
    /// if any, else all of them; none at all when none is ready.
    fn apply_slices(&self, nodes: &[NodeSpec]) {
        let (set, in_zone) = Self::static_set(nodes, self.zone.as_deref());
        self.in_zone.store(in_zone, Ordering::Relaxed);
        let ranked = set.len();
        if self.swap(set) {
            tracing::info!(
                nodes = ranked,
                of = nodes.len(),
                "cluster membership changed"
            );
        }
    }

    /// Takes `set` unless it holds the nodes of the current one, and marks the
    /// source as having answered; whether the set changed.
    fn swap(&self, set: NodeSet) -> bool {
        let mut cur = self.current.write().unwrap();
        let changed = !cur
            .nodes()
            .iter()
            .map(|n| &n.id)
            .eq(set.nodes().iter().map(|n| &n.id));
        if changed {
            *cur = Arc::new(set);
        }
        drop(cur);
        self.answered.send_replace(true);
        changed
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
        let nodes = set.len();
        if !self.swap(set) {
            return Ok(Refresh::Unchanged);
        }
        tracing::info!(name = %dns.host, nodes, "cluster membership changed");
        Ok(Refresh::Changed { nodes })
    }

    /// For DNS membership: resolves now, then every `refresh` in the background for
    /// as long as the returned task lives. For a Service: lists its slices and
    /// watches them, as long as the task lives and the membership is in use.
    pub fn spawn_refresh(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if let Some(svc) = &self.kube {
            let me = Arc::downgrade(self);
            let what = format!("{}/{}", svc.namespace, svc.service);
            let watcher = match super::kube::Watcher::new(svc.clone()) {
                Ok(w) => w,
                Err(e) => {
                    tracing::error!(service = %what, "cannot watch the nodes' EndpointSlices, reading from the origin: {e}");
                    return None;
                }
            };
            return Some(tokio::spawn(watcher.run(move |slices| {
                let Some(m) = me.upgrade() else { return false };
                m.apply_slices(&slices.nodes());
                true
            })));
        }
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
