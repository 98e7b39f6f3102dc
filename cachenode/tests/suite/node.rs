//! shoal-node against the real local origin: bytes, coalescing, versions, auth,
//! hostile input and tier bounds.

use std::time::{Duration, Instant};

use crate::common::*;
use futures_util::future::join_all;
use rand::Rng;
use shoal::store::{ByteRange, GetObject, StoreError};

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn every_range_equals_the_origin_bytes() {
    let origin = origin().await;
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let c = client(node.addr);
    let objects = [
        ("zero", 0usize),
        ("one", 1),
        ("block", MIB as usize),
        ("block-plus-one", MIB as usize + 1),
        ("fifty", 50 * MIB as usize),
    ];
    let mut rng = rand::rng();
    for (i, (name, len)) in objects.iter().enumerate() {
        let body = data(*len, i as u64 + 1);
        let etag = origin.put(BUCKET, name, body.clone());
        // Whole object.
        let (meta, got) = c.get_bytes(&GetObject::new(BUCKET, *name)).await.unwrap();
        assert_eq!(
            (meta.etag.as_str(), meta.size),
            (etag.as_str(), *len as u64)
        );
        assert!(got == body, "{name}: whole object differs");
        if *len == 0 {
            let r = c
                .get_bytes(&GetObject::new(BUCKET, *name).range(ByteRange::span(0, 1)))
                .await;
            assert!(matches!(r, Err(StoreError::InvalidRange { .. })), "{r:?}");
            continue;
        }
        let n = *len as u64;
        let mut ranges = vec![(0, 1), (n - 1, n), (0, n)];
        for _ in 0..25 {
            let a = rng.random_range(0..n);
            let b = rng.random_range(a + 1..=n.min(a + 3 * MIB));
            ranges.push((a, b));
        }
        for (a, b) in ranges {
            let (_, got) = c
                .get_bytes(&GetObject::new(BUCKET, *name).range(ByteRange::span(a, b)))
                .await
                .unwrap();
            assert!(
                got == body.slice(a as usize..b as usize),
                "{name}: range {a}..{b} differs"
            );
        }
        let (_, got) = c
            .get_bytes(&GetObject::new(BUCKET, *name).range(ByteRange::Suffix(1)))
            .await
            .unwrap();
        assert_eq!(got, body.slice(*len - 1..));
        let (_, got) = c
            .get_bytes(&GetObject::new(BUCKET, *name).range(ByteRange::From {
                first: n / 2,
                last: None,
            }))
            .await
            .unwrap();
        assert!(got == body.slice(*len / 2..));
    }
    // HEAD agrees.
    let meta = c
        .head_object(&GetObject::new(BUCKET, "fifty"))
        .await
        .unwrap();
    assert_eq!(meta.size, 50 * MIB);
    let r = c.get_bytes(&GetObject::new(BUCKET, "missing")).await;
    assert!(matches!(r, Err(StoreError::NoSuchKey { .. })), "{r:?}");
}

#[tokio::test]
async fn concurrent_cold_reads_fetch_each_block_once() {
    let origin = origin().await;
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let body = data(10 * MIB as usize, 9);
    origin.put(BUCKET, "hot", body.clone());
    origin.stats.reset();
    let c = client(node.addr);
    let range = ByteRange::span(MIB, 9 * MIB);
    let reads = (0..16).map(|_| {
        let c = c.clone();
        async move {
            c.get_bytes(&GetObject::new(BUCKET, "hot").range(range))
                .await
                .unwrap()
                .1
        }
    });
    for got in join_all(reads).await {
        assert!(got == body.slice(MIB as usize..9 * MIB as usize));
    }
    let s = origin.stats.snapshot();
    assert_eq!(
        s.gets_of(BUCKET, "hot"),
        8,
        "one origin GET per 1 MiB block: {:?}",
        s.requests
    );
    let text = scrape(node.addr).await;
    assert!(
        metric(&text, "shoal_node_coalesced_waits_total") > 0.0,
        "{text}"
    );
    // Warm: no origin traffic at all.
    for _ in 0..3 {
        let (_, got) = c
            .get_bytes(&GetObject::new(BUCKET, "hot").range(range))
            .await
            .unwrap();
        assert!(got == body.slice(MIB as usize..9 * MIB as usize));
    }
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "hot"), 8);
    // A small range on a miss widens to a whole block; later ranges in it hit.
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "hot").range(ByteRange::span(9 * MIB + 5, 9 * MIB + 10)))
        .await
        .unwrap();
    assert_eq!(got, body.slice(9 * MIB as usize + 5..9 * MIB as usize + 10));
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "hot").range(ByteRange::span(10 * MIB - 3, 10 * MIB)))
        .await
        .unwrap();
    assert_eq!(got, body.slice(10 * MIB as usize - 3..));
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "hot"), 9);
}

