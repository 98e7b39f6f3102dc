//! Cold blocks cut through: streamed to every asker as they arrive from the
//! origin, fetched once however many ask, resumed when the origin's body is cut,
//! and never kept short.

use std::time::{Duration, Instant};

use crate::common::*;
use futures_util::StreamExt;
use shoal::store::{ByteRange, GetObject, ObjectStore};
use shoal_testorigin::FaultSettings;

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_cold_readers_of_one_block_cost_one_get_and_all_stream() {
    let origin = origin().await;
    let body = data(MIB as usize, 1);
    origin.put(BUCKET, "one", body.clone());
    // 1 MiB at 4 MB/s: a quarter of a second from first byte to last.
    origin.faults.set(FaultSettings {
        bandwidth_bytes_per_sec: 4_000_000,
        ..Default::default()
    });
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let t0 = Instant::now();
    let readers = (0..16).map(|_| {
        let c = client(node.addr);
        tokio::spawn(async move {
            let resp = c.get_range(&GetObject::new(BUCKET, "one")).await.unwrap();
            let mut body = resp.body;
            let mut first = None;
            let mut got = Vec::new();
            while let Some(chunk) = body.next().await {
                first.get_or_insert_with(|| t0.elapsed());
                got.extend_from_slice(&chunk.unwrap());
            }
            (first.unwrap(), t0.elapsed(), got)
        })
    });
    let results = futures_util::future::join_all(readers).await;
    for r in results {
        let (first, last, got) = r.unwrap();
        assert!(got == body, "byte-exact");
        assert!(
            first * 2 < last,
            "the first bytes came before the block had arrived: first {first:?}, last {last:?}"
        );
    }
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "one"),
        1,
        "one origin GET"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_mid_block_is_resumed_and_a_cut_that_persists_is_a_clean_error() {
    let origin = origin().await;
    let body = data(3 * MIB as usize, 2);
    origin.put(BUCKET, "cut", body.clone());
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;

    // One cut, 300 KiB into a block: the node asks for the rest and the reader
    // gets every byte.
    origin.faults.set(FaultSettings {
        reset_after_bytes: 300 << 10,
        ..Default::default()
    });
    origin.faults.reset_next(1);
    let (_, got) = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "cut").range(ByteRange::span(0, MIB)))
        .await
        .unwrap();
    assert!(got == body.slice(0..MIB as usize), "resumed byte-exact");
    let snap = origin.stats.snapshot();
    assert!(
        snap.requests.iter().any(|r| r.kind.key == "cut"
            && r.kind.range.as_deref() == Some(&format!("bytes={}-{}", 300 << 10, MIB - 1)[..])),
        "the rest was asked for with a range: {:?}",
        snap.requests
    );

    // Every body cut: the reader's stream fails (never a short answer taken as
    // whole), and nothing short is kept: once the origin is well, it reads whole.
    origin.faults.set(FaultSettings {
        reset_per_mille: 1000,
        reset_after_bytes: 100 << 10,
        ..Default::default()
    });
    let r = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "cut").range(ByteRange::span(MIB, 2 * MIB)))
        .await;
    assert!(r.is_err(), "a body cut every time is an error: {r:?}");
    origin.faults.clear();
    let (_, got) = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "cut").range(ByteRange::span(MIB, 2 * MIB)))
        .await
        .unwrap();
    assert!(got == body.slice(MIB as usize..2 * MIB as usize));
    // And now it is warm: no more origin GETs for it.
    let before = origin.stats.snapshot().gets_of(BUCKET, "cut");
    let (_, again) = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "cut").range(ByteRange::span(MIB, 2 * MIB)))
        .await
        .unwrap();
    assert!(again == got);
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "cut"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_small_read_waits_for_the_origins_first_byte_not_the_whole_block() {
    let origin = origin().await;
    let body = data(4 * MIB as usize, 3);
    origin.put(BUCKET, "small", body.clone());
    // Slow enough that a whole 1 MiB block takes a second.
    origin.faults.set(FaultSettings {
        bandwidth_bytes_per_sec: 1_000_000,
        ..Default::default()
    });
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let t0 = Instant::now();
    let (_, got) = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "small").range(ByteRange::span(4096, 8192)))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(got == body.slice(4096..8192));
    assert!(
        took < Duration::from_millis(500),
        "4 KiB from the start of a cold block came in {took:?}, not after the block's second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_small_read_deep_in_a_block_is_asked_on_its_own_and_the_block_still_fills() {
    let origin = origin().await;
    let body = data(2 * MIB as usize, 5);
    origin.put(BUCKET, "deep", body.clone());
    // A whole 1 MiB block takes a second; the last 4 KiB of block 0 would come
    // at its end.
    origin.faults.set(FaultSettings {
        bandwidth_bytes_per_sec: 1_000_000,
        ..Default::default()
    });
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let c = client(node.addr);
    let (at, to) = (MIB - 4096, MIB);
    let t0 = Instant::now();
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "deep").range(ByteRange::span(at, to)))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(got == body.slice(at as usize..to as usize), "byte-exact");
    assert!(
        took < Duration::from_millis(500),
        "4 KiB at the end of a cold block came in {took:?}, not after the block's second"
    );
    // The block's own fetch went on: a whole read of it joins that fetch or finds
    // it in the RAM tier, and no third GET is made.
    let (_, whole) = c
        .get_bytes(&GetObject::new(BUCKET, "deep").range(ByteRange::span(0, MIB)))
        .await
        .unwrap();
    assert!(whole == body.slice(..MIB as usize));
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "deep"),
        2,
        "the block and the side range"
    );
    // Once the block is held, a small read deep in it costs the origin nothing.
    let (_, again) = c
        .get_bytes(&GetObject::new(BUCKET, "deep").range(ByteRange::span(at - 8192, at)))
        .await
        .unwrap();
    assert!(again == body.slice((at - 8192) as usize..at as usize));
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "deep"), 2);
}
