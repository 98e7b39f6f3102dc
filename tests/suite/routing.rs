//! Routing v1: golden vectors (written by tests/data/gen_routing_v1.py, an independent
//! implementation of the spec) and the properties rendezvous hashing promises.

use std::collections::HashMap;

use proptest::prelude::*;
use shoal::route::{BlockId, NodeSet};

#[derive(serde::Deserialize)]
struct Case {
    nodes: Vec<NodeJ>,
    bucket: String,
    key: String,
    index: u64,
    ranking: Vec<String>,
}

#[derive(serde::Deserialize)]
struct NodeJ {
    id: String,
    weight: f64,
}

#[test]
fn golden_vectors_v1() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/routing-v1.json");
    let cases: Vec<Case> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cases.len() >= 200, "the spec asks for at least 200 cases");
    assert!(cases.iter().any(|c| c.key.is_empty()));
    assert!(cases
        .iter()
        .any(|c| c.nodes.iter().any(|n| n.weight != 1.0)));
    assert!(cases.iter().any(|c| c.index >= 1 << 40));
    for (i, c) in cases.iter().enumerate() {
        let set = NodeSet::new(c.nodes.iter().map(|n| (n.id.clone(), n.weight)));
        let block = BlockId {
            bucket: &c.bucket,
            key: &c.key,
            index: c.index,
        };
        assert_eq!(
            set.rank_ids(&block),
            c.ranking,
            "case {i} ({} nodes, key {:?})",
            c.nodes.len(),
            c.key
        );
        let top2: Vec<&str> = set
            .top_k(&block, 2)
            .into_iter()
            .map(|j| set.nodes()[j].id.as_str())
            .collect();
        assert_eq!(
            top2,
            c.ranking
                .iter()
                .take(2)
                .map(String::as_str)
                .collect::<Vec<_>>(),
            "case {i} top-2"
        );
    }
}

/// The golden cases' nodes as a config's node list, each in `zone`, among two
/// nodes of another zone: a client of `client_zone` ranks through its
/// membership's set.
fn zoned_ranking(c: &Case, zone: &str, client_zone: &str) -> Vec<String> {
    let mut specs: Vec<String> = c
        .nodes
        .iter()
        .map(|n| {
            format!(
                "{{ id = \"{}\", weight = {:?}, zone = \"{zone}\" }}",
                n.id, n.weight
            )
        })
        .collect();
    for i in 0..2 {
        specs.push(format!(
            "{{ id = \"elsewhere-{i}.example:9000\", zone = \"x\" }}"
        ));
    }
    let text = format!(
        "[cluster]\nzone = \"{client_zone}\"\nnodes = [{}]\n",
        specs.join(", ")
    );
    let cfg = shoal::config::Config::parse(&text, "t.toml", &shoal::config::ProcessEnv)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let m = shoal::route::Membership::from_config(cfg.cluster().unwrap());
    m.current()
        .rank_ids(&BlockId {
            bucket: &c.bucket,
            key: &c.key,
            index: c.index,
        })
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// A client with a zone ranks the nodes of its zone exactly as the golden
/// vectors rank them alone; a client whose zone has no node ranks every node
/// (never an empty set), each zone's nodes placed as the spec places them.
#[test]
fn golden_vectors_v1_hold_within_a_zone() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/routing-v1.json");
    let cases: Vec<Case> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (i, c) in cases.iter().enumerate() {
        assert_eq!(zoned_ranking(c, "a", "a"), c.ranking, "case {i} in zone a");
        // Zone c has no node: the golden nodes and the two of zone x, all ranked,
        // the golden nodes in their golden order among them.
        let all = zoned_ranking(c, "a", "c");
        assert_eq!(all.len(), c.nodes.len() + 2, "case {i} from zone c");
        let golden: Vec<&String> = all
            .iter()
            .filter(|id| !id.starts_with("elsewhere-"))
            .collect();
        assert_eq!(
            golden,
            c.ranking.iter().collect::<Vec<_>>(),
            "case {i} from zone c"
        );
    }
}

#[derive(serde::Deserialize)]
struct PageCase {
    nodes: Vec<NodeJ>,
    bucket: String,
    prefix: String,
    delimiter: String,
    continuation: String,
    ranking: Vec<String>,
}

