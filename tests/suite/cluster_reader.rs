//! The cluster reader against real `shoal-node` processes and the real origin:
//! byte-exact reads, killed and paused nodes, no nodes at all, objects changing
//! under an open handle, origin traffic, and memory bounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;
use futures_util::StreamExt;
use shoal::cluster::{ClusterReader, ReadError, ReaderOptions};
use shoal::store::StoreError;

const MIB: u64 = 1 << 20;

struct Cluster {
    origin: Origin,
    nodes: Vec<NodeProcess>,
    _dir: tempfile::TempDir,
}

async fn cluster(n: usize) -> Cluster {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let nodes = (0..n)
        .map(|i| {
            let toml = node_toml(&origin, "", "[cache]\nram_size = \"128MiB\"");
            NodeProcess::start(dir.path(), &format!("n{i}"), &toml)
        })
        .collect();
    Cluster {
        origin,
        nodes,
        _dir: dir,
    }
}

fn reader(c: &Cluster, ram: u64, extra: &str) -> Arc<ClusterReader> {
    let ids: Vec<&str> = c.nodes.iter().map(|n| n.addr.as_str()).collect();
    let toml = format!(
        "{}{}",
        origin_toml(&c.origin),
        cluster_toml(
            &ids,
            &format!("down_for = \"1s\"\nhedge_floor = \"20ms\"\n{extra}")
        )
    );
    let cfg = parse(&toml);
    let origin = (cfg.origin().unwrap()).client().unwrap();
    ClusterReader::new(
        origin,
        cfg.cluster(),
        ReaderOptions {
            ram_bytes: ram,
            disk: None,
            max_inflight_blocks: None,
            queue_wait: None,
            ..Default::default()
        },
    )
}

fn counter(r: &ClusterReader, series: &str) -> f64 {
    r.refresh_gauges();
    let mut reg = prometheus_client::registry::Registry::default();
    r.metrics.register(&mut reg);
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
    metric(&s, series)
}

