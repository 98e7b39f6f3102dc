//! A node keeps what is hot through a scan: one node (32 MiB of RAM, 128 MiB of
//! disk) reads a working set of 8 x 8 MiB three times, then one pass over 50 x
//! 16 MiB other objects (5x the cache: a nightly scan, a backfill), then the
//! working set again; what the origin sends for that last read is what the
//! scan cost. Under LRU it is everything; under S3-FIFO (the default) next to
//! nothing. A pinned prefix read once costs nothing after a scan of 20x its
//! node's cache.

use std::time::Duration;

use bytes::Bytes;
use shoal::store::GetObject;

use crate::common::*;

const MB: usize = 1 << 20;

/// A node over `origin` with these tiers and `rest` (rules, policy).
async fn node(
    origin: &Origin,
    dir: &std::path::Path,
    ram: &str,
    disk: &str,
    cache_extra: &str,
    rest: &str,
) -> NodeProcess {
    let toml = node_toml(
        origin,
        "",
        &format!(
            "[cache]\nram_size = \"{ram}\"\ndisk_size = \"{disk}\"\ndata_dir = \"{}\"\n{cache_extra}\n{rest}",
            dir.join("data").display()
        ),
    );
    let node = NodeProcess::start(dir, "node", &toml);
    // An empty disk tier's index is read at once; until then it never evicts.
    wait_for("the disk index read", Duration::from_secs(10), || async {
        metric_required(
            &scrape(node.socket_addr()).await,
            "shoal_node_disk_index_done",
        ) == 1.0
    })
    .await;
    node
}

async fn read(node: &NodeProcess, key: &str, want: &Bytes) {
    let (_, got) = client(node.socket_addr())
        .get_bytes(&GetObject::new(BUCKET, key))
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {e}"));
    assert!(got == *want, "{key}: other bytes");
}

/// `n` objects `PREFIX/i` of `mb` MiB each, put at the origin.
fn objects(origin: &Origin, prefix: &str, n: u64, mb: usize, seed: u64) -> Vec<(String, Bytes)> {
    (0..n)
        .map(|i| {
            let (k, b) = (format!("{prefix}/{i}"), data(mb * MB, seed + i));
            origin.put(BUCKET, &k, b.clone());
            (k, b)
        })
        .collect()
}

/// 50 objects `scan/i` of 16 MiB, put at the origin: distinct objects of the
/// same bytes, distinct blocks to a cache.
fn scan_objects(origin: &Origin, seed: u64) -> Bytes {
    let scan = data(16 * MB, seed);
    for i in 0..50 {
        origin.put(BUCKET, &format!("scan/{i}"), scan.clone());
    }
    scan
}

/// One pass over [`scan_objects`].
async fn scan_once(node: &NodeProcess, scan: &Bytes) {
    for i in 0..50 {
        read(node, &format!("scan/{i}"), scan).await;
    }
}

fn sent(origin: &Origin) -> u64 {
    origin.stats.snapshot().body_bytes_sent
}

/// The working set's second read after a scan, as a share of its size.
async fn working_set_after_a_scan(policy: &str) -> f64 {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let hot = objects(&origin, "hot", 8, 8, 100);
    let scan = scan_objects(&origin, 7);
    let node = node(
        &origin,
        dir.path(),
        "32MiB",
        "128MiB",
        &format!("policy = \"{policy}\""),
        "",
    )
    .await;
    for _ in 0..3 {
        for (k, b) in &hot {
            read(&node, k, b).await;
        }
    }
    scan_once(&node, &scan).await;
    let before = sent(&origin);
    for (k, b) in &hot {
        read(&node, k, b).await;
    }
    let share = (sent(&origin) - before) as f64 / (64 * MB) as f64;
    eprintln!(
        "{policy}: the working set read again after the scan cost the origin {share:.3}x its size"
    );
    share
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_five_times_the_cache_leaves_the_working_set_in_it() {
    let s3fifo = working_set_after_a_scan("s3-fifo").await;
    assert!(s3fifo <= 0.10, "S3-FIFO: {s3fifo:.3}x");
    // The same node evicting by LRU loses it: the scan is what is measured.
    let lru = working_set_after_a_scan("lru").await;
    assert!(lru >= 0.9, "LRU: {lru:.3}x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_prefix_outlasts_a_scan_of_twenty_times_the_cache() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let pinned = objects(&origin, "model", 2, 4, 200);
    // 8 MiB of RAM and 32 MiB of disk: 20x is 800 MiB.
    let scan = scan_objects(&origin, 8);
    let rules = format!(
        "[[rules]]\npattern = \"{BUCKET}/model/**\"\npin = true\n[[rules]]\npattern = \"**\"\n"
    );
    let node = node(&origin, dir.path(), "8MiB", "32MiB", "", &rules).await;
    // Read once: pinned blocks need no second read to be kept.
    for (k, b) in &pinned {
        read(&node, k, b).await;
    }
    scan_once(&node, &scan).await;
    let (gets, before) = (origin.stats.snapshot().object_gets(), sent(&origin));
    for (k, b) in &pinned {
        read(&node, k, b).await;
    }
    let after = origin.stats.snapshot();
    assert_eq!(
        (after.object_gets() - gets, after.body_bytes_sent - before),
        (0, 0),
        "the pinned prefix read again after the scan"
    );
    // The scan itself was cached and evicted meanwhile: the tiers were full.
    let text = scrape(node.socket_addr()).await;
    assert!(metric_required(&text, "shoal_node_evictions_total{tier=\"disk\"}") > 0.0);
}
