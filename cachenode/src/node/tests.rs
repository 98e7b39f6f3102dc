//! The node's logic on the store doubles, with tokio's clock paused: no network,
//! no origin process, and time that moves only when everything waits.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use shoal::store::faults::{Fault, FaultStore};
use shoal::store::memory::MemoryStore;
use shoal::store::{ObjectMeta, StoreError};

use super::{Node, NodeError, NodeOptions, Via};
use crate::metrics::KindLabel;

const BS: u64 = 1 << 20;

type Origin = Arc<FaultStore<MemoryStore>>;

fn node_over(origin: &Origin, revalidate_after: Duration) -> Arc<Node> {
    Arc::new(
        Node::new(
            origin.clone(),
            NodeOptions {
                block_size: BS,
                revalidate_after,
                max_age: Duration::from_secs(3600),
                ram_bytes: 64 << 20,
                disk: None,
                rules: vec![],
                evicting: Default::default(),
                upstream: None,
                peers: None,
                origin_attempts: 3,
                metadata_ttl: Duration::from_secs(60),
                metadata_size: 1 << 20,
            },
        )
        .unwrap(),
    )
}

fn origin_with(key: &str, data: &Bytes) -> Origin {
    let m = MemoryStore::new("origin", &["b"]);
    m.put("b", key, data.clone());
    Arc::new(FaultStore::new(m))
}

