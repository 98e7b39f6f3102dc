//! Miss ratios of the tiers' eviction policies on the same request streams, and
//! what a policy costs a RAM tier's hot path.
//!
//! Streams: Zipf over `DISTINCT` blocks (alpha 0.8, 1.0, 1.2), each alone and
//! with a one-pass scan mixed in: as many other blocks again, each read once,
//! `SCAN_PER_REQUEST` of them after each Zipf request from a third of the
//! stream on (a nightly scan or a backfill beside the working set). A scan
//! block misses under every policy, so the ratio counted is of the Zipf
//! requests made while the scan runs (the same requests, same seed, in the
//! rows without it): what the scan cost the blocks that are read again.
//! Caches of 1% and 10% of the distinct blocks.
//!
//! Then the hot path: a RAM tier of 1 MiB blocks (as a node's) answering hits
//! and taking misses (insert and evict) under each policy, nanoseconds per
//! request of CPU on one thread.
//!
//! Usage: cargo run --release --example cache_policy [-- REQUESTS]

use std::time::Instant;

use bytes::Bytes;
use rand::{rngs::StdRng, Rng, SeedableRng};
use shoal::blocks::policy::{Eviction, PolicyKind};
use shoal::blocks::{BlockCache, BlockKey, Evicting, RamTier};

const DISTINCT: u64 = 100_000;
const SCAN_PER_REQUEST: u64 = 4;
const POLICIES: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::S3Fifo];

/// Draws ranks 0.. with probability proportional to 1 / (rank + 1)^alpha.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: u64, alpha: f64) -> Zipf {
        let mut sum = 0.0;
        let cumulative = (1..=n)
            .map(|r| {
                sum += 1.0 / (r as f64).powf(alpha);
                sum
            })
            .collect();
        Zipf { cumulative }
    }

    fn draw(&self, rng: &mut StdRng) -> u64 {
        let x = rng.random::<f64>() * self.cumulative.last().unwrap();
        self.cumulative.partition_point(|&c| c < x) as u64
    }
}

/// A request: a block, and whether its miss is counted (a Zipf request while
/// the scan runs, or would run).
fn stream(alpha: f64, requests: usize, scan: bool) -> Vec<(u64, bool)> {
    let zipf = Zipf::new(DISTINCT, alpha);
    let mut rng = StdRng::seed_from_u64(7);
    // Ranks are spread over block ids, so that hot blocks are not neighbours.
    let spread = |r: u64| (r * 48_271) % DISTINCT;
    let mut out = Vec::with_capacity(requests * 2);
    let from = requests / 3;
    let to = from + (DISTINCT / SCAN_PER_REQUEST) as usize;
    assert!(to <= requests, "the scan ends within the stream");
    let mut next_scan = DISTINCT;
    for i in 0..requests {
        let during = (from..to).contains(&i);
        out.push((spread(zipf.draw(&mut rng)), during));
        if scan && during {
            for _ in 0..SCAN_PER_REQUEST {
                out.push((next_scan, false));
                next_scan += 1;
            }
        }
    }
    out
}

/// Misses of the counted requests over their count.
fn miss_ratio(kind: PolicyKind, capacity: u64, requests: &[(u64, bool)]) -> f64 {
    let mut p: Box<dyn Eviction<u64, ()>> = kind.build(capacity);
    let (mut held, mut misses, mut counted) = (0u64, 0u64, 0u64);
    for &(k, count) in requests {
        counted += u64::from(count);
        if p.get(&k).is_some() {
            continue;
        }
        misses += u64::from(count);
        p.insert(k, (), 1);
        held += 1;
        while held > capacity {
            p.pop_victim();
            held -= 1;
        }
    }
    misses as f64 / counted as f64
}

/// Nanoseconds of CPU per request on a RAM tier: hits of a held set, then
/// misses that each insert a block and evict one.
fn hot_path(kind: PolicyKind) -> (f64, f64) {
    const MB: u64 = 1 << 20;
    let blocks = 1024u64;
    let tier = RamTier::for_blocks(blocks * MB, MB, &Evicting::by(kind));
    let data = Bytes::from(vec![7u8; MB as usize]);
    let key = |i: u64| BlockKey::new("bucket", "data/part-00017.parquet", "etag", MB, i);
    for i in 0..blocks {
        tier.insert(key(i), data.clone());
    }
    let keys: Vec<BlockKey> = (0..blocks).map(key).collect();
    let hits = 2_000_000usize;
    let cpu = cpu_ns();
    for i in 0..hits {
        std::hint::black_box(tier.get(&keys[i % keys.len()]));
    }
    let hit_ns = (cpu_ns() - cpu) as f64 / hits as f64;
    let misses: Vec<BlockKey> = (blocks..blocks + 200_000).map(key).collect();
    let cpu = cpu_ns();
    for k in &misses {
        tier.insert(k.clone(), data.clone());
    }
    let miss_ns = (cpu_ns() - cpu) as f64 / misses.len() as f64;
    (hit_ns, miss_ns)
}

/// This thread's CPU time.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("REQUESTS is a number"))
        .unwrap_or(1_000_000);
    let started = Instant::now();
    println!(
        "miss ratio of the Zipf requests made while the scan runs ({requests} requests over \
         {DISTINCT} blocks; scan: {DISTINCT} other blocks read once, {SCAN_PER_REQUEST} after \
         each request from a third of the stream on)"
    );
    println!(
        "{:<6} {:<5} {:>6} {:>8} {:>8} {:>10}",
        "alpha", "scan", "cache", "lru", "s3-fifo", "s3-fifo/lru"
    );
    let mut worst: f64 = 0.0;
    let mut worst_scan: f64 = 0.0;
    for alpha in [0.8, 1.0, 1.2] {
        for scan in [false, true] {
            let reqs = stream(alpha, requests, scan);
            for share in [0.01, 0.10] {
                let cap = (DISTINCT as f64 * share) as u64;
                let r: Vec<f64> = POLICIES
                    .iter()
                    .map(|&k| miss_ratio(k, cap, &reqs))
                    .collect();
                let ratio = r[1] / r[0];
                worst = worst.max(ratio);
                if scan {
                    worst_scan = worst_scan.max(ratio);
                }
                println!(
                    "{alpha:<6} {:<5} {:>5}% {:>8.4} {:>8.4} {:>10.3}",
                    if scan { "yes" } else { "no" },
                    (share * 100.0) as u32,
                    r[0],
                    r[1],
                    ratio
                );
            }
        }
    }
    println!("s3-fifo/lru at most: {worst:.3} (rows with a scan: {worst_scan:.3})");
    println!();
    println!("RAM tier hot path, 1 MiB blocks, ns of CPU per request (one thread)");
    println!("{:<8} {:>8} {:>16}", "policy", "hit", "miss (+evict)");
    for kind in POLICIES {
        let (hit, miss) = hot_path(kind);
        println!("{:<8} {hit:>8.1} {miss:>16.1}", kind.name());
    }
    println!("({:.1} s)", started.elapsed().as_secs_f64());
}
