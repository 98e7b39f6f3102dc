//! Cold blocks cut through: streamed to every asker as they arrive from the
//! origin, fetched once however many ask, resumed when the origin's body is cut,
//! and never kept short. "As they arrive" is an order of events: the origin is
//! paced, and a reader's bytes must come while the origin has yet to send the
//! rest of the block (what it has sent is counted before each paced piece goes).

use crate::common::*;
use futures_util::StreamExt;
use shoal::store::{ByteRange, GetObject, ObjectStore};
use shoal_testorigin::FaultSettings;

const MIB: u64 = 1 << 20;

/// The origin's pace: 256 KiB pieces, one every two seconds, so a 1 MiB block
/// takes eight seconds and a reader of its first bytes has seconds to spare
/// before the origin has sent the rest, however busy the machine.
const SLOW: FaultSettings = FaultSettings {
    first_byte_delay_ms: 0,
    bandwidth_bytes_per_sec: 128 << 10,
    slowdown_per_mille: 0,
    slowdown_above_per_second: 0,
    error_per_mille: 0,
    reset_per_mille: 0,
    reset_after_bytes: 0,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_cold_readers_of_one_block_cost_one_get_and_all_stream() {
    let origin = origin().await;
    let body = data(MIB as usize, 1);
    origin.put(BUCKET, "one", body.clone());
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    origin.stats.reset();
    origin.faults.set(SLOW);
    let readers = (0..16).map(|_| {
        let c = client(node.addr);
        let stats = origin.stats.clone();
        tokio::spawn(async move {
            let resp = c.get_range(&GetObject::new(BUCKET, "one")).await.unwrap();
            let mut body = resp.body;
            let mut sent_then = None;
            let mut got = Vec::new();
            while let Some(chunk) = body.next().await {
                sent_then.get_or_insert_with(|| stats.snapshot().body_bytes_sent);
                got.extend_from_slice(&chunk.unwrap());
            }
            (sent_then.unwrap(), got)
        })
    });
    let results = futures_util::future::join_all(readers).await;
    for r in results {
        let (sent_then, got) = r.unwrap();
        assert!(got == body, "byte-exact");
        assert!(
            sent_then < MIB,
            "a reader's first bytes came once the origin had sent {sent_then} of the block's {MIB}"
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
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    origin.stats.reset();
    origin.faults.set(SLOW);
    let (_, got) = client(node.addr)
        .get_bytes(&GetObject::new(BUCKET, "small").range(ByteRange::span(4096, 8192)))
        .await
        .unwrap();
    let sent = origin.stats.snapshot().body_bytes_sent;
    assert!(got == body.slice(4096..8192));
    assert!(
        sent < MIB,
        "4 KiB from the start of a cold block came once the origin had sent {sent} bytes, \
         not before the block's end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_small_read_deep_in_a_block_is_asked_on_its_own_and_the_block_still_fills() {
    let origin = origin().await;
    let body = data(2 * MIB as usize, 5);
    origin.put(BUCKET, "deep", body.clone());
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    let c = client(node.addr);
    // The last 4 KiB of block 0 would come at the block's end.
    let (at, to) = (MIB - 4096, MIB);
    origin.stats.reset();
    origin.faults.set(SLOW);
    let (_, got) = c
        .get_bytes(&GetObject::new(BUCKET, "deep").range(ByteRange::span(at, to)))
        .await
        .unwrap();
    let sent = origin.stats.snapshot().body_bytes_sent;
    assert!(got == body.slice(at as usize..to as usize), "byte-exact");
    // The side range's 4 KiB and less than the block: the block was still on
    // its way.
    assert!(
        sent < MIB + 4096,
        "4 KiB at the end of a cold block came once the origin had sent {sent} bytes, \
         not before the block's end"
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
