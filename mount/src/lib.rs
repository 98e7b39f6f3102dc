//! `shoal-mount`: an S3 bucket as a read-only directory, read through the cluster.
//!
//! Two processes serve a mount. The [`keeper`] mounts, holds the kernel
//! connection and the [`journal`], and runs the [`server`], which answers the
//! kernel: [`kernel`] (the `fusewire` crate) speaks FUSE, [`fuse`] adapts each request to [`fs`], the
//! filesystem (namespace, handles, read-ahead) as async functions over the
//! cluster reader. The keeper replaces a server that dies and hands over to a new
//! one on request ([`link`] is how they talk), so a mount outlives the process
//! serving it. This module holds what both need: the mount's spec and its checks.

pub mod build;
pub mod env_file;
pub mod fs;
pub mod fuse;
pub mod journal;
pub mod keeper;
/// FUSE's wire protocol, a crate of its own that knows nothing of shoal.
pub use fusewire as kernel;
pub mod link;
pub mod memory;
pub mod metrics;
pub mod passthrough;
pub mod pipes;
pub mod replies;
pub mod server;
pub mod start_log;
pub mod token_group;

use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal::config::Config;
use shoal::store::StoreError;

/// Everything a mount needs, after the config file and flags are merged.
#[derive(Clone, Debug)]
pub struct MountSpec {
    pub config: Config,
    pub bucket: String,
    /// Empty or ending in `/`.
    pub prefix: String,
    pub mountpoint: PathBuf,
    pub allow_other: bool,
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u16,
    pub dir_mode: u16,
    pub metadata_ttl: Duration,
    pub negative_ttl: Duration,
    pub prefetch_files: usize,
    pub cache_size: u64,
    /// The memory the mount is held to (`--memory-limit`): its RAM tier, blocks
    /// in flight and read window derive from it ([`memory`]).
    pub memory_limit: Option<u64>,
    /// Where `/metrics` is served (`--metrics-addr`, `--metrics-socket`).
    pub metrics: Vec<metrics::Listen>,
}

/// What the cluster reader and the FUSE adapter are built with.
#[derive(Clone, Debug)]
pub struct ReaderBudgets {
    /// The config's `[cluster]` (or the origin alone), its read window fitted.
    pub cluster: Option<shoal::config::ClusterConfig>,
    /// The RAM tier.
    pub ram: u64,
    /// Blocks in flight at once (`None`: the reader's default).
    pub inflight_blocks: Option<usize>,
    /// Bytes of FUSE replies made at once (`None`: no bound).
    pub replies: Option<u64>,
}

impl MountSpec {
    /// The reader's and replies' budgets: the config's, fitted to the memory
    /// limit if there is one ([`memory`]).
    pub fn reader_budgets(&self) -> Result<ReaderBudgets, String> {
        let Some(limit) = self.memory_limit else {
            return Ok(ReaderBudgets {
                cluster: self.config.reader_cluster(),
                ram: self.cache_size,
                inflight_blocks: None,
                replies: None,
            });
        };
        let mut cluster = self
            .config
            .reader_cluster()
            .unwrap_or_else(shoal::config::ClusterConfig::standalone);
        let b = memory::Budgets::derive(
            limit,
            cluster.block_size,
            self.cache_size,
            cluster.read_window,
            self.config.mount.disk_cache.is_some(),
        )
        .map_err(|e| format!("--memory-limit: {e}"))?;
        cluster.read_window = b.read_window;
        Ok(ReaderBudgets {
            cluster: Some(cluster),
            ram: b.ram,
            inflight_blocks: Some(b.inflight_blocks),
            replies: Some(b.replies),
        })
    }
}

/// `BUCKET[/PREFIX]` as (bucket, prefix ending in `/` or empty).
pub fn parse_source(s: &str) -> Result<(String, String), String> {
    let s = s.strip_prefix("s3://").unwrap_or(s);
    let (bucket, prefix) = s.split_once('/').unwrap_or((s, ""));
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid {
        return Err(format!(
            "{bucket:?} is not a bucket name (3 to 63 of a-z, 0-9, '-', '.')"
        ));
    }
    let prefix = prefix.trim_matches('/');
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    Ok((bucket.to_owned(), prefix))
}

