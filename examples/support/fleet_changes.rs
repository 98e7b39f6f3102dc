//! What routine fleet changes cost the origin, at scale: a warm working set on
//! `n` nodes (each block on its owner's disk), then 10 nodes added, every node
//! upgraded in turn, 10 nodes removed, the working set read once after each
//! change. Counted in blocks fetched from the origin, with and without the
//! mechanisms that hand blocks over:
//!
//! - previous-owner fill (item 1): a node missing a block it owns asks the
//!   block's runner-up (`only-if-cached`) before the origin;
//! - handover (item 2): an upgrade starts the new process on the old one's
//!   sockets and disk, so the node is never away;
//! - stop and start (item 3): a node stopped with SIGTERM keeps what it held
//!   (RAM flushed, versions kept) and serves it again at once; without it the
//!   disk still survives, so the model charges it nothing extra (an honest
//!   floor: what it really lost was the RAM-only blocks and one block per
//!   object whose version it had to learn again);
//! - drain (item 4): a leaving node's blocks are taken by their runner-ups
//!   from it before it stops.
//!
//! While a node is away (an upgrade without handover), readers go to each
//! block's runner-up, which is not its owner and fetches it from the origin
//! (keeping it); `away_share` of a node's blocks are read in that window (the
//! 3-node test measured about half; a busy working set approaches 1).

use shoal::route::{BlockId, NodeSet};

/// Which mechanisms are on.
#[derive(Clone, Copy)]
pub struct Mechanisms {
    pub name: &'static str,
    pub peer_fill: bool,
    pub handover: bool,
    pub drain: bool,
}

pub const CONFIGS: [Mechanisms; 4] = [
    Mechanisms {
        name: "none",
        peer_fill: false,
        handover: false,
        drain: false,
    },
    Mechanisms {
        name: "1",
        peer_fill: true,
        handover: false,
        drain: false,
    },
    Mechanisms {
        name: "1,3,4",
        peer_fill: true,
        handover: false,
        drain: true,
    },
    Mechanisms {
        name: "1-4",
        peer_fill: true,
        handover: true,
        drain: true,
    },
];

fn block(i: u64) -> BlockId<'static> {
    BlockId {
        bucket: "datasets",
        key: "fleet/working-set",
        index: i,
    }
}

/// Blocks held per block: node ids (indexes into the id list).
struct Held(Vec<Vec<u32>>);

impl Held {
    fn has(&self, b: usize, n: u32) -> bool {
        self.0[b].contains(&n)
    }
    fn put(&mut self, b: usize, n: u32) {
        if !self.has(b, n) {
            self.0[b].push(n);
        }
    }
}

/// The owner and runner-up of every block in `set`, as indexes into `ids`.
fn ranked(set: &NodeSet, ids: &[String], blocks: u64) -> Vec<(u32, u32)> {
    let index: std::collections::HashMap<&str, u32> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i as u32))
        .collect();
    let mut buf = Vec::with_capacity(2);
    (0..blocks)
        .map(|b| {
            set.top_k_into(&block(b), 2, &mut buf);
            let id = |c: usize| index[set.nodes()[buf[c].index].id.as_str()];
            (id(0), id(1))
        })
        .collect()
}

/// One read of every block under ranking `rank`: origin blocks fetched.
fn read_all(held: &mut Held, rank: &[(u32, u32)], m: Mechanisms) -> u64 {
    let mut origin = 0;
    for (b, &(owner, second)) in rank.iter().enumerate() {
        if held.has(b, owner) {
            continue;
        }
        if !(m.peer_fill && held.has(b, second)) {
            origin += 1;
        }
        held.put(b, owner);
    }
    origin
}

/// Cheap reproducible hash of a block and a node, in [0, 1).
fn unit(b: u64, n: u32) -> f64 {
    let mut x =
        b.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (n as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Origin blocks each change costs: (added, upgraded, removed).
pub fn run(n: usize, blocks: u64, away_share: f64, m: Mechanisms, ids: &[String]) -> [u64; 3] {
    let with = |alive: &[usize]| NodeSet::new(alive.iter().map(|&i| (ids[i].clone(), 1.0)));
    let first: Vec<usize> = (0..n).collect();
    let rank0 = ranked(&with(&first), ids, blocks);
    // Warm: every block on its owner.
    let mut held = Held(rank0.iter().map(|&(o, _)| vec![o]).collect());

    // 10 nodes join.
    let added: Vec<usize> = (0..n + 10).collect();
    let rank1 = ranked(&with(&added), ids, blocks);
    let add = read_all(&mut held, &rank1, m);

    // Every node upgraded in turn; without handover it is away meanwhile and
    // the readers of its blocks go to their runner-up.
    let mut upgrade = 0;
    if !m.handover {
        for (b, &(owner, second)) in rank1.iter().enumerate() {
            if unit(b as u64, owner) < away_share && !held.has(b, second) {
                upgrade += 1;
                held.put(b, second);
            }
        }
    }
    upgrade += read_all(&mut held, &rank1, m);

    // 10 of the first nodes leave, spread over the id space.
    let gone: Vec<usize> = (0..10).map(|i| i * n / 10 + n / 20).collect();
    if m.drain {
        // Their runner-ups take what they hold from them first.
        for (b, &(owner, second)) in rank1.iter().enumerate() {
            if gone.contains(&(owner as usize)) && held.has(b, owner) {
                held.put(b, second);
            }
        }
    }
    let left: Vec<usize> = added
        .iter()
        .copied()
        .filter(|i| !gone.contains(i))
        .collect();
    let rank2 = ranked(&with(&left), ids, blocks);
    for h in held.0.iter_mut() {
        h.retain(|x| !gone.contains(&(*x as usize)));
    }
    let remove = read_all(&mut held, &rank2, m);
    [add, upgrade, remove]
}
