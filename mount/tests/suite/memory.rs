//! Memory bounds: 32 readers of large files through a real mount and a real node,
//! both with their disk tiers on. The peak resident size of each process (the
//! kernel's VmHWM) must stay within what it was at rest, plus its RAM tier, plus
//! the blocks it may hold in flight, plus a stated overhead for buffers,
//! connections and allocator slack: a disk tier costs page cache, not memory.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;

use crate::common::*;

const MIB: u64 = 1 << 20;
const READERS: usize = 32;
const FILES: usize = 4;
/// Together well over every bound below (384 MiB against bounds of about 200
/// MiB): a tier that kept everything it saw would show.
const FILE_SIZE: usize = 96 << 20;

const NODE_RAM: u64 = 32 * MIB;
/// The node's metadata cache, well under the listings walked (about 1 MiB).
const NODE_METADATA: u64 = MIB / 4;
const LISTED_DIRS: usize = 40;
const LISTED_PER_DIR: usize = 80;
const MOUNT_RAM: u64 = 16 * MIB;
const READ_WINDOW: u64 = 8;
/// Everything not counted as cache or in-flight blocks: per-connection buffers,
/// FUSE request and reply buffers, task stacks, allocator slack. Measured here:
/// 60 to 80 MiB for the mount, 20 to 40 for the node, whatever the data's size
/// (96 and 192 MiB files peak alike).
const OVERHEAD: u64 = 96 * MIB;

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing in /proc/{pid}/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_stays_within_tiers_and_budgets_under_32_readers() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let mut bodies = Vec::new();
    for i in 0..FILES {
        let b = data(FILE_SIZE + i * 4099, 77 + i as u64);
        o.put(BUCKET, &format!("big/f{i}"), b.clone());
        bodies.push(b);
    }
    for d in 0..LISTED_DIRS {
        for f in 0..LISTED_PER_DIR {
            o.put(
                BUCKET,
                &format!("listed/directory-{d:03}/a-long-enough-file-name-{f:05}.bin"),
                bytes::Bytes::from_static(b"x"),
            );
        }
    }
    let node = start_node_with(
        &o,
        dir.path(),
        "n",
        &format!(
            "[cache]\nram_size = \"{}MiB\"\nmetadata_size = \"{}KiB\"\ndisk_size = \"512MiB\"\ndata_dir = \"{}\"\n",
            NODE_RAM / MIB,
            NODE_METADATA / 1024,
            dir.path().join("node-disk").display()
        ),
    );
    let m = Mount::start(
        &mount_toml(
            &o,
            &[&node],
            &format!(
                "[cache]\nram_size = \"{}MiB\"\n[mount]\ndisk_cache = \"{}\"\ndisk_cache_size = \"512MiB\"\n",
                MOUNT_RAM / MIB,
                dir.path().join("mount-disk").display()
            ),
        )
        .replace(
            "[cluster]\n",
            &format!("[cluster]\nread_window = {READ_WINDOW}\n"),
        ),
        BUCKET,
        &[],
    );
    let mount_pid = m.server_pid();
    let node_pid = node.child.id();
    // At rest: mounted, one listing and one small read done.
    assert!(std::fs::read_dir(m.path("big")).unwrap().count() == FILES);
    let (node_rest, _) = rss(node_pid);
    let (mount_rest, _) = rss(mount_pid);

    // A walk of every listing through the node: its metadata cache fills to its
    // bound, evicting, and keeps to it.
    let walked = sh_ok(&format!("find {} -type f | wc -l", q(&m.path("listed")))).await;
    assert_eq!(walked.trim(), (LISTED_DIRS * LISTED_PER_DIR).to_string());
    let text = scrape(&node.addr).await;
    let kept = metric_required(&text, "shoal_node_metadata_bytes");
    assert!(
        kept <= NODE_METADATA as f64,
        "{kept} bytes of metadata kept"
    );
    assert!(
        kept > NODE_METADATA as f64 / 2.0,
        "the cache filled: {kept}"
    );
    assert!(metric_required(&text, "shoal_node_metadata_evictions_total") > 0.0);

    let started = Instant::now();
    let threads: Vec<_> = (0..READERS)
        .map(|r| {
            let path = m.path(&format!("big/f{}", r % FILES));
            let want = bodies[r % FILES].clone();
            std::thread::spawn(move || {
                // Half bypass the page cache, so every reader keeps asking the mount.
                let mut opts = std::fs::OpenOptions::new();
                opts.read(true);
                if r % 2 == 0 {
                    opts.custom_flags(libc::O_DIRECT);
                }
                let mut f = opts.open(&path).unwrap();
                let mut buf = vec![0u8; MIB as usize];
                let mut at = 0;
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    assert_eq!(buf[..n], want[at..at + n], "reader {r} at {at}");
                    at += n;
                }
                assert_eq!(at, want.len(), "reader {r} read the whole file");
            })
        })
        .collect();
    for t in threads {
        tokio::task::spawn_blocking(move || t.join().unwrap())
            .await
            .unwrap();
    }
    let took = started.elapsed();
    let (_, node_peak) = rss(node_pid);
    let (_, mount_peak) = rss(mount_pid);

    // The mount holds its RAM tier plus its in-flight budget (8 read windows of
    // blocks, what adaptive read-ahead may grow to, and the blocks queued for its
    // disk tier); the node its RAM tier plus
    // what the mount can ask of it at once (one block per request, cut through,
    // with the node's prefetch of 4 blocks per stream on top).
    let inflight = (8 * READ_WINDOW + shoal::blocks::tiers::DISK_QUEUE as u64) * MIB;
    let mount_bound = mount_rest + MOUNT_RAM + inflight + OVERHEAD;
    let node_bound = node_rest + NODE_RAM + NODE_METADATA + inflight + OVERHEAD;
    eprintln!(
        "{READERS} readers x {} MiB in {:.1} s: mount rest {} MiB peak {} MiB (bound {} MiB); node rest {} MiB peak {} MiB (bound {} MiB)",
        FILE_SIZE as u64 / MIB,
        took.as_secs_f64(),
        mount_rest / MIB,
        mount_peak / MIB,
        mount_bound / MIB,
        node_rest / MIB,
        node_peak / MIB,
        node_bound / MIB,
    );
    assert!(
        mount_peak <= mount_bound,
        "mount peak RSS {} MiB over its bound {} MiB",
        mount_peak / MIB,
        mount_bound / MIB
    );
    assert!(
        node_peak <= node_bound,
        "node peak RSS {} MiB over its bound {} MiB",
        node_peak / MIB,
        node_bound / MIB
    );
    // The bounds are not vacuous: the caches did fill, and what went through each
    // process is well over its bound.
    let total = (FILES * FILE_SIZE) as u64;
    assert!(total > 3 * (node_bound - node_rest) / 2 && total > 3 * (mount_bound - mount_rest) / 2);
    assert!(mount_peak > mount_rest + MOUNT_RAM / 2);
    assert!(node_peak > node_rest + NODE_RAM / 2);
}
