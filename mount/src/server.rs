//! The server: the process that answers a mount's kernel requests, for its
//! [`crate::keeper`]. It checks what it can before anything is mounted (config,
//! credentials, the bucket) and says so; then takes the FUSE device and the
//! journal from the keeper, and either answers the kernel's INIT (a new mount)
//! or takes over what its predecessor left (the journal's inodes and handles);
//! then serves until the keeper tells it to hand over, or the mount ends.
//!
//! A handover drains: the readers stop taking requests, every request taken is
//! answered, and only then does the successor start. After a crash the successor
//! has the kernel send again what the dead server had taken (where the kernel
//! can: Linux 6.9 and later); elsewhere each server reads through a descriptor of
//! its own, whose requests the kernel ends with an error when it dies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal::config::MetadataSource;
use shoal::store::s3::S3Client;
use shoal::store::{ListRequest, ObjectStore};

use crate::journal::{Journal, Record};
use crate::kernel::{self, Channel, Running};
use crate::link::{Link, Msg, Start};
use crate::{fs, fuse, metrics, MountSpec};

/// Threads reading requests off the FUSE device; each hands its requests to the
/// runtime at once, so a few keep up with any number of readers.
const READERS: usize = 4;
/// Longest a handover waits for the requests already taken to be answered; past
/// it the successor has the kernel send them again.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Serves the mount `spec` describes for the keeper at the other end of `link`;
/// returns once this server is done (handed over, or unmounted).
pub fn run(mut spec: MountSpec, link: Link) -> Result<(), String> {
    // Dies with its keeper: a mount nobody holds must not be served by an orphan
    // that still has its disk tier open.
    // SAFETY: prctl with plain arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("shoal-mount")
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    let origin = match rt.block_on(prepare(&mut spec)) {
        Ok(o) => o,
        // The keeper tells the user; this process has nobody to tell.
        Err(why) => {
            let _ = link.send(&Msg::Failed(why), &[]);
            return Err(String::new());
        }
    };
    link.send(&Msg::Prepared, &[]).map_err(|e| e.to_string())?;
    let Some((Msg::Take(start), mut fds)) = link.recv().map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if fds.len() != 2 {
        return Err("the keeper sent no device and journal".into());
    }
    let journal_fd = fds.pop().expect("journal");
    let chan = Arc::new(Channel::new(fds.pop().expect("device")).map_err(|e| e.to_string())?);
    let has_disk = spec.config.mount.disk_cache.is_some();
    // The journal is taken over in place (its file is the keeper's, and a CSI
    // driver's copy, for the mount's whole life). A damaged one fails the
    // takeover: serving part of a state would hand out again inode numbers the
    // kernel holds for other paths, and lose open files. The keeper then
    // answers the mount's calls with EIO, as when no server can start.
    let (journal, state) = match Journal::open(journal_fd) {
        Ok(j) => j,
        Err(e) => {
            // The keeper tells the user, and answers EIO meanwhile.
            let why = format!(
                "the mount's journal cannot be taken over: {e}; refusing to serve part of its state"
            );
            let _ = link.send(&Msg::Failed(why), &[]);
            return Err(String::new());
        }
    };
    let journal = Arc::new(journal);
    let (agreed, state) = match start {
        Start::New => {
            let a = kernel::handshake(&chan, &fuse::wants(has_disk))
                .map_err(|e| format!("FUSE INIT failed: {e}"))?;
            journal.append(&Record::Agreed(a));
            (a, None)
        }
        Start::AfterCrash | Start::Handover => {
            let a = state
                .agreed
                .ok_or("the mount's state holds no INIT: nothing to take over")?;
            (a, Some(state))
        }
    };
    let fs = rt.block_on(build(&spec, origin, journal.clone()))?;
    if let Some(s) = &state {
        let t0 = Instant::now();
        rt.block_on(fs.restore(s, &chan));
        tracing::info!(
            inodes = s.inodes.len(),
            files = s.files.len(),
            dirs = s.dirs.len(),
            "took over {} ({:?}) in {:?}",
            spec.mountpoint.display(),
            start,
            t0.elapsed()
        );
    }
    let mountpoint = spec.mountpoint.clone();
    let metrics = Arc::new(metrics::MountMetrics::default());
    let adapter = Arc::new(fuse::FuseFs::new(
        fs.clone(),
        rt.handle().clone(),
        metrics.clone(),
        chan.clone(),
        &agreed,
        spec.reader_budgets()?.replies,
    ));
    // Metrics answer before the first call does: whoever saw the mount answer
    // (a test's stat, a readiness probe) finds them up.
    for on in &spec.metrics {
        if let Err(e) = rt.block_on(metrics::serve(on, fs.clone(), metrics.clone())) {
            tracing::warn!("cannot serve metrics on {on}: {e}");
        }
    }
    // Without resend, a reader that dies must take its requests' end with it.
    let running = Running::start(chan.clone(), adapter, READERS, !agreed.resend())
        .map_err(|e| format!("cannot start the FUSE readers: {e}"))?;
    if start == Start::AfterCrash && agreed.resend() {
        if let Err(e) = chan.notify_resend() {
            tracing::warn!("cannot have the kernel resend what the dead server took: {e}");
        }
    }
    // As far ahead as the reader reads: its window of its blocks.
    let reader = fs.reader();
    crate::raise_readahead(
        &mountpoint,
        reader.read_window() as u64 * reader.block_size() / 1024,
    );
    tracing::info!(
        "serving s3://{}/{} on {} ({} nodes)",
        spec.bucket,
        spec.prefix,
        mountpoint.display(),
        reader.router().nodes().len()
    );
    link.send(&Msg::Serving, &[]).map_err(|e| e.to_string())?;
    crate::start_log::done();
    serve(&link, running);
    drop(chan);
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// Config, credentials and the bucket, checked before anything is mounted.
async fn prepare(spec: &mut MountSpec) -> Result<S3Client, String> {
    shoal::settle_region(&mut spec.config).await;
    let origin = spec
        .config
        .origin()
        .map_err(|e| e.to_string())?
        .client()
        .map_err(|e| e.to_string())?;
    origin
        .list_page(&ListRequest {
            bucket: spec.bucket.clone(),
            prefix: spec.prefix.clone(),
            delimiter: Some("/".into()),
            max_keys: Some(1),
            ..Default::default()
        })
        .await
        .map_err(|e| crate::access_error(spec, e))?;
    Ok(origin)
}

/// The filesystem over the cluster reader and, if configured, the disk tier
/// (opened only now: a predecessor may have had it until it handed over).
async fn build(
    spec: &MountSpec,
    origin: S3Client,
    journal: Arc<Journal>,
) -> Result<Arc<fs::Fs>, String> {
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
    let budgets = spec.reader_budgets()?;
    if let Some(limit) = spec.memory_limit {
        tracing::info!(
            limit,
            ram_tier = budgets.ram,
            inflight_blocks = budgets.inflight_blocks,
            replies = budgets.replies,
            read_window = budgets.cluster.as_ref().map(|c| c.read_window),
            "budgets fitted to the memory limit"
        );
    }
    let reader = ClusterReader::new(
        origin,
        budgets.cluster.as_ref(),
        ReaderOptions {
            ram_bytes: budgets.ram,
            disk: disk
                .clone()
                .map(|d| d as Arc<dyn shoal::blocks::BlockCache>),
            max_inflight_blocks: budgets.inflight_blocks,
            queue_wait: None,
            evicting: spec.config.evicting(),
        },
    );
    // A membership from DNS or the Kubernetes API answers first: reads served
    // before it would all go to the origin.
    reader.membership_ready().await;
    Ok(Arc::new(fs::Fs::new(
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
            metadata_via_cluster: spec.config.mount.metadata == MetadataSource::Cluster
                && spec.config.cluster().is_some(),
            splice: spec.config.mount.splice_reads,
        },
        reader,
        disk,
        Some(journal),
    )))
}

