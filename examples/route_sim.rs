//! Scale simulator for shoal's block placement.
//!
//! `cargo run --release --example route_sim -- [--nodes 10,100,1000] [--blocks 1000000]
//! [--weights] [--zipf 1.1]` prints, for each node count: blocks per node (max/mean),
//! the share of blocks that move when one node is added or removed against 1/n, the
//! load spread under a Zipf-popular workload with and without bounded load, and the
//! cost of a top-2 ranking.
//!
//! `--fleet [--fleet-nodes 1000] [--fleet-blocks 200000] [--away-share 0.5]` prints
//! instead what routine changes cost the origin (10 nodes added, every node
//! upgraded, 10 removed) with and without the mechanisms that hand blocks over
//! (see `support/fleet_changes.rs` for the model).

use std::time::Instant;

use shoal::route::{BlockId, NodeSet};

#[path = "support/fleet_changes.rs"]
mod fleet_changes;

struct Args {
    nodes: Vec<usize>,
    blocks: u64,
    weights: bool,
    zipf: f64,
    fleet: bool,
    fleet_nodes: usize,
    fleet_blocks: u64,
    away_share: f64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        nodes: vec![10, 100, 1000],
        blocks: 1_000_000,
        weights: false,
        zipf: 1.1,
        fleet: false,
        fleet_nodes: 1000,
        fleet_blocks: 200_000,
        away_share: 0.5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => {
                a.nodes = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad node count {s:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--blocks" => a.blocks = val()?.parse().map_err(|_| "bad --blocks")?,
            "--zipf" => a.zipf = val()?.parse().map_err(|_| "bad --zipf")?,
            "--weights" => a.weights = true,
            "--fleet" => a.fleet = true,
            "--fleet-nodes" => a.fleet_nodes = val()?.parse().map_err(|_| "bad --fleet-nodes")?,
            "--fleet-blocks" => {
                a.fleet_blocks = val()?.parse().map_err(|_| "bad --fleet-blocks")?
            }
            "--away-share" => {
                a.away_share = val()?
                    .parse()
                    .ok()
                    .filter(|s| (0.0..=1.0).contains(s))
                    .ok_or("--away-share is a share, 0 to 1")?
            }
            "-h" | "--help" => {
                println!("route_sim [--nodes 10,100,1000] [--blocks N] [--weights] [--zipf S]");
                println!(
                    "route_sim --fleet [--fleet-nodes 1000] [--fleet-blocks N] [--away-share F]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    if a.fleet_nodes < 20 || a.fleet_blocks == 0 {
        return Err("--fleet needs at least 20 nodes and 1 block".into());
    }
    if a.nodes.iter().any(|n| *n < 2) || a.blocks == 0 {
        return Err("need at least 2 nodes and 1 block".into());
    }
    Ok(a)
}

fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.{}.{}.{}:9100", i / 65536, (i / 256) % 256, i % 256))
        .collect()
}

fn weight(i: usize, weighted: bool) -> f64 {
    if weighted {
        [1.0, 2.0, 0.5, 4.0][i % 4]
    } else {
        1.0
    }
}

fn block(i: u64) -> BlockId<'static> {
    BlockId {
        bucket: "datasets",
        key: "imagenet/train.tar",
        index: i,
    }
}

/// Xorshift: cheap reproducible randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("route_sim: {e}");
            std::process::exit(2);
        }
    };
    if args.fleet {
        fleet(&args);
        return;
    }
    println!(
        "blocks={} weights={} zipf={}  (moves are shares of all blocks; ideal is the added/removed node's weight share)",
        args.blocks,
        if args.weights { "1,2,0.5,4" } else { "equal" },
        args.zipf
    );
    println!(
        "{:>6} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8}",
        "nodes",
        "max/fair",
        "add-move",
        "ideal",
        "rm-move",
        "ideal",
        "rm->2nd",
        "zipf-max",
        "bounded",
        "spill%",
        "ns/top2"
    );
    for &n in &args.nodes {
        run(n, &args);
    }
}