/// Reads `start..end` as a stream, checking every chunk against `want`, and returns
/// the longest wait for one chunk. Runs `at_mib` once the read passes that MiB.
async fn read_checked(
    h: &shoal::cluster::Handle,
    want: &Bytes,
    mut at_mib: Option<(u64, Box<dyn FnMut() + Send>)>,
) -> Duration {
    let mut s = Box::pin(h.stream(0, want.len() as u64));
    let mut pos = 0usize;
    let mut worst = Duration::ZERO;
    let mut t = Instant::now();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap_or_else(|e| panic!("read failed at {pos}: {e}"));
        worst = worst.max(t.elapsed());
        assert!(
            chunk[..] == want[pos..pos + chunk.len()],
            "wrong bytes at {pos}"
        );
        pos += chunk.len();
        if let Some((mib, f)) = at_mib.as_mut() {
            if pos as u64 >= *mib * MIB {
                f();
                at_mib = None;
            }
        }
        t = Instant::now();
    }
    assert_eq!(pos, want.len());
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_ranges_are_byte_exact_across_three_nodes() {
    let c = cluster(3).await;
    let r = reader(&c, 32 * MIB, "");
    let body = data(20 * MIB as usize + 333, 1);
    c.origin.put(BUCKET, "r/obj", body.clone());
    let h = r.open(BUCKET, "r/obj", None).await.unwrap();
    assert_eq!(h.meta().size, body.len() as u64);
    let mut x = 7u64;
    for _ in 0..60 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = x % body.len() as u64;
        let len = (x >> 20) % (3 * MIB) + 1;
        let got = h.read(a, len).await.unwrap();
        let end = (a + len).min(body.len() as u64);
        assert!(
            got == body.slice(a as usize..end as usize),
            "range {a}+{len}"
        );
    }
    // Every node served some blocks; nothing fell back.
    for addr in c.nodes.iter().map(|n| &n.addr) {
        assert!(
            counter(
                &r,
                &format!("shoal_client_node_requests_total{{node=\"{addr}\"}}")
            ) > 0.0
        );
    }
    assert_eq!(
        counter(&r, "shoal_client_fallbacks_total{cause=\"connect\"}"),
        0.0
    );
    // Empty and one-byte objects.
    c.origin.put(BUCKET, "r/empty", Bytes::new());
    let h = r.open(BUCKET, "r/empty", None).await.unwrap();
    assert_eq!((h.meta().size, h.read(0, 10).await.unwrap().len()), (0, 0));
    c.origin.put(BUCKET, "r/one", Bytes::from_static(b"z"));
    let h = r.open(BUCKET, "r/one", None).await.unwrap();
    assert_eq!(&h.read(0, 10).await.unwrap()[..], b"z");
    assert!(matches!(
        r.open(BUCKET, "r/missing", None).await,
        Err(ReadError::Store(StoreError::NoSuchKey { .. }))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_read_costs_nothing_but_time() {
    let mut c = cluster(3).await;
    // No hedges: a hedge in flight when the node dies takes its failover's place
    // (one extra node per request), and on a busy machine the 20 ms hedge floor
    // can hedge every request the dead node had, leaving no failover to count.
    let r = reader(&c, 16 * MIB, "hedge_budget = 0");
    let body = data(200 * MIB as usize, 2);
    c.origin.put(BUCKET, "big", body.clone());
    let h = r.open(BUCKET, "big", None).await.unwrap();
    let victim_addr = c.nodes[1].addr.clone();
    let mut victim = c.nodes.remove(1);
    read_checked(
        &h,
        &body,
        Some((
            60,
            Box::new(move || {
                victim.child.kill().unwrap();
                victim.child.wait().unwrap();
            }),
        )),
    )
    .await;
    let node = r.router().node(&victim_addr);
    let failed = counter(
        &r,
        &format!("shoal_client_node_failures_total{{node=\"{victim_addr}\"}}"),
    );
    assert!(failed >= 1.0, "the dead node's failures are counted");
    assert!(
        r.router()
            .counters
            .marked_down
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    let moved = counter(&r, "shoal_client_failovers_total")
        + counter(&r, "shoal_client_fallbacks_total{cause=\"down\"}");
    assert!(moved >= 1.0, "its blocks went elsewhere");
    let _ = node;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_never_stalls_a_read() {
    let c = cluster(3).await;
    let r = reader(&c, 16 * MIB, "");
    let body = data(64 * MIB as usize, 3);
    c.origin.put(BUCKET, "p", body.clone());
    let h = r.open(BUCKET, "p", None).await.unwrap();
    let paused_pid = c.nodes[2].pid();
    let worst = read_checked(
        &h,
        &body,
        Some((
            10,
            Box::new(move || {
                signal(paused_pid, "-STOP");
            }),
        )),
    )
    .await;
    // Budget: a first-byte deadline on the owner, one on the next node, then the origin.
    assert!(worst < Duration::from_secs(3), "a chunk waited {worst:?}");
    let paused = c.nodes[2].addr.clone();
    let helped = counter(&r, "shoal_client_hedges_sent_total")
        + counter(&r, "shoal_client_failovers_total")
        + counter(&r, "shoal_client_fallbacks_total{cause=\"first_byte\"}");
    assert!(helped >= 1.0, "hedges, failovers or fallbacks happened");
    // Resumed, the node is used again once down_for has passed.
    signal(paused_pid, "-CONT");
    let handle = r.router().node(&paused);
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.router().is_down(&handle) {
        assert!(
            Instant::now() < deadline,
            "still marked down long after down_for"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = counter(
        &r,
        &format!("shoal_client_node_requests_total{{node=\"{paused}\"}}"),
    );
    let fresh = data(16 * MIB as usize, 4);
    c.origin.put(BUCKET, "p2", fresh.clone());
    let h2 = r.open(BUCKET, "p2", None).await.unwrap();
    read_checked(&h2, &fresh, None).await;
    let after = counter(
        &r,
        &format!("shoal_client_node_requests_total{{node=\"{paused}\"}}"),
    );
    assert!(
        after > before,
        "resumed node gets requests again ({before} -> {after})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_node_down_reads_come_from_the_origin() {
    let mut c = cluster(2).await;
    let r = reader(&c, 8 * MIB, "");
    let body = data(12 * MIB as usize + 5, 5);
    c.origin.put(BUCKET, "down", body.clone());
    for n in &mut c.nodes {
        n.child.kill().unwrap();
        n.child.wait().unwrap();
    }
    let h = r.open(BUCKET, "down", None).await.unwrap();
    read_checked(&h, &body, None).await;
    let fell = counter(&r, "shoal_client_fallbacks_total{cause=\"connect\"}")
        + counter(&r, "shoal_client_fallbacks_total{cause=\"down\"}");
    assert!(fell >= 13.0, "every block fell back ({fell})");
    // No nodes configured at all: a plain S3 reader.
    let plain = ClusterReader::new(origin_client(&c.origin), None, ReaderOptions::default());
    let h = plain.open(BUCKET, "down", None).await.unwrap();
    read_checked(&h, &body, None).await;
    assert!(counter(&plain, "shoal_client_fallbacks_total{cause=\"no_nodes\"}") >= 13.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_rewritten_under_a_handle_is_an_error_never_a_mix() {
    let c = cluster(3).await;
    let r = reader(&c, 32 * MIB, "");
    let old = data(8 * MIB as usize, 6);
    c.origin.put(BUCKET, "rw", old.clone());
    let h = r.open(BUCKET, "rw", None).await.unwrap();
    assert!(h.read(0, MIB).await.unwrap() == old.slice(0..MIB as usize));
    c.origin.put(BUCKET, "rw", data(8 * MIB as usize, 7));
    let e = h.read(5 * MIB, MIB).await.unwrap_err();
    assert!(matches!(e, ReadError::Stale { .. }), "{e:?}");
    assert!(h.is_stale());
    // Even blocks cached before the change are refused now: one version or an error.
    assert!(h.read(0, 10).await.is_err());
    // A new open sees the new version.
    let h2 = r.open(BUCKET, "rw", None).await.unwrap();
    assert!(h2.read(0, 8 * MIB).await.unwrap() == data(8 * MIB as usize, 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_cold_readers_fetch_the_object_from_the_origin_about_once() {
    let c = cluster(3).await;
    let r = reader(&c, 0, "");
    let body = data(64 * MIB as usize, 8);
    c.origin.put(BUCKET, "shared", body.clone());
    c.origin.stats.reset();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        // Separate readers (separate clients): dedup is the nodes' doing.
        let r2 = reader(&c, 0, "");
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let h = r2.open(BUCKET, "shared", None).await.unwrap();
            read_checked(&h, &body, None).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sent = c.origin.stats.snapshot().body_bytes_sent as f64;
    assert!(
        sent <= 1.05 * (64 * MIB) as f64,
        "origin sent {sent} bytes for a 64 MiB object"
    );
    drop(r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_within_bounds_under_16_readers() {
    let c = cluster(3).await;
    let ram = 8 * MIB;
    let r = reader(&c, ram, "read_window = 4");
    let mut bodies = Vec::new();
    for i in 0..16 {
        let b = data(6 * MIB as usize, 100 + i);
        c.origin.put(BUCKET, &format!("m/{i}"), b.clone());
        bodies.push(b);
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (r2, d2) = (r.clone(), done.clone());
    let watcher = tokio::spawn(async move {
        let (mut worst_ram, mut worst_inflight) = (0, 0);
        while !d2.load(std::sync::atomic::Ordering::Relaxed) {
            worst_ram = worst_ram.max(r2.ram_stats().used_bytes);
            worst_inflight = worst_inflight.max(r2.inflight_blocks());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (worst_ram, worst_inflight)
    });
    let mut tasks = Vec::new();
    for (i, b) in bodies.into_iter().enumerate() {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let h = r.open(BUCKET, &format!("m/{i}"), None).await.unwrap();
            read_checked(&h, &b, None).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (worst_ram, worst_inflight) = watcher.await.unwrap();
    assert!(worst_ram <= ram, "RAM tier reached {worst_ram}");
    assert!(
        worst_inflight <= r.inflight_limit(),
        "{worst_inflight} blocks in flight, limit {}",
        r.inflight_limit()
    );
    assert!(worst_inflight > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_read_asks_its_owner_for_the_range_only() {
    let c = cluster(2).await;
    let body = data(4 * MIB as usize, 17);
    c.origin.put(BUCKET, "rand", body.clone());
    let r = reader(&c, 64 * MIB, "");
    let h = r.open(BUCKET, "rand", None).await.unwrap();
    // Inside block 2, and again inside block 2 (warm on its owner now).
    for at in [2 * MIB + 12_345, 2 * MIB + 700_000] {
        let got = h.read_random(at, 4096).await.unwrap();
        assert!(
            got == body.slice(at as usize..at as usize + 4096),
            "byte-exact at {at}"
        );
    }
    // Across a block edge: each block's owner is asked for its part.
    let edge = 3 * MIB - 100;
    let got = h.read_random(edge, 4096).await.unwrap();
    assert!(got == body.slice(edge as usize..edge as usize + 4096));
    // The origin saw block 2 once, whole (the owner's fetch), not per read.
    let snap = c.origin.stats.snapshot();
    let block2 = format!("bytes={}-{}", 2 * MIB, 3 * MIB - 1);
    let gets_of_2 = snap
        .requests
        .iter()
        .filter(|q| q.kind.key == "rand" && q.kind.range.as_deref() == Some(&block2[..]))
        .map(|q| q.count)
        .sum::<u64>();
    assert_eq!(gets_of_2, 1, "{:?}", snap.requests);
    // From the nodes: block 0 (the open learns the version from it), the two
    // ranges, and the two parts of the read across the edge: no whole block.
    assert_eq!(
        counter(&r, "shoal_client_bytes_total{source=\"node\"}"),
        (MIB + 3 * 4096) as f64
    );
}
