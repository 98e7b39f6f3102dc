//! The disk tier under SIGKILL: a node killed again and again while it fills its
//! disk tier under load never serves a wrong byte afterwards, cleans up what a
//! kill left half written, and keeps every block a kill left whole (a block is
//! written to a temporary file and renamed into place, so a block file is whole
//! or not there).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use shoal::blocks::{decode_block, decode_header};
use shoal::store::{ByteRange, GetObject};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 256 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kills_while_filling_the_disk_tier() {
    let kills: usize = std::env::var("SHOAL_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        node_toml(
            &origin,
            &format!("block_size = {BLOCK}"),
            &format!(
                "[cache]\nram_size = \"4MiB\"\ndisk_size = \"48MiB\"\ndata_dir = \"{}\"",
                dir.path().join("data").display()
            ),
        ),
    )
    .unwrap();
    let objects: Vec<(String, bytes::Bytes)> = (0..8)
        .map(|i| {
            (
                format!("crash/{i}"),
                data(6 * MIB as usize + i * 1000, 500 + i as u64),
            )
        })
        .collect();
    let etags: Vec<String> = objects
        .iter()
        .map(|(k, b)| origin.put(BUCKET, k, b.clone()))
        .collect();
    let blocks_dir = dir.path().join("data").join("blocks");
    // What the kill before each start left: nothing before the first.
    let mut left = Census::default();
    let mut survived = 0.0;
    let mut rebuilds = Vec::new();
    let mut removed = 0.0;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..kills {
        let mut node = NodeProcess::spawn(&cfg);
        let addr = node.socket_addr();
        // The node serves while its index is read; what the scan found is
        // known once it is done.
        let text = indexed(addr).await;
        survived += kept_what_the_kill_left(&text, &left, round);
        rebuilds.push(metric(&text, "shoal_node_disk_index_rebuild_seconds"));
        removed += metric(&text, "shoal_node_disk_files_removed_at_start");
        // Load: a few readers of random ranges, each checked, while a kill comes at
        // a random moment.
        let c = client(addr);
        let mut readers = Vec::new();
        for _ in 0..3 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (k, b) = objects[(rng % objects.len() as u64) as usize].clone();
            let a = (rng >> 8) % (b.len() as u64 - MIB);
            let c = c.clone();
            readers.push(tokio::spawn(async move {
                // Reads cut by the kill may fail; a read that succeeds must be exact.
                if let Ok((_, got)) = c
                    .get_bytes(&GetObject::new(BUCKET, &k).range(ByteRange::span(a, a + MIB)))
                    .await
                {
                    assert!(
                        got == b.slice(a as usize..(a + MIB) as usize),
                        "wrong bytes from {k} at {a}"
                    );
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(20 + (rng % 150))).await;
        node.child.kill().unwrap();
        node.child.wait().unwrap();
        for r in readers {
            r.await.unwrap();
        }
        left = census(&blocks_dir);
    }
    // After the last kill: what survived is whole and the objects' own bytes,
    // and everything reads back exactly from it.
    let node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let text = indexed(addr).await;
    survived += kept_what_the_kill_left(&text, &left, kills);
    let on_disk = metric(&text, "shoal_node_disk_blocks_at_start");
    let files = census(&blocks_dir).blocks;
    assert_eq!(
        files.len() as f64,
        on_disk,
        "block files on disk, and blocks the index holds"
    );
    let per_object = objects[0].1.len().div_ceil(BLOCK as usize);
    assert!(
        on_disk <= (objects.len() * per_object) as f64,
        "{on_disk} blocks on disk, more than the objects have"
    );
    for f in &files {
        let buf = std::fs::read(f).unwrap();
        let key = decode_header(&buf)
            .unwrap_or_else(|e| panic!("{}: {e:?}", f.display()))
            .key;
        let data = decode_block(&buf, &key)
            .unwrap_or_else(|e| panic!("{} is not a whole block: {e:?}", f.display()));
        let i = objects
            .iter()
            .position(|(k, _)| *k == *key.key)
            .unwrap_or_else(|| panic!("{}: a block of {}", f.display(), key.key));
        assert_eq!(&*key.etag, etags[i].trim_matches('"'), "{}", f.display());
        let at = (key.index * key.block_size) as usize;
        assert!(
            data == &objects[i].1[at..at + data.len()],
            "{}: block {} of {} holds other bytes",
            f.display(),
            key.index,
            key.key
        );
    }
    // Something must have outlived a kill, or none of this was tested.
    assert!(
        survived > 0.0,
        "no block file was left whole by any of {kills} kills"
    );
    let c = client(addr);
    let started = Instant::now();
    for (k, b) in &objects {
        let (_, got) = c.get_bytes(&GetObject::new(BUCKET, k)).await.unwrap();
        assert!(got == *b, "{k} differs after {kills} kills");
    }
    let text = scrape(addr).await;
    let checksum_failures = metric(&text, "shoal_node_checksum_failures_total");
    // The final reads' blocks reach the disk after their answers: let those
    // writes end, so only what the kills left is judged.
    wait_for(
        "the last block writes end",
        Duration::from_secs(10),
        || async {
            walkdir(&dir.path().join("data"))
                .iter()
                .all(|p| !p.ends_with(".tmp"))
        },
    )
    .await;
    drop(node);
    // No temporary files survive a start.
    let leftovers = walkdir(&dir.path().join("data"))
        .into_iter()
        // The versions log is the tier's too (what its blocks are versions of).
        .filter(|p| !p.ends_with(".blk") && !p.ends_with("/versions.log"))
        .count();
    rebuilds.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "crash loop: {kills} kills; index rebuild max {:.1} ms, median {:.1} ms; {removed} partial files removed at starts; \
         {on_disk} blocks on disk at the end; {checksum_failures} checksum failures at the final read; read back in {:?}",
        rebuilds.last().unwrap_or(&0.0) * 1e3,
        rebuilds.get(rebuilds.len() / 2).unwrap_or(&0.0) * 1e3,
        started.elapsed()
    );
    assert_eq!(leftovers, 0, "non-block files left in the data dir");
    assert_eq!(checksum_failures, 0.0, "a block file read back bad");
}

/// A tier's `blocks` directory as a kill left it: block files (whole, once
/// renamed into place) and anything else (temporary files of writes cut off).
#[derive(Default)]
struct Census {
    blocks: Vec<PathBuf>,
    other: usize,
}

fn census(blocks: &Path) -> Census {
    let mut c = Census::default();
    for sub in std::fs::read_dir(blocks).into_iter().flatten().flatten() {
        if !sub.path().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "blk") {
                c.blocks.push(f.path());
            } else {
                c.other += 1;
            }
        }
    }
    c
}

