//! The fleet changing under its readers: a block that moved to a new owner (a
//! node joined) is fetched once from its previous owner with
//! `Cache-Control: only-if-cached`, not again from the origin; a node asked that
//! way answers from RAM or disk or 504, and never asks the origin. Each node has
//! an origin of its own, so every origin byte is counted where it went.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal::store::{ByteRange, ExtraHeaders, GetObject, ObjectStore, StoreError};

use crate::common::*;

const MIB: u64 = 1 << 20;
const KEYS: [&str; 2] = ["fleet/a.bin", "fleet/b.bin"];

/// A node of the fleet: its own origin, a disk tier, an access log, the
/// cluster `nodes`.
fn fleet_node(dir: &Path, i: usize, origin: &Origin, listen: &str, nodes: &[&str]) -> NodeProcess {
    let toml = node_toml(
        origin,
        &format!(
            "peer_fill_timeout = \"150ms\"\naccess_log = \"{}\"",
            dir.join(format!("access{i}.log")).display()
        ),
        &format!(
            "[cache]\nram_size = \"256MiB\"\ndisk_size = \"256MiB\"\ndata_dir = \"{}\"\n{}",
            dir.join(format!("disk{i}")).display(),
            cluster_toml(nodes, "")
        ),
    )
    .replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{listen}\""),
    );
    NodeProcess::start(dir, &format!("n{i}"), &toml)
}

/// Every object read whole through a fresh reader of the cluster `nodes` (its
/// origin `fallback`, counted like the nodes'), each byte checked.
async fn read_through(fallback: &Origin, nodes: &[&str], bodies: &[Bytes]) {
    let cfg = parse(&format!(
        "{}{}",
        origin_toml(fallback),
        cluster_toml(nodes, "")
    ));
    let reader = ClusterReader::new(
        origin_client(fallback),
        cfg.cluster(),
        ReaderOptions {
            ram_bytes: 64 << 20,
            ..Default::default()
        },
    );
    for (key, body) in KEYS.iter().zip(bodies) {
        let h = reader.open(BUCKET, key, None).await.unwrap();
        let got = h.read(0, body.len() as u64).await.unwrap();
        assert!(got == *body, "{key}: the bytes read differ");
    }
}

