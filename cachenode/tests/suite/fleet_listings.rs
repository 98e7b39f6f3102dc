//! Listings and HEADs move with the fleet as blocks do: a node that joins and
//! misses a listing page (or a HEAD) it now owns asks the page's previous owner
//! with `Cache-Control: only-if-cached` before the origin, and keeps the answer
//! as old as it was there. A node asked that way answers from its metadata cache
//! or 504, and never asks the origin. Each node has an origin of its own, so
//! every origin request is counted where it went.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::Method;
use shoal::store::{GetObject, ListEntry, ListPage, ListRequest, ObjectMeta, ObjectStore};

use crate::common::*;

const PREFIXES: [&str; 4] = ["ls/p0/", "ls/p1/", "ls/p2/", "ls/p3/"];
const KEYS_PER_PREFIX: usize = 10;
/// Three pages of each prefix: 4, 4 and 2 keys.
const PAGE: u32 = 4;
/// How old an answer the readers accept.
const ACCEPT: Duration = Duration::from_secs(120);

/// A fleet node: its own origin, the cluster `nodes`, an access log.
fn node(dir: &Path, i: usize, origin: &Origin, listen: &str, nodes: &[&str]) -> NodeProcess {
    let cache = "ram_size = \"64MiB\"\nmetadata_ttl = \"10m\"";
    crate::fleet::node_of_fleet(dir, i, origin, listen, nodes, cache)
}

fn keys() -> Vec<String> {
    PREFIXES
        .iter()
        .flat_map(|p| (0..KEYS_PER_PREFIX).map(move |i| format!("{p}k{i:02}")))
        .collect()
}

/// What a reader of the cluster `nodes` sees: every page of every prefix, the
/// directory listing above them, and every key's HEAD.
struct Seen {
    pages: Vec<ListPage>,
    heads: Vec<ObjectMeta>,
}

async fn read_through(fallback: &Origin, nodes: &[&str]) -> Seen {
    let reader = crate::fleet::fleet_reader(fallback, &cluster_toml(nodes, ""), 8 << 20);
    let store = reader.metadata(ACCEPT);
    let mut pages = Vec::new();
    let mut asks: Vec<(String, Option<String>)> =
        PREFIXES.iter().map(|p| (p.to_string(), None)).collect();
    asks.push(("ls/".into(), Some("/".into())));
    for (prefix, delimiter) in asks {
        let mut token = None;
        loop {
            let req = ListRequest {
                bucket: BUCKET.into(),
                prefix: prefix.clone(),
                delimiter: delimiter.clone(),
                continuation_token: token.clone(),
                start_after: None,
                max_keys: Some(PAGE),
                headers: Vec::new(),
            };
            let page = store.list_page(&req).await.unwrap();
            token = page.next_continuation_token.clone();
            pages.push(page);
            if token.is_none() {
                break;
            }
        }
    }
    let mut heads = Vec::new();
    for k in keys() {
        heads.push(store.head(&GetObject::new(BUCKET, &k)).await.unwrap());
    }
    Seen { pages, heads }
}

/// An address for a node joining `fleet` that owns, among the four, a first
/// listing page and a HEAD the readers ask for. Addresses are free ports, so
/// which pages a joiner owns is chance: of 13 pages it owned none about one run
/// in 40, and then had no listing to take from a peer.
fn joiner_owning_some(fleet: &[String]) -> String {
    use shoal::route::{list_page_key, BlockId, NodeSet};
    let mut first_pages: Vec<(String, String)> = PREFIXES
        .iter()
        .map(|p| (p.to_string(), String::new()))
        .collect();
    first_pages.push(("ls/".into(), "/".into()));
    let page_keys: Vec<String> = first_pages
        .iter()
        .map(|(p, d)| list_page_key(p, d, ""))
        .collect();
    let owns = |set: &NodeSet, me: &str, key: &str| {
        let block = BlockId {
            bucket: BUCKET,
            key,
            index: 0,
        };
        set.nodes()[set.rank(&block)[0]].id == me
    };
    for _ in 0..1000 {
        let joiner = free_addr();
        let set = NodeSet::new(fleet.iter().chain([&joiner]).map(|id| (id.clone(), 1.0)));
        if page_keys.iter().any(|k| owns(&set, &joiner, k))
            && keys().iter().any(|k| owns(&set, &joiner, k))
        {
            return joiner;
        }
    }
    panic!("no free address owns a first page and a HEAD among {fleet:?}");
}

