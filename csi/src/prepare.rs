//! What a volume's mount runs with: its files in the volume's directory (a copy
//! of its config, its tokens, its disk tier), its `shoal-mount` arguments and
//! its environment, written down in its [`Record`] so that a restarted plugin
//! starts its keeper again the same way ([`Plugin::launch_of`]).

use std::path::Path;

use crate::error::CsiError;
use crate::launch::Launch;
use crate::published::{control_of, metrics_of, start_log_of, Record};
use crate::tokens::write_token;
use crate::volume::{Auth, VolumeSpec};
use crate::Plugin;

/// What the credential chain of a pod-credentials mount must not find: the
/// driver's own identity, in any of the places the chain looks.
const NOT_THE_DRIVERS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
];

impl Plugin {
    /// The volume's files and what its mount runs with; `role` is the pod's
    /// (for `authenticationSource: pod`).
    pub(crate) fn prepare(
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
        let load = || {
            shoal::config::Config::load(&config)
                .map_err(|e| CsiError::Invalid(format!("volume attribute config: {e}")))
        };
        let mut args = vec![
            "--config".to_owned(),
            config.display().to_string(),
            "--control-socket".to_owned(),
            control_of(dir).display().to_string(),
            "--metrics-socket".to_owned(),
            metrics_of(dir).display().to_string(),
            "--start-log".to_owned(),
            start_log_of(dir).display().to_string(),
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
        let mut reader = None;
        match (&spec.auth, role) {
            (Auth::Pod { pod_uid, .. }, Some(role)) => {
                let cfg = load()?;
                if !matches!(
                    cfg.origin().map(|o| &o.credentials),
                    Ok(shoal::config::CredentialMode::Chain { profile: None }) | Err(_)
                ) {
                    return Err(CsiError::Invalid(format!(
                        "authenticationSource: pod, but {} names the origin's credentials: the pod's role would not be used",
                        spec.config.display()
                    )));
                }
                let id = self.readers.take()?;
                reader = Some(id);
                let token = dir.join("token");
                write_token(&token, spec.token.as_deref().unwrap_or_default(), Some(id))?;
                // The chain finds the pod's web identity and nothing of the driver's.
                let none = dir.join("none").display().to_string();
                env.extend([
                    (
                        "AWS_WEB_IDENTITY_TOKEN_FILE".to_owned(),
                        Some(token.display().to_string()),
                    ),
                    ("AWS_ROLE_ARN".to_owned(), Some(role)),
                    (
                        "AWS_ROLE_SESSION_NAME".to_owned(),
                        Some(format!("shoal-{pod_uid}")),
                    ),
                    ("AWS_CONFIG_FILE".to_owned(), Some(none.clone())),
                    ("AWS_SHARED_CREDENTIALS_FILE".to_owned(), Some(none)),
                    ("AWS_EC2_METADATA_DISABLED".to_owned(), Some("true".into())),
                ]);
                env.extend(NOT_THE_DRIVERS.iter().map(|k| (k.to_string(), None)));
            }
            // Keys or anonymous reads need no token; the chain (any profile)
            // may read them. (A config that does not load fails its mount,
            // which says why.)
            (Auth::Driver, _)
                if !self.driver_tokens.is_empty()
                    && load().map_or(true, |c| {
                        c.origin().map_or(true, |o| {
                            matches!(o.credentials, shoal::config::CredentialMode::Chain { .. })
                        })
                    }) =>
            {
                let id = self.readers.take()?;
                reader = Some(id);
                match self.driver_tokens.hand_to(dir, id) {
                    Ok(e) => env.extend(e),
                    Err(e) => {
                        self.readers.release(id);
                        return Err(e);
                    }
                }
            }
            _ => {}
        }
        if let Some(g) = reader {
            // Before the source and target, the last two.
            let at = args.len() - 2;
            args.insert(at, format!("--token-group={g}"));
        }
        Ok(Record {
            target: spec.target.clone(),
            fingerprint: spec.fingerprint(),
            args,
            env,
            memory_max: Some(memory_max),
            reader,
        })
    }

    pub(crate) fn launch_of(&self, r: &Record, dir: &Path) -> Launch {
        Launch {
            mount_bin: self.mount_bin.clone(),
            args: r.args.clone(),
            env: r.env.clone(),
            log: dir.join("mount.log"),
            start_log: start_log_of(dir),
            env_file: dir.join("unit.env"),
            memory_max: r.memory_max,
            reader: r.reader,
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
}
