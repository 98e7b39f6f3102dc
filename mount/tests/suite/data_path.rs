//! Where a read's bytes go on their way to the kernel: answered as they arrive
//! (cut-through); for the page cache, spliced from the node's socket and never
//! copied into the mount; otherwise written once into buffers that are used
//! again, and not kept twice once the kernel's page cache holds them.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::common::*;
use shoal_testorigin::FaultSettings;

/// Metrics of the mount at `addr`, as numbers by series (each on the page).
async fn value(addr: &str, series: &str) -> f64 {
    metric(&scrape(addr).await, series)
}

/// A mount's page before its first read: every FUSE operation it answers,
/// every source and fallback cause its reader counts, a series at 0 or more.
fn every_known_series_from_the_start(text: &str) {
    for op in ["lookup", "getattr", "open", "read", "opendir"] {
        metric(text, &format!("shoal_mount_ops_total{{op=\"{op}\"}}"));
        metric(
            text,
            &format!("shoal_mount_op_seconds_count{{op=\"{op}\"}}"),
        );
    }
    for op in [
        "forget",
        "release",
        "readdirplus",
        "statfs",
        "listxattr",
        "access",
    ] {
        metric(text, &format!("shoal_mount_ops_total{{op=\"{op}\"}}"));
    }
    for source in ["ram", "node", "origin"] {
        metric(
            text,
            &format!("shoal_client_bytes_total{{source=\"{source}\"}}"),
        );
    }
    for cause in [
        "connect",
        "first_byte",
        "stall",
        "error",
        "down",
        "no_nodes",
        "shed",
    ] {
        let s = format!("shoal_client_fallbacks_total{{cause=\"{cause}\"}}");
        assert_eq!(metric(text, &s), 0.0, "{s} before a read");
    }
}

/// The copy path: page-cache reads come into the RAM tier first.
const COPYING: &str = "[mount]\nsplice_reads = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_read_is_answered_before_its_block_has_arrived() {
    // Spliced from the node's socket, and copied through a block's buffer.
    for extra in ["", COPYING] {
        cold_read_cuts_through(extra).await;
    }
}

