//! Two tiers and invalidation: gateways whose misses go to owner nodes, hop limits,
//! writes through a gateway (warm on write, invalidate on overwrite and delete),
//! purge fan-out and the `max_age` backstop, eventual mode, caching rules, zones,
//! and the breaker and shedding on the node-to-node path.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::*;
use shoal::node_proto::purge::purge;
use shoal::node_proto::Purge;
use shoal::store::{GetObject, StoreError};
use tokio::net::TcpListener;

const MIB: usize = 1 << 20;

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// A `[cluster]` of `nodes` (and invalidation-only `peers`) with this test's keys
/// and node deadlines a gateway can afford.
fn gateway_cluster(nodes: &[SocketAddr], peers: &[SocketAddr], extra: &str) -> String {
    let ids: Vec<String> = nodes.iter().map(|a| a.to_string()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let peers: Vec<String> = peers.iter().map(|a| format!("\"{a}\"")).collect();
    cluster_toml(&ids, &format!("peers = [{}]\n{extra}", peers.join(", ")))
        .replace("first_byte_timeout = \"1s\"", "first_byte_timeout = \"2s\"")
        .replace("stall_timeout = \"1s\"", "stall_timeout = \"2s\"")
}

async fn owners(origin: &shoal_testorigin::Origin, n: usize) -> Vec<TestNode> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(node_for(origin, "", "").await);
    }
    v
}

/// Three owners; gateway A takes writes and warms them, gateway B only reads.
async fn writer_and_reader(
    origin: &shoal_testorigin::Origin,
) -> (Vec<TestNode>, TestNode, TestNode) {
    let owners = owners(origin, 3).await;
    let ids: Vec<SocketAddr> = owners.iter().map(|n| n.addr).collect();
    let a = node_for(
        origin,
        "",
        &format!(
            "{}[gateway]\nwrites = true\nwarm_on_write = true\n",
            gateway_cluster(&ids, &[], "")
        ),
    )
    .await;
    let b = node_for(origin, "", &gateway_cluster(&ids, &[], "")).await;
    (owners, a, b)
}

/// A series of the node's page (every one these tests read is there from the
/// start).
async fn value(addr: SocketAddr, series: &str) -> f64 {
    metric(&scrape(addr).await, series)
}

/// Polls a metric until it reaches `want` (never a blind sleep).
async fn until(addr: SocketAddr, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = value(addr, series).await;
        if v >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} on {addr} stayed at {v}, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get(
    addr: SocketAddr,
    key: &str,
    if_match: Option<&str>,
) -> Result<bytes::Bytes, StoreError> {
    let mut req = GetObject::new(BUCKET, key);
    req.if_match = if_match.map(str::to_owned);
    client(addr).get_bytes(&req).await.map(|(_, b)| b)
}

