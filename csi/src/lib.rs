//! `shoal-csi`: a CSI node plugin (spec 1.12) that makes S3 buckets Kubernetes
//! volumes, read through the shoal cluster by `shoal-mount`s: one per volume,
//! mount options and identity on a host, shared by its pods ([`share`]).
//!
//! A publish ([`node`]) checks the request ([`volume`], [`options`]), finds the
//! pod's role for `authenticationSource: pod` ([`pod_identity`], through
//! [`kube`]), writes the volume's files under the state directory
//! ([`published`]; a config that finds its nodes through the Kubernetes API is
//! lent the plugin's access, [`api_access`]) and starts its
//! mount's keeper outside the plugin ([`launch`]) with what [`prepare`] gives
//! it (the driver's tokens copied for it, [`tokens`]), then keeps a copy of the
//! mount's connection. The plugin may restart at any time: at start it finds the
//! volumes it published and takes back their copies, hands each mount over to
//! its own `shoal-mount` ([`upgrade`]), and it replaces a keeper that dies on
//! the same connection, so no published mount ever breaks. [`metrics`] and
//! [`scrape`] serve its metrics and its mounts'. [`identity`] answers who the
//! plugin is; [`error`] maps failures to gRPC codes; [`install`] puts the image's
//! `shoal-mount` on the host.

pub mod api_access;
pub mod authority;
pub mod condition;
pub mod error;
pub mod identity;
pub mod install;
pub mod keeper_deaths;
pub mod kube;
pub mod launch;
pub mod metrics;
pub mod node;
pub mod options;
pub mod pod_identity;
pub mod prepare;
pub mod published;
pub mod scrape;
pub mod share;
pub mod tokens;
pub mod upgrade;
pub mod volume;
pub mod zone;

#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!("proto/csi.v1.rs");
}

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::KubeApi;
use launch::Launcher;
use published::{control_of, Published, Volumes};

/// The topology key a zone is given under.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// What the plugin is started with.
pub struct PluginConfig {
    pub node_id: String,
    pub zone: Option<String>,
    /// Where published volumes' files live (a host path on Kubernetes).
    pub state_dir: PathBuf,
    pub mount_bin: PathBuf,
    pub launcher: Launcher,
    /// The config a volume names none of.
    pub default_config: PathBuf,
    pub kube: KubeApi,
    /// The first of the groups the volumes' tokens belong to ([`tokens`]).
    pub token_group_base: u32,
    /// How often the copies of the driver's tokens are brought up to date.
    pub token_refresh: Duration,
    /// Hand mounts on another `shoal-mount` over to `mount_bin` at start.
    pub upgrade_mounts: bool,
}

pub struct Plugin {
    pub node_id: String,
    pub zone: Option<String>,
    pub mount_bin: PathBuf,
    pub launcher: Launcher,
    pub default_config: PathBuf,
    pub kube: KubeApi,
    pub volumes: Volumes,
    /// Stages and publishes of shared mounts.
    pub binds: share::Binds,
    /// Where shared mounts are mounted.
    pub shares: PathBuf,
    /// The plugin's API access, lent to mounts that find their nodes there.
    pub api_access: Arc<api_access::ApiAccess>,
    /// The groups of the volumes' tokens.
    pub readers: tokens::Readers,
    /// The driver's own tokens, copied to the mounts that read with its role.
    pub driver_tokens: tokens::DriverTokens,
    pub token_refresh: Duration,
    /// What `mount_bin` is (`None` if it cannot be read or run).
    pub driver_mount: Option<upgrade::DriverMount>,
    pub upgrade_mounts: bool,
    pub metrics: metrics::Metrics,
    /// The mounts' keepers, watched for their deaths.
    pub keeper_deaths: keeper_deaths::KeeperDeaths,
}