#[tokio::test]
async fn versions_are_never_mixed() {
    let origin = origin().await;
    let node = node_for(&origin, "revalidate_after = \"200ms\"", "").await;
    let c = client(node.addr);
    let old_body = data(3 * MIB as usize, 1);
    let old = origin.put(BUCKET, "v", old_body.clone());
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "v").if_match(&old))
        .await
        .unwrap();
    assert!(got == old_body);
    let new_body = data(3 * MIB as usize, 2);
    let new = origin.put(BUCKET, "v", new_body.clone());
    // Pinned to the old version: a cached block is still that version's bytes...
    let (_, got) = c
        .get_bytes(
            &GetObject::new(BUCKET, "v")
                .if_match(&old)
                .range(ByteRange::span(0, 100)),
        )
        .await
        .unwrap();
    assert_eq!(got, old_body.slice(0..100));
    // ...and a block the node never had cannot be fetched for it: 412.
    node.app.node.purge_object(BUCKET, "v").await;
    let r = c
        .get_bytes(&GetObject::new(BUCKET, "v").if_match(&old))
        .await;
    assert!(
        matches!(r, Err(StoreError::PreconditionFailed { .. })),
        "{r:?}"
    );
    // Unpinned: the new bytes within revalidate_after.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (meta, got) = c.get_bytes(&GetObject::new(BUCKET, "v")).await.unwrap();
        assert!(got == old_body || got == new_body, "a mix of versions");
        if meta.etag == new {
            assert!(got == new_body);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new version not seen within the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "v").if_match(&new))
        .await
        .unwrap();
    assert!(got == new_body);
}

#[tokio::test]
async fn authentication_is_enforced() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    origin.put(BUCKET, "a", data(100, 3));
    let bad = node_s3_client(&node.addr.to_string(), NODE_KEY, "wrong-secret");
    let r = bad.get_bytes(&GetObject::new(BUCKET, "a")).await;
    assert!(matches!(r, Err(StoreError::AccessDenied { .. })), "{r:?}");
    let unknown = node_s3_client(&node.addr.to_string(), "nobody", NODE_SECRET);
    assert!(matches!(
        unknown.get_bytes(&GetObject::new(BUCKET, "a")).await,
        Err(StoreError::AccessDenied { .. })
    ));
    // No signature at all.
    let resp = reqwest::get(format!("http://{}/{BUCKET}/a", node.addr))
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(resp
        .text()
        .await
        .unwrap()
        .contains("<Code>AccessDenied</Code>"));
    // A presigned URL works, including with an unsigned Range.
    let url = client(node.addr)
        .presign_get(BUCKET, "a", Duration::from_secs(60))
        .await
        .unwrap();
    let resp = reqwest::Client::new()
        .get(&url)
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 206);
    assert_eq!(resp.bytes().await.unwrap(), data(100, 3).slice(10..20));
    // Writes are refused.
    let r = client(node.addr)
        .put_object(BUCKET, "w", bytes::Bytes::from_static(b"x"))
        .await;
    assert!(
        matches!(r, Err(StoreError::BadRequest { status: 405, .. })),
        "{r:?}"
    );
    assert!(origin.store.get(BUCKET, "w").is_err());
}

