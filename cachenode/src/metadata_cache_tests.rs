//! [`super::MetadataCache`]'s own tests.

use super::*;
use std::sync::atomic::AtomicUsize;

fn answer(body: &str) -> Answer {
    Answer {
        status: 200,
        headers: vec![],
        body: Bytes::from(body.to_owned()),
    }
}

const TTL: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn identical_listings_cost_one_fetch_and_age_out_per_asker() {
    let c = Arc::new(MetadataCache::new(TTL, 1 << 20));
    let fetches = Arc::new(AtomicUsize::new(0));
    let fetch = |f: Arc<AtomicUsize>| async move {
        f.fetch_add(1, Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(answer("<page/>"))
    };
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (c, f) = (c.clone(), fetches.clone());
        tasks.push(tokio::spawn(async move {
            c.listing("b?p".into(), ("b", "p/"), TTL, fetch(f))
                .await
                .unwrap()
                .1
        }));
    }
    let mut how = Vec::new();
    for t in tasks {
        how.push(t.await.unwrap());
    }
    assert_eq!(fetches.load(Relaxed), 1);
    assert_eq!(how.iter().filter(|h| **h == Listed::Fetched).count(), 1);
    assert_eq!(how.iter().filter(|h| **h == Listed::Joined).count(), 49);
    tokio::time::advance(Duration::from_secs(5)).await;
    // Five seconds old: fine for one who accepts ten, not for one who accepts two.
    let (_, how) = c
        .listing(
            "b?p".into(),
            ("b", "p/"),
            Duration::from_secs(10),
            fetch(fetches.clone()),
        )
        .await
        .unwrap();
    assert_eq!(how, Listed::Hit(Duration::from_secs(5)));
    let (_, how) = c
        .listing(
            "b?p".into(),
            ("b", "p/"),
            Duration::from_secs(2),
            fetch(fetches.clone()),
        )
        .await
        .unwrap();
    assert_eq!(how, Listed::Fetched);
    assert_eq!(fetches.load(Relaxed), 2);
    assert_eq!(c.accept(Some(Duration::from_secs(3600))), Some(TTL));
    assert_eq!(c.accept(None), None);
    assert_eq!(MetadataCache::new(TTL, 0).accept(Some(TTL)), None);
}

#[tokio::test(start_paused = true)]
async fn errors_are_shared_not_kept_and_invalidation_drops_what_covers_a_key() {
    let c = MetadataCache::new(TTL, 1 << 20);
    let denied = || async {
        Ok(Answer {
            status: 403,
            headers: vec![],
            body: Bytes::from_static(b"<Error/>"),
        })
    };
    let (a, _) = c
        .listing("x".into(), ("b", ""), TTL, denied())
        .await
        .unwrap();
    assert_eq!(a.status, 403);
    assert!(c.fresh_listing("x", TTL).is_none(), "an error is not kept");
    for (id, prefix) in [("root", ""), ("d", "d/"), ("e", "e/"), ("de", "d/e/")] {
        c.listing(id.into(), ("b", prefix), TTL, async { Ok(answer(id)) })
            .await
            .unwrap();
    }
    c.note_missing("b", "d/gone");
    assert!(c.missing("b", "d/gone", TTL));
    c.forget_key("b", "d/x");
    let held = |id: &str| c.fresh_listing(id, TTL).is_some();
    assert!(!held("root") && !held("d") && held("e") && held("de"));
    assert!(c.missing("b", "d/gone", TTL), "another key's mark stays");
    c.forget_prefix("b", "d/");
    assert!(!held("de") && held("e") && !c.missing("b", "d/gone", TTL));
    // Another bucket's purge touches nothing here.
    c.forget_prefix("other", "");
    assert!(held("e"));
}

#[tokio::test(start_paused = true)]
async fn the_bound_holds_and_the_least_recently_used_goes_first() {
    let page = "x".repeat(1000);
    let one = answer(&page).bytes() + 2 + ENTRY_OVERHEAD;
    let c = MetadataCache::new(TTL, one * 3);
    for id in ["a", "b", "c"] {
        let p = page.clone();
        c.listing(id.into(), ("b", ""), TTL, async move { Ok(answer(&p)) })
            .await
            .unwrap();
    }
    assert!(c.fresh_listing("a", TTL).is_some());
    let p = page.clone();
    c.listing("d".into(), ("b", ""), TTL, async move { Ok(answer(&p)) })
        .await
        .unwrap();
    let s = c.stats();
    assert!(s.used_bytes <= s.capacity_bytes, "{s:?}");
    assert_eq!((s.entries, s.evictions), (3, 1));
    assert!(
        c.fresh_listing("b", TTL).is_none(),
        "b was the least recently used"
    );
    assert!(c.fresh_listing("a", TTL).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_copy_taken_from_another_cache_keeps_its_age() {
    let c = MetadataCache::new(TTL, 1 << 20);
    let taken = async { Ok((answer("page"), Some(Duration::from_secs(50)))) };
    let (_, how) = c
        .listing_aged("p".into(), ("b", ""), TTL, taken)
        .await
        .unwrap();
    assert_eq!(how, Listed::Taken(Duration::from_secs(50)));
    let (_, age) = c.fresh_listing("p", TTL).unwrap();
    assert_eq!(age, Duration::from_secs(50), "the age was reset");
    // Ten more seconds and the origin's answer is a minute old: gone,
    // though it arrived here only ten seconds ago.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(c.fresh_listing("p", TTL).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_fetch_across_an_invalidation_is_served_not_kept() {
    let c = Arc::new(MetadataCache::new(TTL, 1 << 20));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let c2 = c.clone();
    let t = tokio::spawn(async move {
        c2.listing("d".into(), ("b", "d/"), TTL, async move {
            rx.await.ok();
            Ok(answer("old"))
        })
        .await
        .unwrap()
    });
    tokio::task::yield_now().await;
    c.forget_key("b", "d/new");
    tx.send(()).unwrap();
    let (a, _) = t.await.unwrap();
    assert_eq!(&a.body[..], b"old");
    assert!(c.fresh_listing("d", TTL).is_none());
}
