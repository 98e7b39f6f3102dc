//! Staged volumes share one mount per host: a keeper per (volume, mount options,
//! identity) at `shares/KEY` under the state directory, and each stage and each
//! publish a read-only bind mount of it. Sixteen pods reading a volume then have
//! one FUSE server, one RAM tier, one read-ahead window and one copy of each file
//! in the page cache, not sixteen.
//!
//! Identity is part of the key: a driver-credentials volume has one share; a
//! pod-credentials one has one per service account (its role), so a pod never
//! reads with another pod's credentials. Such a volume's identity is known only at
//! publish (kubelet sends pod info to NodePublishVolume alone), so its stage
//! mounts nothing.
//!
//! Each bind is a record in `binds/` (target, share, what was asked), so that a
//! restarted plugin knows who uses which share. A share goes when its last bind
//! goes; the share itself is kept, replaced and taken back at a restart as every
//! published mount is ([`crate::published`]).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::error::CsiError;
use crate::published::control_of;
use crate::tokens::write_token;
use crate::volume::{Auth, Fingerprint, VolumeSpec};
use crate::Plugin;

/// One stage or publish of a share.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bind {
    /// The staging path or the publish target.
    pub target: PathBuf,
    /// Where the share is mounted.
    pub share: PathBuf,
    /// What was asked: the same again is the same bind.
    pub fingerprint: Fingerprint,
    /// A stage (kubelet's) rather than a publish (a pod's).
    pub stage: bool,
}

/// Every bind, by target, and its record on disk.
pub struct Binds {
    root: PathBuf,
    map: Mutex<HashMap<PathBuf, Bind>>,
}

impl Binds {
    pub fn new(root: PathBuf) -> Binds {
        Binds {
            root,
            map: Default::default(),
        }
    }

    fn file_of(&self, target: &Path) -> PathBuf {
        let h = xxhash_rust::xxh3::xxh3_64(target.as_os_str().as_encoded_bytes());
        self.root.join(format!("{h:016x}.json"))
    }

    /// Every bind.
    pub fn all(&self) -> Vec<Bind> {
        self.map.lock().unwrap().values().cloned().collect()
    }

    pub fn get(&self, target: &Path) -> Option<Bind> {
        self.map.lock().unwrap().get(target).cloned()
    }

    fn save(&self, b: &Bind) -> std::io::Result<()> {
        let file = self.file_of(&b.target);
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(b)?)?;
        std::fs::rename(tmp, file)?;
        self.map.lock().unwrap().insert(b.target.clone(), b.clone());
        Ok(())
    }

    fn remove(&self, target: &Path) -> Option<Bind> {
        let _ = std::fs::remove_file(self.file_of(target));
        self.map.lock().unwrap().remove(target)
    }

    /// How many stages and publishes `share` has.
    pub fn users_of(&self, share: &Path) -> usize {
        self.map
            .lock()
            .unwrap()
            .values()
            .filter(|b| b.share == share)
            .count()
    }

    /// Takes back the records on disk whose bind is still mounted; forgets the rest.
    pub fn recover(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            let b = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Bind>(&b).ok());
            match b {
                Some(b) if shoal_mount::is_mounted(&b.target) => {
                    self.map.lock().unwrap().insert(b.target.clone(), b);
                }
                _ => {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// The share a volume reads through: what must match for two binds to share a
/// mount. The pod itself is not part of it, its service account is.
pub fn share_key(f: &Fingerprint) -> String {
    let mut f = f.clone();
    if let Auth::Pod { pod_uid, .. } = &mut f.auth {
        pod_uid.clear();
    }
    let json = serde_json::to_vec(&f).expect("a fingerprint serializes");
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&json))
}

/// Mounts `source` at `target` again, read-only.
pub fn bind_read_only(source: &Path, target: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (src, tgt) = (c(source)?, c(target)?);
    let none = std::ptr::null();
    // SAFETY: NUL-terminated paths; no data.
    if unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), none, libc::MS_BIND, none as _) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // A bind takes its source's flags; read-only needs a remount of the bind.
    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID;
    // SAFETY: as above.
    if unsafe { libc::mount(none, tgt.as_ptr(), none, flags, none as _) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = shoal_mount::kernel::mount::unmount(target, true);
        return Err(e);
    }
    Ok(())
}