fn origin_bytes(origins: &[Origin]) -> u64 {
    origins
        .iter()
        .map(|o| o.stats.snapshot().body_bytes_sent)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_fills_from_previous_owners_not_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    // Four nodes' origins and the reader's own, each holding the same objects
    // (the same bytes: the same ETags).
    let mut origins = Vec::new();
    for _ in 0..5 {
        origins.push(origin().await);
    }
    let bodies: Vec<Bytes> = (0..KEYS.len())
        .map(|i| data(16 * MIB as usize, 380 + i as u64))
        .collect();
    for o in &origins {
        for (k, b) in KEYS.iter().zip(&bodies) {
            o.put(BUCKET, k, b.clone());
        }
    }
    let addrs: Vec<String> = (0..4).map(|_| free_addr()).collect();
    let ids: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut nodes: Vec<NodeProcess> = (0..3)
        .map(|i| fleet_node(dir.path(), i, &origins[i], ids[i], &ids[..3]))
        .collect();
    let (reader_origin, node_origins) = origins.split_last().unwrap();
    read_through(reader_origin, &ids[..3], &bodies).await;
    let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
    let first = origin_bytes(&origins);
    assert!(first >= total, "the cold read fetched {first} of {total}");

    // A fourth node joins. The three keep their 3-node lists: only the new node
    // and the readers need the new one, the old owners only answer.
    for o in &origins {
        o.stats.reset();
    }
    nodes.push(fleet_node(dir.path(), 3, &node_origins[3], ids[3], &ids));
    read_through(reader_origin, &ids, &bodies).await;
    let again = origin_bytes(&origins);
    let ratio = again as f64 / total as f64;
    let text = scrape(&addrs[3]).await;
    let hits = metric(&text, "shoal_node_peer_fills_total{result=\"hit\"}");
    let others: f64 = ["miss", "timeout", "error"]
        .iter()
        .map(|r| {
            metric(
                &text,
                &format!("shoal_node_peer_fills_total{{result=\"{r}\"}}"),
            )
        })
        .sum();
    eprintln!(
        "join: origin bytes {again} for {total} read again ({ratio:.3}x); new node's peer fills: {hits} hit, {others} other"
    );
    assert!(
        ratio <= 0.02,
        "a join cost the origins {ratio:.3}x the data read again"
    );
    assert!(
        hits >= 1.0,
        "the new node filled nothing from peers:\n{text}"
    );
    assert_eq!(
        others, 0.0,
        "every block the new node owns was on its previous owner"
    );
    assert_eq!(
        metric(&text, "shoal_node_peer_fill_bytes_total"),
        hits * MIB as f64,
        "whole 1 MiB blocks"
    );
    // The fill is on the access log's line of the request it was made for.
    let log = dir.path().join("access3.log");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.contains("\"peer_fill\":{\"hit\":1,"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no peer fill in the access log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two nodes in process, each with its own origin, that know each other
/// (eventual mode: each fetches its own misses).
async fn pair() -> (Vec<Origin>, Vec<TestNode>) {
    let mut origins = Vec::new();
    for _ in 0..2 {
        origins.push(origin().await);
    }
    let mut listeners = Vec::new();
    for _ in 0..2 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let ids: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut nodes = Vec::new();
    for (o, l) in origins.iter().zip(listeners) {
        let toml = node_toml(o, "", &cluster_toml(&ids, "mode = \"eventual\""));
        nodes.push(start_node_on(&parse(&toml), l).await);
    }
    (origins, nodes)
}

/// Which of two nodes owns block 0 of `key`, and which is its runner-up.
fn ranked(nodes: &[TestNode], key: &str) -> (usize, usize) {
    let ids: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let set = shoal::route::Membership::fixed(&ids).current();
    let top = set.top_k(
        &shoal::route::BlockId {
            bucket: BUCKET,
            key,
            index: 0,
        },
        2,
    );
    let owner = ids
        .iter()
        .position(|i| *i == set.nodes()[top[0]].id)
        .unwrap();
    (owner, 1 - owner)
}

fn block0(etag: &str) -> GetObject {
    GetObject::new(BUCKET, "")
        .if_match(etag)
        .range(ByteRange::span(0, MIB))
}

async fn get(node: &TestNode, key: &str, etag: &str) -> Result<Bytes, StoreError> {
    let mut req = block0(etag);
    req.key = key.to_owned();
    client(node.addr).get_bytes(&req).await.map(|(_, b)| b)
}

fn peer_fills(node: &TestNode, result: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &node.app.registry).unwrap();
    metric(
        &text,
        &format!("shoal_node_peer_fills_total{{result=\"{result}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_if_cached_answers_504_and_never_asks_the_origin() {
    let (origins, nodes) = pair().await;
    let body = data(3 * MIB as usize, 381);
    let etag = origins[0].put(BUCKET, "oic", body.clone());
    origins[0].stats.reset();
    for (i, head) in [(0, false), (1, true)] {
        let c = client(nodes[0].addr);
        let mut req = block0(&etag);
        req.key = "oic".into();
        req.set_header("cache-control", Some("max-age=0, only-if-cached".into()));
        let e = if head {
            c.head(&req).await.unwrap_err()
        } else {
            c.get_bytes(&req).await.unwrap_err()
        };
        assert!(
            matches!(e.cause(), StoreError::Server { status: 504, code, .. } if code == "ShoalNotCached")
                || (head && matches!(e.cause(), StoreError::Server { status: 504, .. })),
            "ask {i}: {e:?}"
        );
    }
    let seen = origins[0].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
    // Held: served from the cache, still nothing asked of the origin.
    get(&nodes[0], "oic", &etag).await.unwrap();
    origins[0].stats.reset();
    let mut req = block0(&etag);
    req.key = "oic".into();
    req.set_header("cache-control", Some("only-if-cached".into()));
    let (_, got) = client(nodes[0].addr).get_bytes(&req).await.unwrap();
    assert!(got == body.slice(0..MIB as usize));
    // Block 1 is not held: 504, and no fetch of it.
    req.range = Some(ByteRange::span(MIB, 2 * MIB));
    let e = client(nodes[0].addr).get_bytes(&req).await.unwrap_err();
    assert!(
        matches!(e.cause(), StoreError::Server { status: 504, .. }),
        "{e:?}"
    );
    let seen = origins[0].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_ups_copy_is_taken_only_for_the_version_asked() {
    let (origins, nodes) = pair().await;
    let key = "versions";
    let (owner, runner_up) = ranked(&nodes, key);
    let v1 = data(2 * MIB as usize, 382);
    let v2 = data(2 * MIB as usize, 383);
    let e1 = origins
        .iter()
        .map(|o| o.put(BUCKET, key, v1.clone()))
        .last()
        .unwrap();
    // The runner-up holds version 1's block 0; the owner, asked for it, takes
    // it from there.
    get(&nodes[runner_up], key, &e1).await.unwrap();
    for o in &origins {
        o.stats.reset();
    }
    let got = get(&nodes[owner], key, &e1).await.unwrap();
    assert!(got == v1.slice(0..MIB as usize));
    assert_eq!(origins[owner].stats.snapshot().body_bytes_sent, 0);
    assert_eq!(peer_fills(&nodes[owner], "hit"), 1.0);
    // Version 2: the runner-up holds only version 1's block, which is never
    // taken; the owner fetches version 2 from its origin.
    let e2 = origins
        .iter()
        .map(|o| o.put(BUCKET, key, v2.clone()))
        .last()
        .unwrap();
    assert_ne!(e1, e2);
    for o in &origins {
        o.stats.reset();
    }
    let got = get(&nodes[owner], key, &e2).await.unwrap();
    assert!(
        got == v2.slice(0..MIB as usize),
        "version 1's bytes served for version 2"
    );
    assert_eq!(peer_fills(&nodes[owner], "hit"), 1.0);
    assert!(peer_fills(&nodes[owner], "miss") >= 1.0);
    // The runner-up was asked only from its cache: its origin saw nothing.
    let seen = origins[runner_up].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
}
