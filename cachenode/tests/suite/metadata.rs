//! The metadata cache of a node: listings asked with `x-shoal-metadata-ttl` (or
//! under a rule's `list_ttl`) are the origin's answers byte for byte, coalesced
//! and kept; without either they pass through as they always did; purges and
//! gateway writes drop what they change; missing keys are remembered for the
//! askers that accept it; bad values are refused before the origin is asked.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use http::Method;
use shoal::node_proto::purge::purge;
use shoal::node_proto::{Purge, METADATA_TTL_HEADER};
use shoal::store::s3::{parse, S3Client};
use shoal::store::{GetObject, ObjectStore, StoreError};

/// Keys no XML carries unencoded, spaces, pluses, percent signs, other scripts,
/// a file and a directory of the same name, and a directory marker.
const ODD_KEYS: &[&str] = &[
    "plain/a.txt",
    "plain/b.txt",
    "with space/and+plus%25.bin",
    "ünïcødé/日本語/ファイル.bin",
    "ctl/\u{1}start",
    "ctl/tab\there",
    "xml/<&>'\".txt",
    "same",
    "same/inside",
    "dir/",
    "dir/x",
    "deep/a/b/c/d",
];

/// One raw answer: status, the headers a test looks at, body.
struct Raw {
    status: u16,
    age: Option<String>,
    body: bytes::Bytes,
}

