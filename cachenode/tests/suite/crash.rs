//! The disk tier under SIGKILL: a node killed again and again while it fills its
//! disk tier under load never serves a wrong byte afterwards, and cleans up what a
//! kill left half written.

use std::time::{Duration, Instant};

use crate::common::*;
use shoal::store::{ByteRange, GetObject};

const MIB: u64 = 1 << 20;

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
            "block_size = \"256KiB\"",
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
    for (k, b) in &objects {
        origin.put(BUCKET, k, b.clone());
    }
    let mut rebuilds = Vec::new();
    let mut removed = 0.0;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..kills {
        let mut node = NodeProcess::spawn(&cfg);
        let addr = node.socket_addr();
        // The node serves while its index is read; what the scan found is
        // known once it is done.
        let text = indexed(addr).await;
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
        let _ = round;
    }
    // After the last kill: everything reads back exactly, from whatever survived.
    let node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let c = client(addr);
    let started = Instant::now();
    for (k, b) in &objects {
        let (_, got) = c.get_bytes(&GetObject::new(BUCKET, k)).await.unwrap();
        assert!(got == *b, "{k} differs after {kills} kills");
    }
    let text = indexed(addr).await;
    let checksum_failures = metric(&text, "shoal_node_checksum_failures_total");
    let on_disk = metric(&text, "shoal_node_disk_blocks_at_start");
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
}

/// The node's metrics once its disk tier's index scan is done.
async fn indexed(addr: std::net::SocketAddr) -> String {
    wait_for_value("the index scan's end", Duration::from_secs(30), || async {
        let text = scrape(addr).await;
        (metric(&text, "shoal_node_disk_index_done") == 1.0).then_some(text)
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