/// The mountpoint must be an empty directory with nothing mounted on it (a
/// shoal mount whose keeper died is taken off first).
pub fn check_mountpoint(p: &Path) -> Result<PathBuf, String> {
    detach_if_dead(p);
    let meta = std::fs::metadata(p).map_err(|e| format!("mountpoint {}: {e}", p.display()))?;
    if !meta.is_dir() {
        return Err(format!("mountpoint {} is not a directory", p.display()));
    }
    let canon = std::fs::canonicalize(p).map_err(|e| format!("mountpoint {}: {e}", p.display()))?;
    if is_mounted(&canon) {
        return Err(format!(
            "mountpoint {} is busy: something is already mounted there",
            p.display()
        ));
    }
    let mut entries =
        std::fs::read_dir(&canon).map_err(|e| format!("mountpoint {}: {e}", p.display()))?;
    if entries.next().is_some() {
        return Err(format!("mountpoint {} is not empty", p.display()));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("FUSE is unavailable: /dev/fuse is missing (load the fuse module, or give the container /dev/fuse)".into());
    }
    Ok(canon)
}

/// Whether `p` is a mount point, from /proc/self/mountinfo.
pub fn is_mounted(p: &Path) -> bool {
    fstype_at(p).is_some()
}

/// The type of what is mounted on top at `p` (`fuse.shoal`), from
/// /proc/self/mountinfo (the last line for `p` is the one on top).
fn fstype_at(p: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = p.to_string_lossy();
    info.lines()
        .rev()
        .find(|l| {
            l.split(' ')
                .nth(4)
                .map(|m| {
                    m.replace("\\040", " ")
                        .replace("\\011", "\t")
                        .replace("\\012", "\n")
                        .replace("\\134", "\\")
                })
                .is_some_and(|m| m == want)
        })
        .and_then(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_owned))
}

/// A keeper killed with its server (`systemctl kill -s KILL`, the OOM killer)
/// leaves its mount behind with no one to answer it: every call fails with
/// ENOTCONN, and nothing could mount there again, so systemd's `Restart=` or an
/// fstab `mount` would fail on a busy mountpoint for ever. Such a mount of ours
/// is detached (lazily: a process may still be in it). A live one is left
/// alone: a keeper, or a CSI driver holding a copy of the connection, answers.
fn detach_if_dead(p: &Path) {
    if !std::fs::read_dir(p).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN)) {
        return;
    }
    // A dead mount's root cannot be resolved (that stats it): its parent can.
    let Some(name) = p.file_name() else { return };
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(abs) = std::fs::canonicalize(dir).map(|d| d.join(name)) else {
        return;
    };
    if fstype_at(&abs).as_deref() != Some("fuse.shoal") {
        return;
    }
    match kernel::mount::unmount(&abs, true) {
        Ok(()) => tracing::warn!(
            "{} held a mount left by a keeper that died (ENOTCONN): detached it",
            abs.display()
        ),
        Err(e) => tracing::warn!(
            "{} holds a mount left by a keeper that died, and it cannot be detached: {e}",
            abs.display()
        ),
    }
}

pub(crate) fn access_error(spec: &MountSpec, e: StoreError) -> String {
    let what = format!("s3://{}/{}", spec.bucket, spec.prefix);
    match e.cause() {
        StoreError::NoSuchBucket { .. } => format!("bucket {:?} does not exist", spec.bucket),
        StoreError::AccessDenied { message } => format!("access denied listing {what}: {message}"),
        _ => format!("cannot list {what}: {e}"),
    }
}

/// The mount's FUSE connection number (its device minor), as named under
/// `/sys/fs/fuse/connections/`.
pub(crate) fn connection_id(mountpoint: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(mountpoint).ok()?;
    Some(libc::minor(meta.dev()))
}

/// Ends a FUSE connection from the kernel side: every pending and future request
/// fails, and the session's reads of /dev/fuse return.
pub(crate) fn abort_connection(id: u32) -> bool {
    let path = format!("/sys/fs/fuse/connections/{id}/abort");
    match std::fs::write(&path, "1") {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("cannot abort the FUSE connection ({path}): {e}; exiting ends it");
            false
        }
    }
}

/// Lets the kernel read ahead `kb` KiB on this mount (it grants only 128 KiB at
/// FUSE init); best effort.
pub(crate) fn raise_readahead(mountpoint: &Path, kb: u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    if let Err(e) = std::fs::write(&path, kb.to_string()) {
        tracing::debug!("cannot raise {path}: {e}");
    }
}
