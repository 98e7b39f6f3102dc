//! Starting a volume's mount: a `shoal-mount` keeper of its own (its command line
//! names the target path), outside the plugin so that a restart of the plugin
//! breaks no mount.
//!
//! - `direct`: a process in a session of its own, outside the plugin's process
//!   group. It outlives the plugin's process (its crash, its SIGKILL) but not its
//!   container: for a plugin outside containers, and for tests.
//! - `systemd`: a transient unit of the host's systemd (`systemd-run`), so that
//!   a DaemonSet rollout, which kills every process of the plugin's container,
//!   leaves the mounts served. The plugin's container then needs the host's
//!   `/run/systemd` and `shoal-mount` at a host path (the manifests copy it to
//!   the plugin directory); a keeper of a unit cannot adopt a connection, so the
//!   plugin's copies serve only `direct` keepers. Its environment (the cluster
//!   secret's variable among it) reaches it through a file of mode 0600 in the
//!   volume's directory (`shoal-mount --env-file`), never a command line. The
//!   unit keeps only the capabilities a mount needs ([`UNIT_CAPABILITIES`]) and
//!   no device but `/dev/fuse`: it reads no file its mode does not let it, so
//!   of the volumes' tokens ([`crate::tokens`]) only its own, whose group it
//!   joins itself (`shoal-mount --token-group`, with `CAP_SETGID` and
//!   `CAP_SETPCAP` kept for that alone and dropped once joined).
//!
//! A mount that fails to start says why in its start log (`shoal-mount
//! --start-log`, in the volume's directory): its last lines are the error, for
//! kubelet to show in the pod's events. The host's journal is not in the
//! plugin's container.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::error::CsiError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launcher {
    Direct,
    Systemd,
}

/// One keeper's start: what to run, with what.
pub struct Launch {
    pub mount_bin: PathBuf,
    /// `shoal-mount`'s arguments (config, control socket, options, source, target).
    pub args: Vec<String>,
    /// Set for the keeper and its servers; `None` removes a variable.
    pub env: Vec<(String, Option<String>)>,
    /// The mount's log (`direct`).
    pub log: PathBuf,
    /// Where the mount writes the log of its start (`--start-log`).
    pub start_log: PathBuf,
    /// A unit name for `systemd` ([`unit_name`]).
    pub unit: String,
    /// What `systemctl status` says the unit is: the volume and its target.
    pub description: String,
    /// Where a `systemd` unit's environment is written for it (mode 0600).
    pub env_file: PathBuf,
    /// The unit's `MemoryMax=` (`systemd`; the mount fits its caches to it
    /// under either launcher).
    pub memory_max: Option<u64>,
    /// The group that may read the volume's tokens ([`crate::tokens`]).
    pub reader: Option<u32>,
}

/// What a mount's unit may do as root: mount and unmount (`CAP_SYS_ADMIN`), and
/// size its pipes past the default (`CAP_SYS_RESOURCE`). Nothing that reads or
/// writes past a file's mode (`CAP_DAC_*`, `CAP_FOWNER`), changes owners or
/// identities (`CAP_CHOWN`, `CAP_SET*`) or looks into other processes
/// (`CAP_SYS_PTRACE`).
pub const UNIT_CAPABILITIES: &str = "CAP_SYS_ADMIN CAP_SYS_RESOURCE";

/// The most of a mount's start log an error carries: kubelet's event shows it.
const START_LOG_MAX: usize = 900;

impl Launcher {
    pub fn parse(s: &str) -> Result<Launcher, String> {
        match s {
            "direct" => Ok(Launcher::Direct),
            "systemd" => Ok(Launcher::Systemd),
            other => Err(format!(
                "--launcher {other:?} is neither direct nor systemd"
            )),
        }
    }

    /// Starts the keeper and waits until the mount is live; the mount's own error
    /// otherwise.
    pub fn start(&self, l: &Launch) -> Result<(), CsiError> {
        let out = match self {
            Launcher::Direct => {
                // Background mode: it returns once the mount is live (the keeper
                // in a session of its own), or with why not on stderr.
                let mut cmd = Command::new(&l.mount_bin);
                cmd.args(&l.args)
                    .arg("--log-file")
                    .arg(&l.log)
                    .stdin(Stdio::null());
                apply_env(&mut cmd, &l.env);
                cmd.output()
            }
            Launcher::Systemd => {
                // A unit starts with systemd's environment, not the plugin's: what
                // shapes a mount (its secrets' variables, AWS's, proxies) goes
                // along, then the volume's own. All of it through a file only
                // root may read: an argument of systemd-run is in `ps` for every
                // user, and an Environment= of the unit in its `systemctl show`.
                shoal_mount::env_file::write(&l.env_file, &unit_env(&l.env)).map_err(|e| {
                    CsiError::Internal(format!("cannot write the mount's environment: {e}"))
                })?;
                let mut cmd = Command::new("systemd-run");
                cmd.arg(format!("--unit={}", l.unit))
                    .arg(format!("--description={}", l.description))
                    .args(["--collect", "--quiet", "--property=Type=notify"])
                    .args(["--property=KillMode=mixed", "--property=TimeoutStopSec=30"])
                    .arg(format!(
                        "--property=CapabilityBoundingSet={UNIT_CAPABILITIES}{}",
                        // To join its token group, then dropped
                        // (`shoal-mount --token-group`).
                        if l.reader.is_some() {
                            " CAP_SETGID CAP_SETPCAP"
                        } else {
                            ""
                        }
                    ))
                    .args([
                        "--property=DevicePolicy=closed",
                        "--property=DeviceAllow=/dev/fuse rw",
                    ])
                    .args(l.memory_max.map(|m| format!("--property=MemoryMax={m}")))
                    .arg("--")
                    .arg(&l.mount_bin)
                    .arg("--foreground")
                    .arg("--env-file")
                    .arg(&l.env_file)
                    .args(&l.args);
                cmd.output()
            }
        }
        .map_err(|e| CsiError::Mount(format!("cannot start {}: {e}", l.mount_bin.display())))?;
        if out.status.success() {
            return Ok(());
        }
        // The mount's own lines first: systemd-run says only that the unit
        // failed.
        let mut why = last_lines(&l.start_log, START_LOG_MAX);
        if *self == Launcher::Systemd || why.is_empty() {
            let said = String::from_utf8_lossy(&out.stderr);
            if !said.trim().is_empty() && !why.contains(said.trim()) {
                if !why.is_empty() {
                    why.push('\n');
                }
                why.push_str(said.trim());
            }
        }
        if why.is_empty() {
            why = format!("shoal-mount exited with {}", out.status);
        }
        Err(CsiError::Mount(why))
    }

