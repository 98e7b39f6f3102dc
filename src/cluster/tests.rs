//! The reader's fetch logic on in-memory doubles with tokio's paused clock: no
//! network, and every deadline passes in no real time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::{ClusterConfig, Membership as MembershipConfig, NodeSpec};
use crate::route::{BlockId, Membership, TokioClock};
use crate::store::faults::{Fault, FaultStore};
use crate::store::memory::MemoryStore;
use crate::store::{ObjectMeta, ObjectStore, StoreError};

const B: &str = "b";
const BS: u64 = 64 << 10;

type Node = Arc<FaultStore<Arc<MemoryStore>>>;

struct Rig {
    reader: Arc<ClusterReader>,
    data: Arc<MemoryStore>,
    origin: Node,
    /// Every node, in the rank order of block 0 of `k`.
    ranked: Vec<Node>,
}

impl Rig {
    /// `n` nodes and an origin over one store holding `k` (4 blocks); the RAM tier
    /// is off so every read goes to the cluster.
    fn new(n: usize, tweak: impl FnOnce(&mut ClusterConfig)) -> Rig {
        let opts = ReaderOptions {
            ram_bytes: 0,
            disk: None,
            ..Default::default()
        };
        Rig::with(n, tweak, opts)
    }

    /// [`Rig::new`], the reader shaped by `opts`.
    fn with(n: usize, tweak: impl FnOnce(&mut ClusterConfig), opts: ReaderOptions) -> Rig {
        let data = Arc::new(MemoryStore::new("origin", &[B]));
        data.put(B, "k", vec![7u8; 4 * BS as usize]);
        let mut cluster = ClusterConfig::standalone();
        let ids: Vec<String> = (0..n).map(|i| format!("node{i}:9000")).collect();
        cluster.membership = MembershipConfig::Static(
            ids.iter()
                .map(|id| NodeSpec {
                    id: id.clone(),
                    weight: 1.0,
                    zone: None,
                })
                .collect(),
        );
        cluster.block_size = BS;
        cluster.hedge.budget = 0.0;
        tweak(&mut cluster);
        let stores: HashMap<String, Node> = ids
            .iter()
            .map(|id| (id.clone(), Arc::new(FaultStore::new(data.clone()))))
            .collect();
        let nodes: HashMap<String, Arc<dyn ObjectStore>> = stores
            .iter()
            .map(|(id, s)| (id.clone(), s.clone() as Arc<dyn ObjectStore>))
            .collect();
        let membership = Membership::from_config(&cluster);
        let ranked = membership
            .current()
            .rank_ids(&BlockId {
                bucket: B,
                key: "k",
                index: 0,
            })
            .into_iter()
            .map(|id| stores[id].clone())
            .collect();
        let origin = Arc::new(FaultStore::new(data.clone()));
        let reader = ClusterReader::from_parts(
            ReaderParts {
                origin: origin.clone(),
                origin_attempts: 2,
                cluster,
                membership,
                nodes: Arc::new(nodes),
                clock: Arc::new(TokioClock),
            },
            opts,
        );
        Rig {
            reader,
            data,
            origin,
            ranked,
        }
    }

    fn meta(&self) -> ObjectMeta {
        self.data.meta(B, "k").expect("stored")
    }

    /// Block 0 of `k`, through a fresh handle.
    async fn read0(&self) -> Result<bytes::Bytes, ReadError> {
        let h = self.reader.open(B, "k", Some(self.meta())).await?;
        h.read(0, BS).await
    }

    fn fallbacks(&self, cause: Fallback) -> u64 {
        self.reader
            .metrics
            .fallbacks
            .get_or_create(&cause.label())
            .get()
    }