/// Listing pages are placed as the spec says (the generator's own encoding of
/// their identity), so every client sends a page to the same owner.
#[test]
fn golden_vectors_v1_listing_pages() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/routing-v1-metadata.json"
    );
    let cases: Vec<PageCase> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cases.len() >= 64);
    let mut owners = std::collections::HashSet::new();
    for (i, c) in cases.iter().enumerate() {
        let set = NodeSet::new(c.nodes.iter().map(|n| (n.id.clone(), n.weight)));
        let key = shoal::route::list_page_key(&c.prefix, &c.delimiter, &c.continuation);
        let block = BlockId {
            bucket: &c.bucket,
            key: &key,
            index: 0,
        };
        assert_eq!(set.rank_ids(&block), c.ranking, "case {i} ({:?})", c.prefix);
        if c.nodes.len() == 13 {
            owners.insert(c.ranking[0].clone());
        }
    }
    // Pages spread over the nodes rather than piling on one.
    assert!(owners.len() >= 3, "{owners:?}");
}

fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.1.{}.{}:9000", i / 200, i % 200))
        .collect()
}

fn owner(set: &NodeSet, index: u64) -> &str {
    let b = BlockId {
        bucket: "bkt",
        key: "some/object",
        index,
    };
    &set.nodes()[set.top_k(&b, 1)[0]].id
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn adding_a_node_moves_only_blocks_it_now_wins(n in 1usize..40, seed in 0u64..1000) {
        let base = ids(n);
        let new_id = format!("new-{seed}.example:9000");
        let before = NodeSet::new(base.iter().map(|i| (i.clone(), 1.0)));
        let after = NodeSet::new(base.iter().cloned().chain([new_id.clone()]).map(|i| (i, 1.0)));
        for index in 0..2000u64 {
            let (a, b) = (owner(&before, index), owner(&after, index));
            prop_assert!(a == b || b == new_id, "block {index} moved from {a} to {b}");
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_blocks_to_their_second(n in 2usize..40, victim in 0usize..40) {
        let base = ids(n);
        let victim = base[victim % n].clone();
        let before = NodeSet::new(base.iter().map(|i| (i.clone(), 1.0)));
        let after = NodeSet::new(base.iter().filter(|i| **i != victim).map(|i| (i.clone(), 1.0)));
        for index in 0..2000u64 {
            let b = BlockId { bucket: "bkt", key: "some/object", index };
            let ranked = before.rank_ids(&b);
            let now = owner(&after, index);
            if ranked[0] == victim {
                prop_assert_eq!(now, ranked[1]);
            } else {
                prop_assert_eq!(now, ranked[0]);
            }
        }
    }

    #[test]
    fn node_list_order_does_not_matter(n in 1usize..30, weighted in any::<bool>(), shuffle in any::<u64>()) {
        let mut nodes: Vec<(String, f64)> = ids(n).into_iter().enumerate()
            .map(|(i, id)| (id, if weighted { 0.5 + (i % 4) as f64 } else { 1.0 })).collect();
        let a = NodeSet::new(nodes.clone());
        // A deterministic shuffle.
        let mut x = shuffle | 1;
        for i in (1..nodes.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            nodes.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let b = NodeSet::new(nodes);
        for index in 0..200u64 {
            let blk = BlockId { bucket: "b", key: "k", index };
            prop_assert_eq!(a.rank_ids(&blk), b.rank_ids(&blk));
        }
    }
}

#[test]
fn equal_weights_are_near_uniform_at_100_nodes() {
    let set = NodeSet::new(ids(100).into_iter().map(|i| (i, 1.0)));
    let blocks = 1_000_000u64;
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for index in 0..blocks {
        *counts.entry(owner(&set, index)).or_default() += 1;
    }
    let mean = blocks as f64 / 100.0;
    for (id, c) in &counts {
        let dev = (*c as f64 - mean).abs() / mean;
        assert!(
            dev < 0.05,
            "{id} owns {c} blocks, {:.1}% from the mean",
            dev * 100.0
        );
    }
    assert_eq!(counts.len(), 100);
}

#[test]
fn weights_are_honoured_in_proportion() {
    let nodes: Vec<(String, f64)> = ids(10)
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, (i % 4 + 1) as f64))
        .collect();
    let total: f64 = nodes.iter().map(|n| n.1).sum();
    let set = NodeSet::new(nodes.clone());
    let blocks = 400_000u64;
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for index in 0..blocks {
        *counts.entry(owner(&set, index)).or_default() += 1;
    }
    for (id, w) in &nodes {
        let want = w / total;
        let got = counts[id.as_str()] as f64 / blocks as f64;
        assert!(
            (got - want).abs() / want < 0.05,
            "{id} weight {w}: share {got:.4}, want {want:.4}"
        );
    }
}
