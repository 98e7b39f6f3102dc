//! The mount's own disk tier (`[mount] disk_cache`) and FUSE passthrough: a file
//! held whole is read by the kernel from its backing file; a changed object is a
//! new file; a corrupted block is dropped and refetched, never handed to the
//! kernel; the tier survives a remount and a SIGKILL of the mount.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

const MIB: usize = 1 << 20;

fn toml(o: &Origin, nodes: &[&NodeProcess], cache: &Path) -> String {
    mount_toml(
        o,
        nodes,
        &format!(
            "[mount]\nmetadata_ttl = \"200ms\"\ndisk_cache = \"{}\"\ndisk_cache_size = \"256MiB\"\n",
            cache.display()
        ),
    )
}

/// An origin, one node, and the directory for the mount's tier.
struct Rig {
    o: Origin,
    node: NodeProcess,
    cache: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(&o, dir.path(), "n");
    let cache = dir.path().join("cache");
    Rig {
        o,
        node,
        cache,
        _dir: dir,
    }
}

impl Rig {
    fn toml(&self) -> String {
        toml(&self.o, &[&self.node], &self.cache)
    }
}

/// A mount of `toml` with a metrics endpoint of its own; its address.
async fn mounted(toml: &str) -> (Mount, String) {
    let metrics = free_addr();
    let (t, a) = (toml.to_owned(), metrics.clone());
    let m = tokio::task::spawn_blocking(move || Mount::start(&t, BUCKET, &["--metrics-addr", &a]))
        .await
        .unwrap();
    (m, metrics)
}

async fn passthrough_opens(metrics: &str) -> f64 {
    metric(
        &scrape(metrics).await,
        "shoal_mount_passthrough_opens_total",
    )
}

/// Waits until the mount's disk tier holds `bytes` bytes: its writes are done
/// after the read that asked for them has been answered.
async fn tier_holds(metrics: &str, bytes: usize) {
    wait_for(
        "the disk tier holds the file",
        Duration::from_secs(10),
        || async { metric(&scrape(metrics).await, "shoal_client_disk_bytes") >= bytes as f64 },
    )
    .await;
}

/// Reads `rel` in the mount on a blocking thread.
async fn read(m: &Mount, rel: &str) -> Vec<u8> {
    let p = m.path(rel);
    tokio::task::spawn_blocking(move || std::fs::read(p).unwrap())
        .await
        .unwrap()
}

async fn stop(m: Mount) {
    tokio::task::spawn_blocking(move || drop(m)).await.unwrap();
}

/// The data files of the tier under `cache`.
fn data_files(cache: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(cache.join("objects")).unwrap() {
        for f in std::fs::read_dir(sub.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "data") {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_held_whole_is_passed_through_and_survives_a_remount_and_sigkill() {
    let r = rig().await;
    let o = &r.o;
    let body = data(5 * MIB + 123, 1);
    o.put(BUCKET, "big", body.clone());
    let t = r.toml();
    let (m, metrics) = mounted(&t).await;
    // Cold: through the daemon, filling the disk tier.
    assert!(read(&m, "big").await == body);
    assert_eq!(passthrough_opens(&metrics).await, 0.0);
    // Whole now: the next open is passed through, and reads the same bytes.
    tier_holds(&metrics, body.len()).await;
    assert!(read(&m, "big").await == body);
    assert_eq!(passthrough_opens(&metrics).await, 1.0, "passed through");
    let gets = o.stats.snapshot().gets_of(BUCKET, "big");

    // SIGKILL the mount, clear the dead mount point, mount again on the same tier.
    let mut m = m;
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::process::Command::new("fusermount3")
        .args(["-uz"])
        .arg(&m.mnt)
        .status();
    drop(m);
    let (m, metrics) = mounted(&t).await;
    assert!(read(&m, "big").await == body, "byte-exact after the kill");
    assert_eq!(
        passthrough_opens(&metrics).await,
        1.0,
        "passed through after the kill"
    );
    assert_eq!(
        o.stats.snapshot().gets_of(BUCKET, "big"),
        gets,
        "nothing fetched again: the tier survived"
    );
    stop(m).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_block_is_refetched_and_never_handed_to_the_kernel() {
    let r = rig().await;
    let (o, cache) = (&r.o, &r.cache);
    let body = data(3 * MIB, 2);
    o.put(BUCKET, "c", body.clone());
    let t = r.toml();
    let (m, metrics) = mounted(&t).await;
    assert!(read(&m, "c").await == body);
    tier_holds(&metrics, body.len()).await;
    assert!(read(&m, "c").await == body);
    assert_eq!(passthrough_opens(&metrics).await, 1.0);
    stop(m).await;
    // Flip bytes in the middle block of the tier's file, mount again (an empty
    // RAM tier: what the mount has is on disk).
    let files = data_files(cache);
    assert_eq!(files.len(), 1);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"corrupted!", (MIB + 4096) as u64).unwrap();
    drop(f);
    let (m, metrics) = mounted(&t).await;
    // Not passed through (the file changed and fails its check): read through
    // the daemon, the bad block dropped and fetched again, the others from disk.
    assert!(
        read(&m, "c").await == body,
        "the corrupted bytes never reached a reader"
    );
    assert_eq!(passthrough_opens(&metrics).await, 0.0);
    let text = scrape(&metrics).await;
    assert_eq!(
        metric(&text, "shoal_client_blocks_total{source=\"node\"}"),
        1.0,
        "only the bad block came from a node again"
    );
    // Whole and good again: passed through.
    tier_holds(&metrics, body.len()).await;
    assert!(read(&m, "c").await == body);
    assert_eq!(passthrough_opens(&metrics).await, 1.0);
    stop(m).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_object_is_a_new_file_and_an_open_handle_never_mixes_versions() {
    let r = rig().await;
    let (o, cache) = (&r.o, &r.cache);
    let old = data(2 * MIB, 3);
    let new = data(2 * MIB, 4);
    o.put(BUCKET, "v", old.clone());
    let t = r.toml();
    let (m, metrics) = mounted(&t).await;
    assert!(read(&m, "v").await == old);
    tier_holds(&metrics, old.len()).await;
    // Open the whole old version (passed through) and keep it open.
    let p = m.path("v");
    let mut held = tokio::task::spawn_blocking(move || std::fs::File::open(p).unwrap())
        .await
        .unwrap();
    assert_eq!(passthrough_opens(&metrics).await, 1.0);
    o.put(BUCKET, "v", new.clone());
    // Once the metadata ttl (200 ms) has passed, a new open reads the new version.
    wait_for(
        "a new open reads the new version",
        Duration::from_secs(10),
        || async { read(&m, "v").await == new },
    )
    .await;
    // The old handle reads its own version whole, or fails: never a mix.
    let got = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut buf = Vec::new();
        held.read_to_end(&mut buf).map(|_| buf)
    })
    .await
    .unwrap();
    if let Ok(got) = got {
        assert!(got == old, "the old handle read its version");
    }
    assert_eq!(data_files(cache).len(), 2, "each version has its own file");
    stop(m).await;
}