#[tokio::test]
async fn auth_none_must_be_asked_for_and_then_serves_anyone() {
    let origin = origin().await;
    let toml = without_auth(&node_toml(&origin, "", ""));
    let node = start_node(&parse(&toml)).await;
    origin.put(BUCKET, "open", data(10, 4));
    let resp = reqwest::get(format!("http://{}/{BUCKET}/open", node.addr))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap(), data(10, 4));
    // A signed request works too (the signature is ignored).
    let (_, got) = node_s3_client(&node.addr.to_string(), "any", "thing")
        .get_bytes(&GetObject::new(BUCKET, "open"))
        .await
        .unwrap();
    assert_eq!(got, data(10, 4));
    // Without an [auth] section the node refuses to start.
    let no_auth = node_toml(&origin, "", "").replace(
        &format!("[auth]\n[[auth.keys]]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\nallow = [\"*:*\"]"),
        "",
    );
    let err = shoal_node::build(&parse(&no_auth), None).err().unwrap();
    assert!(
        err.contains("[auth]") && err.contains("mode = \"none\""),
        "{err}"
    );
}

#[tokio::test]
async fn tiers_never_exceed_their_bounds() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = node_toml(
        &origin,
        "block_size = \"256KiB\"",
        &format!(
            "[cache]\nram_size = \"2MiB\"\ndisk_size = \"4MiB\"\ndata_dir = \"{}\"",
            dir.path().display()
        ),
    );
    let node = start_node(&parse(&toml)).await;
    let c = client(node.addr);
    // 3x the combined capacity, in distinct blocks, read twice.
    let body = data(18 * MIB as usize, 5);
    origin.put(BUCKET, "big", body.clone());
    for pass in 0..2 {
        for i in 0..18u64 {
            let (_, got) = c
                .get_bytes(
                    &GetObject::new(BUCKET, "big").range(ByteRange::span(i * MIB, (i + 1) * MIB)),
                )
                .await
                .unwrap();
            assert!(
                got == body.slice((i * MIB) as usize..((i + 1) * MIB) as usize),
                "pass {pass} MiB {i}"
            );
            let text = scrape(node.addr).await;
            let ram = metric(&text, "shoal_node_cache_bytes{tier=\"ram\"}");
            let disk = metric(&text, "shoal_node_cache_bytes{tier=\"disk\"}");
            assert!(
                ram <= (2 * MIB) as f64 && disk <= (4 * MIB) as f64,
                "ram {ram} disk {disk}"
            );
            // The files are counted once the blocks' writes (which follow the
            // answer) have ended: a walk over directories while one block is
            // written and another evicted can count both.
            shoal_testkit::wait_for(
                "the node's disk writes to end",
                Duration::from_secs(20),
                || async {
                    metric_required(&scrape(node.addr).await, "shoal_node_disk_writes") == 0.0
                },
            )
            .await;
            let on_disk: u64 = walk(dir.path());
            assert!(on_disk <= 4 * MIB, "files on disk: {on_disk}");
        }
    }
    let text = scrape(node.addr).await;
    assert!(
        metric(&text, "shoal_node_evictions_total{tier=\"disk\"}") > 0.0,
        "{text}"
    );
}

fn walk(p: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += walk(&e.path());
        } else {
            n += e.metadata().unwrap().len();
        }
    }
    n
}

#[tokio::test]
async fn listing_and_head_bucket_pass_through() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    for i in 0..30 {
        origin.put(BUCKET, &format!("dir/{i:02}"), data(i, i as u64));
    }
    let c = client(node.addr);
    let page = c.list_all(BUCKET, "dir/", None).await.unwrap();
    assert_eq!(page.objects.len(), 30);
    assert_eq!(page.objects[7].size, 7);
    c.head_bucket(BUCKET).await.unwrap();
    assert!(matches!(
        c.head_bucket("no-such-bucket-here").await,
        Err(StoreError::NoSuchBucket { .. })
    ));
}

