//! The volumes this node has published, kept so that a restarted plugin finds
//! them: a directory per target under the state directory, holding the record
//! (what was published, so a repeated publish can be told from a conflicting
//! one), the mount's config, the pod's token, the disk tier of a `cache:
//! emptyDir` volume, the mount's log and its keeper's control socket. The plugin
//! also holds a copy of each mount's connection (device and journal, asked of
//! its keeper), so that a keeper that dies is replaced on the same connection.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::volume::Fingerprint;

/// What is written about one published volume.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub target: PathBuf,
    pub fingerprint: Fingerprint,
    /// `shoal-mount`'s arguments and environment, to start a keeper again.
    pub args: Vec<String>,
    pub env: Vec<(String, Option<String>)>,
    /// The unit's `MemoryMax=` in bytes (absent in records of plugins before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// The group its tokens belong to ([`crate::tokens`]), if it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<u32>,
}

/// One published volume.
pub struct Published {
    pub dir: PathBuf,
    pub record: Record,
    /// The plugin's copy of the mount's device and journal.
    pub held: Option<(OwnedFd, OwnedFd)>,
}

impl Published {
    pub fn control(&self) -> PathBuf {
        control_of(&self.dir)
    }
}

pub fn control_of(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Where the mount of `dir` serves its metrics (`shoal-mount --metrics-socket`).
pub fn metrics_of(dir: &Path) -> PathBuf {
    dir.join("metrics.sock")
}

/// Where the mount of `dir` writes the log of its start (`--start-log`).
pub fn start_log_of(dir: &Path) -> PathBuf {
    dir.join("start.log")
}

/// Whether a keeper answers on the control socket in `dir`: its mount is live,
/// or about to be, and uses what `dir` holds.
pub fn keeper_answers(dir: &Path) -> bool {
    shoal_mount::keeper::ask(&control_of(dir), "status").is_ok()
}

/// Whether a keeper listens on `control`: a keeper that has died leaves its
/// socket refusing connections; one busy starting a server takes them and
/// answers later, and is alive all the same.
pub fn keeper_listens(control: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(control).is_ok()
}

/// Every published volume, by target path.
#[derive(Default)]
pub struct Volumes {
    pub root: PathBuf,
    pub map: Mutex<HashMap<PathBuf, Published>>,
    /// One publish or unpublish per target at a time.
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl Volumes {
    pub fn new(root: PathBuf) -> Volumes {
        Volumes {
            root,
            ..Default::default()
        }
    }

    /// Where target `target`'s files live.
    pub fn dir_for(&self, target: &Path) -> PathBuf {
        let h = xxhash_rust::xxh3::xxh3_64(target.as_os_str().as_encoded_bytes());
        self.root.join(format!("{h:016x}"))
    }

    pub fn lock(&self, target: &Path) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap()
            .entry(target.to_owned())
            .or_default()
            .clone()
    }

    pub fn save(dir: &Path, r: &Record) -> std::io::Result<()> {
        let tmp = dir.join("volume.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(r)?)?;
        std::fs::rename(tmp, dir.join("volume.json"))
    }

    /// The records found on disk (a restarted plugin's volumes).
    pub fn on_disk(&self) -> Vec<(PathBuf, Record)> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let dir = e.path();
            match std::fs::read(dir.join("volume.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            {
                Some(r) => out.push((dir, r)),
                // A keeper still serves from it (a publish whose record was never
                // written): its config, token and disk tier are in use.
                None if keeper_answers(&dir) => tracing::error!(
                    "{}: no readable record, but a live mount's keeper answers there; left as it is",
                    dir.display()
                ),
                None => {
                    tracing::warn!("{}: no readable record; removing it", dir.display());
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        out
    }
}
