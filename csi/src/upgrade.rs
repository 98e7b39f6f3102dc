//! Mounts that follow the driver's version. A DaemonSet rollout installs the new
//! `shoal-mount` (at `--mount-bin`) and restarts the plugin; the mounts it keeps
//! go on serving with the old one. At start (`--upgrade-mounts`, on by
//! default; off, it only says which mounts are behind) the plugin asks each
//! mount's keeper which build its server runs
//! ([`shoal_mount::build`]), and hands every mount on another build over to the
//! driver's through its keeper (`restart`: the successor, started from the
//! keeper's path, is checked before the old server drains, so a successor that
//! cannot serve leaves the old one serving), one mount at a time, while the
//! others serve and their readers read on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::published::control_of;
use crate::Plugin;

/// The `shoal-mount` the driver starts mounts with.
#[derive(Clone, Debug)]
pub struct DriverMount {
    /// `VERSION+DIGEST`, as a mount's keeper says its own.
    pub version: String,
    pub digest: String,
}

impl DriverMount {
    /// What `bin` is, as it says (`shoal-mount --version`: `shoal-mount
    /// VERSION+DIGEST`, the digest of the executable that runs, whatever
    /// wraps it); the digest of its bytes for one that says only its version.
    pub fn of(bin: &Path) -> Result<DriverMount, String> {
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .map_err(|e| format!("{} --version: {e}", bin.display()))?;
        let said = String::from_utf8_lossy(&out.stdout);
        let version = said.split_whitespace().nth(1).unwrap_or("unknown");
        let digest = match shoal_mount::build::digest_part(version) {
            Some(d) => d.to_owned(),
            None => {
                shoal_mount::build::digest_of(bin).map_err(|e| format!("{}: {e}", bin.display()))?
            }
        };
        let version = version.split('+').next().unwrap_or(version);
        Ok(DriverMount {
            version: format!("{version}+{digest}"),
            digest,
        })
    }
}

/// A mount's version as its keeper's status says it: the build of the server
/// that serves it (`server_build`), named by its version when known (it is the
/// driver's, or the keeper's own). `None` when the status says nothing of it.
pub fn mount_version(status: &serde_json::Value, driver: Option<&DriverMount>) -> Option<String> {
    let keeper = status["version"].as_str();
    let Some(digest) = status["server_build"].as_str() else {
        // A keeper of before builds were told: its own version, the one its
        // first server ran.
        return keeper.map(str::to_owned);
    };
    if let Some(d) = driver.filter(|d| d.digest == digest) {
        return Some(d.version.clone());
    }
    match keeper.and_then(|k| k.split_once('+')) {
        Some((v, d)) if d == digest => Some(format!("{v}+{digest}")),
        _ => Some(format!("unknown+{digest}")),
    }
}

/// What one handover did.
#[derive(Debug)]
pub struct Handover {
    pub mount: PathBuf,
    pub from: String,
    pub to: String,
    pub took: Duration,
}