impl Plugin {
    /// Stages `spec` (its target is the staging path): its share, bound there.
    pub(crate) async fn stage(self: &Arc<Self>, spec: VolumeSpec) -> Result<(), CsiError> {
        if matches!(spec.auth, Auth::Pod { .. }) {
            // Whose mount it is is known at publish: nothing to mount yet.
            return Ok(());
        }
        self.bind(spec, true).await
    }

    /// Binds `spec`'s share (started if none is live) at its target.
    pub(crate) async fn bind(
        self: &Arc<Self>,
        spec: VolumeSpec,
        stage: bool,
    ) -> Result<(), CsiError> {
        let fingerprint = spec.fingerprint();
        let share = self.shares.join(share_key(&fingerprint));
        if let Some(b) = self.binds.get(&spec.target) {
            if b.fingerprint != fingerprint {
                return Err(CsiError::AlreadyExists(format!(
                    "{} is {} already, as volume {:?} with other attributes or options",
                    spec.target.display(),
                    if b.stage { "staged" } else { "published" },
                    b.fingerprint.volume_id
                )));
            }
            if crate::node::mount_is_live(&spec.target) {
                // A republish (kubelet's requiresRepublish): a fresh token.
                if let Some(t) = &spec.token {
                    let dir = self.volumes.dir_for(&b.share);
                    write_token(&dir.join("token"), t, self.reader_of(&b.share))?;
                }
                return Ok(());
            }
            tracing::warn!(
                "{} was bound but its mount is gone; binding it again",
                spec.target.display()
            );
            self.unbind(&spec.target).await?;
        } else if self.volumes.map.lock().unwrap().contains_key(&spec.target)
            || shoal_mount::is_mounted(&spec.target)
        {
            return Err(CsiError::AlreadyExists(format!(
                "{} has something mounted already that is not this volume's",
                spec.target.display()
            )));
        }
        let parent = spec.target.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(CsiError::Invalid(format!(
                "the parent {} of {} does not exist",
                parent.display(),
                spec.target.display()
            )));
        }
        // The share lives while a bind of it is being made: no release of another
        // bind stops it in between.
        let lock = self.volumes.lock(&share);
        let _held = lock.lock().await;
        self.start_share(&spec, &share).await?;
        let made = match std::fs::create_dir(&spec.target) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e.into()),
        };
        let bound = bind_read_only(&share, &spec.target)
            .map_err(|e| {
                CsiError::Mount(format!(
                    "cannot bind {} at {}: {e}",
                    share.display(),
                    spec.target.display()
                ))
            })
            .and_then(|()| {
                self.binds
                    .save(&Bind {
                        target: spec.target.clone(),
                        share: share.clone(),
                        fingerprint,
                        stage,
                    })
                    .map_err(CsiError::from)
            });
        if let Err(e) = bound {
            let _ = shoal_mount::kernel::mount::unmount(&spec.target, true);
            if made {
                let _ = std::fs::remove_dir(&spec.target);
            }
            self.stop_unused(&share).await?;
            return Err(e);
        }
        tracing::info!(
            volume = %spec.volume_id,
            share = %share.display(),
            users = self.binds.users_of(&share),
            "{} s3://{} at {}",
            if stage { "staged" } else { "published" },
            spec.source(),
            spec.target.display()
        );
        Ok(())
    }

    /// The share's keeper, started at `share` unless it is live.
    async fn start_share(
        self: &Arc<Self>,
        spec: &VolumeSpec,
        share: &Path,
    ) -> Result<(), CsiError> {
        let mut shared = spec.clone();
        shared.target = share.to_owned();
        if let Auth::Pod { pod_uid, .. } = &mut shared.auth {
            // What the share's role session is named after: the share, not the
            // pod that happened to come first.
            *pod_uid = share
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
        }
        self.publish(shared).await
    }

    /// Ends the bind at `target`, if any, and the share it was of once no other
    /// bind uses it. Whether there was one.
    pub(crate) async fn unbind(self: &Arc<Self>, target: &Path) -> Result<bool, CsiError> {
        let Some(b) = self.binds.get(target) else {
            return Ok(false);
        };
        let t = target.to_owned();
        let stage = b.stage;
        tokio::task::spawn_blocking(move || end_bind(&t, !stage))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))??;
        self.binds.remove(target);
        let lock = self.volumes.lock(&b.share);
        let _held = lock.lock().await;
        self.stop_unused(&b.share).await?;
        Ok(true)
    }

    /// Stops `share`'s keeper if no bind uses it (the caller holds its lock).
    async fn stop_unused(self: &Arc<Self>, share: &Path) -> Result<(), CsiError> {
        if self.binds.users_of(share) > 0 {
            return Ok(());
        }
        tracing::info!("{}: its last user is gone; ending it", share.display());
        let me = self.clone();
        let share = share.to_owned();
        tokio::task::spawn_blocking(move || me.unpublish(&share))
            .await
            .map_err(|e| CsiError::Internal(e.to_string()))?
    }

    /// At a restart: the shares no bind uses any more (a plugin killed between
    /// starting one and binding it) are ended.
    pub(crate) fn stop_orphan_shares(&self) {
        let shares: Vec<PathBuf> = self
            .volumes
            .map
            .lock()
            .unwrap()
            .keys()
            .filter(|t| t.parent() == Some(self.shares.as_path()))
            .cloned()
            .collect();
        for s in shares {
            if self.binds.users_of(&s) == 0 {
                tracing::info!("{}: no stage or publish uses it; ending it", s.display());
                if let Err(e) = self.unpublish(&s) {
                    tracing::warn!("cannot end {}: {e}", s.display());
                }
            }
        }
    }

    /// The control socket of the keeper serving `path` (a target, a staging path
    /// or a share).
    pub(crate) fn control_for(&self, path: &Path) -> PathBuf {
        match self.binds.get(path) {
            Some(b) => control_of(&self.volumes.dir_for(&b.share)),
            None => control_of(&self.volumes.dir_for(path)),
        }
    }
}