fn data(n: usize) -> Bytes {
    (0..n)
        .map(|i| (i * 7 % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

async fn read(
    node: &Arc<Node>,
    meta: &ObjectMeta,
    start: u64,
    end: u64,
) -> Result<Bytes, NodeError> {
    let s = node
        .read("b", "k", meta, start, end, Via::default())
        .await?;
    let parts: Vec<Bytes> = s.try_collect().await?;
    Ok(parts.concat().into())
}

fn origin_requests(node: &Node, kind: &'static str) -> u64 {
    node.metrics
        .origin_requests
        .get_or_create(&KindLabel { kind })
        .get()
}

#[tokio::test(start_paused = true)]
async fn a_body_cut_midway_is_resumed_from_where_it_stopped() {
    let d = data(3 * BS as usize / 2);
    let origin = origin_with("k", &d);
    let node = node_over(&origin, Duration::from_secs(10));
    let meta = node.resolve("b", "k", None, Via::default()).await.unwrap();
    origin.then(Fault::CutAfter(100_000));
    let got = read(&node, &meta, 0, d.len() as u64).await.unwrap();
    assert_eq!(got, d, "byte-exact across the resume");
    // Block 0 cut once and resumed, block 1 whole: three block requests.
    assert_eq!(origin_requests(&node, "block"), 3);
    assert!(node.cached("b", "k", &meta, 0, d.len() as u64).await);
}

#[tokio::test(start_paused = true)]
async fn a_body_cut_on_every_attempt_fails_cleanly_and_keeps_nothing() {
    let d = data(BS as usize);
    let origin = origin_with("k", &d);
    let node = node_over(&origin, Duration::from_secs(10));
    let meta = node.resolve("b", "k", None, Via::default()).await.unwrap();
    origin.always(Some(Fault::CutAfter(10_000)));
    let r = read(&node, &meta, 0, d.len() as u64).await;
    assert!(
        r.is_err(),
        "a short block is an error, never a short answer"
    );
    // The first request and two resumes (origin_attempts = 3), each cut.
    assert_eq!(origin_requests(&node, "block"), 3);
    origin.always(None);
    assert!(
        !node.cached("b", "k", &meta, 0, 1).await,
        "nothing short kept"
    );
    let again = read(&node, &meta, 0, d.len() as u64).await.unwrap();
    assert_eq!(again, d);
}

#[tokio::test(start_paused = true)]
async fn concurrent_readers_of_a_cold_block_share_one_origin_fetch() {
    let d = data(BS as usize);
    let origin = origin_with("k", &d);
    let node = node_over(&origin, Duration::from_secs(10));
    let meta = node.resolve("b", "k", None, Via::default()).await.unwrap();
    let gets_before = origin.gets();
    origin.always(Some(Fault::Delay(Duration::from_millis(50))));
    let readers: Vec<_> = (0..16)
        .map(|i| {
            let (node, meta) = (node.clone(), meta.clone());
            tokio::spawn(async move { read(&node, &meta, i * 1000, BS).await })
        })
        .collect();
    for (i, r) in readers.into_iter().enumerate() {
        let got = r.await.unwrap().unwrap();
        assert_eq!(got, d.slice(i * 1000..));
    }
    assert_eq!(origin.gets() - gets_before, 1);
    assert_eq!(node.metrics.coalesced_waits.get(), 15);
}

#[tokio::test(start_paused = true)]
async fn a_small_read_deep_in_a_cold_block_is_asked_of_the_origin_on_its_own() {
    let d = data(BS as usize);
    let origin = origin_with("k", &d);
    let node = node_over(&origin, Duration::from_secs(10));
    let meta = node.resolve("b", "k", None, Via::default()).await.unwrap();
    let (start, end) = (700_000, 704_096);
    let got = read(&node, &meta, start, end).await.unwrap();
    assert_eq!(got, d.slice(start as usize..end as usize));
    assert_eq!(origin_requests(&node, "range"), 1);
    assert_eq!(
        origin_requests(&node, "block"),
        1,
        "the block is fetched beside it"
    );
    // The block's own fetch goes on and fills the tiers for the next reader.
    shoal_testkit::wait_for("the block in RAM", Duration::from_secs(5), || async {
        node.cached("b", "k", &meta, 0, BS).await
    })
    .await;
    let near = read(&node, &meta, 10, 20).await.unwrap();
    assert_eq!(near, d.slice(10..20));
    assert_eq!(
        origin_requests(&node, "range"),
        1,
        "a warm block needs no side read"
    );
}

#[tokio::test(start_paused = true)]
async fn a_version_that_changed_is_a_412_and_its_blocks_go() {
    let d = data(3 * BS as usize / 2);
    let origin = origin_with("k", &d);
    let node = node_over(&origin, Duration::from_secs(10));
    let old = node.resolve("b", "k", None, Via::default()).await.unwrap();
    assert_eq!(read(&node, &old, 0, 1000).await.unwrap(), d.slice(..1000));
    origin.inner().put("b", "k", data(500));
    // A version is immutable: what the node holds of it is still served...
    assert_eq!(read(&node, &old, 0, 1000).await.unwrap(), d.slice(..1000));
    // ...until a block it lacks is asked of the origin, which says it is gone.
    let e = read(&node, &old, BS + 1000, BS + 2000).await.unwrap_err();
    assert!(
        matches!(e.store(), Some(StoreError::PreconditionFailed { .. })),
        "{e}"
    );
    assert!(
        !node.cached("b", "k", &old, 0, 1000).await,
        "the old version's blocks went"
    );
    assert!(node.known("b", "k", &old.etag).is_none());
    let new = node.resolve("b", "k", None, Via::default()).await.unwrap();
    assert_ne!(new.etag, old.etag);
    assert_eq!(read(&node, &new, 0, 500).await.unwrap(), data(500));
}

#[tokio::test(start_paused = true)]
async fn an_unpinned_request_revalidates_after_revalidate_after() {
    let origin = origin_with("k", &data(10));
    let node = node_over(&origin, Duration::from_secs(10));
    let heads = || origin.inner().counts().1;
    let first = node.resolve("b", "k", None, Via::default()).await.unwrap();
    assert_eq!(heads(), 1);
    tokio::time::advance(Duration::from_secs(9)).await;
    let again = node.resolve("b", "k", None, Via::default()).await.unwrap();
    assert_eq!(
        (heads(), &again.etag),
        (1, &first.etag),
        "within revalidate_after"
    );
    // Pinned to the known ETag: versions are immutable, no revalidation ever.
    tokio::time::advance(Duration::from_secs(60)).await;
    node.resolve("b", "k", Some(&first.etag), Via::default())
        .await
        .unwrap();
    assert_eq!(heads(), 1);
    origin.inner().put("b", "k", data(20));
    let later = node.resolve("b", "k", None, Via::default()).await.unwrap();
    assert_eq!(heads(), 2, "past revalidate_after the origin is asked");
    assert_eq!(later.size, 20);
    // Many unpinned askers at once: one HEAD.
    tokio::time::advance(Duration::from_secs(11)).await;
    origin.always(Some(Fault::Delay(Duration::from_millis(20))));
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let node = node.clone();
            tokio::spawn(async move { node.resolve("b", "k", None, Via::default()).await })
        })
        .collect();
    for a in askers {
        a.await.unwrap().unwrap();
    }
    assert_eq!(heads(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_missing_key_and_a_missing_bucket_are_told_apart() {
    let origin = origin_with("k", &data(10));
    let node = node_over(&origin, Duration::from_secs(10));
    let e = node
        .resolve("b", "nope", None, Via::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e.store(), Some(StoreError::NoSuchKey { .. })),
        "{e}"
    );
    let e = node
        .resolve("nobucket", "k", None, Via::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e.store(), Some(StoreError::NoSuchBucket { .. })),
        "{e}"
    );
}
