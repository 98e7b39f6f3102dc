//! `shoal-node`: an S3-compatible cache node.
//!
//! A request goes [`server`] (HTTP, `/metrics`, `/healthz`) -> [`api`] (the S3
//! operations, on `s3s`) -> [`node`] (versions, the tier pipeline, fetches from the
//! origin or, on a gateway, from each block's owner). [`rules`] decide what is
//! cached; [`fanout`] passes invalidations on to the other nodes. [`build`] makes
//! all of it from a config, for the binary and for tests. `api` uses `node`, never
//! the other way round.

pub mod access;
pub mod api;
pub mod connections;
pub mod fanout;
pub mod handover;
pub mod metadata_cache;
pub mod metrics;
pub mod node;
pub mod rules;
pub mod server;
mod tls;

use std::sync::Arc;

use shoal::config::{AuthConfig, Config};

pub use server::{serve, App};

/// Builds the node's app from a validated config. `bound` is the address its
/// listener is bound to, when known (else `node.listen`): it names the node's own
/// entry in its cluster. Must be called inside a tokio runtime: a node with a
/// `[cluster]` starts background tasks (invalidation fan-out, DNS membership
/// refresh).
pub fn build(
    cfg: &Config,
    bound: Option<std::net::SocketAddr>,
) -> Result<(Arc<App>, Option<tokio_rustls::TlsAcceptor>), String> {
    let origin_cfg = cfg.origin().map_err(|e| e.to_string())?;
    let node_cfg = cfg.node().map_err(|e| e.to_string())?;
    let auth = cfg.auth().map_err(|e| e.to_string())?;
    let origin = origin_cfg.client().map_err(|e| e.to_string())?;
    let disk = match (cfg.cache.data_dir.clone(), cfg.cache.disk_size) {
        (Some(dir), n) if n > 0 => Some((dir, n)),
        (Some(_), 0) => {
            tracing::warn!("cache.data_dir is set but cache.disk_size is 0: the disk tier is off");
            None
        }
        _ => None,
    };
    // A node with a [cluster] reaches the other nodes: a gateway's misses (strong
    // mode), warming after writes, and invalidations (both modes).
    let reader = cfg.cluster().map(|c| {
        let mut c = c.clone();
        if c.zone.is_none() {
            c.zone = node_cfg.zone.clone();
        }
        shoal::cluster::ClusterReader::new(
            origin.clone(),
            Some(&c),
            shoal::cluster::ReaderOptions {
                // Blocks land in this node's own tiers; the reader only needs room
                // for the cluster blocks a read is cut from.
                ram_bytes: c.block_size * c.read_window as u64,
                disk: None,
                max_inflight_blocks: Some(c.peer_concurrency),
                queue_wait: Some(c.peer_queue_wait),
                ..Default::default()
            },
        )
    });
    let listen = bound.unwrap_or(node_cfg.listen);
    // This node's own entry in the cluster: as configured, or its listen address.
    let self_id = node_cfg
        .id
        .clone()
        .or_else(|| (!listen.ip().is_unspecified()).then(|| listen.to_string()));
    let upstream = match (cfg.cluster(), &reader) {
        (Some(c), Some(r)) if c.mode == shoal::config::ClusterMode::Strong => {
            Some(node::Upstream {
                reader: r.clone(),
                hop_limit: c.hop_limit,
                self_id: self_id.clone(),
            })
        }
        _ => None,
    };
    let hop_limit = upstream.as_ref().map(|u| u.hop_limit);
    // A node that knows its cluster and its own entry in it asks a block's
    // runner-up before the origin (in either mode).
    let peers = match (cfg.cluster(), &reader, &self_id) {
        (Some(c), Some(r), Some(me)) if !node_cfg.peer_fill_timeout.is_zero() => {
            Some(node::Peers {
                reader: r.clone(),
                self_id: me.clone(),
                timeout: node_cfg.peer_fill_timeout,
                first_byte: c.timeouts.first_byte,
                stall: c.timeouts.stall,
                clients: node::PeerClients::new(c, &origin.options().region),
                asking: Default::default(),
            })
        }
        _ => None,
    };
    if cfg.gateway.writes && cfg.cluster().is_none() {
        tracing::info!("[gateway] writes = true on a node without [cluster]: writes are forwarded, invalidations stay on this node");
    }
    let node = node::Node::new(
        Arc::new(origin.clone()),
        node::NodeOptions {
            origin_attempts: origin.options().retry.max_attempts,
            block_size: node_cfg.block_size,
            revalidate_after: node_cfg.revalidate_after,
            max_age: node_cfg.max_age,
            ram_bytes: cfg.cache.ram_size,
            disk: disk.clone(),
            rules: cfg.rules.clone(),
            evicting: cfg.evicting(),
            upstream,
            peers,
            metadata_ttl: cfg.cache.metadata_ttl,
            metadata_size: cfg.cache.metadata_size,
        },
    )
    .map_err(|e| match &disk {
        Some((d, _)) => format!("cannot open the disk tier in {}: {e}", d.display()),
        None => e.to_string(),
    })?;
    let node = Arc::new(node);
    let fanout = cfg.cluster().map(|c| {
        Arc::new(fanout::Fanout::start(
            node.metrics.clone(),
            c,
            &origin_cfg.region,
            self_id,
        ))
    });
    let writes = cfg.gateway.writes.then(|| api::writes::Writes {
        node: node.clone(),
        origin: origin.clone(),
        fanout: fanout.clone(),
        warm: if cfg.gateway.warm_on_write {
            reader.clone()
        } else {
            None
        },
    });
    if cfg.gateway.writes && matches!(auth, AuthConfig::None) {
        return Err(format!(
            "{}: gateway.writes takes writes from authenticated clients only, and auth.mode is \"none\"",
            cfg.file
        ));
    }
    if cfg.gateway.warm_on_write && reader.is_none() {
        return Err(format!(
            "{}: gateway.warm_on_write needs a [cluster] whose owners fetch the blocks",
            cfg.file
        ));
    }
    if cfg.gateway.warm_on_write && !cfg.gateway.writes {
        return Err(format!(
            "{}: gateway.warm_on_write needs gateway.writes = true",
            cfg.file
        ));
    }
    let mut builder = s3s::service::S3ServiceBuilder::new(api::NodeApi {
        node: node.clone(),
        fanout: fanout.clone(),
    });
    let cluster_key = cfg.cluster().and_then(|c| match &c.credentials {
        shoal::config::CredentialMode::Keys(k) => Some(k.access_key_id.clone()),
        _ => None,
    });
    let mut gate = None;
    let open = match auth {
        AuthConfig::None => {
            tracing::warn!("AUTHENTICATION IS OFF (auth.mode = \"none\"): anyone who can reach this node can read what it caches and what the origin credentials allow");
            true
        }
        AuthConfig::SigV4 { keys, max_skew } => {
            builder.set_auth(api::auth::NodeAuth::new(keys));
            access::Policy::log_upgrade(keys, cluster_key.as_deref(), cfg.gateway.writes);
            let g = api::auth::Gate {
                policy: Arc::new(access::Policy::new(keys, cluster_key.as_deref())),
                metrics: node.metrics.clone(),
            };
            builder.set_access(g.clone());
            gate = Some(g);
            // How far a request's signing time may be from ours.
            let mut config = s3s::config::S3Config::default();
            config.presigned_url_max_skew_time_secs =
                max_skew.as_secs().min(u32::MAX as u64) as u32;
            builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
                config,
            ))));
            false
        }
    };
    builder.set_route(api::Routes {
        purge: api::PurgeRoute {
            node: node.clone(),
            fanout: fanout.clone(),
            open,
            gate: gate.clone(),
        },
        lists: api::ListRoute {
            node: node.clone(),
            origin: origin.clone(),
            open,
            domains: node_cfg.domains.clone(),
        },
        objects: api::passthrough::ObjectRoute {
            node: node.clone(),
            origin: origin.clone(),
            open,
            domains: node_cfg.domains.clone(),
        },
        writes: writes.map(|writes| api::forwarded_writes::WriteRoute {
            writes,
            domains: node_cfg.domains.clone(),
        }),
        gate: gate.clone(),
        domains: node_cfg.domains.clone(),
    });
    if !node_cfg.domains.is_empty() {
        let host = s3s::host::MultiDomain::new(&node_cfg.domains)
            .map_err(|e| format!("{}: node.domains: {e}", cfg.file))?;
        builder.set_host(host);
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let keys = match &auth {
        AuthConfig::SigV4 { keys, .. } => &keys[..],
        AuthConfig::None => &[],
    };
    let known = metrics::Known { keys, hop_limit };
    node.metrics.register(&mut registry, &known);
    if let Some(b) = origin.budget() {
        b.metrics
            .register(registry.sub_registry_with_prefix("shoal_node_origin_budget"));
    }
    if let Some(r) = &reader {
        r.metrics.register(&mut registry);
    }
    let access_log = match &node_cfg.access_log {
        Some(path) => {
            let log = Arc::new(access::log::AccessLog::start(
                path.clone(),
                node.metrics.access_log_dropped.clone(),
            )?);
            reopen_on_sigusr1(&log)?;
            Some(log)
        }
        None => None,
    };
    let tls = match &cfg.tls {
        Some(t) => Some(tls::acceptor(&t.cert, &t.key)?),
        None => None,
    };
    Ok((
        Arc::new(App {
            node,
            s3: builder.build(),
            registry,
            open,
            limits: connections::Limits::of(node_cfg),
            policy: gate.map(|g| g.policy),
            access_log,
            domains: node_cfg.domains.clone(),
        }),
        tls,
    ))
}

/// logrotate's signal: the access log is opened again by name.
fn reopen_on_sigusr1(log: &Arc<access::log::AccessLog>) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sig = signal(SignalKind::user_defined1()).map_err(|e| format!("SIGUSR1: {e}"))?;
    let log = Arc::downgrade(log);
    tokio::spawn(async move {
        while sig.recv().await.is_some() {
            match log.upgrade() {
                Some(l) => l.reopen(),
                None => break,
            }
        }
    });
    Ok(())
}
