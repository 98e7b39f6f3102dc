//! A real `shoal-node` whose disk tier lives on a 4 MiB tmpfs: the disk fills, then
//! turns read-only, then unreadable under the running node. Every read stays
//! byte-exact (from RAM, what is left on disk, or the origin), each failure is
//! counted, logged once a minute, and the node never stops.
//!
//! Needs root (it mounts the tmpfs); the node runs without the capabilities that
//! let root ignore file permissions, so `chmod 000` stops it as it would a service
//! user.

use std::path::Path;
use std::process::Command;

use crate::common::*;
use shoal::store::{ByteRange, GetObject};

const MIB: u64 = 1 << 20;

struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount")
            .success();
        assert!(
            ok,
            "mounting a tmpfs at {} failed: this test needs root",
            at.display()
        );
        Tmpfs(at.to_owned())
    }

    fn remount(&self, opt: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{opt}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount {opt}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Reads `key` through the node a block and a bit at a time (ranges that straddle
/// blocks), checking every byte.
async fn read_all(node: &NodeProcess, key: &str, body: &bytes::Bytes) {
    let c = client(node.socket_addr());
    let len = body.len() as u64;
    let mut at = 0;
    while at < len {
        let end = (at + MIB + 4097).min(len);
        let (_, got) = c
            .get_bytes(&GetObject::new(BUCKET, key).range(ByteRange::span(at, end)))
            .await
            .unwrap_or_else(|e| panic!("reading {key} {at}..{end}: {e}"));
        assert_eq!(got.len() as u64, end - at, "{key} {at}..{end}: short");
        assert!(
            got == body.slice(at as usize..end as usize),
            "{key} {at}..{end}: wrong bytes"
        );
        at = end;
    }
}

/// Block files under `dir` written since `t`.
fn written_since(dir: &Path, t: std::time::SystemTime) -> usize {
    let Ok(subdirs) = std::fs::read_dir(dir) else {
        return 0;
    };
    subdirs
        .flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flat_map(|files| files.flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "blk"))
        .filter(|f| {
            f.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= t)
        })
        .count()
}

async fn counts(node: &NodeProcess) -> (f64, f64) {
    let text = scrape(&node.addr).await;
    (
        metric_required(&text, "shoal_node_disk_write_failures_total"),
        metric_required(&text, "shoal_node_disk_read_failures_total"),
    )
}

/// The disk counters once `ok` holds of them: a block reaches the disk (or fails
/// to) just after its answer has gone, so counters read right after the reads
/// could miss the last writes.
async fn counts_when(
    node: &NodeProcess,
    what: &str,
    ok: impl Fn((f64, f64)) -> bool,
) -> (f64, f64) {
    let t0 = std::time::Instant::now();
    loop {
        let c = counts(node).await;
        if ok(c) {
            return c;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{what}: not within 20 s; (write, read) failures counted: {c:?}; node log: {:?}",
            node.log_lines("disk")
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_only_or_unreadable_disk_tier_never_fails_a_read() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let fs = Tmpfs::mount(&data_dir, "4m");
    let toml = node_toml(
        &origin,
        "",
        &format!(
            "[cache]\nram_size = \"4MiB\"\ndisk_size = \"64MiB\"\ndata_dir = \"{}\"",
            data_dir.display()
        ),
    );
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, toml).unwrap();
    let node = NodeProcess::spawn_under(
        &[
            "setpriv",
            "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search",
            "--",
        ],
        &cfg,
    );
    let start_warning = node.wait_log_lines("larger than the filesystem", 1);
    assert_eq!(
        start_warning.len(),
        1,
        "disk_size above the filesystem is reported at start"
    );

    // Full: 16 MiB of blocks into 4 MiB of disk.
    let a = data(16 * MIB as usize, 1);
    origin.put(BUCKET, "a", a.clone());
    read_all(&node, "a", &a).await;
    read_all(&node, "a", &a).await;
    let (full_writes, _) =
        counts_when(&node, "writes to the full disk counted", |(w, _)| w > 0.0).await;
    let text = scrape(&node.addr).await;
    let on_disk = metric(&text, "shoal_node_cache_bytes{tier=\"disk\"}");
    assert!(
        on_disk > 0.0 && on_disk <= 4.0 * MIB as f64,
        "the tier shrank to the disk: {on_disk}"
    );
    println!("full disk: {full_writes} block writes failed; the tier holds {on_disk} bytes");

    // Read-only under the node: what is on disk still serves, nothing new lands.
    fs.remount("ro");
    let b = data(6 * MIB as usize, 2);
    origin.put(BUCKET, "b", b.clone());
    read_all(&node, "b", &b).await;
    read_all(&node, "a", &a).await;
    let _ = counts_when(&node, "writes to the read-only disk counted", |(w, _)| {
        w > full_writes
    })
    .await;

    // Unreadable: every block on disk fails to read, and is fetched instead.
    let writable = std::time::SystemTime::now();
    fs.remount("rw");
    read_all(&node, "b", &b).await;
    // A block reaches the disk after its answer: on a busy machine b's could
    // still be on their way, would fail once the directory is closed (evicting
    // what is there first), and leave nothing on disk to fail a read. So b's
    // writes end first.
    shoal_testkit::wait_for(
        "the node's disk writes to end",
        std::time::Duration::from_secs(20),
        || async { metric_required(&scrape(&node.addr).await, "shoal_node_disk_writes") == 0.0 },
    )
    .await;
    assert!(
        written_since(&data_dir.join("blocks"), writable) > 0,
        "no block written to the disk tier since it became writable"
    );
    // The RAM tier could hold every block the disk does (which blocks each keeps
    // depends on timing), and a read answered from RAM never touches the disk.
    // A restarted node has only its disk: each block it serves is read there.
    let w = node.wait_log_lines("disk tier cannot write", 1);
    assert_eq!(w.len(), 1, "one line for every failed write: {w:?}");
    drop(node);
    let mut node = NodeProcess::spawn_under(
        &[
            "setpriv",
            "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search",
            "--",
        ],
        &cfg,
    );
    node.wait_log_lines("disk tier index read", 1);
    std::fs::set_permissions(
        data_dir.join("blocks"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    read_all(&node, "b", &b).await;
    read_all(&node, "a", &a).await;
    let (writes, reads) = counts_when(
        &node,
        "unreadable and unwritable blocks counted",
        |(w, r)| r > 0.0 && w > 0.0,
    )
    .await;
    println!("unreadable after a restart: {writes} writes and {reads} reads failed");

    // One line each for the restarted node's run, and still serving.
    let w = node.wait_log_lines("disk tier cannot write", 1);
    let r = node.wait_log_lines("disk tier cannot read", 1);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "the node is running"
    );
    std::fs::set_permissions(
        data_dir.join("blocks"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    drop(node);
}