#[tokio::test]
async fn purge_drops_cached_blocks() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    let c = client(node.addr);
    origin.put(BUCKET, "p/a", data(1000, 1));
    origin.put(BUCKET, "p/b", data(1000, 2));
    c.get_bytes(&GetObject::new(BUCKET, "p/a")).await.unwrap();
    c.get_bytes(&GetObject::new(BUCKET, "p/b")).await.unwrap();
    origin.stats.reset();
    // Unsigned purge is refused.
    let r = reqwest::Client::new()
        .post(format!(
            "http://{}/{BUCKET}?shoal-purge&prefix=p/",
            node.addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let answer = shoal::node_proto::purge::purge(
        &c,
        BUCKET,
        &shoal::node_proto::Purge::Prefix("p/".into()),
        false,
    )
    .await
    .unwrap();
    assert!(answer.contains("\"purged_blocks\":2"), "{answer}");
    c.get_bytes(&GetObject::new(BUCKET, "p/a")).await.unwrap();
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "p/a"), 1);
}

#[tokio::test]
async fn cached_only_requests_never_reach_the_origin() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    let c = client(node.addr);
    let body = data(3 * MIB as usize, 31);
    let etag = origin.put(BUCKET, "co", body.clone());
    origin.stats.reset();
    let mut req = GetObject::new(BUCKET, "co")
        .if_match(&etag)
        .range(ByteRange::span(0, MIB));
    shoal::node_proto::set_cached_only(&mut req, true);
    let e = c.get_bytes(&req).await.unwrap_err();
    assert!(shoal::node_proto::is_not_cached(&e), "{e:?}");
    assert_eq!(
        origin.stats.snapshot().count("GET") + origin.stats.snapshot().count("HEAD"),
        0
    );
    // Cache block 0 with a normal read; then cached-only serves it, and still
    // refuses block 1.
    shoal::node_proto::set_cached_only(&mut req, false);
    c.get_bytes(&req).await.unwrap();
    shoal::node_proto::set_cached_only(&mut req, true);
    let (_, got) = c.get_bytes(&req).await.unwrap();
    assert!(got == body.slice(0..MIB as usize));
    let mut far = GetObject::new(BUCKET, "co")
        .if_match(&etag)
        .range(ByteRange::span(MIB, 2 * MIB));
    shoal::node_proto::set_cached_only(&mut far, true);
    assert!(shoal::node_proto::is_not_cached(
        &c.get_bytes(&far).await.unwrap_err()
    ));
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "co"),
        1,
        "one GET, no HEAD: the pinned block supplied the size"
    );
    assert_eq!(origin.stats.snapshot().count("HEAD"), 0);
}

#[tokio::test]
async fn metrics_answer_in_the_format_the_scraper_asks_for() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    origin.put(BUCKET, "m", data(10, 1));
    client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "m"))
        .await
        .unwrap();
    let get = |accept: Option<&'static str>| {
        let url = format!("http://{}/metrics", node.addr);
        async move {
            let mut req = reqwest::Client::new().get(url);
            if let Some(a) = accept {
                req = req.header("accept", a);
            }
            let resp = req.send().await.unwrap();
            let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
            (ct, resp.text().await.unwrap())
        }
    };
    // Prometheus asks for OpenMetrics: counter families without `_total`, `# EOF`.
    let (ct, open) = get(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    ))
    .await;
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(
        open.contains("# TYPE shoal_node_origin_bytes counter\n"),
        "{open}"
    );
    assert!(open.trim_end().ends_with("# EOF"));
    // A classic scraper (or curl) gets the classic text: the type names the series.
    let (ct, classic) = get(None).await;
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    assert!(
        classic.contains("# TYPE shoal_node_origin_bytes_total counter\n"),
        "{classic}"
    );
    assert!(!classic.contains("# EOF"));
    assert_eq!(
        metric(&classic, "shoal_node_origin_bytes_total"),
        metric(&open, "shoal_node_origin_bytes_total")
    );
    assert_eq!(metric(&classic, "shoal_node_origin_bytes_total"), 10.0);
}