const BOTO3_READ: &str = r#"
import hashlib, sys
import boto3
from botocore.config import Config
endpoint, bucket, key, secret, want_md5 = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id="node-client", aws_secret_access_key=secret,
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
assert hashlib.md5(body).hexdigest() == want_md5, "bytes differ"
print("boto3 read", len(body))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_misses_land_on_owners_and_a_second_gateway_costs_no_origin_get() {
    let origin = origin().await;
    let owners = owners(&origin, 3).await;
    let ids: Vec<SocketAddr> = owners.iter().map(|n| n.addr).collect();
    let gw = |_: ()| parse(&node_toml(&origin, "", &gateway_cluster(&ids, &[], "")));
    let a = start_node(&gw(())).await;
    let b = start_node(&gw(())).await;
    let body = data(5 * MIB + 7, 31);
    let etag = origin.put(BUCKET, "g/obj", body.clone());
    origin.stats.reset();

    // A plain boto3 client talks to gateway A only.
    let out = tokio::process::Command::new("python3")
        .args(["-c", BOTO3_READ])
        .arg(format!("http://{}", a.addr))
        .args([BUCKET, "g/obj", NODE_SECRET, &etag])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Six blocks, each fetched from the origin once, by its owner; none by A.
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "g/obj"), 6);
    let mut owned = 0.0;
    for o in &owners {
        owned += value(o.addr, "shoal_node_origin_requests_total{kind=\"block\"}").await;
    }
    assert_eq!(owned, 6.0, "the owners fetched every block");
    assert_eq!(
        value(a.addr, "shoal_node_origin_requests_total{kind=\"block\"}").await,
        0.0
    );
    assert_eq!(value(a.addr, "shoal_node_cluster_fetches_total").await, 6.0);
    // Each block sits on the node the routing names as its owner.
    let set = shoal::route::NodeSet::new(ids.iter().map(|a| (a.to_string(), 1.0)));
    for index in 0..6u64 {
        let owner = set.rank_ids(&shoal::route::BlockId {
            bucket: BUCKET,
            key: "g/obj",
            index,
        })[0]
            .to_owned();
        let mut req = GetObject::new(BUCKET, "g/obj")
            .range(shoal::store::ByteRange::span(
                index * MIB as u64,
                ((index + 1) * MIB as u64).min(body.len() as u64),
            ))
            .if_match(&etag);
        shoal::node_proto::set_cached_only(&mut req, true);
        let got = client(owner.parse().unwrap()).get_bytes(&req).await;
        assert!(
            got.is_ok(),
            "block {index} is not cached on its owner {owner}: {got:?}"
        );
    }

    // Gateway B reading the same object costs the origin nothing.
    origin.stats.reset();
    assert_eq!(get(b.addr, "g/obj", None).await.unwrap(), body);
    let s = origin.stats.snapshot();
    assert_eq!(s.count("GET"), 0, "gateway B caused origin GETs");
    assert_eq!(s.count("HEAD"), 0, "gateway B caused origin HEADs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_listing_each_other_forward_at_most_once() {
    let origin = origin().await;
    // A's only node is B and B's only node is A: every miss would bounce.
    let (la, lb) = (listener().await, listener().await);
    let (a_id, b_id) = (la.local_addr().unwrap(), lb.local_addr().unwrap());
    let a = start_node_on(
        &parse(&node_toml(&origin, "", &gateway_cluster(&[b_id], &[], ""))),
        la,
    )
    .await;
    let b = start_node_on(
        &parse(&node_toml(&origin, "", &gateway_cluster(&[a_id], &[], ""))),
        lb,
    )
    .await;
    let (one, two) = (data(8 * MIB, 32), data(8 * MIB, 132));
    origin.put(BUCKET, "loop1", one.clone());
    origin.put(BUCKET, "loop2", two.clone());
    origin.stats.reset();
    assert_eq!(get(a.addr, "loop1", None).await.unwrap(), one);
    assert_eq!(get(b.addr, "loop2", None).await.unwrap(), two);
    assert_eq!(get(b.addr, "loop1", None).await.unwrap(), one);
    // Every block came from the origin exactly once.
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "loop1"), 8);
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "loop2"), 8);
    for n in [&a, &b] {
        let text = scrape(n.addr).await;
        assert!(metric(&text, "shoal_node_hop_requests_total") > 0.0);
        let first = metric(&text, "shoal_node_forwarded_total{hop=\"0\"}");
        assert!(first > 0.0);
        // What arrived from the other gateway was served, never sent back:
        // every forward was of a request that came from a client.
        assert!(metric(&text, "shoal_node_hop_limited_total") > 0.0);
        assert_eq!(
            metric_sum(&text, "shoal_node_forwarded_total"),
            first,
            "{}: a forwarded request was forwarded again",
            n.addr
        );
    }

    // Gateways that each list both: their own blocks they fetch themselves, never
    // asking themselves over the network.
    let (lc, ld) = (listener().await, listener().await);
    let ids = [lc.local_addr().unwrap(), ld.local_addr().unwrap()];
    let cfg = parse(&node_toml(&origin, "", &gateway_cluster(&ids, &[], "")));
    let c = start_node_on(&cfg, lc).await;
    let d = start_node_on(&cfg, ld).await;
    let three = data(8 * MIB, 232);
    origin.put(BUCKET, "loop3", three.clone());
    assert_eq!(get(c.addr, "loop3", None).await.unwrap(), three);
    assert_eq!(get(d.addr, "loop3", None).await.unwrap(), three);
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "loop3"), 8);
    for n in [&c, &d] {
        let text = scrape(n.addr).await;
        assert!(metric(&text, "shoal_node_owned_misses_total") > 0.0);
        assert_eq!(
            metric(
                &text,
                &format!("shoal_client_node_requests_total{{node=\"{}\"}}", n.addr)
            ),
            0.0,
            "{} sent requests to itself",
            n.addr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_through_a_gateway_warms_the_owners() {
    let origin = origin().await;
    let (_owners, a, b) = writer_and_reader(&origin).await;
    let body = data(3 * MIB + 5, 33);
    let etag = client(a.addr)
        .put_object(BUCKET, "w/new", body.clone())
        .await
        .unwrap();
    assert_eq!(
        origin.get(BUCKET, "w/new").unwrap(),
        body,
        "the origin has the object"
    );
    assert!(!etag.is_empty());
    until(a.addr, "shoal_node_warms_done_total", 1.0).await;
    assert_eq!(
        value(a.addr, "shoal_node_warmed_blocks_total{kind=\"ok\"}").await,
        4.0
    );
    origin.stats.reset();
    assert_eq!(get(b.addr, "w/new", None).await.unwrap(), body);
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "w/new"),
        0,
        "a read after the warm went to the origin"
    );
    // Writes are refused by a node that was not asked to take them.
    let refused = client(b.addr).put_object(BUCKET, "w/x", body.clone()).await;
    assert!(refused.is_err());
    assert!(origin.get(BUCKET, "w/x").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_and_delete_through_a_gateway_leave_no_old_bytes_anywhere() {
    let origin = origin().await;
    let owners = owners(&origin, 3).await;
    let ids: Vec<SocketAddr> = owners.iter().map(|n| n.addr).collect();
    let lb = listener().await;
    let b_addr = lb.local_addr().unwrap();
    let a = node_for(
        &origin,
        "revalidate_after = \"1h\"",
        &format!(
            "{}[gateway]\nwrites = true\n",
            gateway_cluster(&ids, &[b_addr], "")
        ),
    )
    .await;
    let b = start_node_on(
        &parse(&node_toml(
            &origin,
            "revalidate_after = \"1h\"",
            &gateway_cluster(&ids, &[], ""),
        )),
        lb,
    )
    .await;
    let v1 = data(2 * MIB + 3, 34);
    let e1 = origin.put(BUCKET, "d/obj", v1.clone());
    let all: Vec<SocketAddr> = ids.iter().copied().chain([a.addr, b.addr]).collect();
    // Every node learns and caches v1.
    for n in &all {
        assert_eq!(get(*n, "d/obj", None).await.unwrap(), v1);
    }

    // Overwrite through A.
    let v2 = data(MIB + 9, 35);
    let e2 = client(a.addr)
        .put_object(BUCKET, "d/obj", v2.clone())
        .await
        .unwrap();
    assert_ne!(e1, e2);
    // One batch to each of the 3 owners and peer B.
    until(a.addr, "shoal_node_fanout_batches_total{kind=\"ok\"}", 4.0).await;
    for n in &all {
        assert_eq!(
            get(*n, "d/obj", None).await.unwrap(),
            v2,
            "{n} after overwrite"
        );
        let old = get(*n, "d/obj", Some(&e1)).await;
        assert!(
            matches!(old, Err(ref e) if matches!(e.cause(), StoreError::PreconditionFailed { .. })),
            "{n} answered If-Match of the old version with {old:?}"
        );
    }

    // Delete through A.
    client(a.addr).delete_object(BUCKET, "d/obj").await.unwrap();
    assert!(origin.get(BUCKET, "d/obj").is_none());
    until(a.addr, "shoal_node_fanout_batches_total{kind=\"ok\"}", 8.0).await;
    for n in &all {
        for etag in [None, Some(e2.as_str())] {
            let r = get(*n, "d/obj", etag).await;
            assert!(
                matches!(r, Err(ref e) if matches!(e.cause(), StoreError::NoSuchKey { .. } | StoreError::PreconditionFailed { .. })),
                "{n} served a deleted object (If-Match {etag:?}): {:?}",
                r.map(|b| b.len())
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_reaches_every_node_and_a_paused_one_expires_after_max_age() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    // Real processes, so one can be paused through the purge.
    let mut procs = Vec::new();
    for i in 0..3 {
        let path = dir.path().join(format!("o{i}.toml"));
        std::fs::write(
            &path,
            node_toml(&origin, "revalidate_after = \"1h\"\nmax_age = \"2s\"", ""),
        )
        .unwrap();
        procs.push(NodeProcess::spawn(&path));
    }
    let ids: Vec<SocketAddr> = procs.iter().map(|p| p.socket_addr()).collect();
    let a = node_for(
        &origin,
        "",
        &gateway_cluster(&ids, &[], "").replace(
            "first_byte_timeout = \"2s\"",
            "first_byte_timeout = \"300ms\"",
        ),
    )
    .await;
    let old = data(100_000, 36);
    let e_old = origin.put(BUCKET, "p/a", old.clone());
    for id in &ids {
        assert_eq!(get(*id, "p/a", None).await.unwrap(), old);
    }
    // Every node learned the version before this instant: a read starting
    // max_age after it finds the node's knowledge older than max_age, however
    // slowly the machine got here.
    let learned = Instant::now();
    let new = data(100_001, 37);
    origin.put(BUCKET, "p/a", new.clone());
    signal(procs[2].pid(), "-STOP");
    let answer = purge(&client(a.addr), BUCKET, &Purge::Prefix("p/".into()), false)
        .await
        .unwrap();
    assert!(answer.contains("purged_blocks"), "{answer}");
    until(a.addr, "shoal_node_fanout_batches_total{kind=\"ok\"}", 2.0).await;
    until(
        a.addr,
        "shoal_node_fanout_batches_total{kind=\"failed\"}",
        1.0,
    )
    .await;
    for id in &ids[..2] {
        assert_eq!(
            get(*id, "p/a", None).await.unwrap(),
            new,
            "{id} after purge"
        );
        assert_eq!(
            value(*id, "shoal_node_invalidations_total{kind=\"fanout\"}").await,
            1.0
        );
    }
    signal(procs[2].pid(), "-CONT");
    // The paused node missed the purge and may serve the old bytes until max_age
    // (2 s) has passed since it learned them; no read that starts later may.
    loop {
        let asked = learned.elapsed();
        let got = get(ids[2], "p/a", None).await.unwrap();
        if got == new {
            break;
        }
        assert_eq!(got, old, "neither version");
        assert!(
            asked < Duration::from_secs(2),
            "stale {asked:?} after it learned the object (max_age 2 s)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pinned_old = get(ids[2], "p/a", Some(&e_old)).await;
    assert!(pinned_old.is_err(), "old version served after max_age");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventual_mode_fetches_alone_and_still_shares_invalidations() {
    let origin = origin().await;
    let (l1, l2) = (listener().await, listener().await);
    let ids = [l1.local_addr().unwrap(), l2.local_addr().unwrap()];
    let cfg = parse(&node_toml(
        &origin,
        "revalidate_after = \"1h\"",
        &gateway_cluster(&ids, &[], "mode = \"eventual\""),
    ));
    let n1 = start_node_on(&cfg, l1).await;
    let n2 = start_node_on(&cfg, l2).await;
    let body = data(4 * MIB, 38);
    origin.put(BUCKET, "e/obj", body.clone());
    origin.stats.reset();
    assert_eq!(get(n1.addr, "e/obj", None).await.unwrap(), body);
    assert_eq!(get(n2.addr, "e/obj", None).await.unwrap(), body);
    // No miss was forwarded; each block came from the origin once, to its
    // owner (asked for it by the other node first, or its own reader), and
    // every other read of it from the node holding it (asked only-if-cached).
    let mut filled = 0.0;
    for n in [&n1, &n2] {
        let t = scrape(n.addr).await;
        assert_eq!(metric(&t, "shoal_node_cluster_fetches_total"), 0.0);
        filled += metric(&t, "shoal_node_peer_fills_total{result=\"hit\"}");
        filled += metric(&t, "shoal_node_owner_fills_total{result=\"hit\"}");
    }
    let gets = origin.stats.snapshot().gets_of(BUCKET, "e/obj") as f64;
    assert_eq!(
        (gets, filled),
        (4.0, 4.0),
        "origin GETs and peer fills of 4 blocks read by 2 nodes"
    );
    let changed = data(4 * MIB, 39);
    origin.put(BUCKET, "e/obj", changed.clone());
    purge(&client(n1.addr), BUCKET, &Purge::Key("e/obj".into()), false)
        .await
        .unwrap();
    until(
        n2.addr,
        "shoal_node_invalidations_total{kind=\"fanout\"}",
        1.0,
    )
    .await;
    assert_eq!(get(n2.addr, "e/obj", None).await.unwrap(), changed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_pass_unmatched_keys_through_and_expire_matched_ones() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let node = node_for(
        &origin,
        "",
        &format!(
            "[cache]\nram_size = \"64MiB\"\ndisk_size = \"64MiB\"\ndata_dir = \"{}\"\n\
             [[rules]]\npattern = \"{BUCKET}/nocache/**\"\ncache = false\n\
             [[rules]]\npattern = \"{BUCKET}/hot/**\"\nttl = \"1s\"\nblock_size = \"64KiB\"\n",
            dir.path().display()
        ),
    )
    .await;
    let body = data(300_000, 40);
    for k in ["other/x", "nocache/y", "hot/z"] {
        origin.put(BUCKET, k, body.clone());
    }
    let blocks_on_disk = || {
        walk(&dir.path().join("blocks"))
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "blk"))
            .count()
    };
    origin.stats.reset();
    for k in ["other/x", "nocache/y"] {
        assert_eq!(get(node.addr, k, None).await.unwrap(), body);
        assert_eq!(get(node.addr, k, None).await.unwrap(), body);
        // Never kept: each read went to the origin.
        assert_eq!(origin.stats.snapshot().gets_of(BUCKET, k), 2, "{k}");
    }
    let t = scrape(node.addr).await;
    assert_eq!(metric(&t, "shoal_node_uncached_requests_total"), 4.0);
    assert_eq!(metric(&t, "shoal_node_cache_bytes{tier=\"ram\"}"), 0.0);
    assert_eq!(blocks_on_disk(), 0);

    // A matched key is cached, in its rule's blocks, until its ttl. The ttl runs
    // from the blocks' fetch, somewhere between these two instants: a read that
    // starts a ttl after `fetched` may find them expired, and one that ends
    // less than a ttl after `before` may not; how long the fetch itself took on
    // a busy machine does not matter.
    let before = Instant::now();
    assert_eq!(get(node.addr, "hot/z", None).await.unwrap(), body);
    let fetched = Instant::now();
    assert_eq!(get(node.addr, "hot/z", None).await.unwrap(), body);
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "hot/z"),
        5,
        "64 KiB blocks"
    );
    assert_eq!(blocks_on_disk(), 5);
    // Read until the blocks come from the origin again: never before the ttl
    // (1 s), always by a read that starts after it.
    loop {
        let asked = fetched.elapsed();
        assert_eq!(get(node.addr, "hot/z", None).await.unwrap(), body);
        let done = before.elapsed();
        match origin.stats.snapshot().gets_of(BUCKET, "hot/z") {
            5 => assert!(
                asked < Duration::from_secs(1),
                "still cached {asked:?} after it was fetched (ttl 1 s)"
            ),
            10 => {
                assert!(
                    done >= Duration::from_secs(1),
                    "expired {done:?} after it was fetched, before its ttl"
                );
                break;
            }
            n => panic!("{n} origin GETs: expiry refetches all 5 blocks at once"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        value(node.addr, "shoal_node_expired_objects_total").await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_ttl_expires_a_key_that_plain_reads_keep_revalidating() {
    // Reads without If-Match revalidate the version every 200 ms; the ttl (1 s)
    // still runs from when the blocks were fetched.
    let origin = origin().await;
    let node = node_for(
        &origin,
        "revalidate_after = \"200ms\"",
        &format!("[[rules]]\npattern = \"{BUCKET}/hot/**\"\nttl = \"1s\"\n"),
    )
    .await;
    let body = data(100_000, 41);
    origin.put(BUCKET, "hot/r", body.clone());
    origin.stats.reset();
    let fetched = Instant::now();
    assert_eq!(get(node.addr, "hot/r", None).await.unwrap(), body);
    let refetched = std::sync::Mutex::new(None);
    wait_for(
        "the ttl expires the block",
        Duration::from_secs(5),
        || async {
            assert_eq!(get(node.addr, "hot/r", None).await.unwrap(), body);
            let gets = origin.stats.snapshot().gets_of(BUCKET, "hot/r");
            if gets >= 2 {
                *refetched.lock().unwrap() = Some(fetched.elapsed());
            }
            gets >= 2
        },
    )
    .await;
    let at = refetched.lock().unwrap().unwrap();
    assert!(
        at >= Duration::from_secs(1),
        "expired after {at:?}, before its ttl"
    );
    assert!(
        origin.stats.snapshot().count("HEAD") >= 2,
        "the reads revalidated in between"
    );
    assert_eq!(
        value(node.addr, "shoal_node_expired_objects_total").await,
        1.0
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_bad_rule_or_open_writes_stop_the_node_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[origin]\nendpoint = \"http://127.0.0.1:1\"\n[origin.credentials]\nanonymous = true\n[node]\nlisten = \"127.0.0.1:0\"\n[auth]\nmode = \"none\"\n[[rules]]\npattern = \"b/[unclosed\"\n",
    )
    .unwrap();
    let out = run_node_with(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rules[0].pattern"), "{err}");
    assert!(err.contains("not a glob"), "{err}");

    // Writes need authenticated clients.
    std::fs::write(
        &path,
        "[origin]\nendpoint = \"http://127.0.0.1:1\"\n[origin.credentials]\nanonymous = true\n[node]\nlisten = \"127.0.0.1:0\"\n[auth]\nmode = \"none\"\n[gateway]\nwrites = true\n",
    )
    .unwrap();
    let out = run_node_with(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("gateway.writes"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_reads_only_its_nodes_and_falls_back_to_the_origin_when_they_are_down() {
    let origin = origin().await;
    let mut a_nodes = owners(&origin, 2).await;
    let b_node = node_for(&origin, "", "").await;
    let list = format!(
        "[{{ id = \"{}\", zone = \"a\" }}, {{ id = \"{}\", zone = \"a\" }}, {{ id = \"{}\", zone = \"b\" }}]",
        a_nodes[0].addr, a_nodes[1].addr, b_node.addr
    );
    let cfg = parse(&format!(
        "{}[cluster]\nzone = \"a\"\nnodes = {list}\nconnect_timeout = \"300ms\"\n[cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n",
        node_toml(&origin, "", "")
    ));
    let reader = shoal::cluster::ClusterReader::new(
        (cfg.origin().unwrap()).client().unwrap(),
        cfg.cluster(),
        shoal::cluster::ReaderOptions {
            ram_bytes: 0,
            disk: None,
            ..Default::default()
        },
    );
    let body = data(6 * MIB, 41);
    origin.put(BUCKET, "z/obj", body.clone());
    let h = reader.open(BUCKET, "z/obj", None).await.unwrap();
    assert_eq!(h.read(0, body.len() as u64).await.unwrap(), body);
    let in_a: f64 = {
        let mut n = 0.0;
        for x in &a_nodes {
            n += value(x.addr, "shoal_node_origin_requests_total{kind=\"block\"}").await;
        }
        n
    };
    assert_eq!(in_a, 6.0, "zone a's nodes fetched every block");
    let asked = |t: &str| {
        metric(t, "shoal_node_misses_total{tier=\"ram\"}")
            + metric(t, "shoal_node_hits_total{tier=\"ram\"}")
    };
    assert_eq!(
        asked(&scrape(b_node.addr).await),
        0.0,
        "zone b's node was asked"
    );
    // Zone a goes down: reads go to the origin, counted, never to zone b.
    a_nodes.clear();
    let body2 = data(3 * MIB, 42);
    origin.put(BUCKET, "z/two", body2.clone());
    let h = reader.open(BUCKET, "z/two", None).await.unwrap();
    assert_eq!(h.read(0, body2.len() as u64).await.unwrap(), body2);
    let h = reader.open(BUCKET, "z/two", None).await.unwrap();
    assert_eq!(h.read(0, body2.len() as u64).await.unwrap(), body2);
    let mut reg = prometheus_client::registry::Registry::default();
    reader.refresh_gauges();
    reader.metrics.register(&mut reg);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
    assert!(
        metric(&text, "shoal_client_fallbacks_total{cause=\"zone_down\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(
        asked(&scrape(b_node.addr).await),
        0.0,
        "zone b's node was asked"
    );
}

/// Zones choose where reads and misses go, never who hears an invalidation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_reaches_every_zone_while_reads_stay_in_their_own() {
    let origin = origin().await;
    let (la, lb) = (listener().await, listener().await);
    let (a, b) = (la.local_addr().unwrap(), lb.local_addr().unwrap());
    let list =
        format!("[{{ id = \"{a}\", zone = \"zone-a\" }}, {{ id = \"{b}\", zone = \"zone-b\" }}]");
    let cfg = |zone: &str| {
        parse(&format!(
            "{}[cluster]\nmode = \"eventual\"\nzone = \"{zone}\"\nnodes = {list}\nconnect_timeout = \"300ms\"\n\
             [cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n",
            node_toml(&origin, "revalidate_after = \"1h\"", "")
        ))
    };
    let na = start_node_on(&cfg("zone-a"), la).await;
    let nb = start_node_on(&cfg("zone-b"), lb).await;
    let asked = |t: &str| {
        metric(t, "shoal_node_misses_total{tier=\"ram\"}")
            + metric(t, "shoal_node_hits_total{tier=\"ram\"}")
    };
    // A cold read through the zone-b node asks no zone-a node: the origin sends
    // every block to zone b, and zone a's node is asked nothing.
    let body = data(4 * MIB, 43);
    origin.put(BUCKET, "zp/obj", body.clone());
    origin.stats.reset();
    assert_eq!(get(nb.addr, "zp/obj", None).await.unwrap(), body);
    assert_eq!(
        asked(&scrape(na.addr).await),
        0.0,
        "zone a's node was asked"
    );
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "zp/obj"), 4);
    assert_eq!(get(na.addr, "zp/obj", None).await.unwrap(), body);
    // A purge sent to zone a reaches zone b, and zone b serves the new bytes.
    let changed = data(4 * MIB, 44);
    origin.put(BUCKET, "zp/obj", changed.clone());
    purge(
        &client(na.addr),
        BUCKET,
        &Purge::Key("zp/obj".into()),
        false,
    )
    .await
    .unwrap();
    until(
        nb.addr,
        "shoal_node_invalidations_total{kind=\"fanout\"}",
        1.0,
    )
    .await;
    assert_eq!(get(nb.addr, "zp/obj", None).await.unwrap(), changed);
    assert_eq!(get(na.addr, "zp/obj", None).await.unwrap(), changed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_owner_trips_the_breaker_and_a_full_queue_sheds_to_the_origin() {
    let origin = origin().await;
    // An owner whose origin is unreachable answers every miss with an error.
    let broken = start_node(&parse(
        &node_toml(&origin, "", "").replace(&origin.endpoint(), "http://127.0.0.1:1"),
    ))
    .await;
    let gw = node_for(
        &origin,
        "",
        &gateway_cluster(
            &[broken.addr],
            &[],
            "breaker_failures = 3\nbreaker_cooldown = \"30s\"",
        ),
    )
    .await;
    // A node streams a GET with a few blocks in flight, so the first several may all
    // reach the owner before the third failure trips the breaker; a dozen blocks make
    // sure later ones find it open.
    let body = data(12 * MIB, 43);
    origin.put(BUCKET, "b/obj", body.clone());
    assert_eq!(get(gw.addr, "b/obj", None).await.unwrap(), body);
    let t = scrape(gw.addr).await;
    assert!(metric(&t, "shoal_client_breaker_trips_total") >= 1.0, "{t}");
    assert!(metric(&t, "shoal_client_fallbacks_total{cause=\"down\"}") >= 1.0);

    // One peer request at a time and no patience: concurrent misses shed.
    let owner = node_for(&origin, "", "").await;
    let gw2 = node_for(
        &origin,
        "",
        &gateway_cluster(
            &[owner.addr],
            &[],
            "peer_concurrency = 1\npeer_queue_wait = \"1ms\"",
        ),
    )
    .await;
    let big = data(16 * MIB, 44);
    origin.put(BUCKET, "b/big", big.clone());
    assert_eq!(get(gw2.addr, "b/big", None).await.unwrap(), big);
    let t = scrape(gw2.addr).await;
    assert!(
        metric(&t, "shoal_client_fallbacks_total{cause=\"shed\"}") >= 1.0,
        "{t}"
    );
}

#[tokio::test]
async fn bad_purges_and_hop_counts_are_refused_and_change_nothing() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    origin.put(BUCKET, "keep/a", data(1000, 45));
    get(node.addr, "keep/a", None).await.unwrap();
    let signed = |query: &str, body: &str| {
        let (q, b) = (query.to_owned(), body.to_owned());
        async move {
            let url = format!("http://{}/{BUCKET}?{q}", node.addr);
            let signer = shoal::store::s3::Signer::new(
                &shoal::config::Credentials {
                    access_key_id: NODE_KEY.into(),
                    secret_access_key: NODE_SECRET.into(),
                    session_token: None,
                },
                "us-east-1",
            );
            let host = node.addr.to_string();
            let added = signer
                .sign_headers(
                    "POST",
                    &url,
                    &[("host", host.as_str())],
                    shoal::store::s3::Payload::Bytes(b.as_bytes()),
                    std::time::SystemTime::now(),
                )
                .unwrap();
            let mut req = reqwest::Client::new().post(&url).body(b);
            for (k, v) in added {
                req = req.header(k, v);
            }
            req.send().await.unwrap()
        }
    };
    for (query, body) in [
        ("shoal-purge=&shoal-local=", "nonsense\n"),
        ("shoal-purge=&shoal-local=", "key=\n"),
        ("shoal-purge=&shoal-local=", "keep=x\n"),
        ("shoal-purge=&key=a&prefix=b", ""),
        ("shoal-purge=", ""),
    ] {
        let r = signed(query, body).await;
        assert_eq!(r.status(), 400, "{query} / {body:?}");
        assert!(r.text().await.unwrap().contains("InvalidArgument"));
    }
    let r = reqwest::Client::new()
        .get(format!("http://{}/{BUCKET}/keep/a", node.addr))
        .header("x-shoal-hop", "many")
        .send()
        .await
        .unwrap();
    assert!(r.status() == 400 || r.status() == 403, "{}", r.status());
    // Still cached: nothing was purged.
    let t = scrape(node.addr).await;
    for kind in ["fanout", "local"] {
        let series = format!("shoal_node_invalidations_total{{kind=\"{kind}\"}}");
        assert_eq!(metric(&t, &series), 0.0, "{t}");
    }
    origin.stats.reset();
    get(node.addr, "keep/a", None).await.unwrap();
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "keep/a"), 0);
}

const BOTO3_WRITE: &str = r#"
import hashlib, os, sys, tempfile
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from boto3.s3.transfer import TransferConfig
endpoint, bucket, secret = sys.argv[1:4]
def client(secret):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="node-client", aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
s3 = client(secret)
data = os.urandom(20 * 1024 * 1024 + 11)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "big")
    open(path, "wb").write(data)
    # 8 MiB parts: a multipart upload through the gateway.
    s3.upload_file(path, bucket, "mp/big", Config=TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20))
s3.put_object(Bucket=bucket, Key="mp/small", Body=b"small object")
try:
    client("wrong-secret").put_object(Bucket=bucket, Key="mp/forged", Body=b"x")
    raise SystemExit("a wrongly signed PUT was accepted")
except ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
up = s3.create_multipart_upload(Bucket=bucket, Key="mp/aborted")
s3.abort_multipart_upload(Bucket=bucket, Key="mp/aborted", UploadId=up["UploadId"])
print(hashlib.md5(data).hexdigest())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_multipart_upload_through_a_gateway_is_warm_everywhere() {
    let origin = origin().await;
    let (_owners, a, b) = writer_and_reader(&origin).await;
    let out = tokio::process::Command::new("python3")
        .args(["-c", BOTO3_WRITE])
        .arg(format!("http://{}", a.addr))
        .args([BUCKET, NODE_SECRET])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let big = origin
        .get(BUCKET, "mp/big")
        .expect("the upload reached the origin");
    assert_eq!(big.len(), 20 * MIB + 11);
    assert_eq!(md5_hex(&big), stdout, "uploaded bytes differ");
    assert_eq!(
        &origin.get(BUCKET, "mp/small").unwrap()[..],
        b"small object"
    );
    assert!(origin.get(BUCKET, "mp/forged").is_none());
    assert!(origin.get(BUCKET, "mp/aborted").is_none());
    let t = scrape(a.addr).await;
    assert_eq!(
        metric(&t, "shoal_node_writes_total{kind=\"multipart_part\"}"),
        3.0
    );
    assert_eq!(
        metric(&t, "shoal_node_writes_total{kind=\"multipart_complete\"}"),
        1.0
    );
    assert_eq!(
        metric(&t, "shoal_node_writes_total{kind=\"multipart_abort\"}"),
        1.0
    );
    // Both objects warmed: 21 + 1 blocks.
    until(a.addr, "shoal_node_warms_done_total", 2.0).await;
    assert_eq!(
        metric(
            &scrape(a.addr).await,
            "shoal_node_warmed_blocks_total{kind=\"ok\"}"
        ),
        22.0
    );
    origin.stats.reset();
    assert_eq!(get(b.addr, "mp/big", None).await.unwrap(), big);
    assert_eq!(origin.stats.snapshot().count("GET"), 0);
}

fn md5_hex(b: &[u8]) -> String {
    use md5::Digest;
    md5::Md5::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_done_at_the_origin_even_when_no_node_can_be_told() {
    let origin = origin().await;
    // The only other node is unreachable: every invalidation batch fails.
    let dead: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let a = node_for(
        &origin,
        "",
        &format!(
            "{}[gateway]\nwrites = true\n",
            gateway_cluster(&[dead], &[], "mode = \"eventual\"")
        ),
    )
    .await;
    origin.put(BUCKET, "gone", data(5000, 46));
    assert_eq!(get(a.addr, "gone", None).await.unwrap().len(), 5000);
    client(a.addr).delete_object(BUCKET, "gone").await.unwrap();
    assert!(
        origin.get(BUCKET, "gone").is_none(),
        "the delete reached the origin"
    );
    let r = get(a.addr, "gone", None).await;
    assert!(
        matches!(r, Err(ref e) if matches!(e.cause(), StoreError::NoSuchKey { .. })),
        "{r:?}"
    );
    until(
        a.addr,
        "shoal_node_fanout_batches_total{kind=\"failed\"}",
        1.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_through_a_gateway_asks_the_owner_and_moves_no_block() {
    let origin = origin().await;
    let owners = owners(&origin, 2).await;
    let ids: Vec<SocketAddr> = owners.iter().map(|n| n.addr).collect();
    let gw = node_for(&origin, "", &gateway_cluster(&ids, &[], "")).await;
    let body = data(3 * MIB, 47);
    let etag = origin.put(BUCKET, "h/obj", body);
    origin.stats.reset();
    let meta = client(gw.addr)
        .head_object(&GetObject::new(BUCKET, "h/obj"))
        .await
        .unwrap();
    assert_eq!(meta.size, 3 * MIB as u64);
    assert_eq!(meta.etag, etag);
    let s = origin.stats.snapshot();
    assert_eq!(s.count("GET"), 0, "a HEAD made the origin send bytes");
    assert_eq!(s.count("HEAD"), 1, "the owner asked the origin once");
    let t = scrape(gw.addr).await;
    assert_eq!(metric(&t, "shoal_node_cluster_fetches_total"), 0.0);
    assert_eq!(
        metric(&t, "shoal_client_blocks_total{source=\"node\"}"),
        0.0
    );
    // A missing key is an answer from the owner, not a fallback.
    let missing = client(gw.addr)
        .head_object(&GetObject::new(BUCKET, "h/none"))
        .await;
    assert!(matches!(missing, Err(ref e) if matches!(e.cause(), StoreError::NoSuchKey { .. })));
    // Both HEADs asked of an owner, neither read from the origin instead.
    let t = scrape(gw.addr).await;
    let series = "shoal_node_origin_requests_total{kind=\"cluster_head\"}";
    assert_eq!(metric(&t, series), 2.0, "{t}");
    assert!(
        metric_sum(&t, "shoal_client_node_requests_total") >= 2.0,
        "{t}"
    );
    for family in ["fallbacks", "metadata_fallbacks"] {
        let all = metric_sum(&t, &format!("shoal_client_{family}_total"));
        assert_eq!(all, 0.0, "{t}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_puts_and_stored_headers_reach_the_origin_as_the_client_sent_them() {
    let origin = origin().await;
    let owners = owners(&origin, 2).await;
    let ids: Vec<SocketAddr> = owners.iter().map(|n| n.addr).collect();
    let gw = node_for(
        &origin,
        "",
        &format!(
            "{}[gateway]\nwrites = true\n",
            gateway_cluster(&ids, &[], "")
        ),
    )
    .await;
    let (through, direct) = (client(gw.addr), origin_client(&origin));
    let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let put = |c: &shoal::store::s3::S3Client, key: &str, body: &'static [u8], hs| {
        let (c, key) = (c.clone(), key.to_owned());
        async move {
            c.put_object_with(BUCKET, &key, bytes::Bytes::from_static(body), hs)
                .await
        }
    };
    let refused = |r: &Result<String, StoreError>| matches!(r, Err(e) if matches!(e.cause(), StoreError::PreconditionFailed { .. }));
    // If-None-Match: * writes only where nothing is, through the gateway as at
    // the origin, and a refused write changes nothing anywhere.
    for (c, key) in [(&through, "c/new-gw"), (&direct, "c/new-direct")] {
        let first = put(c, key, b"first", h(&[("if-none-match", "*")])).await;
        assert!(first.is_ok(), "{key}: {first:?}");
        let again = put(c, key, b"second", h(&[("if-none-match", "*")])).await;
        assert!(refused(&again), "{key}: {again:?}");
        assert_eq!(origin.get(BUCKET, key).unwrap(), &b"first"[..]);
    }
    // (The invalidations of the write went to both owners.)
    until(gw.addr, "shoal_node_fanout_batches_total{kind=\"ok\"}", 2.0).await;
    for n in ids.iter().chain([&gw.addr]) {
        assert_eq!(get(*n, "c/new-gw", None).await.unwrap(), &b"first"[..]);
    }
    // If-Match: only over the version named; a wrong one is refused.
    let etag = through
        .head_object(&GetObject::new(BUCKET, "c/new-gw"))
        .await
        .unwrap()
        .etag;
    let wrong = put(&through, "c/new-gw", b"x", h(&[("if-match", "\"0123\"")])).await;
    assert!(refused(&wrong), "{wrong:?}");
    let quoted = format!("\"{etag}\"");
    let right = put(&through, "c/new-gw", b"third", h(&[("if-match", &quoted)])).await;
    assert!(right.is_ok(), "{right:?}");
    // Every node reads the new version once the write's invalidations are in.
    until(gw.addr, "shoal_node_fanout_batches_total{kind=\"ok\"}", 4.0).await;
    for n in ids.iter().chain([&gw.addr]) {
        assert_eq!(
            get(*n, "c/new-gw", None).await.unwrap(),
            &b"third"[..],
            "{n}"
        );
    }
    // What the object is stored with goes along.
    put(
        &through,
        "c/typed",
        b"{}",
        h(&[
            ("content-type", "application/json"),
            ("cache-control", "max-age=7"),
            ("x-amz-meta-color", "teal"),
        ]),
    )
    .await
    .unwrap();
    let meta = direct
        .head_object(&GetObject::new(BUCKET, "c/typed"))
        .await
        .unwrap();
    assert_eq!(meta.content_type.as_deref(), Some("application/json"));
    let stored: std::collections::BTreeMap<_, _> = meta.headers.into_iter().collect();
    assert_eq!(
        stored.get("cache-control").map(String::as_str),
        Some("max-age=7")
    );
    assert_eq!(
        stored.get("x-amz-meta-color").map(String::as_str),
        Some("teal")
    );
}
