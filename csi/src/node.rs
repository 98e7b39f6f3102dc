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
use crate::proto;
use crate::proto::node_server::Node;
use crate::published::{control_of, Published, Volumes};
use crate::tokens::write_token;
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
        self.counted("publish", async {
            let spec = VolumeSpec::from_publish(req.get_ref(), &self.default_config)?;
            let lock = self.volumes.lock(&spec.target);
            let _held = lock.lock().await;
            if req.get_ref().staging_target_path.is_empty() {
                // A CO that does not stage (an inline volume): a mount of its own.
                self.publish(spec).await?;
            } else {
                self.bind(spec, false).await?;
            }
            Ok(proto::NodePublishVolumeResponse {})
        })
        .await
    }

    async fn node_unpublish_volume(
        &self,
        req: Request<proto::NodeUnpublishVolumeRequest>,
    ) -> Answer<proto::NodeUnpublishVolumeResponse> {
        self.counted("unpublish", async {
            let r = req.get_ref();
            if r.volume_id.is_empty() {
                return Err(CsiError::Invalid("volume_id is missing".into()));
            }
            if r.target_path.is_empty() {
                return Err(CsiError::Invalid("target_path is missing".into()));
            }
            let target = PathBuf::from(&r.target_path);
            let lock = self.volumes.lock(&target);
            let _held = lock.lock().await;
            if self.unbind(&target).await? {
                return Ok(proto::NodeUnpublishVolumeResponse {});
            }
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.unpublish(&target))
                .await
                .map_err(|e| CsiError::Internal(e.to_string()))??;
            Ok(proto::NodeUnpublishVolumeResponse {})
        })
        .await
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
        self.counted("stats", async {
            let r = req.get_ref();
            if r.volume_id.is_empty() {
                return Err(CsiError::Invalid("volume_id is missing".into()));
            }
            if r.volume_path.is_empty() {
                return Err(CsiError::Invalid("volume_path is missing".into()));
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
                )));
            }
            let me = self.clone();
            let (usage, condition) = tokio::task::spawn_blocking(move || me.stats(&path))
                .await
                .map_err(|e| CsiError::Internal(e.to_string()))?;
            Ok(proto::NodeGetVolumeStatsResponse {
                usage,
                volume_condition: Some(condition),
            })
        })
        .await
    }

    async fn node_stage_volume(
        &self,
        req: Request<proto::NodeStageVolumeRequest>,
    ) -> Answer<proto::NodeStageVolumeResponse> {
        self.counted("stage", async {
            let spec = VolumeSpec::from_stage(req.get_ref(), &self.default_config)?;
            let lock = self.volumes.lock(&spec.target);
            let _held = lock.lock().await;
            self.stage(spec).await?;
            Ok(proto::NodeStageVolumeResponse {})
        })
        .await
    }

    async fn node_unstage_volume(
        &self,
        req: Request<proto::NodeUnstageVolumeRequest>,
    ) -> Answer<proto::NodeUnstageVolumeResponse> {
        self.counted("unstage", async {
            let r = req.get_ref();
            if r.volume_id.is_empty() {
                return Err(CsiError::Invalid("volume_id is missing".into()));
            }
            if r.staging_target_path.is_empty() {
                return Err(CsiError::Invalid("staging_target_path is missing".into()));
            }
            let path = PathBuf::from(&r.staging_target_path);
            let lock = self.volumes.lock(&path);
            let _held = lock.lock().await;
            // Unstaging what is not staged (a pod-credentials volume) is fine.
            self.unbind(&path).await?;
            Ok(proto::NodeUnstageVolumeResponse {})
        })
        .await
    }

    async fn node_expand_volume(
        &self,
        _: Request<proto::NodeExpandVolumeRequest>,
    ) -> Answer<proto::NodeExpandVolumeResponse> {
        Err(Status::unimplemented("shoal volumes do not expand"))
    }
}

impl Plugin {
    /// Answers a call's outcome, counting a failure by its reason.
    async fn counted<T>(
        &self,
        call: &'static str,
        f: impl std::future::Future<Output = Result<T, CsiError>>,
    ) -> Answer<T> {
        match f.await {
            Ok(v) => Ok(Response::new(v)),
            Err(e) => {
                self.metrics.failure(call, &e);
                Err(e.into())
            }
        }
    }

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
                    write_token(&dir.join("token"), t, self.reader_of(&spec.target))?;
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
        let reader = record.reader;
        let failed = |e: CsiError| {
            cleanup(&dir, &spec.target, made_target);
            if let Some(id) = reader {
                self.readers.release(id);
            }
            e
        };
        // The record before the mount: a plugin killed once the mount is live
        // finds it at its restart, and takes the mount back instead of removing
        // its files from under it.
        if let Err(e) = Volumes::save(&dir, &record) {
            return Err(failed(e.into()));
        }
        let launch = self.launch_of(&record, &dir);
        let launcher = self.launcher.clone();
        let started = tokio::task::spawn_blocking(move || launcher.start(&launch))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))?;
        self.metrics.launched(started.is_ok());
        if let Err(e) = started {
            return Err(failed(e));
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

    /// Ends the mount at `target` (if any) and removes what publishing made.
    pub(crate) fn unpublish(&self, target: &Path) -> Result<(), CsiError> {
        let published = self.volumes.map.lock().unwrap().remove(target);
        if let Some(id) = published.as_ref().and_then(|p| p.record.reader) {
            self.readers.release(id);
        }
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
            let driver = self.driver_mount.as_ref();
            let version = look
                .status
                .as_ref()
                .and_then(|s| crate::upgrade::mount_version(s, driver));
            let message = match (version, driver) {
                (Some(v), Some(d)) if v == d.version => {
                    format!("mounted, answering, and served by shoal-mount {v} (the driver's)")
                }
                (Some(v), Some(d)) => format!(
                    "mounted, answering, and served by shoal-mount {v} (the driver's is {})",
                    d.version
                ),
                (Some(v), None) => format!("mounted, answering, and served by shoal-mount {v}"),
                (None, _) => "mounted, answering, and served".into(),
            };
            proto::VolumeCondition {
                abnormal: false,
                message,
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