async fn get_raw(c: &S3Client, query: &[(&str, &str)], headers: &[(&'static str, &str)]) -> Raw {
    let q = query
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let h = headers.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let mut got = c
        .forward(Method::GET, BUCKET, "", q, h)
        .await
        .expect("an answer");
    let mut body = Vec::new();
    use futures_util::TryStreamExt;
    while let Some(chunk) = got.body.try_next().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    Raw {
        status: got.status,
        age: got
            .headers
            .get("age")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: body.into(),
    }
}

/// Every page of a listing, following continuation tokens.
async fn pages(c: &S3Client, base: &[(&str, &str)], headers: &[(&'static str, &str)]) -> Vec<Raw> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut q: Vec<(&str, &str)> = base.to_vec();
        if let Some(t) = &token {
            q.push(("continuation-token", t));
        }
        let page = get_raw(c, &q, headers).await;
        assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
        token = parse::list_objects(&page.body)
            .unwrap()
            .next_continuation_token
            .filter(|_| parse::list_objects(&page.body).unwrap().is_truncated);
        out.push(page);
        if token.is_none() {
            return out;
        }
    }
}

const TTL: (&str, &str) = (METADATA_TTL_HEADER, "30");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_through_the_cache_are_the_origins_byte_for_byte_and_kept() {
    let o = origin().await;
    for (i, k) in ODD_KEYS.iter().enumerate() {
        o.put(BUCKET, k, data(10 + i, i as u64));
    }
    let n = node_for(&o, "", "").await;
    let (node, origin) = (client(n.addr), origin_client(&o));
    let listings: &[&[(&str, &str)]] = &[
        &[
            ("list-type", "2"),
            ("delimiter", "/"),
            ("encoding-type", "url"),
        ],
        &[
            ("list-type", "2"),
            ("max-keys", "3"),
            ("encoding-type", "url"),
        ],
        &[
            ("list-type", "2"),
            ("prefix", "ctl/"),
            ("encoding-type", "url"),
        ],
        &[
            ("list-type", "2"),
            ("prefix", "same"),
            ("delimiter", "/"),
            ("max-keys", "1"),
        ],
        &[
            ("list-type", "2"),
            ("start-after", "deep"),
            ("fetch-owner", "true"),
        ],
        // ListObjects v1, markers and all.
        &[
            ("delimiter", "/"),
            ("marker", "ctl"),
            ("encoding-type", "url"),
        ],
    ];
    for q in listings {
        let want = pages(&origin, q, &[]).await;
        let before = o.stats.snapshot().lists();
        let first = pages(&node, q, &[TTL]).await;
        assert_eq!(o.stats.snapshot().lists() - before, want.len() as u64);
        let again = pages(&node, q, &[TTL]).await;
        assert_eq!(
            o.stats.snapshot().lists() - before,
            want.len() as u64,
            "{q:?}: the second walk is answered by the cache"
        );
        assert_eq!(first.len(), want.len(), "{q:?}");
        for ((w, f), a) in want.iter().zip(&first).zip(&again) {
            assert_eq!(f.body, w.body, "{q:?}: the first answer is the origin's");
            assert_eq!(a.body, w.body, "{q:?}: the kept answer is the origin's");
            assert!(
                f.age.is_none() && a.age.is_some(),
                "{q:?}: Age says it was kept"
            );
        }
    }
    // Nothing was listed twice at the origin for the node's askers, and the
    // metrics say so.
    let m = scrape(n.addr).await;
    assert!(
        metric(
            &m,
            "shoal_node_metadata_requests_total{op=\"list\",result=\"hit\"}"
        ) >= 6.0
    );
    assert!(metric(&m, "shoal_node_metadata_entries") >= 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_identical_listings_at_once_cost_the_origin_one() {
    let o = origin().await;
    for i in 0..20 {
        o.put(BUCKET, &format!("d/f{i:02}"), data(5, i));
    }
    let n = node_for(&o, "", "").await;
    let node = Arc::new(client(n.addr));
    // Slow enough that every request arrives while the first is in flight.
    o.faults.set(shoal_testorigin::FaultSettings {
        first_byte_delay_ms: 300,
        ..Default::default()
    });
    let before = o.stats.snapshot().lists();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            get_raw(&node, &[("list-type", "2"), ("prefix", "d/")], &[TTL]).await
        }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        bodies.push(r.body);
    }
    o.faults.clear();
    assert_eq!(o.stats.snapshot().lists() - before, 1, "one origin LIST");
    assert!(bodies.iter().all(|b| *b == bodies[0]));
    let m = scrape(n.addr).await;
    let joined = metric(
        &m,
        "shoal_node_metadata_requests_total{op=\"list\",result=\"coalesced\"}",
    ) + metric(
        &m,
        "shoal_node_metadata_requests_total{op=\"list\",result=\"hit\"}",
    );
    assert_eq!(joined, 49.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_clients_get_the_origin_verbatim_unless_a_rule_says_list_ttl() {
    let o = origin().await;
    o.put(BUCKET, "logs/a", data(3, 1));
    o.put(BUCKET, "data/a", data(3, 2));
    // No rule: every listing goes to the origin, as before this cache existed.
    let n = node_for(&o, "", "").await;
    let c = client(n.addr);
    let before = o.stats.snapshot().lists();
    for _ in 0..3 {
        let r = get_raw(&c, &[("list-type", "2"), ("prefix", "data/")], &[]).await;
        assert!(r.age.is_none());
    }
    assert_eq!(o.stats.snapshot().lists() - before, 3);
    drop(n);
    // A rule with a list_ttl on data/: its listings are kept for plain clients too.
    let n = node_for(
        &o,
        "",
        "[[rules]]\npattern = \"shoal-test/data/**\"\nlist_ttl = \"1m\"\n\
         [[rules]]\npattern = \"shoal-test/**\"\n",
    )
    .await;
    let c = client(n.addr);
    let before = o.stats.snapshot().lists();
    for _ in 0..3 {
        get_raw(&c, &[("list-type", "2"), ("prefix", "data/")], &[]).await;
        get_raw(&c, &[("list-type", "2"), ("prefix", "logs/")], &[]).await;
    }
    assert_eq!(
        o.stats.snapshot().lists() - before,
        1 + 3,
        "data/ listed once, logs/ every time"
    );
    // The library's own client asks with its own query (list-type, encoding-type):
    // a different identity, so the first is fetched and the second is the kept one.
    let ask = shoal::store::ListRequest {
        bucket: BUCKET.into(),
        prefix: "data/".into(),
        ..Default::default()
    };
    let first = c.list_page(&ask).await.unwrap();
    let again = c.list_page(&ask).await.unwrap();
    assert_eq!(first.objects.len(), 1);
    assert_eq!(again.objects.len(), 1);
    assert!(first.age.is_none() && again.age.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_and_gateway_writes_drop_the_listings_they_change() {
    let o = origin().await;
    o.put(BUCKET, "d/a", data(3, 1));
    o.put(BUCKET, "e/a", data(3, 2));
    let n = node_for(&o, "", "[gateway]\nwrites = true\n").await;
    let c = client(n.addr);
    let list = |prefix: &'static str| {
        let c = c.clone();
        async move {
            let r = get_raw(&c, &[("list-type", "2"), ("prefix", prefix)], &[TTL]).await;
            parse::list_objects(&r.body)
                .unwrap()
                .contents
                .into_iter()
                .map(|c| c.key)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("d/").await, ["d/a"]);
    assert_eq!(list("e/").await, ["e/a"]);
    // Written behind the node's back: the kept listing stands (within its TTL)...
    o.put(BUCKET, "d/b", data(3, 3));
    assert_eq!(list("d/").await, ["d/a"]);
    // ...until a purge of the prefix drops it.
    purge(&c, BUCKET, &Purge::Prefix("d/".into()), false)
        .await
        .unwrap();
    assert_eq!(list("d/").await, ["d/a", "d/b"]);
    // A PUT through the gateway drops its parent's listing, and only that.
    let before = o.stats.snapshot().lists();
    c.put_object(BUCKET, "e/b", bytes::Bytes::from_static(b"new"))
        .await
        .unwrap();
    assert_eq!(list("e/").await, ["e/a", "e/b"]);
    assert_eq!(list("d/").await, ["d/a", "d/b"]);
    assert_eq!(
        o.stats.snapshot().lists() - before,
        1,
        "only e/ was listed again"
    );
    // So does a DELETE.
    c.delete_object(BUCKET, "e/a").await.unwrap();
    assert_eq!(list("e/").await, ["e/b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_keys_are_remembered_for_askers_that_accept_it_and_forgotten_on_purge() {
    let o = origin().await;
    let n = node_for(&o, "", "").await;
    let c = client(n.addr);
    let head = |ttl: bool| {
        let c = c.clone();
        async move {
            let mut req = GetObject::new(BUCKET, "later");
            if ttl {
                shoal::node_proto::set_metadata_ttl(&mut req, Duration::from_secs(30));
            }
            c.head_object(&req).await
        }
    };
    let before = o.stats.snapshot().object_heads();
    for _ in 0..3 {
        assert!(matches!(
            head(true).await,
            Err(StoreError::NoSuchKey { .. })
        ));
    }
    assert_eq!(o.stats.snapshot().object_heads() - before, 1);
    // A plain client is never told from memory that a key is missing.
    assert!(matches!(
        head(false).await,
        Err(StoreError::NoSuchKey { .. })
    ));
    assert_eq!(o.stats.snapshot().object_heads() - before, 2);
    o.put(BUCKET, "later", data(7, 1));
    purge(&c, BUCKET, &Purge::Key("later".into()), false)
        .await
        .unwrap();
    assert_eq!(head(true).await.unwrap().size, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_metadata_ttls_are_refused_before_the_origin_is_asked() {
    let o = origin().await;
    o.put(BUCKET, "k", data(3, 1));
    let n = node_for(&o, "", "").await;
    let c = client(n.addr);
    let before = o.stats.snapshot();
    for bad in ["-1", "soon", "1e9", "NaN"] {
        let r = get_raw(&c, &[("list-type", "2")], &[(METADATA_TTL_HEADER, bad)]).await;
        assert_eq!(r.status, 400, "{bad}");
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            body.contains("InvalidArgument") && body.contains("x-shoal-metadata-ttl"),
            "{body}"
        );
    }
    let after = o.stats.snapshot();
    assert_eq!(after.lists(), before.lists());
    // A config asking for more than a day is refused with the key named.
    let e = shoal::config::Config::parse(
        &node_toml(&o, "", "[cache]\nmetadata_ttl = \"2d\"\n"),
        "n.toml",
        &shoal::config::ProcessEnv,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cache.metadata_ttl"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_age_ask_is_answered_by_the_origin_now_and_replaces_what_is_kept() {
    let o = origin().await;
    o.put(BUCKET, "d/a", data(3, 1));
    o.put(BUCKET, "d/k", data(3, 2));
    // Versions trusted an hour: only the ask's own bound makes the node look.
    let n = node_for(&o, "revalidate_after = \"1h\"", "").await;
    let c = client(n.addr);
    let list = |fresh: bool| {
        let c = c.clone();
        async move {
            let mut h = vec![TTL];
            if fresh {
                h.push(("cache-control", "max-age=0"));
            }
            let r = get_raw(&c, &[("list-type", "2"), ("prefix", "d/")], &h).await;
            let keys: Vec<String> = parse::list_objects(&r.body)
                .unwrap()
                .contents
                .into_iter()
                .map(|c| c.key)
                .collect();
            (keys, r.age.is_some())
        }
    };
    let head = |key: &'static str, max_age: Option<u64>| {
        let c = c.clone();
        async move {
            let mut req = GetObject::new(BUCKET, key);
            shoal::node_proto::set_metadata_ttl(&mut req, Duration::from_secs(30));
            shoal::node_proto::set_max_age(&mut req, max_age.map(Duration::from_secs));
            c.head_object(&req).await
        }
    };
    assert_eq!(list(false).await.0, ["d/a", "d/k"]);
    assert_eq!(head("d/k", None).await.unwrap().size, 3);
    assert!(head("d/new", None).await.is_err());
    o.put(BUCKET, "d/b", data(3, 3));
    o.put(BUCKET, "d/k", data(7, 4));
    o.put(BUCKET, "d/new", data(5, 5));
    // Within the TTL (and revalidate_after), what is kept answers...
    assert_eq!(list(false).await, (vec!["d/a".into(), "d/k".into()], true));
    assert_eq!(head("d/k", None).await.unwrap().size, 3);
    assert!(
        head("d/new", None).await.is_err(),
        "the missing mark stands"
    );
    assert_eq!(head("d/k", Some(3600)).await.unwrap().size, 3);
    // ...but not an ask that takes nothing older than now.
    let before = o.stats.snapshot();
    assert_eq!(
        list(true).await,
        (
            vec!["d/a".into(), "d/b".into(), "d/k".into(), "d/new".into()],
            false
        )
    );
    assert_eq!(head("d/k", Some(0)).await.unwrap().size, 7);
    assert_eq!(head("d/new", Some(0)).await.unwrap().size, 5);
    let after = o.stats.snapshot();
    assert_eq!(after.lists() - before.lists(), 1);
    assert_eq!(after.object_heads() - before.object_heads(), 2);
    // What the origin said replaced what was kept: the askers after it see it
    // without asking the origin.
    assert_eq!(
        list(false).await,
        (
            vec!["d/a".into(), "d/b".into(), "d/k".into(), "d/new".into()],
            true
        )
    );
    assert_eq!(head("d/k", None).await.unwrap().size, 7);
    assert_eq!(head("d/new", None).await.unwrap().size, 5);
    let last = o.stats.snapshot();
    assert_eq!(last.lists(), after.lists());
    assert_eq!(last.object_heads(), after.object_heads());
    // A bound that is not whole seconds is refused before the origin is asked.
    for bad in ["max-age=soon", "max-age=-1", "max-age=1.5"] {
        let r = get_raw(&c, &[("list-type", "2")], &[TTL, ("cache-control", bad)]).await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(String::from_utf8_lossy(&r.body).contains("max-age"));
    }
    assert_eq!(o.stats.snapshot().lists(), last.lists());
}
