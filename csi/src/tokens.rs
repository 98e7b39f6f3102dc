//! The tokens a mount reads its AWS role with: a pod's own (for
//! `authenticationSource: pod`, [`crate::pod_identity`]) or the driver's, which
//! the plugin's pod is given as files in its own root (IRSA's
//! `AWS_WEB_IDENTITY_TOKEN_FILE`, EKS Pod Identity's
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`). A mount the host's systemd runs
//! cannot see that root, so each mount gets a copy of the driver's tokens in its
//! volume's directory, kept up to date as kubelet rotates them ([`Refresh`]),
//! and its variables point there.
//!
//! Each volume's tokens belong to a reader id of its own: files owned by user
//! and group `id`, mode 0440. That volume's mount joins group `id` alone
//! (`shoal-mount --token-group`: systemd gives a unit no group the host's
//! database lacks) and its unit keeps no capability that reads past file modes
//! ([`crate::launch`]), so that one mount cannot read another's token.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::CsiError;
use crate::volume::Auth;
use crate::Plugin;

/// The driver's token variables, and the name of each one's copy.
const DRIVER_TOKENS: &[(&str, &str)] = &[
    ("AWS_WEB_IDENTITY_TOKEN_FILE", "driver-web-identity-token"),
    (
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "driver-container-token",
    ),
];

/// How many reader ids there are from the first (`--token-group-base`).
pub const READERS: u32 = 1 << 16;

/// The reader ids in use, one per volume directory with a token.
pub struct Readers {
    base: u32,
    used: Mutex<BTreeSet<u32>>,
}

impl Readers {
    pub fn new(base: u32) -> Readers {
        Readers {
            base,
            used: Mutex::default(),
        }
    }

    /// The first id no volume has.
    pub fn take(&self) -> Result<u32, CsiError> {
        let mut used = self.used.lock().unwrap();
        let id = (self.base..self.base.saturating_add(READERS))
            .find(|i| !used.contains(i))
            .ok_or_else(|| {
                CsiError::Internal(format!(
                    "all {READERS} token groups from {} are in use",
                    self.base
                ))
            })?;
        used.insert(id);
        Ok(id)
    }

    /// Marks `id` as a volume's (one taken back at a restart).
    pub fn claim(&self, id: u32) {
        self.used.lock().unwrap().insert(id);
    }

    pub fn release(&self, id: u32) {
        self.used.lock().unwrap().remove(&id);
    }
}

/// Writes `token` to `path` whole (a reader sees the old token or the new one,
/// never part of one): readable by this user only, or with `reader`, owned by
/// user and group `reader` and readable by them only (mode 0440).
pub fn write_token(path: &Path, token: &str, reader: Option<u32>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    if let Some(id) = reader {
        std::os::unix::fs::fchown(&f, Some(id), Some(id))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o440))?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The driver's own token files (from its environment), copied to each mount
/// that reads with the driver's role.
#[derive(Clone, Debug, Default)]
pub struct DriverTokens {
    /// (variable, the plugin's file, the copy's name)
    sources: Vec<(&'static str, PathBuf, &'static str)>,
}

impl DriverTokens {
    /// The token files the plugin's environment names.
    pub fn from_env() -> DriverTokens {
        Self::from_vars(|k| std::env::var_os(k).map(PathBuf::from))
    }

    pub fn from_vars(var: impl Fn(&str) -> Option<PathBuf>) -> DriverTokens {
        let sources = DRIVER_TOKENS
            .iter()
            .filter_map(|(k, copy)| {
                var(k)
                    .filter(|p| !p.as_os_str().is_empty())
                    .map(|p| (*k, p, *copy))
            })
            .collect();
        DriverTokens { sources }
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Copies each token into `dir` for `reader`: the variables that point a
    /// mount there.
    pub fn hand_to(
        &self,
        dir: &Path,
        reader: u32,
    ) -> Result<Vec<(String, Option<String>)>, CsiError> {
        let mut env = Vec::new();
        for (var, source, name) in &self.sources {
            let token = std::fs::read_to_string(source).map_err(|e| {
                CsiError::Internal(format!(
                    "the driver's {var} {}: {e} (the driver's role cannot reach the mount)",
                    source.display()
                ))
            })?;
            let copy = dir.join(name);
            write_token(&copy, &token, Some(reader))?;
            env.push((var.to_string(), Some(copy.display().to_string())));
        }
        Ok(env)
    }

    /// Rewrites the copies in `dir` whose token has changed since (kubelet
    /// rotated it); a token that cannot be read leaves its copy as it is.
    pub fn refresh(&self, dir: &Path, reader: u32) -> std::io::Result<usize> {
        let mut rewritten = 0;
        for (_, source, name) in &self.sources {
            let copy = dir.join(name);
            if !copy.exists() {
                continue;
            }
            let token = std::fs::read_to_string(source)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", source.display())))?;
            if std::fs::read_to_string(&copy).ok().as_deref() != Some(token.as_str()) {
                write_token(&copy, &token, Some(reader))?;
                rewritten += 1;
            }
        }
        Ok(rewritten)
    }
}

impl Plugin {
    /// The group the tokens of the mount at `target` (a target or a share)
    /// belong to.
    pub(crate) fn reader_of(&self, target: &Path) -> Option<u32> {
        self.volumes
            .map
            .lock()
            .unwrap()
            .get(target)
            .and_then(|p| p.record.reader)
    }

    /// Brings the mounts' copies of the driver's tokens up to date, every
    /// `token_refresh`: kubelet rotates a projected token well before it
    /// expires (at 80% of its life), and a mount reads it again as its
    /// credentials near their own expiry.
    pub async fn refresh_tokens(self: Arc<Self>) {
        if self.driver_tokens.is_empty() {
            return;
        }
        let mut tick = tokio::time::interval(self.token_refresh);
        loop {
            tick.tick().await;
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.refresh_copies()).await;
        }
    }

    fn refresh_copies(&self) {
        let copies: Vec<(PathBuf, u32)> = self
            .volumes
            .map
            .lock()
            .unwrap()
            .values()
            .filter(|p| p.record.fingerprint.auth == Auth::Driver)
            .filter_map(|p| Some((p.dir.clone(), p.record.reader?)))
            .collect();
        for (dir, reader) in copies {
            let outcome = match self.driver_tokens.refresh(&dir, reader) {
                Ok(0) => continue,
                Ok(n) => {
                    tracing::info!("{}: {n} of the driver's tokens copied again", dir.display());
                    "copied"
                }
                Err(e) => {
                    tracing::warn!("cannot copy the driver's token for {}: {e}", dir.display());
                    "failed"
                }
            };
            self.metrics
                .token_copies
                .get_or_create(&crate::metrics::Outcome { result: outcome })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn each_volume_gets_an_id_of_its_own_and_a_freed_one_comes_back() {
        let r = Readers::new(1000);
        r.claim(1001);
        assert_eq!(r.take().unwrap(), 1000);
        assert_eq!(r.take().unwrap(), 1002);
        r.release(1000);
        assert_eq!(r.take().unwrap(), 1000);
        let full = Readers::new(u32::MAX - 1);
        full.take().unwrap();
        assert!(full.take().unwrap_err().to_string().contains("in use"));
    }

    #[test]
    fn the_drivers_tokens_are_copied_for_their_reader_and_follow_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let web = dir.path().join("web");
        std::fs::write(&web, "w1").unwrap();
        let tokens =
            DriverTokens::from_vars(|k| (k == "AWS_WEB_IDENTITY_TOKEN_FILE").then(|| web.clone()));
        let vol = dir.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        let env = tokens.hand_to(&vol, 4242).unwrap();
        let copy = vol.join("driver-web-identity-token");
        assert_eq!(
            env,
            vec![(
                "AWS_WEB_IDENTITY_TOKEN_FILE".to_owned(),
                Some(copy.display().to_string())
            )]
        );
        let m = std::fs::metadata(&copy).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (4242, 4242, 0o440));
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "w1");
        assert_eq!(tokens.refresh(&vol, 4242).unwrap(), 0, "unchanged");
        std::fs::write(&web, "w2").unwrap();
        assert_eq!(tokens.refresh(&vol, 4242).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "w2");
        // A token the driver cannot read is an error naming it, at publish.
        std::fs::remove_file(&web).unwrap();
        let e = tokens.hand_to(&vol, 4242).unwrap_err().to_string();
        assert!(
            e.contains("AWS_WEB_IDENTITY_TOKEN_FILE") && e.contains("web"),
            "{e}"
        );
        assert!(DriverTokens::from_vars(|_| None).is_empty());
    }
}