/// Checks that a node started after kill `round` kept every whole block file
/// that kill left, and removed only what it left half written; the blocks kept.
fn kept_what_the_kill_left(text: &str, left: &Census, round: usize) -> f64 {
    let at_start = metric(text, "shoal_node_disk_blocks_at_start");
    // Nothing is read before the scan ends: whatever the tier evicted by then it
    // evicted to fit its capacity at start.
    let evicted = metric(text, "shoal_node_evictions_total{tier=\"disk\"}");
    assert_eq!(
        metric(text, "shoal_node_disk_files_removed_at_start"),
        left.other as f64,
        "after kill {round}: files removed at start, of {} temporary ones left",
        left.other
    );
    assert_eq!(
        at_start + evicted,
        left.blocks.len() as f64,
        "after kill {round}: {at_start} blocks indexed and {evicted} evicted at start, of {} \
         whole block files left",
        left.blocks.len()
    );
    at_start
}

/// The node's metrics once its disk tier's index scan is done and what it found
/// is published (the scan reports itself done a moment before its figures).
async fn indexed(addr: std::net::SocketAddr) -> String {
    wait_for_value("the index scan's end", Duration::from_secs(30), || async {
        let text = scrape(addr).await;
        (metric(&text, "shoal_node_disk_index_done") == 1.0
            && metric(&text, "shoal_node_disk_index_rebuild_seconds") > 0.0)
            .then_some(text)
    })
    .await
}

fn walkdir(p: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walkdir(&path));
            } else {
                out.push(path.display().to_string());
            }
        }
    }
    out
}