async fn cold_read_cuts_through(extra: &str) {
    let o = origin().await;
    // One block: what the origin has sent is that block's bytes.
    let body = data(1 << 20, 31);
    o.put(BUCKET, "slow.bin", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(&o, dir.path(), "n");
    let addr = free_addr();
    // The origin's first bytes come slowly too: the node is not given up on.
    let toml = mount_toml(&o, &[&node], extra)
        .replace(
            "first_byte_timeout = \"1s\"",
            "first_byte_timeout = \"30s\"",
        )
        .replace("stall_timeout = \"1s\"", "stall_timeout = \"30s\"");
    let m = Mount::start(&toml, BUCKET, &["--metrics-addr", &addr]);
    every_known_series_from_the_start(&scrape(&addr).await);
    // A block takes the origin eight seconds to send whole, in 256 KiB pieces
    // two seconds apart; what it has sent is counted as each piece starts.
    o.faults.set(FaultSettings {
        bandwidth_bytes_per_sec: 128 << 10,
        ..Default::default()
    });
    let path = m.path("slow.bin");
    let stats = o.stats.clone();
    let (first, sent_then) = tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(path).unwrap();
        let mut buf = vec![0u8; 4096];
        f.read_exact(&mut buf).unwrap();
        (buf, stats.snapshot().body_bytes_sent)
    })
    .await
    .unwrap();
    assert_eq!(first, body[..4096]);
    // The reader had its bytes while the origin was still sending the block:
    // an order of events, whatever the machine's speed.
    assert!(
        sent_then < body.len() as u64,
        "the first 4 KiB came once the origin had sent {sent_then} of the block's {} bytes ({extra:?})",
        body.len()
    );
    // And the mount's side of it: it asked the node, less than a block has
    // come from it (none, if it is counted when whole), and nothing was read
    // from the origin by the mount itself.
    let asked = metric_sum(&scrape(&addr).await, "shoal_client_node_requests_total");
    assert!(asked >= 1.0, "the mount asked no node ({extra:?})");
    let from_node = value(&addr, "shoal_client_bytes_total{source=\"node\"}").await;
    assert!(
        from_node < (1 << 20) as f64,
        "{from_node} bytes had come ({extra:?})"
    );
    assert_eq!(
        value(&addr, "shoal_client_blocks_total{source=\"origin\"}").await,
        0.0
    );
    o.faults.clear();
    drop(m);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_the_page_cache_took_whole_leave_the_ram_tier_and_their_buffers_are_reused() {
    let o = origin().await;
    let cached = data(4 << 20, 32);
    let direct = data(4 << 20, 33);
    o.put(BUCKET, "cached.bin", cached.clone());
    o.put(BUCKET, "direct.bin", direct.clone());
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(&o, dir.path(), "n");
    let addr = free_addr();
    let m = Mount::start(
        &mount_toml(&o, &[&node], COPYING),
        BUCKET,
        &["--metrics-addr", &addr],
    );
    let got = md5_through(&m.path("cached.bin")).await;
    let want = md5_of(dir.path(), "cached.bin", &cached).await;
    assert_eq!(got, want);
    let ram = value(&addr, "shoal_client_ram_bytes").await;
    assert!(
        ram < (1 << 20) as f64,
        "{ram} bytes kept beside the page cache"
    );
    // An O_DIRECT reader's blocks stay: the kernel keeps none of them.
    let path = m.path("direct.bin");
    let read = tokio::task::spawn_blocking(move || {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .unwrap();
    assert!(read == direct[..], "O_DIRECT read differs");
    let ram = value(&addr, "shoal_client_ram_bytes").await;
    assert!(
        ram >= (4 << 20) as f64,
        "{ram} bytes kept for an O_DIRECT reader"
    );
    // The second file's blocks went into the buffers the first one's left.
    assert!(value(&addr, "shoal_client_block_buffers_reused_total").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_cache_reads_are_spliced_from_the_nodes_which_fetch_each_block_once() {
    let o = origin().await;
    let body = data(8 << 20, 34);
    o.put(BUCKET, "big.bin", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(&o, dir.path(), "n");
    let addr = free_addr();
    let m = Mount::start(
        &mount_toml(&o, &[&node], ""),
        BUCKET,
        &["--metrics-addr", &addr],
    );
    let sent = o.stats.snapshot().body_bytes_sent;
    let got = md5_through(&m.path("big.bin")).await;
    let want = md5_of(dir.path(), "big.bin", &body).await;
    assert_eq!(got, want);
    // The bytes went from the node's socket to the kernel: none came into a
    // block buffer or the RAM tier here. (A read whose body came in fragments
    // too many for the pipe is read instead, into a buffer of its own.)
    let spliced = value(&addr, "shoal_mount_spliced_bytes_total").await;
    assert!(spliced > 0.0, "nothing was spliced");
    assert_eq!(value(&addr, "shoal_client_ram_bytes").await, 0.0);
    assert_eq!(
        value(&addr, "shoal_client_block_buffers_allocated_total").await,
        0.0
    );
    // Read-ahead asked the node to have blocks ready, and the node fetched
    // each block from the origin once for the hint and the read together (a
    // listing's few hundred bytes beside them).
    assert!(value(&addr, "shoal_mount_readahead_blocks_total").await >= 1.0);
    let origin_sent = o.stats.snapshot().body_bytes_sent - sent;
    assert!(
        (body.len() as u64..body.len() as u64 + (64 << 10)).contains(&origin_sent),
        "the origin sent {origin_sent} bytes for an object of {}",
        body.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_nodes_hold_is_not_asked_of_them_ahead_block_by_block() {
    let o = origin().await;
    // Big enough that the asks sent before the first answers come back (up to
    // the 64 blocks of the read-ahead budget, on a busy machine) are not most
    // of the file: what is checked is what comes after them.
    const BLOCKS: usize = 192;
    let body = data(BLOCKS << 20, 35);
    o.put(BUCKET, "warm.bin", body.clone());
    let dir = tempfile::tempdir().unwrap();
    // The node's RAM tier (256 MiB in 16 shards) holds the whole file, however
    // unevenly its blocks fall in the shards.
    let node = start_node(&o, dir.path(), "n");
    let want = md5_of(dir.path(), "warm.bin", &body).await;
    // The first mount finds the node cold and asks it ahead for every block;
    // the second finds the blocks held and, after a run of them (and the asks
    // already sent while it ran), asks only every eighth, then fewer.
    let mut asked = Vec::new();
    let mut fetched = Vec::new();
    for _ in 0..2 {
        let addr = free_addr();
        let m = Mount::start(
            &mount_toml(&o, &[&node], ""),
            BUCKET,
            &["--metrics-addr", &addr],
        );
        let got = md5_through(&m.path("warm.bin")).await;
        assert_eq!(got, want);
        asked.push(value(&addr, "shoal_client_prefetched_total").await);
        fetched.push(metric_required(
            &scrape(&node.addr).await,
            "shoal_node_origin_requests_total{kind=\"block\"}",
        ));
        drop(m);
    }
    assert_eq!(
        fetched, [BLOCKS as f64; 2],
        "blocks the node fetched from the origin after each read"
    );
    // Cold, nearly every block is asked ahead: all but the run's first few
    // and those a busy host read before the window reached them (183 of 192
    // in one suite run).
    assert!(
        asked[0] >= (BLOCKS - BLOCKS / 8) as f64,
        "the cold read asked ahead for {asked:?} blocks of {BLOCKS}"
    );
    assert!(
        asked[1] * 2.0 <= asked[0],
        "the warm read asked ahead for {asked:?} blocks of {BLOCKS}"
    );
}

/// The MD5 of `path` read through the page cache in whole blocks, as dd bs=1M
/// and the kernel's read-ahead ask for them.
async fn md5_through(path: &std::path::Path) -> String {
    sh_ok(&format!("dd if={} bs=1M status=none | md5sum", q(path))).await
}

/// The MD5 of `data`, written to `dir/name` and read from there.
async fn md5_of(dir: &std::path::Path, name: &str, data: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    sh_ok(&format!("md5sum < {}", q(&p))).await
}
