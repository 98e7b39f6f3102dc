//! A mount held to a memory limit (`--memory-limit`, what a CSI volume's
//! `memoryLimit` gives it along with its unit's `MemoryMax=`), inside a real
//! memory cgroup of that size: the kernel, not the mount, counts what it holds
//! (its heap, its pipes and sockets, its page cache) and would OOM-kill it past
//! the limit.
//!
//! 16 and 64 readers, with direct and with buffered I/O, read 2 GiB of distinct
//! bytes in 1 MiB reads through a node: 16 files of 128 MiB, one each, or a
//! quarter of one each. Each run must end with no OOM kill, the cgroup never
//! at its limit (not once: each time it is, the kernel reclaims or kills),
//! every byte as written. Beside each, the same run by a mount given no limit,
//! in a cgroup that only counts.
//!
//! What shows that the limit is what holds the mount differs with the I/O.
//! Direct reads take their bytes from blocks in the mount: with no limit the
//! mount peaks above the limit (its RAM tier alone is 256 MiB), so the work
//! would not fit without the mount's budgets, and with the limit the mount
//! peaks above its RAM tier's budget, so those budgets were spent, not left
//! idle. Buffered reads have their bytes spliced from the node's socket to
//! the kernel, never into the mount, limited or not: for them it is checked
//! that they were (most of the bytes spliced), so that what they stress is
//! the pipes and replies the budgets bound.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;

use bytes::Bytes;

use crate::common::*;

const MIB: u64 = 1 << 20;
const LIMIT: u64 = 256 * MIB;
const FILES: usize = 16;
const FILE_SIZE: usize = 128 << 20;

/// One run: how many readers, and whether they bypass the page cache.
#[derive(Clone, Copy, Debug)]
struct Case {
    readers: usize,
    direct: bool,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let io = if self.direct { "direct" } else { "buffered" };
        write!(f, "{} readers, {io} I/O", self.readers)
    }
}

/// Each reader's file and range: readers beyond [`FILES`] split the files, so
/// every byte is read once and by one reader.
fn share(r: usize, readers: usize) -> (usize, u64, u64) {
    let parts = (readers / FILES).max(1);
    let len = (FILE_SIZE / parts) as u64;
    let part = (r / FILES) as u64;
    (r % FILES, part * len, (part + 1) * len)
}

/// Reads every reader's share through `m` at once, each checked byte for
/// byte as it goes.
async fn read_all(m: &Mount, bodies: &[Bytes], case: Case) {
    let threads: Vec<_> = (0..case.readers)
        .map(|r| {
            let (file, start, end) = share(r, case.readers);
            let path = m.path(&format!("lim/f{file:02}"));
            let want = bodies[file].clone();
            std::thread::spawn(move || {
                let mut opts = std::fs::OpenOptions::new();
                opts.read(true);
                if case.direct {
                    opts.custom_flags(libc::O_DIRECT);
                }
                let mut f = opts.open(&path).unwrap();
                f.seek(SeekFrom::Start(start)).unwrap();
                let mut buf = vec![0u8; MIB as usize];
                let mut at = start as usize;
                while at < end as usize {
                    let n = f.read(&mut buf).unwrap();
                    assert!(n > 0, "reader {r}: {} ends at {at}", path.display());
                    let n = n.min(end as usize - at);
                    assert!(
                        buf[..n] == want[at..at + n],
                        "reader {r}: bytes differ at {at}"
                    );
                    at += n;
                }
            })
        })
        .collect();
    for t in threads {
        tokio::task::spawn_blocking(move || t.join().unwrap())
            .await
            .unwrap();
    }
}

/// What one run came to.
#[derive(Debug)]
struct Run {
    used: MemUse,
    /// Of the bytes the mount returned, those spliced from a node.
    spliced: f64,
    read: f64,
    /// What the mount asked of the node: more than it read is blocks fetched
    /// again (read-ahead pushed out before it was read).
    fetched: f64,
}

