//! A node started on a disk tier of many blocks serves at once: /healthz and a
//! block from disk while its index scan is still to read that block's file (the
//! block looked up by its file's name, no origin GET), and every block from disk
//! once the scan is done. The scan is held at a gate the test opens, so "before
//! the scan" is an order of events, not a race against the machine's speed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use shoal::blocks::{block_path, decode_header, encode_header, BlockKey};
use shoal::store::GetObject;

use crate::common::*;

/// Small blocks, so that the tier holds many without much disk.
const BLOCKS: usize = 60_000;
const LEN: usize = 512;
const BLOCK_SIZE: u64 = 4096;

fn object(i: usize) -> String {
    format!("many/{i:06}")
}

/// Every `.blk` file under `blocks`, in the order a directory walk meets them
/// (the order the node's scan reads them in).
fn walk(blocks: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(blocks).unwrap().flatten() {
        if !sub.path().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "blk") {
                out.push(f.path());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_its_disk_tier_before_its_index_is_read() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let blocks = data_dir.join("blocks");
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        node_toml(
            &origin,
            &format!("block_size = {BLOCK_SIZE}"),
            &format!(
                "[cache]\nram_size = \"1MiB\"\ndisk_size = \"1GiB\"\ndata_dir = \"{}\"",
                data_dir.display()
            ),
        ),
    )
    .unwrap();
    let bodies: Vec<bytes::Bytes> = (0..BLOCKS).map(|i| data(LEN, i as u64)).collect();
    let etags: Vec<String> = (0..BLOCKS)
        .map(|i| origin.put(BUCKET, &object(i), bodies[i].clone()))
        .collect();

    // One block written by a node itself: its file names the block exactly as
    // the node does (the ETag's form), and the rest are written the same way.
    let node = NodeProcess::spawn(&cfg);
    let (_, got) = client(node.socket_addr())
        .get_bytes(&GetObject::new(BUCKET, object(0)))
        .await
        .unwrap();
    assert_eq!(got, bodies[0]);
    let first = wait_for_value("the first block file", Duration::from_secs(10), || async {
        walk(&blocks).pop()
    })
    .await;
    drop(node);
    let written = decode_header(&std::fs::read(&first).unwrap()).unwrap().key;
    let quoted = written.etag.starts_with('"');
    let file_len = std::fs::metadata(&first).unwrap().len();
    assert_eq!(written.etag.trim_matches('"'), etags[0]);
    let mut of_path = HashMap::new();
    let made = Instant::now();
    for i in 1..BLOCKS {
        let etag = if quoted {
            format!("\"{}\"", etags[i])
        } else {
            etags[i].clone()
        };
        let key = BlockKey::new(BUCKET, &object(i), &etag, BLOCK_SIZE, 0);
        let path = block_path(&blocks, &key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut file = encode_header(&key, &bodies[i]);
        file.extend_from_slice(&bodies[i]);
        std::fs::write(&path, file).unwrap();
        of_path.insert(path, i);
    }
    eprintln!("{BLOCKS} block files written in {:?}", made.elapsed());
    // The gate: a named pipe where a block file would be, in the directory the
    // scan reads first. Opening it waits for a writer, so the scan reads no
    // further until the test opens it.
    let first_dir = std::fs::read_dir(&blocks)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap();
    let gate = first_dir.join(format!("{:032x}.blk", 0));
    let made_fifo = std::process::Command::new("mkfifo")
        .arg(&gate)
        .status()
        .unwrap();
    assert!(made_fifo.success(), "mkfifo {}", gate.display());
    let order = walk(&blocks);
    let at_gate = order.iter().position(|p| *p == gate).unwrap();
    // The block the scan reaches last, well past the gate.
    let (at_last, last) = order
        .iter()
        .enumerate()
        .rev()
        .find_map(|(n, p)| of_path.get(p).map(|&i| (n, i)))
        .unwrap();
    assert!(at_last > at_gate, "the gate is not before the last block");

    origin.stats.reset();
    let started = Instant::now();
    let node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let listening = started.elapsed();
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert!(health.status().is_success(), "{}", health.status());
    let healthy = started.elapsed();
    let c = client(addr);
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, object(last)))
        .await
        .unwrap();
    let served = started.elapsed();
    assert_eq!(got, bodies[last]);
    // Served with the scan held at the gate, short of the block's file: found
    // by its name.
    let text = scrape(addr).await;
    let read_then = metric(&text, "shoal_node_disk_index_blocks");
    assert_eq!(metric(&text, "shoal_node_disk_index_done"), 0.0);
    assert!(
        read_then <= at_gate as f64,
        "{read_then} files read, though the scan is held at file {at_gate}"
    );
    assert_eq!(
        origin.stats.snapshot().object_gets(),
        0,
        "the block was fetched from the origin though its file is on disk"
    );

    // Open, and shut at once: the scan reads nothing there, removes the pipe as
    // no block file, and goes on.
    let opened = Instant::now();
    tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&gate)
            .map(drop)
    })
    .await
    .unwrap()
    .unwrap();
    let scan = wait_for_value("the index scan's end", Duration::from_secs(120), || async {
        let text = scrape(addr).await;
        let took = metric(&text, "shoal_node_disk_index_rebuild_seconds");
        (took > 0.0).then_some(took)
    })
    .await;
    let rest = opened.elapsed();
    let text = scrape(addr).await;
    eprintln!(
        "index first: {BLOCKS} blocks; listening after {listening:?}, /healthz after {healthy:?}, \
         the block the scan reads last served after {served:?} ({read_then} files read by then); \
         the scan took {scan:.3} s with the gate, seen done {rest:?} after it opened"
    );
    assert_eq!(metric(&text, "shoal_node_disk_index_done"), 1.0);
    assert_eq!(
        metric(&text, "shoal_node_disk_index_blocks"),
        BLOCKS as f64,
        "blocks indexed"
    );
    assert_eq!(
        metric(&text, "shoal_node_disk_files_removed_at_start"),
        1.0,
        "the gate, and nothing else, removed as no block file"
    );

    // Every block from disk once the scan is done: none counted twice, none
    // fetched.
    let read = Instant::now();
    let checked = futures_util::stream::iter(0..BLOCKS)
        .map(|i| {
            let (c, want) = (c.clone(), bodies[i].clone());
            async move {
                let (_, got) = c.get_bytes(&GetObject::new(BUCKET, object(i))).await?;
                assert_eq!(got, want, "{} differs", object(i));
                Ok::<_, shoal::store::StoreError>(())
            }
        })
        .buffer_unordered(8)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    let text = scrape(addr).await;
    eprintln!(
        "all {checked} blocks read back in {:?}; origin GETs {}",
        read.elapsed(),
        origin.stats.snapshot().object_gets()
    );
    assert_eq!(checked, BLOCKS);
    assert_eq!(origin.stats.snapshot().object_gets(), 0);
    // Counted once each, whether the scan or a request found it first.
    assert_eq!(
        metric(&text, "shoal_node_cache_bytes{tier=\"disk\"}"),
        (BLOCKS as u64 * file_len) as f64
    );
}