fn run(n: usize, args: &Args) {
    let specs: Vec<(String, f64)> = ids(n)
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, weight(i, args.weights)))
        .collect();
    let set = NodeSet::new(specs.clone());
    let plus = NodeSet::new(
        specs
            .iter()
            .cloned()
            .chain([("10.255.255.254:9100".to_string(), 1.0)]),
    );
    let victim = specs[n / 2].0.clone();
    let minus = NodeSet::new(specs.iter().filter(|s| s.0 != victim).cloned());
    let id_of = |s: &NodeSet, i: usize| s.nodes()[i].id.clone();

    let mut per_node = vec![0u64; n];
    let (mut add_moved, mut rm_moved, mut rm_to_second) = (0u64, 0u64, 0u64);
    let mut buf = Vec::with_capacity(3);
    for b in 0..args.blocks {
        let blk = block(b);
        set.top_k_into(&blk, 2, &mut buf);
        let (owner, second) = (buf[0].index, buf[1].index);
        per_node[owner] += 1;
        plus.top_k_into(&blk, 1, &mut buf);
        if id_of(&plus, buf[0].index) != id_of(&set, owner) {
            add_moved += 1;
        }
        minus.top_k_into(&blk, 1, &mut buf);
        let now = id_of(&minus, buf[0].index);
        if now != id_of(&set, owner) {
            rm_moved += 1;
            if now == id_of(&set, second) {
                rm_to_second += 1;
            }
        }
    }
    // Blocks per node against each node's fair share (its weight's share).
    let total_w: f64 = specs.iter().map(|s| s.1).sum();
    let max_ratio = set
        .nodes()
        .iter()
        .zip(&per_node)
        .map(|(node, c)| *c as f64 / (args.blocks as f64 * node.weight / total_w))
        .fold(0.0f64, f64::max);

    let (zipf_plain, zipf_bounded, spill) = zipf_load(&set, args);

    let reps = 200_000u64;
    let t = Instant::now();
    let mut sink = 0usize;
    for i in 0..reps {
        set.top_k_into(&block(i), 2, &mut buf);
        sink ^= buf[0].index;
    }
    let ns = t.elapsed().as_nanos() as f64 / reps as f64;
    std::hint::black_box(sink);

    println!(
        "{:>6} {:>9.3} {:>9.4} {:>8.4} {:>9.4} {:>9.4} {:>9.4} {:>8.2} {:>9.2} {:>9.2} {:>8.0}",
        n,
        max_ratio,
        add_moved as f64 / args.blocks as f64,
        1.0 / (total_w + 1.0),
        rm_moved as f64 / args.blocks as f64,
        if args.weights {
            weight(n / 2, true) / total_w
        } else {
            1.0 / n as f64
        },
        if rm_moved == 0 {
            1.0
        } else {
            rm_to_second as f64 / rm_moved as f64
        },
        zipf_plain,
        zipf_bounded,
        spill * 100.0,
        ns
    );
}

/// Peak in-flight on the busiest node over the mean, for waves of concurrent
/// requests drawn from a Zipf popularity over the blocks: without bounds, and with
/// a bound of `ceil(1.25 × mean)` (the relative form of bounded load). A request
/// looks at most 256 ranked nodes for room, as a client would before giving the
/// block to its owner anyway.
fn zipf_load(set: &NodeSet, args: &Args) -> (f64, f64, f64) {
    let n = set.len();
    let distinct = args.blocks.min(100_000);
    // Zipf CDF over `distinct` blocks.
    let mut cdf = Vec::with_capacity(distinct as usize);
    let mut acc = 0.0;
    for r in 1..=distinct {
        acc += 1.0 / (r as f64).powf(args.zipf);
        cdf.push(acc);
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let wave = (n * 8) as u64;
    let waves = 50;
    let (mut plain_peak, mut bounded_peak, mut spills, mut total) = (0f64, 0f64, 0u64, 0u64);
    let mut buf = Vec::new();
    for _ in 0..waves {
        let mut plain = vec![0u64; n];
        let mut bounded = vec![0u64; n];
        for j in 0..wave {
            let x = rng.unit() * acc;
            let b = cdf.partition_point(|c| *c < x) as u64;
            set.top_k_into(&block(b), n.min(256), &mut buf);
            plain[buf[0].index] += 1;
            let limit = (1.25 * (j + 1) as f64 / n as f64).ceil() as u64;
            let pick = buf
                .iter()
                .map(|c| c.index)
                .find(|i| bounded[*i] < limit)
                .unwrap_or(buf[0].index);
            if pick != buf[0].index {
                spills += 1;
            }
            bounded[pick] += 1;
            total += 1;
        }
        let mean = wave as f64 / n as f64;
        plain_peak = plain_peak.max(*plain.iter().max().unwrap() as f64 / mean);
        bounded_peak = bounded_peak.max(*bounded.iter().max().unwrap() as f64 / mean);
    }
    (plain_peak, bounded_peak, spills as f64 / total as f64)
}

/// Origin blocks each routine change costs, per set of mechanisms.
fn fleet(args: &Args) {
    let (n, blocks) = (args.fleet_nodes, args.fleet_blocks);
    let all = ids(n + 10);
    println!(
        "{n} nodes, a working set of {blocks} blocks read once after each change; {}% of a node's blocks read while it is away",
        args.away_share * 100.0
    );
    println!(
        "origin blocks (share of the working set) each change costs; items: 1 previous-owner fill, 2 handover, 3 stop/start keeps the disk, 4 drain"
    );
    println!(
        "{:<8} {:>18} {:>18} {:>18}",
        "items", "add 10", "upgrade all", "remove 10"
    );
    for m in fleet_changes::CONFIGS {
        let cost = fleet_changes::run(n, blocks, args.away_share, m, &all);
        let cell = |c: u64| format!("{c} ({:.4}x)", c as f64 / blocks as f64);
        println!(
            "{:<8} {:>18} {:>18} {:>18}",
            m.name,
            cell(cost[0]),
            cell(cost[1]),
            cell(cost[2])
        );
    }
}