impl Plugin {
    /// A plugin with the volumes published before it (by an earlier run) taken back.
    pub fn start(c: PluginConfig) -> Result<Arc<Plugin>, String> {
        let root = c.state_dir.join("volumes");
        let binds = c.state_dir.join("binds");
        let shares = c.state_dir.join("shares");
        for d in [&root, &binds, &shares] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("state directory {}: {e}", d.display()))?;
        }
        let api_access = api_access::ApiAccess::start(c.kube.clone(), c.state_dir.join("kube"))?;
        let driver_mount = upgrade::DriverMount::of(&c.mount_bin)
            .map_err(|e| tracing::warn!("cannot tell which shoal-mount the driver has: {e}"))
            .ok();
        let p = Arc::new(Plugin {
            api_access,
            readers: tokens::Readers::new(c.token_group_base),
            driver_tokens: tokens::DriverTokens::from_env(),
            token_refresh: c.token_refresh,
            driver_mount,
            upgrade_mounts: c.upgrade_mounts,
            metrics: metrics::Metrics::default(),
            keeper_deaths: Default::default(),
            node_id: c.node_id,
            zone: c.zone,
            mount_bin: c.mount_bin,
            launcher: c.launcher,
            default_config: c.default_config,
            kube: c.kube,
            volumes: Volumes::new(root),
            binds: share::Binds::new(binds),
            shares,
        });
        p.recover();
        p.binds.recover();
        p.stop_orphan_shares();
        Ok(p)
    }

    /// Takes back what an earlier run published: a live mount's record and a
    /// copy of its connection; a record whose mount is gone is dropped.
    fn recover(&self) {
        for (dir, record) in self.volumes.on_disk() {
            let target = record.target.clone();
            // A keeper that answers may still be mounting (the plugin was killed
            // as it started the mount): its files stay, and it is taken back.
            if !shoal_mount::is_mounted(&target) && !published::keeper_answers(&dir) {
                tracing::info!("{} is no longer mounted; forgetting it", target.display());
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
            let held = match shoal_mount::keeper::ask_fds(&control_of(&dir)) {
                Ok(fds) => Some(fds),
                Err(e) => {
                    tracing::error!(
                        "{}: its keeper does not answer ({e}) and this plugin holds no copy of its connection: the next publish of it mounts it again",
                        target.display()
                    );
                    None
                }
            };
            tracing::info!(
                "took back {} (volume {:?})",
                target.display(),
                record.fingerprint.volume_id
            );
            if let Some(id) = record.reader {
                self.readers.claim(id);
            }
            self.volumes
                .map
                .lock()
                .unwrap()
                .insert(target, Published { dir, record, held });
        }
    }

    /// Whether a mount could start now; why not otherwise.
    pub fn can_mount(&self) -> Result<(), String> {
        if !std::path::Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse is missing".into());
        }
        let out = std::process::Command::new(&self.mount_bin)
            .arg("--version")
            .output()
            .map_err(|e| format!("{}: {e}", self.mount_bin.display()))?;
        if !out.status.success() {
            return Err(format!("{} --version failed", self.mount_bin.display()));
        }
        Ok(())
    }

    /// Replaces, on the same connection, the keeper of any published volume that
    /// has gone (the plugin holds a copy of its connection): as a keeper dies
    /// ([`keeper_deaths`]), and every `every`.
    pub async fn watch_keepers(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            self.keeper_deaths.next(&mut tick).await;
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.replace_lost_keepers()).await;
        }
    }

    fn replace_lost_keepers(&self) {
        let targets: Vec<PathBuf> = self.volumes.map.lock().unwrap().keys().cloned().collect();
        for target in targets {
            let lock = self.volumes.lock(&target);
            let Ok(_held) = lock.try_lock() else {
                // A publish or unpublish of it is under way.
                continue;
            };
            // The map is not held while a keeper is asked anything: a keeper busy
            // starting servers answers late, and every call of kubelet's (stats,
            // publish, unpublish) takes the map.
            let Some(control) = self
                .volumes
                .map
                .lock()
                .unwrap()
                .get(&target)
                .map(|p| p.control())
            else {
                continue;
            };
            if published::keeper_listens(&control) {
                self.keeper_deaths.watch(&target, &control);
                // Taken back while its mount was still coming up: its copy now.
                let has_copy = self
                    .volumes
                    .map
                    .lock()
                    .unwrap()
                    .get(&target)
                    .is_some_and(|p| p.held.is_some());
                if !has_copy {
                    let fds = shoal_mount::keeper::ask_fds(&control).ok();
                    if let Some(p) = self.volumes.map.lock().unwrap().get_mut(&target) {
                        p.held = p.held.take().or(fds);
                    }
                }
                continue;
            }
            // The copy's journal is the one in use now, however many servers
            // took over since it was taken: a mount keeps one journal file for
            // its whole life, compacted in place, never replaced.
            let taken = {
                let mut map = self.volumes.map.lock().unwrap();
                map.get_mut(&target).and_then(|p| {
                    let fds = p.held.take()?;
                    Some((self.launch_of(&p.record, &p.dir), fds))
                })
            };
            let Some((launch, fds)) = taken else { continue };
            tracing::warn!(
                "the keeper of {} is gone; starting another on the same connection",
                target.display()
            );
            match self.launcher.adopt(&launch, &fds) {
                Ok(()) => tracing::info!("{} is kept again", target.display()),
                Err(e) => tracing::error!("cannot keep {} again: {e}", target.display()),
            }
            if let Some(p) = self.volumes.map.lock().unwrap().get_mut(&target) {
                p.held = Some(fds);
            }
        }
    }
}

/// Serves the Identity and Node services on `listener` until `shutdown`; hands
/// the mounts over to the driver's `shoal-mount` meanwhile (`upgrade_mounts`).
pub async fn serve(
    plugin: Arc<Plugin>,
    listener: tokio::net::UnixListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    tokio::spawn(plugin.clone().watch_keepers(Duration::from_secs(1)));
    tokio::spawn(plugin.clone().refresh_tokens());
    let me = plugin.clone();
    tokio::task::spawn_blocking(move || me.upgrade_mounts());
    tonic::transport::Server::builder()
        .add_service(proto::identity_server::IdentityServer::new(plugin.clone()))
        .add_service(proto::node_server::NodeServer::new(plugin))
        .serve_with_incoming_shutdown(
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                |conn| conn.map(authority::AnyAuthority::new),
            ),
            shutdown,
        )
        .await
        .map_err(|e| e.to_string())
}