/// Unmounts a bind (detaching it if a process is still in it) and, for a
/// publish target (the plugin's to make), removes the directory.
fn end_bind(target: &Path, remove: bool) -> Result<(), CsiError> {
    if shoal_mount::is_mounted(target) {
        if let Err(e) = shoal_mount::kernel::mount::unmount(target, false) {
            tracing::warn!("{}: {e}; detaching it", target.display());
            shoal_mount::kernel::mount::unmount(target, true)
                .map_err(|e| CsiError::Internal(format!("unmount {}: {e}", target.display())))?;
        }
    }
    if remove {
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
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(auth: Auth) -> Fingerprint {
        Fingerprint {
            volume_id: "v".into(),
            bucket: "b".into(),
            prefix: String::new(),
            config: "/c.toml".into(),
            args: vec![],
            auth,
            cache: None,
            memory_limit: None,
        }
    }

    fn pod(sa: &str, uid: &str) -> Auth {
        Auth::Pod {
            namespace: "ns".into(),
            service_account: sa.into(),
            pod_uid: uid.into(),
        }
    }

    #[test]
    fn pods_of_one_service_account_share_and_others_never() {
        assert_eq!(share_key(&fp(pod("a", "1"))), share_key(&fp(pod("a", "2"))));
        assert_ne!(share_key(&fp(pod("a", "1"))), share_key(&fp(pod("b", "1"))));
        assert_ne!(share_key(&fp(pod("a", "1"))), share_key(&fp(Auth::Driver)));
        let mut other = fp(Auth::Driver);
        other.args = vec!["--uid=1000".into()];
        assert_ne!(share_key(&other), share_key(&fp(Auth::Driver)));
    }
}