/// One run of `case` by a mount in a fresh cgroup (held to `LIMIT` when
/// `limited`, with the mount given the same limit); what the kernel counted.
async fn run(
    o: &Origin,
    node: &NodeProcess,
    bodies: &[Bytes],
    case: Case,
    limited: bool,
) -> Option<Run> {
    let cg = MemCgroup::required("shoal-mount-memory", limited.then_some(LIMIT))?;
    let limit = format!("--memory-limit={LIMIT}");
    let metrics = free_addr();
    let mut args = vec![format!("--metrics-addr={metrics}")];
    args.extend(limited.then_some(limit));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut m = Mount::start_in(&cg, &mount_toml(o, &[node], ""), BUCKET, &args);
    let server = m.server_pid();
    assert!(cg.pids().contains(&server), "the server is in the cgroup");
    let t0 = Instant::now();
    read_all(&m, bodies, case).await;
    let took = t0.elapsed();
    let used = cg.usage();
    let text = scrape(&metrics).await;
    let run = Run {
        used,
        spliced: metric_required(&text, "shoal_mount_spliced_bytes_total"),
        read: metric_required(&text, "shoal_mount_read_bytes_total"),
        fetched: metric_required(&text, "shoal_client_bytes_total{source=\"node\"}"),
    };
    let replaced = m.server_pid() != server;
    m.stop(std::time::Duration::from_secs(10));
    eprintln!(
        "{case}, {}: peak {} MiB, limit met {} times, {} OOM kills, {:.0}% spliced, {:.2}x fetched ({:?}, {:.1} s)",
        if limited { "256 MiB limit" } else { "no limit" },
        used.peak / MIB,
        used.hit_limit,
        used.oom_kills,
        100.0 * run.spliced / run.read,
        run.fetched / run.read,
        cg.version(),
        took.as_secs_f64(),
    );
    assert!(!replaced, "{case}: the server was replaced: {used:?}");
    Some(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_holds_the_mount_in_a_cgroup_of_its_size() {
    if MemCgroup::required("shoal-mount-memory-probe", None).is_none() {
        return;
    }
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<Bytes> = (0..FILES)
        .map(|i| {
            let b = data(FILE_SIZE, 300 + i as u64);
            o.put(BUCKET, &format!("lim/f{i:02}"), b.clone());
            b
        })
        .collect();
    let node = start_node_with(&o, dir.path(), "n", "[cache]\nram_size = \"64MiB\"\n");
    let mut runs = Vec::new();
    for readers in [16, 64] {
        for direct in [true, false] {
            let case = Case { readers, direct };
            let Some(held) = run(&o, &node, &bodies, case, true).await else {
                return;
            };
            let free = run(&o, &node, &bodies, case, false).await.unwrap();
            runs.push((case, held, free));
        }
    }
    let ram = shoal_mount::memory::Budgets::derive(LIMIT, MIB, 256 * MIB, 8, false)
        .unwrap()
        .ram;
    // Every figure is printed before any is judged.
    for (case, held, free) in runs {
        let (h, f) = (held.used, free.used);
        assert_eq!(h.oom_kills, 0, "{case}: OOM-killed under the limit: {h:?}");
        assert!(
            h.hit_limit == 0 && h.peak < LIMIT,
            "{case}: the cgroup met its limit of {} MiB: {h:?}",
            LIMIT / MIB
        );
        // Read-ahead shared by the readers: blocks fetched ahead are read
        // before they are pushed out of the RAM tier (each reader fetching a
        // window of its own fetched 1.35x with 16 readers, 2.5x with 64).
        for r in [&held, &free] {
            assert!(
                r.fetched <= 1.25 * r.read,
                "{case}: fetched {:.2}x what was read",
                r.fetched / r.read
            );
        }
        if case.direct {
            assert!(
                f.peak > LIMIT,
                "{case}: with no limit the mount peaked at {} MiB, not above {} MiB: the limit held nothing",
                f.peak / MIB,
                LIMIT / MIB
            );
            assert!(
                h.peak > ram,
                "{case}: the limited mount peaked at {} MiB, under its RAM tier's {} MiB: its budgets were never spent",
                h.peak / MIB,
                ram / MIB
            );
        } else {
            for r in [&held, &free] {
                assert!(
                    r.spliced >= 0.75 * r.read,
                    "{case}: {} of {} bytes spliced",
                    r.spliced,
                    r.read
                );
            }
        }
    }
}