/// Serves until the keeper says stop (then drains) or the mount ends.
fn serve(link: &Link, running: Running) {
    let (tx, rx) = std::sync::mpsc::channel();
    let Ok(reader) = link.try_clone() else {
        tracing::error!("cannot listen to the keeper; serving until unmounted");
        running.join();
        return;
    };
    std::thread::spawn(move || loop {
        match reader.recv() {
            Ok(Some((Msg::Stop, _))) => {
                let _ = tx.send(true);
                return;
            }
            Ok(Some(_)) => continue,
            // The keeper is gone: the death signal ends this process.
            _ => {
                let _ = tx.send(false);
                return;
            }
        }
    });
    loop {
        if running.unmounted() {
            let _ = link.send(&Msg::Unmounted, &[]);
            running.join();
            return;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(true) => break,
            Ok(false) => return,
            Err(_) => continue,
        }
    }
    // A handover: take no more, answer what was taken.
    running.stop();
    let t0 = Instant::now();
    while running.pending() > 0 && t0.elapsed() < DRAIN_LIMIT {
        std::thread::sleep(Duration::from_millis(2));
    }
    let left = running.pending();
    running.join();
    if left > 0 {
        tracing::warn!("{left} requests still unanswered after {DRAIN_LIMIT:?}: the successor has them sent again");
        return;
    }
    tracing::info!("drained in {:?}; handing over", t0.elapsed());
    let _ = link.send(&Msg::Drained, &[]);
}