    /// Starts a new keeper on a live connection whose keeper is gone: the
    /// plugin's copies of its device and journal (`direct` only).
    pub fn adopt(&self, l: &Launch, fds: &(OwnedFd, OwnedFd)) -> Result<(), CsiError> {
        if *self != Launcher::Direct {
            return Err(CsiError::Internal(
                "only a direct launcher's keepers can be replaced by the plugin".into(),
            ));
        }
        let (dev, journal) = (fds.0.try_clone()?, fds.1.try_clone()?);
        let (d, j) = (dev.as_raw_fd(), journal.as_raw_fd());
        let mut cmd = Command::new(&l.mount_bin);
        cmd.args(&l.args)
            .arg("--log-file")
            .arg(&l.log)
            .stdin(Stdio::null())
            .env(shoal_mount::keeper::ADOPT_ENV, format!("{d},{j}"));
        apply_env(&mut cmd, &l.env);
        // SAFETY: only async-signal-safe calls: the two descriptors are made
        // inheritable in the child.
        unsafe {
            cmd.pre_exec(move || {
                for fd in [d, j] {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let out = cmd.output().map_err(|e| CsiError::Mount(e.to_string()))?;
        drop((dev, journal));
        if out.status.success() {
            Ok(())
        } else {
            Err(CsiError::Mount(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ))
        }
    }
}

/// The last lines of the file at `path` that fit in `max` bytes (whole lines,
/// the last one always, cut to `max`).
pub fn last_lines(path: &std::path::Path, max: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut kept: Vec<&str> = Vec::new();
    let mut size = 0;
    for line in text.lines().rev().filter(|l| !l.trim().is_empty()) {
        if !kept.is_empty() && size + line.len() + 1 > max {
            break;
        }
        size += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    let mut out = kept.join("\n");
    if out.len() > max {
        let cut = out.len() - max;
        let cut = (cut..out.len())
            .find(|i| out.is_char_boundary(*i))
            .unwrap_or(cut);
        out = out[cut..].to_owned();
    }
    out
}

/// Longest part of a unit's name taken from its volume's id: CSI allows ids far
/// longer than systemd's 256-byte names.
const UNIT_VOLUME_MAX: usize = 64;

/// The unit of volume `volume_id` published at the target whose files are in
/// the directory `dir_name`: `shoal-csi-VOLUME-DIR.service`, so that
/// `systemctl list-units` says which volume each is, the directory's name
/// keeping apart two publishes of one volume (two pods). What a unit name cannot
/// hold becomes `_`.
pub fn unit_name(volume_id: &str, dir_name: &str) -> String {
    let volume: String = volume_id
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' | ':' => c,
            _ => '_',
        })
        .take(UNIT_VOLUME_MAX)
        .collect();
    format!("shoal-csi-{volume}-{dir_name}.service")
}

/// What a unit's mount runs with: the plugin's variables it needs too, then the
/// volume's own (`None` takes one away).
fn unit_env(volume: &[(String, Option<String>)]) -> Vec<(String, String)> {
    let mut last = std::collections::BTreeMap::new();
    let plugin = std::env::vars().filter(|(k, _)| passed_on(k));
    for (k, v) in plugin
        .map(|(k, v)| (k, Some(v)))
        .chain(volume.iter().cloned())
    {
        last.insert(k, v);
    }
    last.into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

/// The plugin's variables a mount started elsewhere needs too.
fn passed_on(name: &str) -> bool {
    name.starts_with("SHOAL_")
        || name.starts_with("AWS_")
        || matches!(
            name.to_ascii_uppercase().as_str(),
            "HTTPS_PROXY" | "HTTP_PROXY" | "ALL_PROXY" | "NO_PROXY" | "RUST_LOG"
        )
}

fn apply_env(cmd: &mut Command, env: &[(String, Option<String>)]) {
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_units_name_says_its_volume_and_is_one_systemd_takes() {
        assert_eq!(
            unit_name("vol-alpha", "f288a7f4af2654cb"),
            "shoal-csi-vol-alpha-f288a7f4af2654cb.service"
        );
        // A volumeHandle of a bucket and prefix, a template's @, spaces, non-ASCII.
        assert_eq!(
            unit_name("bucket/data set@é", "0123456789abcdef"),
            "shoal-csi-bucket_data_set__-0123456789abcdef.service"
        );
        let long = unit_name(&"v".repeat(1000), "0123456789abcdef");
        assert!(long.len() < 256, "{}", long.len());
        assert!(long.contains(&"v".repeat(UNIT_VOLUME_MAX)));
    }
}
