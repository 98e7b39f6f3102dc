//! The Node service: staging a volume starts its shared mount and publishing
//! binds it at the target ([`crate::share`]); a publish that was not staged (an
//! inline volume) starts a mount of its own at the target. Unpublishing ends
//! what publishing made. Publishes are idempotent (the same target and
//! volume again: OK, and a pod's token refreshed), a different volume or other
//! attributes on a published target are ALREADY_EXISTS, unpublishing what is not
//! there is OK.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use crate::condition;
use crate::error::CsiError;
use crate::launch::Launch;
use crate::pod_identity::write_token;
use crate::proto;
use crate::proto::node_server::Node;
use crate::published::{control_of, Published, Record, Volumes};
use crate::volume::{Auth, VolumeSpec};
use crate::Plugin;

type Answer<T> = Result<Response<T>, Status>;

/// How long an unpublish waits for a keeper to end its mount.
const UNMOUNT_WAIT: Duration = Duration::from_secs(10);

#[tonic::async_trait]
impl Node for Arc<Plugin> {
    async fn node_publish_volume(
        &self,
        req: Request<proto::NodePublishVolumeRequest>,
    ) -> Answer<proto::NodePublishVolumeResponse> {
        let spec = VolumeSpec::from_publish(req.get_ref(), &self.default_config)?;
        let lock = self.volumes.lock(&spec.target);
        let _held = lock.lock().await;
        if req.get_ref().staging_target_path.is_empty() {
            // A CO that does not stage (an inline volume): a mount of its own.
            self.publish(spec).await?;
        } else {
            self.bind(spec, false).await?;
        }
        Ok(Response::new(proto::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        req: Request<proto::NodeUnpublishVolumeRequest>,
    ) -> Answer<proto::NodeUnpublishVolumeResponse> {
        let r = req.get_ref();
        if r.volume_id.is_empty() {
            return Err(CsiError::Invalid("volume_id is missing".into()).into());
        }
        if r.target_path.is_empty() {
            return Err(CsiError::Invalid("target_path is missing".into()).into());
        }
        let target = PathBuf::from(&r.target_path);
        let lock = self.volumes.lock(&target);
        let _held = lock.lock().await;
        if self.unbind(&target).await? {
            return Ok(Response::new(proto::NodeUnpublishVolumeResponse {}));
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.unpublish(&target))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))??;
        Ok(Response::new(proto::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<proto::NodeGetCapabilitiesRequest>,
    ) -> Answer<proto::NodeGetCapabilitiesResponse> {
        use proto::node_service_capability::{rpc::Type, Rpc, Type as Cap};
        let cap = |t: Type| proto::NodeServiceCapability {
            r#type: Some(Cap::Rpc(Rpc { r#type: t as i32 })),
        };
        Ok(Response::new(proto::NodeGetCapabilitiesResponse {
            capabilities: vec![
                cap(Type::StageUnstageVolume),
                cap(Type::GetVolumeStats),
                cap(Type::VolumeCondition),
            ],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<proto::NodeGetInfoRequest>,
    ) -> Answer<proto::NodeGetInfoResponse> {
        Ok(Response::new(proto::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: self.zone.as_ref().map(|z| proto::Topology {
                segments: [(crate::ZONE_KEY.to_owned(), z.clone())].into(),
            }),
        }))
    }

    async fn node_get_volume_stats(
        &self,
        req: Request<proto::NodeGetVolumeStatsRequest>,
    ) -> Answer<proto::NodeGetVolumeStatsResponse> {
        let r = req.get_ref();
        if r.volume_id.is_empty() {
            return Err(CsiError::Invalid("volume_id is missing".into()).into());
        }
        if r.volume_path.is_empty() {
            return Err(CsiError::Invalid("volume_path is missing".into()).into());
        }
        let path = PathBuf::from(&r.volume_path);
        let published = self
            .volumes
            .map
            .lock()
            .unwrap()
            .get(&path)
            .is_some_and(|p| p.record.fingerprint.volume_id == r.volume_id)
            || self
                .binds
                .get(&path)
                .is_some_and(|b| b.fingerprint.volume_id == r.volume_id);
        if !published {
            return Err(CsiError::NotFound(format!(
                "volume {:?} is not published at {}",
                r.volume_id, r.volume_path
            ))
            .into());
        }
        let me = self.clone();
        let (usage, condition) = tokio::task::spawn_blocking(move || me.stats(&path))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))?;
        Ok(Response::new(proto::NodeGetVolumeStatsResponse {
            usage,
            volume_condition: Some(condition),
        }))
    }

    async fn node_stage_volume(
        &self,
        req: Request<proto::NodeStageVolumeRequest>,
    ) -> Answer<proto::NodeStageVolumeResponse> {
        let spec = VolumeSpec::from_stage(req.get_ref(), &self.default_config)?;
        let lock = self.volumes.lock(&spec.target);
        let _held = lock.lock().await;
        self.stage(spec).await?;
        Ok(Response::new(proto::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        req: Request<proto::NodeUnstageVolumeRequest>,
    ) -> Answer<proto::NodeUnstageVolumeResponse> {
        let r = req.get_ref();
        if r.volume_id.is_empty() {
            return Err(CsiError::Invalid("volume_id is missing".into()).into());
        }
        if r.staging_target_path.is_empty() {
            return Err(CsiError::Invalid("staging_target_path is missing".into()).into());
        }
        let path = PathBuf::from(&r.staging_target_path);
        let lock = self.volumes.lock(&path);
        let _held = lock.lock().await;
        // Unstaging what is not staged (a pod-credentials volume) is fine.
        self.unbind(&path).await?;
        Ok(Response::new(proto::NodeUnstageVolumeResponse {}))
    }

    async fn node_expand_volume(
        &self,
        _: Request<proto::NodeExpandVolumeRequest>,
    ) -> Answer<proto::NodeExpandVolumeResponse> {
        Err(Status::unimplemented("shoal volumes do not expand"))
    }
}

impl Plugin {
    /// Publishes `spec`, or finds it published already.
    pub(crate) async fn publish(self: &Arc<Self>, spec: VolumeSpec) -> Result<(), CsiError> {
        let fingerprint = spec.fingerprint();
        let dir = self.volumes.dir_for(&spec.target);
        let existing = self
            .volumes
            .map
            .lock()
            .unwrap()
            .get(&spec.target)
            .map(|p| p.record.fingerprint.clone());
        if let Some(f) = existing {
            if f != fingerprint {
                return Err(CsiError::AlreadyExists(format!(
                    "{} is published already, as volume {:?} with other attributes or options",
                    spec.target.display(),
                    f.volume_id
                )));
            }
            if mount_is_live(&spec.target) {
                // A republish (kubelet's requiresRepublish): a fresh token.
                if let Some(t) = &spec.token {
                    write_token(&dir.join("token"), t)?;
                }
                return Ok(());
            }
            tracing::warn!(
                "{} was published but its mount is gone; mounting it again",
                spec.target.display()
            );
            let target = spec.target.clone();
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.unpublish(&target))
                .await
                .map_err(|e| CsiError::Internal(e.to_string()))??;
        } else if shoal_mount::is_mounted(&spec.target) {
            return Err(CsiError::AlreadyExists(format!(
                "{} has something mounted already that this plugin did not publish",
                spec.target.display()
            )));
        }
        let parent = spec.target.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(CsiError::Invalid(format!(
                "target_path's parent {} does not exist",
                parent.display()
            )));
        }
        // What the mount runs with: the pod's role first, so a missing one is an
        // answer before anything is made.
        let role = match &spec.auth {
            Auth::Pod {
                namespace,
                service_account,
                ..
            } => Some(self.kube.role_of(namespace, service_account).await?),
            Auth::Driver => None,
        };
        std::fs::create_dir_all(&dir)?;
        let made_target = match std::fs::create_dir(&spec.target) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e.into()),
        };
        let record = match self.prepare(&spec, &dir, role) {
            Ok(r) => r,
            Err(e) => {
                cleanup(&dir, &spec.target, made_target);
                return Err(e);
            }
        };
        // The record before the mount: a plugin killed once the mount is live
        // finds it at its restart, and takes the mount back instead of removing
        // its files from under it.
        if let Err(e) = Volumes::save(&dir, &record) {
            cleanup(&dir, &spec.target, made_target);
            return Err(e.into());
        }
        let launch = self.launch_of(&record, &dir);
        let launcher = self.launcher.clone();
        let started = tokio::task::spawn_blocking(move || launcher.start(&launch))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))?;
        if let Err(e) = started {
            cleanup(&dir, &spec.target, made_target);
            return Err(e);
        }
        let held = shoal_mount::keeper::ask_fds(&control_of(&dir))
            .map_err(|e| {
                tracing::warn!(
                    "cannot keep a copy of {}'s connection: {e}",
                    spec.target.display()
                )
            })
            .ok();
        tracing::info!(
            volume = %spec.volume_id,
            "published s3://{} at {}",
            spec.source(),
            spec.target.display()
        );
        self.volumes
            .map
            .lock()
            .unwrap()
            .insert(spec.target.clone(), Published { dir, record, held });
        Ok(())
    }

    /// The volume's files and what its mount runs with.
    fn prepare(
        &self,
        spec: &VolumeSpec,
        dir: &Path,
        role: Option<String>,
    ) -> Result<Record, CsiError> {
        // A copy of the config: the mount reads it from here (a host path, for a
        // keeper the host's systemd runs), and it does not change under it.
        let config = dir.join("mount.toml");
        std::fs::copy(&spec.config, &config).map_err(|e| {
            CsiError::Invalid(format!(
                "volume attribute config: {}: {e}",
                spec.config.display()
            ))
        })?;
        self.api_access.lend(&config)?;
        let mut args = vec![
            "--config".to_owned(),
            config.display().to_string(),
            "--control-socket".to_owned(),
            control_of(dir).display().to_string(),
        ];
        args.extend(spec.args.iter().cloned());
        if let Some(size) = &spec.cache {
            let cache = dir.join("cache");
            std::fs::create_dir_all(&cache)?;
            args.push(format!("--disk-cache={}", cache.display()));
            if !spec
                .args
                .iter()
                .any(|a| a.starts_with("--disk-cache-size="))
            {
                args.push(format!("--disk-cache-size={size}"));
            }
        }
        if let Some(z) = &self.zone {
            args.push(format!("--zone={z}"));
        }
        let memory_max = match &spec.memory_limit {
            Some(m) => {
                shoal::config::units::Size::parse(m)
                    .map_err(|e| CsiError::Invalid(format!("volume attribute memoryLimit: {e}")))?
                    .0
            }
            None => shoal_mount::memory::default_limit(shoal_mount::memory::host_memory()),
        };
        args.push(format!("--memory-limit={memory_max}"));
        args.push(spec.source());
        args.push(spec.target.display().to_string());
        let mut env = Vec::new();
        if let (Auth::Pod { pod_uid, .. }, Some(role)) = (&spec.auth, role) {
            let cfg = shoal::config::Config::load(&config)
                .map_err(|e| CsiError::Invalid(format!("volume attribute config: {e}")))?;
            if let Ok(o) = cfg.origin() {
                if !matches!(
                    o.credentials,
                    shoal::config::CredentialMode::Chain { profile: None }
                ) {
                    return Err(CsiError::Invalid(format!(
                        "authenticationSource: pod, but {} names the origin's credentials: the pod's role would not be used",
                        spec.config.display()
                    )));
                }
            }
            let token = dir.join("token");
            write_token(&token, spec.token.as_deref().unwrap_or_default())?;
            // The chain finds the pod's web identity and nothing of the driver's.
            let none = dir.join("none");
            for (k, v) in [
                (
                    "AWS_WEB_IDENTITY_TOKEN_FILE",
                    Some(token.display().to_string()),
                ),
                ("AWS_ROLE_ARN", Some(role)),
                ("AWS_ROLE_SESSION_NAME", Some(format!("shoal-{pod_uid}"))),
                ("AWS_CONFIG_FILE", Some(none.display().to_string())),
                (
                    "AWS_SHARED_CREDENTIALS_FILE",
                    Some(none.display().to_string()),
                ),
                ("AWS_EC2_METADATA_DISABLED", Some("true".to_owned())),
                ("AWS_ACCESS_KEY_ID", None),
                ("AWS_SECRET_ACCESS_KEY", None),
                ("AWS_SESSION_TOKEN", None),
                ("AWS_PROFILE", None),
                ("AWS_CONTAINER_CREDENTIALS_FULL_URI", None),
                ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", None),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", None),
            ] {
                env.push((k.to_owned(), v));
            }
        }
        Ok(Record {
            target: spec.target.clone(),
            fingerprint: spec.fingerprint(),
            args,
            env,
            memory_max: Some(memory_max),
        })
    }

    pub(crate) fn launch_of(&self, r: &Record, dir: &Path) -> Launch {
        Launch {
            mount_bin: self.mount_bin.clone(),
            args: r.args.clone(),
            env: r.env.clone(),
            log: dir.join("mount.log"),
            env_file: dir.join("unit.env"),
            memory_max: r.memory_max,
            unit: crate::launch::unit_name(
                &r.fingerprint.volume_id,
                &dir.file_name().unwrap_or_default().to_string_lossy(),
            ),
            description: format!(
                "shoal CSI volume {} at {}",
                r.fingerprint.volume_id,
                r.target.display()
            ),
        }
    }

    /// Ends the mount at `target` (if any) and removes what publishing made.
    pub(crate) fn unpublish(&self, target: &Path) -> Result<(), CsiError> {
        let published = self.volumes.map.lock().unwrap().remove(target);
        let dir = self.volumes.dir_for(target);
        if published.is_some() || shoal_mount::is_mounted(target) {
            let control = control_of(&dir);
            let _ = shoal_mount::keeper::ask(&control, "unmount");
            let deadline = Instant::now() + UNMOUNT_WAIT;
            while shoal_mount::is_mounted(target) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if shoal_mount::is_mounted(target) {
                tracing::warn!(
                    "{}: the keeper did not unmount; detaching it",
                    target.display()
                );
                shoal_mount::kernel::mount::unmount(target, true).map_err(|e| {
                    CsiError::Internal(format!("unmount {}: {e}", target.display()))
                })?;
            }
        }
        // The plugin's copy of the connection goes with the record.
        drop(published);
        let _ = std::fs::remove_dir_all(&dir);
        match std::fs::remove_dir(target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CsiError::Internal(format!(
                    "cannot remove {}: {e}",
                    target.display()
                )))
            }
        }
        Ok(())
    }

    fn stats(&self, path: &Path) -> (Vec<proto::VolumeUsage>, proto::VolumeCondition) {
        let look = condition::look(path, &self.control_for(path));
        use proto::volume_usage::Unit;
        let usage = |unit: Unit, total: u64, free: u64| proto::VolumeUsage {
            available: free as i64,
            total: total as i64,
            used: total.saturating_sub(free) as i64,
            unit: unit as i32,
        };
        let usage = match look.usage {
            Some(s) => vec![
                usage(
                    Unit::Bytes,
                    s.f_blocks * s.f_frsize,
                    s.f_bavail * s.f_frsize,
                ),
                usage(Unit::Inodes, s.f_files, s.f_favail),
            ],
            None => Vec::new(),
        };
        let condition = if look.problems.is_empty() {
            proto::VolumeCondition {
                abnormal: false,
                message: "mounted, answering, and served".into(),
            }
        } else {
            proto::VolumeCondition {
                abnormal: true,
                message: look.problems.join("; "),
            }
        };
        (usage, condition)
    }
}

/// Whether `target` is a mount that answers (not one whose connection died).
pub(crate) fn mount_is_live(target: &Path) -> bool {
    shoal_mount::is_mounted(target) && std::fs::metadata(target).is_ok()
}

fn cleanup(dir: &Path, target: &Path, made_target: bool) {
    let _ = std::fs::remove_dir_all(dir);
    if made_target {
        let _ = std::fs::remove_dir(target);
    }
}
