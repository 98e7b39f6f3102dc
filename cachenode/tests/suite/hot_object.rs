//! A hot object read cold by many readers at once costs the origin once. Bounded
//! load spills a busy owner's blocks to other nodes; a node that misses a block
//! it does not own asks the block's owner with `Cache-Control: only-if-cached`
//! first, marked as an owner fill, and the owner answers as it answers its own
//! readers (from its cache, or from its one fetch of the block, started or
//! joined), so every spill of a block shares the owner's one origin fetch, even
//! one that asks before the owner's own readers get to the block. Nodes run in
//! eventual mode (each fetches its own misses), as the Kubernetes manifests run
//! them; each has an origin of its own, so every origin byte is counted where it
//! went.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use shoal::cluster::ClusterReader;

use crate::common::*;

const MIB: u64 = 1 << 20;
const KEY: &str = "hot/object.bin";
const READERS: usize = 32;

/// Reads the whole object through `reader`, every chunk checked against
/// `body`: how many bytes matched, or the first difference.
async fn read_checked(reader: Arc<ClusterReader>, body: Bytes) -> Result<u64, String> {
    let h = reader
        .open(BUCKET, KEY, None)
        .await
        .map_err(|e| format!("open: {e}"))?;
    let mut s = Box::pin(h.stream(0, body.len() as u64));
    let mut at = 0usize;
    while let Some(c) = s.next().await {
        let c = c.map_err(|e| format!("read at {at}: {e}"))?;
        if body.get(at..at + c.len()) != Some(&c[..]) {
            return Err(format!("{} bytes at {at} differ", c.len()));
        }
        at += c.len();
    }
    match at == body.len() {
        true => Ok(at as u64),
        false => Err(format!("{at} bytes of {}", body.len())),
    }
}

/// The `[cluster]` of `nodes` with every setting at its default but `extra`.
fn default_cluster(nodes: &[&str], extra: &str) -> String {
    let ids: Vec<String> = nodes.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "[cluster]\nnodes = [{}]\n{extra}\n[cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\n\
         secret_access_key = \"{NODE_SECRET}\"\n",
        ids.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_object_costs_the_origin_once_at_the_defaults_with_a_near_origin() {
    hot_object(20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_object_costs_the_origin_once_at_the_defaults_with_a_far_origin() {
    hot_object(200).await;
}

/// 3 nodes at their defaults and 32 cold readers at once of one 64 MiB object,
/// each origin answering `first_byte_ms` late: the origins send the object
/// about once, whatever their latency, and every reader gets it byte-exact.
async fn hot_object(first_byte_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    // The nodes' origins and the readers' own (their fallback), each holding
    // the same bytes: the same ETag.
    let mut origins = Vec::new();
    for _ in 0..4 {
        origins.push(origin().await);
    }
    let body = data(64 * MIB as usize, 410);
    for o in &origins {
        o.put(BUCKET, KEY, body.clone());
    }
    let addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let ids: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let _nodes: Vec<NodeProcess> = (0..3)
        .map(|i| {
            crate::fleet::node_of_cluster(
                dir.path(),
                i,
                &origins[i],
                ids[i],
                &default_cluster(&ids, "mode = \"eventual\""),
                "ram_size = \"256MiB\"",
            )
        })
        .collect();
    for o in &origins {
        o.stats.reset();
        o.faults.set(shoal_testorigin::FaultSettings {
            first_byte_delay_ms: first_byte_ms,
            ..Default::default()
        });
    }

    // One request in flight per node per reader: a reader's read-ahead spills
    // to every node that has room.
    let cluster = default_cluster(&ids, "load_limit = 1");
    let readers: Vec<Arc<ClusterReader>> = (0..READERS)
        .map(|_| crate::fleet::fleet_reader(&origins[3], &cluster, 0))
        .collect();
    let tasks: Vec<_> = readers
        .iter()
        .map(|r| tokio::spawn(read_checked(r.clone(), body.clone())))
        .collect();
    let mut failed = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        if let Err(e) = t.await.unwrap() {
            failed.push(format!("reader {i}: {e}"));
        }
    }

    let by_origin: Vec<u64> = origins
        .iter()
        .map(|o| o.stats.snapshot().body_bytes_sent)
        .collect();
    let sent: u64 = by_origin.iter().sum();
    let ratio = sent as f64 / body.len() as f64;
    let spills: u64 = readers
        .iter()
        .map(|r| {
            r.router()
                .counters
                .spills
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    let mut fills = Vec::new();
    for a in &addrs {
        let text = scrape(a).await;
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                [
                    "shoal_node_peer_fills_total",
                    "shoal_node_owner_fills_total",
                    "shoal_node_cached_only_joins_total",
                    "shoal_node_owner_fill_asks_total",
                ]
                .iter()
                .any(|m| l.starts_with(m))
            })
            .collect();
        fills.push(lines.join(" "));
    }
    eprintln!(
        "hot object, origin +{first_byte_ms} ms: {READERS} readers of {} MiB, {spills} spills; origin bytes {sent} ({ratio:.3}x the object; by origin, the readers' last: {by_origin:?}); peer fills by node: {fills:#?}",
        body.len() as u64 / MIB
    );
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(spills > 0, "load_limit = 1 spilled nothing");
    assert!(
        ratio <= 1.05,
        "the origins sent {ratio:.3}x the object for {READERS} readers"
    );
}
