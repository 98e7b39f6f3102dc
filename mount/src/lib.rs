//! `shoal-mount`: an S3 bucket as a read-only directory, read through the cluster.
//!
//! [`fs`] is the filesystem (namespace, handles, read-ahead) as async functions;
//! [`fuse`] adapts it to the kernel; this module checks the ground, mounts, waits
//! for a signal and unmounts.

pub mod fs;
pub mod fuse;
pub mod metrics;
pub mod passthrough;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shoal::cluster::{ClusterReader, ReaderOptions};
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
    pub metrics_addr: Option<SocketAddr>,
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

/// The mountpoint must be an empty directory with nothing mounted on it.
pub fn check_mountpoint(p: &Path) -> Result<PathBuf, String> {
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
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = p.to_string_lossy();
    info.lines().any(|l| {
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
}

fn access_error(spec: &MountSpec, e: StoreError) -> String {
    let what = format!("s3://{}/{}", spec.bucket, spec.prefix);
    match e.cause() {
        StoreError::NoSuchBucket { .. } => format!("bucket {:?} does not exist", spec.bucket),
        StoreError::AccessDenied { message } => format!("access denied listing {what}: {message}"),
        _ => format!("cannot list {what}: {e}"),
    }
}

/// Mounts, calls `ready` once the mount is live, and serves until SIGINT/SIGTERM
/// or an external unmount; then unmounts.
pub fn run(mut spec: MountSpec, ready: impl FnOnce()) -> Result<(), String> {
    let mountpoint = check_mountpoint(&spec.mountpoint)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("shoal-mount")
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    rt.block_on(shoal::settle_region(&mut spec.config));
    let origin_cfg = spec.config.origin().map_err(|e| e.to_string())?;
    let origin = origin_cfg.client().map_err(|e| e.to_string())?;
    let cluster = spec.config.reader_cluster();
    let disk = match &spec.config.mount.disk_cache {
        Some((dir, bytes)) => {
            let (tier, stats) = shoal::blocks::FileTier::open(dir, *bytes)
                .map_err(|e| format!("mount.disk_cache {}: {e}", dir.display()))?;
            tracing::info!(
                blocks = stats.blocks,
                bytes = stats.bytes,
                removed = stats.removed,
                "disk tier at {} opened in {:?}",
                dir.display(),
                stats.took
            );
            Some(Arc::new(tier))
        }
        None => None,
    };
    let fs = rt.block_on(async {
        let reader = ClusterReader::new(
            origin.clone(),
            cluster.as_ref(),
            ReaderOptions {
                ram_bytes: spec.cache_size,
                disk: disk
                    .clone()
                    .map(|d| d as Arc<dyn shoal::blocks::BlockCache>),
                max_inflight_blocks: None,
                queue_wait: None,
            },
        );
        let fs = fs::Fs::new(
            fs::FsOptions {
                bucket: spec.bucket.clone(),
                prefix: spec.prefix.clone(),
                metadata_ttl: spec.metadata_ttl,
                negative_ttl: spec.negative_ttl,
                uid: spec.uid,
                gid: spec.gid,
                file_mode: spec.file_mode,
                dir_mode: spec.dir_mode,
                prefetch_files: spec.prefetch_files,
            },
            reader,
            disk,
        );
        fs.check_access().await.map(|()| Arc::new(fs))
    });
    let fs = fs.map_err(|e| access_error(&spec, e))?;
    let metrics = Arc::new(metrics::MountMetrics::default());
    if let Some(addr) = spec.metrics_addr {
        rt.block_on(metrics::serve(addr, fs.clone(), metrics.clone()))
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    }

    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName(format!("shoal:{}/{}", spec.bucket, spec.prefix)),
        fuser::MountOption::Subtype("shoal".into()),
        fuser::MountOption::RO,
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if spec.allow_other {
        cfg.acl = fuser::SessionACL::All;
    }
    cfg.n_threads = Some(4);
    let adapter = fuse::FuseFs::new(fs.clone(), rt.handle().clone(), metrics);
    let session = fuser::spawn_mount(adapter, &mountpoint, &cfg).map_err(|e| {
        format!(
            "cannot mount on {}: {e} (is fuse3 installed, and /dev/fuse usable?)",
            mountpoint.display()
        )
    })?;
    let connection = connection_id(&mountpoint);
    // As far ahead as the reader reads: its window of its blocks.
    let reader = fs.reader();
    raise_readahead(
        &mountpoint,
        reader.read_window() as u64 * reader.block_size() / 1024,
    );
    tracing::info!(
        "mounted s3://{}/{} on {} ({} nodes)",
        spec.bucket,
        spec.prefix,
        mountpoint.display(),
        fs.reader().router().nodes().len()
    );
    ready();
    shoal::notify::ready();

    let stopped_by_signal = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return true,
                _ = term.recv() => return true,
                _ = tick.tick() => if session.guard.is_finished() { return false },
            }
        }
    });
    if stopped_by_signal {
        tracing::info!("unmounting {}", mountpoint.display());
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(session.umount_and_join());
        });
        match done.recv_timeout(UNMOUNT_WAIT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!("unmount failed ({e}); detaching lazily");
                let _ = std::process::Command::new("fusermount3")
                    .arg("-uz")
                    .arg(&mountpoint)
                    .status();
            }
            // Unmounted here, but the FUSE connection lives on: a mount namespace
            // made after the mount (a container, a sandboxed service) holds a copy
            // of it, so the kernel keeps asking us. End the connection instead of
            // hanging: through fusectl when it is mounted, else by exiting, which
            // closes /dev/fuse. Reads through such copies then fail, as after any
            // unmount.
            Err(_) => {
                tracing::warn!(
                    "{} is still held by another mount namespace; ending its FUSE connection",
                    mountpoint.display()
                );
                if connection.is_some_and(abort_connection) {
                    let _ = done.recv_timeout(UNMOUNT_WAIT);
                }
            }
        }
    } else {
        tracing::info!("{} was unmounted", mountpoint.display());
        let _ = session.join();
    }
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// How long SIGTERM waits for the FUSE session to end after unmounting.
const UNMOUNT_WAIT: Duration = Duration::from_secs(3);

/// The mount's FUSE connection number (its device minor), as named under
/// `/sys/fs/fuse/connections/`.
fn connection_id(mountpoint: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(mountpoint).ok()?;
    Some(libc::minor(meta.dev()))
}

/// Ends a FUSE connection from the kernel side: every pending and future request
/// fails, and the session's reads of /dev/fuse return.
fn abort_connection(id: u32) -> bool {
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
fn raise_readahead(mountpoint: &Path, kb: u64) {
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