    /// Whether the `i`th ranked node of block 0 is marked down.
    fn is_down(&self, i: usize) -> bool {
        let set = self.reader.router().membership().current();
        let ids = set.rank_ids(&BlockId {
            bucket: B,
            key: "k",
            index: 0,
        });
        let router = self.reader.router();
        router.is_down(&router.node(ids[i]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedge_fires_after_its_delay_and_the_first_answer_wins() {
    let r = Rig::new(3, |c| c.hedge.budget = 1.0);
    r.ranked[0].always(Some(Fault::Delay(Duration::from_secs(1))));
    let t0 = Instant::now();
    let got = r.read0().await.unwrap();
    let took = t0.elapsed();
    assert_eq!(got.len() as u64, BS);
    // No estimate yet: the hedge waits 100 ms, and the second node answers at once.
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(200),
        "{took:?}"
    );
    let m = &r.reader.metrics;
    assert_eq!((m.hedges_sent.get(), m.hedges_won.get()), (1, 1));
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (1, 1));
    assert_eq!(r.origin.gets(), 0);
    assert_eq!(m.failovers.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_connect_failure_fails_over_once_and_marks_the_node_down() {
    let r = Rig::new(3, |_| {});
    r.ranked[0].always(Some(Fault::Refuse));
    r.read0().await.unwrap();
    assert_eq!(r.reader.metrics.failovers.get(), 1);
    assert!(r.is_down(0));
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (1, 1));
    // While it is down it is not asked; the next node is, directly.
    r.read0().await.unwrap();
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (1, 2));
    assert_eq!(r.reader.metrics.failovers.get(), 1);
    assert_eq!(r.origin.gets(), 0);
    // Only once: with the next node refusing too, the origin answers.
    let r = Rig::new(3, |_| {});
    r.ranked[0].always(Some(Fault::Refuse));
    r.ranked[1].always(Some(Fault::Refuse));
    r.read0().await.unwrap();
    assert_eq!(r.ranked[2].gets(), 0);
    assert_eq!((r.origin.gets(), r.fallbacks(Fallback::Connect)), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn silent_nodes_fall_back_to_the_origin_at_the_first_byte_deadline() {
    let r = Rig::new(2, |c| c.timeouts.first_byte = Duration::from_secs(1));
    r.ranked[0].always(Some(Fault::Hang));
    r.ranked[1].always(Some(Fault::Hang));
    let t0 = Instant::now();
    r.read0().await.unwrap();
    // One deadline for the owner, one for the failover, then the origin.
    assert_eq!(t0.elapsed().as_secs(), 2, "{:?}", t0.elapsed());
    assert_eq!(r.fallbacks(Fallback::FirstByte), 1);
    assert_eq!(r.origin.gets(), 1);
    assert!(r.is_down(0) && r.is_down(1));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_falls_back_to_the_origin_at_the_stall_deadline() {
    let r = Rig::new(2, |c| c.timeouts.stall = Duration::from_millis(500));
    r.ranked[0].always(Some(Fault::StallAfter(1000)));
    r.ranked[1].always(Some(Fault::StallAfter(1000)));
    let t0 = Instant::now();
    let got = r.read0().await.unwrap();
    assert_eq!(got, vec![7u8; BS as usize]);
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(r.fallbacks(Fallback::Stall), 1);
    assert_eq!(r.origin.gets(), 1);
    // A stall is not a reason to think the node is gone.
    assert!(!r.is_down(0) && !r.is_down(1));
}

#[tokio::test(start_paused = true)]
async fn a_body_cut_midway_is_resumed_from_the_next_node_for_the_rest_only() {
    let r = Rig::new(3, |_| {});
    r.ranked[0].always(Some(Fault::CutAfter(1000)));
    let got = r.read0().await.unwrap();
    assert_eq!(got, vec![7u8; BS as usize]);
    assert_eq!(r.reader.metrics.failovers.get(), 1);
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (1, 1));
    // The bytes that came stay; the next node sends what is missing.
    assert!(r.ranked[0].body_bytes() > 0);
    assert_eq!(r.ranked[0].body_bytes() + r.ranked[1].body_bytes(), BS);
    assert_eq!(r.origin.gets(), 0);
    // Cut there too: the origin sends the rest, once.
    let r = Rig::new(3, |_| {});
    r.ranked[0].always(Some(Fault::CutAfter(1000)));
    r.ranked[1].always(Some(Fault::CutAfter(2000)));
    let got = r.read0().await.unwrap();
    assert_eq!(got, vec![7u8; BS as usize]);
    assert_eq!(r.ranked[2].gets(), 0);
    assert_eq!(r.origin.gets(), 1);
    assert_eq!(
        r.ranked[0].body_bytes() + r.ranked[1].body_bytes() + r.origin.body_bytes(),
        BS
    );
    assert_eq!(r.fallbacks(Fallback::Error), 1);
}

#[tokio::test(start_paused = true)]
async fn a_read_inside_a_block_is_answered_before_the_block_has_arrived() {
    let r = Rig::new(2, |c| c.timeouts.stall = Duration::from_secs(30));
    // The owner sends the first 8 KiB, then nothing: the rest comes from the
    // next node once the stall deadline has passed.
    r.ranked[0].always(Some(Fault::StallAfter(8192)));
    let h = r.reader.open(B, "k", Some(r.meta())).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), h.read_parts(100, 4000))
        .await
        .expect("answered from the bytes that came, not after the block")
        .unwrap();
    assert_eq!(first.parts.concat(), vec![7u8; 4000]);
    assert!(first.waited, "its bytes were not all there when it asked");
    // Past what came, a read waits (here, for the stall deadline and the
    // failover to the next node).
    let rest = h.read_parts(BS - 10, 10).await.unwrap();
    assert_eq!(rest.parts.concat(), vec![7u8; 10]);
    assert_eq!(r.ranked[1].gets(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_block_handed_over_whole_is_not_fetched_ahead_again() {
    let r = Rig::new(1, |_| {});
    let h = r.reader.open(B, "k", Some(r.meta())).await.unwrap();
    assert_eq!(
        h.read_parts(0, BS).await.unwrap().parts.concat().len() as u64,
        BS
    );
    h.let_go(0);
    let asked = r.ranked[0].gets();
    // Read-ahead that started before the kernel took block 0 and runs after.
    h.prefetch(0, 2);
    while r.reader.inflight_blocks() > 0 || r.ranked[0].gets() == asked {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while r.reader.inflight_blocks() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(r.ranked[0].gets(), asked + 1, "block 1 only");
    assert_eq!(r.reader.metrics.prefetched.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn blocks_fetched_ahead_are_in_flight_once_prefetch_returns() {
    // What asks next must find the fetch however late a task runs: a spliced
    // read asks the node itself unless a fetch is here.
    let r = Rig::new(1, |_| {});
    let h = r.reader.open_known(B, "k", r.meta());
    h.prefetch(1, 2);
    for i in 1..3 {
        let bk = r.reader.key(B, "k", &r.meta().etag, i);
        assert!(r.reader.tiers.arriving(&bk, &()).is_some(), "block {i}");
    }
    while r.reader.inflight_blocks() > 0 || r.ranked[0].gets() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(r.ranked[0].gets(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_after_failures_and_closes_after_its_cooldown() {
    let r = Rig::new(2, |c| {
        c.breaker.failures = 3;
        c.breaker.cooldown = Duration::from_secs(30);
    });
    let broken = StoreError::Server {
        status: 500,
        code: "InternalError".into(),
        message: "broken".into(),
    };
    r.ranked[0].always(Some(Fault::Fail(broken)));
    for _ in 0..3 {
        r.read0().await.unwrap();
    }
    let trips = || {
        r.reader
            .router()
            .counters
            .breaker_trips
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(trips(), 1);
    assert_eq!(r.ranked[0].gets(), 3);
    // Open: the owner is skipped.
    r.read0().await.unwrap();
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (3, 4));
    // Mended and cooled down: asked again, and it answers.
    r.ranked[0].always(None);
    tokio::time::advance(Duration::from_secs(31)).await;
    r.read0().await.unwrap();
    assert_eq!((r.ranked[0].gets(), r.ranked[1].gets()), (4, 4));
    assert_eq!(r.origin.gets(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_hedges() {
    let r = Rig::new(2, |c| {
        c.hedge.budget = 0.25;
        c.hedge.factor = 1.0;
    });
    // Each answer slower than the last, so the owner's estimate always trails its
    // next delay and every request would be worth a hedge.
    for i in 1..=40u64 {
        r.ranked[0].then(Fault::Delay(Duration::from_millis(100 * i)));
    }
    for _ in 0..40 {
        r.read0().await.unwrap();
    }
    let requests = r
        .reader
        .router()
        .counters
        .requests
        .load(std::sync::atomic::Ordering::Relaxed);
    let sent = r.reader.metrics.hedges_sent.get();
    assert_eq!(requests, 40);
    assert!(sent >= 5, "hedging happened: {sent}");
    assert!(
        sent as f64 <= 0.25 * requests as f64,
        "{sent} of {requests}"
    );
    assert_eq!(r.reader.metrics.hedges_won.get(), sent);
}

#[tokio::test(start_paused = true)]
async fn a_changed_object_makes_the_handle_stale() {
    let r = Rig::new(2, |_| {});
    let h = r.reader.open(B, "k", Some(r.meta())).await.unwrap();
    h.read(0, 10).await.unwrap();
    r.data.put(B, "k", vec![8u8; 4 * BS as usize]);
    let e = h.read(BS, 10).await.unwrap_err();
    assert!(matches!(e, ReadError::Stale { .. }), "{e:?}");
    assert!(h.is_stale());
    assert_eq!(r.reader.metrics.stale.get(), 1);
    // Refused without asking anyone again.
    let asked = r.ranked.iter().map(|n| n.gets()).sum::<u64>() + r.origin.gets();
    assert!(matches!(
        h.read(2 * BS, 10).await,
        Err(ReadError::Stale { .. })
    ));
    assert_eq!(
        r.ranked.iter().map(|n| n.gets()).sum::<u64>() + r.origin.gets(),
        asked
    );
    // The next open learns the new version (from the origin first).
    let h2 = r.reader.open(B, "k", None).await.unwrap();
    assert_eq!(h2.read(0, 1).await.unwrap()[0], 8);
}

#[tokio::test(start_paused = true)]
async fn piped_reads_not_spliced_are_read_with_every_failover_and_warming_asks_one_byte() {
    use crate::store::pipe::Pipe;
    let r = Rig::new(3, |_| {});
    r.ranked[0].always(Some(Fault::CutAfter(1000)));
    let h = r.reader.open(B, "k", Some(r.meta())).await.unwrap();
    let mut pipe = Pipe::new().unwrap();
    pipe.prefix(b"head").unwrap();
    // A test double's body is no socket: it is read instead, the pipe emptied,
    // and a body cut midway is resumed from the next node for the rest only.
    match h.read_piped(0, BS, &mut pipe).await.unwrap() {
        Piped::Read(b) => assert_eq!(b, vec![7u8; BS as usize]),
        other => panic!("{other:?}"),
    }
    assert_eq!(pipe.held(), 0);
    assert_eq!(r.reader.metrics.failovers.get(), 1);
    assert_eq!(r.ranked[0].body_bytes() + r.ranked[1].body_bytes(), BS);
    assert_eq!(r.origin.gets(), 0);
    // A read across two blocks is not piped.
    pipe.prefix(b"head").unwrap();
    assert!(matches!(
        h.read_piped(BS - 10, 20, &mut pipe).await.unwrap(),
        Piped::Declined
    ));
    pipe.clear().unwrap();
    // Warming blocks 1 and 2 asks each owner for one byte, and nothing of the
    // origin.
    r.ranked[0].always(None);
    let gets = |r: &Rig| r.ranked.iter().map(|n| n.gets()).sum::<u64>();
    let bytes = |r: &Rig| r.ranked.iter().map(|n| n.body_bytes()).sum::<u64>();
    let (g0, b0) = (gets(&r), bytes(&r));
    h.warm(1, 2);
    while gets(&r) < g0 + 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!((gets(&r) - g0, bytes(&r) - b0), (2, 2));
    assert_eq!(r.origin.gets(), 0);
    assert_eq!(r.reader.metrics.prefetched.get(), 2);
}

/// All of `key` through a handle of its own, `step` bytes a read as the kernel
/// asks a FUSE daemon; each block the reads come to has the `ahead` after it
/// fetched ahead, as a mount's read-ahead does.
async fn small_reads(r: &Rig, key: &str, step: u64, ahead: u64) {
    let meta = r.data.meta(B, key).expect("stored");
    let h = r.reader.open_known(B, key, meta.clone());
    for at in (0..meta.size).step_by(step as usize) {
        if ahead > 0 && at % BS == 0 {
            h.prefetch(at / BS + 1, ahead);
        }
        let got = h.read_parts(at, step).await.unwrap();
        assert_eq!(got.parts.concat().len() as u64, step.min(meta.size - at));
    }
    while r.reader.inflight_blocks() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_scan_in_small_reads_leaves_a_file_read_twice_in_ram() {
    for ahead in [0, 2] {
        let opts = ReaderOptions {
            ram_bytes: 32 * BS,
            max_inflight_blocks: Some(4),
            ..Default::default()
        };
        let r = Rig::with(1, |_| {}, opts);
        // Six times the tier, each of its blocks read once.
        let scan: Vec<String> = (0..6).map(|i| format!("scan/{i}")).collect();
        for key in &scan {
            r.data.put(B, key, vec![1u8; 32 * BS as usize]);
        }
        let asked = |r: &Rig| r.ranked[0].gets() + r.origin.gets();
        // `k`, 4 blocks, read twice, then the scan: eight reads a block.
        small_reads(&r, "k", BS / 8, ahead).await;
        assert_eq!(asked(&r), 4);
        small_reads(&r, "k", BS / 8, ahead).await;
        assert_eq!(asked(&r), 4, "read again from RAM");
        for key in &scan {
            small_reads(&r, key, BS / 8, ahead).await;
        }
        assert_eq!(asked(&r), 4 + 6 * 32, "each block of the scan fetched once");
        let before = asked(&r);
        small_reads(&r, "k", BS / 8, ahead).await;
        assert_eq!(
            asked(&r),
            before,
            "read ahead {ahead}: `k` was pushed out by the scan"
        );
    }
}