impl Plugin {
    /// Hands every mount this plugin keeps that runs another build than the
    /// driver's over to the driver's, one at a time (with `upgrade_mounts`;
    /// without, only says which are behind).
    pub fn upgrade_mounts(&self) -> Vec<Result<Handover, String>> {
        let Some(driver) = self.driver_mount.clone() else {
            return Vec::new();
        };
        let mut targets: Vec<PathBuf> = self.volumes.map.lock().unwrap().keys().cloned().collect();
        targets.sort();
        let (checked, mut left) = (targets.len(), 0);
        let mut done = Vec::new();
        for target in targets {
            // No publish or unpublish of it meanwhile.
            let lock = self.volumes.lock(&target);
            let _held = lock.blocking_lock();
            let Some(dir) = self
                .volumes
                .map
                .lock()
                .unwrap()
                .get(&target)
                .map(|p| p.dir.clone())
            else {
                continue;
            };
            let control = control_of(&dir);
            let from = match crate::condition::keeper_status(&control) {
                Ok(s) if s["server_build"].as_str() == Some(driver.digest.as_str()) => continue,
                Ok(s) => mount_version(&s, Some(&driver)).unwrap_or_else(|| "unknown".into()),
                Err(e) => {
                    tracing::warn!("{}: {e}; not handed over", target.display());
                    continue;
                }
            };
            if !self.upgrade_mounts {
                tracing::info!(
                    "{} runs shoal-mount {from}, not the driver's {}: left as it is (--upgrade-mounts=false)",
                    target.display(),
                    driver.version
                );
                left += 1;
                continue;
            }
            let r = hand_over(&target, &control, from, &driver);
            match &r {
                Ok(h) => {
                    tracing::info!(
                        "handed {} over from shoal-mount {} to {} in {} ms",
                        h.mount.display(),
                        h.from,
                        h.to,
                        h.took.as_millis()
                    );
                    self.metrics.handovers.get_or_create(&outcome("done")).inc();
                    self.metrics.handover_seconds.observe(h.took.as_secs_f64());
                }
                Err(e) => {
                    tracing::error!("{}: {e}", target.display());
                    self.metrics
                        .handovers
                        .get_or_create(&outcome("failed"))
                        .inc();
                }
            }
            done.push(r);
        }
        let failed = done.iter().filter(|r| r.is_err()).count();
        tracing::info!(
            "checked {checked} mounts against shoal-mount {}: {} handed over, {failed} failed, {left} left as they are",
            driver.version,
            done.len() - failed
        );
        done
    }
}

/// Hands the mount at `target` (keeper on `control`, running shoal-mount
/// `from`) over to the driver's.
fn hand_over(
    target: &Path,
    control: &Path,
    from: String,
    driver: &DriverMount,
) -> Result<Handover, String> {
    let start = Instant::now();
    let answer = shoal_mount::keeper::ask(control, "restart")?;
    let took = start.elapsed();
    if let Some(e) = answer.strip_prefix("error ") {
        return Err(format!(
            "its keeper could not hand it over to shoal-mount {}: {e}",
            driver.version
        ));
    }
    let after: serde_json::Value = serde_json::from_str(&answer)
        .map_err(|e| format!("its keeper answered the handover with {answer:?}: {e}"))?;
    let to = mount_version(&after, Some(driver)).unwrap_or_else(|| "unknown".into());
    match after["server_build"].as_str() {
        Some(d) if d == driver.digest => {}
        Some(_) => {
            return Err(format!(
                "handed over in {} ms, but to shoal-mount {to}, not the driver's {}: its keeper starts the binary it was started from, which is no longer --mount-bin",
                took.as_millis(),
                driver.version
            ))
        }
        // A keeper of before builds were told: what it started is unknown.
        None => tracing::warn!(
            "{}: its keeper does not say which build its server runs; it was handed over to the binary at its own path",
            target.display()
        ),
    }
    Ok(Handover {
        mount: target.to_owned(),
        from,
        to,
        took,
    })
}

fn outcome(result: &'static str) -> crate::metrics::Outcome {
    crate::metrics::Outcome { result }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_mounts_version_is_its_servers_build() {
        let driver = DriverMount {
            version: "0.2.0+bbbb".into(),
            digest: "bbbb".into(),
        };
        let v = |s| mount_version(&s, Some(&driver));
        assert_eq!(
            v(json!({"version": "0.1.0+aaaa", "server_build": "aaaa"})).as_deref(),
            Some("0.1.0+aaaa")
        );
        // Handed over by an old keeper to the driver's build.
        assert_eq!(
            v(json!({"version": "0.1.0+aaaa", "server_build": "bbbb"})).as_deref(),
            Some("0.2.0+bbbb")
        );
        assert_eq!(
            v(json!({"version": "0.1.0+aaaa", "server_build": "cccc"})).as_deref(),
            Some("unknown+cccc")
        );
        assert_eq!(v(json!({"version": "0.1.0"})).as_deref(), Some("0.1.0"));
        assert_eq!(v(json!({"server": 12})), None);
    }
}