/// Listings and object HEADs the origins answered.
fn metadata_requests(origins: &[Origin]) -> (u64, u64) {
    origins.iter().fold((0, 0), |(l, h), o| {
        let s = o.stats.snapshot();
        (l + s.lists(), h + s.object_heads())
    })
}

/// What a page says, its age aside.
fn without_age(p: &ListPage) -> (Vec<ListEntry>, Vec<String>, Option<String>) {
    (
        p.objects.clone(),
        p.common_prefixes.clone(),
        p.next_continuation_token.clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_takes_listings_and_heads_from_previous_owners() {
    let dir = tempfile::tempdir().unwrap();
    // Four nodes' origins and the reader's own, each holding the same objects.
    let mut origins = Vec::new();
    for _ in 0..5 {
        origins.push(origin().await);
    }
    for (i, k) in keys().iter().enumerate() {
        let body = Bytes::from(format!("object {i}"));
        for o in &origins {
            o.put(BUCKET, k, body.clone());
        }
    }
    let mut addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    addrs.push(joiner_owning_some(&addrs));
    let ids: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut nodes: Vec<NodeProcess> = (0..3)
        .map(|i| node(dir.path(), i, &origins[i], ids[i], &ids[..3]))
        .collect();
    let reader_origin = &origins[4];
    let before = read_through(reader_origin, &ids[..3]).await;
    let (lists, heads) = metadata_requests(&origins);
    assert!(
        lists as usize >= before.pages.len() && heads as usize >= before.heads.len(),
        "the first read asked the origins {lists} listings and {heads} HEADs"
    );
    // Old enough that an answer whose age was reset shows it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    for o in &origins {
        o.stats.reset();
    }
    nodes.push(node(dir.path(), 3, &origins[3], ids[3], &ids));
    let after = read_through(reader_origin, &ids).await;
    let (lists_after, heads_after) = metadata_requests(&origins);
    let text = scrape(&addrs[3]).await;
    let fills = |op: &str, r: &str| {
        metric(
            &text,
            &format!("shoal_node_peer_metadata_fills_total{{op=\"{op}\",result=\"{r}\"}}"),
        )
    };
    eprintln!(
        "join: {} pages and {} HEADs read again; origins answered {lists_after} listings and \
         {heads_after} HEADs (before the join {lists} and {heads}); new node's asks: \
         list {} hit {} miss {} timeout {} error, head {} hit {} miss {} timeout {} error",
        after.pages.len(),
        after.heads.len(),
        fills("list", "hit"),
        fills("list", "miss"),
        fills("list", "timeout"),
        fills("list", "error"),
        fills("head", "hit"),
        fills("head", "miss"),
        fills("head", "timeout"),
        fills("head", "error"),
    );
    assert_eq!(
        after.pages.iter().map(without_age).collect::<Vec<_>>(),
        before.pages.iter().map(without_age).collect::<Vec<_>>(),
        "the listings changed across the join"
    );
    assert_eq!(
        after.heads, before.heads,
        "the HEADs changed across the join"
    );
    assert_eq!(
        (lists_after, heads_after),
        (0, 0),
        "after the join the origins were asked again"
    );
    assert!(
        fills("list", "hit") >= 1.0 && fills("head", "hit") >= 1.0,
        "the new node took nothing from its peers:\n{text}"
    );
    // Every page is as old as the origin's answer: none was fetched anew, and
    // none that moved had its age reset.
    for p in &after.pages {
        let age = p.age.unwrap_or_default();
        assert!(age >= Duration::from_secs(2), "a page {age:?} old: {p:?}");
    }
    // The asks are on the access log's lines of the requests they were made for.
    let log = dir.path().join("access3.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let with_fill = |what: &str| {
            text.lines()
                .any(|l| l.contains(what) && l.contains("\"peer_fill\":{\"hit\":1,"))
        };
        if with_fill("\"method\":\"GET\",\"bucket\":\"shoal-test\",\"key\":\"\"")
            && with_fill("\"method\":\"HEAD\"")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no listing and HEAD peer fills in the access log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A listing query as the cluster's readers send it.
fn list_query(prefix: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut q = vec![
        ("list-type".to_owned(), "2".to_owned()),
        ("prefix".to_owned(), prefix.to_owned()),
    ];
    q.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    q
}

async fn ask(
    node: &TestNode,
    query: Vec<(String, String)>,
    only_if_cached: bool,
) -> (u16, http::HeaderMap, Bytes) {
    let mut headers = vec![(shoal::node_proto::METADATA_TTL_HEADER, "60".to_owned())];
    if only_if_cached {
        headers.push(("cache-control", "only-if-cached".to_owned()));
    }
    let got = client(node.addr)
        .forward(Method::GET, BUCKET, "", query, headers)
        .await
        .unwrap();
    let (status, h) = (got.status, got.headers.clone());
    let body: Vec<Bytes> = got.body.try_collect().await.unwrap();
    (status, h, body.concat().into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_if_cached_listings_answer_from_the_cache_or_504_and_never_the_origin() {
    let o = origin().await;
    for k in ["a/1", "a/2", "b/1"] {
        o.put(BUCKET, k, Bytes::from_static(b"x"));
    }
    let node = node_for(&o, "", "").await;
    o.stats.reset();
    // Not held: 504 ShoalNotCached, and the origin never hears of it.
    let (status, _, body) = ask(&node, list_query("a/", &[]), true).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("ShoalNotCached"), "{text}");
    assert_eq!(o.stats.snapshot().lists(), 0);
    // Held: the origin's answer as it was, with its age, and still no origin
    // request for the cached-only ask.
    let (status, _, first) = ask(&node, list_query("a/", &[]), false).await;
    assert_eq!((status, o.stats.snapshot().lists()), (200, 1));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, h, again) = ask(&node, list_query("a/", &[]), true).await;
    assert_eq!(status, 200);
    assert_eq!(again, first, "the held listing differs from the origin's");
    let age: u64 = h
        .get(http::header::AGE)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .expect("an Age header");
    assert!(age >= 1, "a listing held 1.1 s said Age: {age}");
    // Another page of the same prefix is another listing: not held.
    let (status, _, _) = ask(&node, list_query("a/", &[("max-keys", "1")]), true).await;
    assert_eq!(status, 504);
    assert_eq!(o.stats.snapshot().lists(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_only_if_cached_listing_with_a_malformed_query_is_refused_clearly() {
    let o = origin().await;
    let node = node_for(&o, "", "").await;
    o.stats.reset();
    for (bad, says) in [
        (("max-keys", "ten"), "max-keys"),
        (("max-keys", "-1"), "max-keys"),
        (("list-type", "3"), "list-type"),
        (("encoding-type", "base64"), "encoding-type"),
        (("fetch-owner", "maybe"), "fetch-owner"),
    ] {
        let (status, _, body) = ask(&node, list_query("a/", &[bad]), true).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{bad:?}: {text}");
        assert!(
            text.contains("InvalidArgument") && text.contains(says),
            "{bad:?}: {text}"
        );
    }
    assert_eq!(o.stats.snapshot().lists(), 0);
    // A malformed TTL is refused whatever else the request says.
    let got = client(node.addr)
        .forward(
            Method::GET,
            BUCKET,
            "",
            list_query("a/", &[]),
            vec![
                (shoal::node_proto::METADATA_TTL_HEADER, "soon".to_owned()),
                ("cache-control", "only-if-cached".to_owned()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(got.status, 400);
}
