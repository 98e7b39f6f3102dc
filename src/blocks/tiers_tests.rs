//! The tier pipeline's tests: fetches shared, kept, let go, written to disk.

use super::*;
use crate::blocks::DiskTier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn key(i: u64) -> BlockKey {
    BlockKey::new("b", "k", "e", 4, i)
}

/// The block from a tier, else from `fetch`'s whole answer.
async fn get_or_fetch(
    t: &Tiers<(), String>,
    key: BlockKey,
    fetch: impl Future<Output = Result<Bytes, String>> + Send + 'static,
) -> Result<(Bytes, Served), FlightError<String>> {
    t.open(key, (), true, 4, |mut g| async move {
        g.push(&fetch.await?).map_err(|e| e.to_string())
    })
    .await
    .whole()
    .await
}

#[tokio::test]
async fn ram_then_disk_then_one_fetch_then_fill() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
    let t: Arc<Tiers<(), String>> = Arc::new(Tiers::new(1 << 20, 4, Some(Arc::new(disk))));
    let fetches = Arc::new(AtomicUsize::new(0));
    let mut askers = Vec::new();
    for _ in 0..8 {
        let (t, fetches) = (t.clone(), fetches.clone());
        askers.push(tokio::spawn(async move {
            get_or_fetch(&t, key(1), async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                Ok(Bytes::from_static(b"abcd"))
            })
            .await
        }));
    }
    let mut served = Vec::new();
    for a in askers {
        let (b, s) = a.await.unwrap().unwrap();
        assert_eq!(b, "abcd");
        served.push(s);
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!(served.iter().filter(|s| **s == Served::Fetched).count(), 1);
    let never = async { Err::<Bytes, String>("must not fetch".into()) };
    let (_, s) = get_or_fetch(&t, key(1), never).await.unwrap();
    assert_eq!(s, Served::Ram);
    // The disk write follows the answer: wait for it, then a fresh RAM tier
    // over the same disk finds the block there.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while t.disk_stats().blocks < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "never written to disk"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(t);
    let (disk, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
    let t: Tiers<(), String> = Tiers::new(1 << 20, 4, Some(Arc::new(disk)));
    assert_eq!(t.lookup(&key(1)).await.unwrap().1, Served::Disk);
    assert_eq!(t.lookup(&key(1)).await.unwrap().1, Served::Ram);
    assert_eq!(t.remove_object("b", "k").await, 2);
    assert!(!t.cached(&key(1)).await);
    // A failed fetch keeps nothing and says why.
    let r = get_or_fetch(&t, key(2), async { Err("origin down".to_owned()) }).await;
    assert_eq!(r, Err(FlightError::Failed("origin down".into())));
    assert!(!t.cached(&key(2)).await);
}

/// A disk whose writes wait until the test opens its gate.
struct GatedDisk {
    gate: Mutex<std::sync::mpsc::Receiver<()>>,
    written: AtomicUsize,
}

impl BlockCache for GatedDisk {
    fn get(&self, _: &BlockKey) -> Option<Bytes> {
        None
    }
    fn insert(&self, _: BlockKey, _: Bytes) {
        let _ = self.gate.lock().unwrap().recv();
        self.written.fetch_add(1, Ordering::SeqCst);
    }
    fn remove(&self, _: &dyn Fn(&BlockKey) -> bool) -> u64 {
        0
    }
    fn stats(&self) -> TierStats {
        TierStats::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_on_their_way_to_disk_are_counted_until_written() {
    let (open, gate) = std::sync::mpsc::channel();
    let disk = Arc::new(GatedDisk {
        gate: Mutex::new(gate),
        written: AtomicUsize::new(0),
    });
    let t: Tiers<(), String> = Tiers::new(1 << 20, 4, Some(disk.clone()));
    assert_eq!(t.disk_writes(), 0);
    for i in 0..2 {
        get_or_fetch(&t, key(i), async { Ok(Bytes::from_static(b"abcd")) })
            .await
            .unwrap();
    }
    // Answered, not yet written: both counted from before their answers.
    assert_eq!(t.disk_writes(), 2);
    assert_eq!(disk.written.load(Ordering::SeqCst), 0);
    open.send(()).unwrap();
    open.send(()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while t.disk_writes() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes never counted done"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(disk.written.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_block_let_go_leaves_ram_whether_it_landed_or_is_still_arriving() {
    let t: Tiers<(), String> = Tiers::new(1 << 20, 4, None);
    get_or_fetch(&t, key(5), async { Ok(Bytes::from_static(b"held")) })
        .await
        .unwrap();
    assert!(t.cached(&key(5)).await);
    t.let_go(&key(5), &());
    assert!(!t.cached(&key(5)).await, "a landed block is dropped");
    // Let go while its fetch is still on its way: it never lands in RAM.
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let block = t
        .open(key(6), (), true, 4, |mut g| async move {
            let _ = wait.await;
            g.push(b"late").unwrap();
            Ok(())
        })
        .await;
    t.let_go(&key(6), &());
    go.send(()).unwrap();
    assert_eq!(
        block.whole().await.unwrap().0,
        "late",
        "its askers still get it"
    );
    // The landing (after the askers are told) has run once the entry is gone.
    while t.arriving(&key(6), &()).is_some() {
        tokio::task::yield_now().await;
    }
    assert!(
        !t.cached(&key(6)).await,
        "a block let go in flight is not kept"
    );
    // Another block is kept as usual.
    get_or_fetch(&t, key(7), async { Ok(Bytes::from_static(b"kept")) })
        .await
        .unwrap();
    assert!(t.cached(&key(7)).await);
}

#[tokio::test]
async fn askers_stream_a_fetch_as_it_arrives_and_a_dying_fetch_ends_them() {
    let t: Tiers<(), String> = Tiers::new(1 << 20, 4, None);
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let first = t
        .open(key(3), (), true, 4, |mut g| async move {
            g.push(b"ab").unwrap();
            let _ = wait.await;
            g.push(b"cd").unwrap();
            Ok(())
        })
        .await;
    let Block::Arriving(g, Served::Fetched) = first else {
        panic!("a cold block is fetched by its first asker");
    };
    g.started().await.unwrap();
    assert_eq!(g.len(), 2, "the first bytes are readable before the rest");
    let joined = t
        .open(key(3), (), true, 4, |_| async {
            panic!("a second fetch of a block in flight");
            #[allow(unreachable_code)]
            Ok(())
        })
        .await;
    assert!(matches!(joined, Block::Arriving(_, Served::Joined)));
    go.send(()).unwrap();
    assert_eq!(joined.whole().await.unwrap().0, "abcd");
    assert_eq!(t.lookup(&key(3)).await.unwrap().1, Served::Ram);

    let dying = t
        .open(key(4), (), true, 4, |_| async {
            panic!("the fetch blew up");
            #[allow(unreachable_code)]
            Ok(())
        })
        .await;
    assert!(matches!(dying.whole().await, Err(FlightError::Lost(_))));
    assert!(t.arriving(&key(4), &()).is_none(), "the key is free again");
}
