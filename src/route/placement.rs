//! Rendezvous (highest random weight) placement: pure, no I/O, no clock.
//!
//! This is routing version 1, normative for every client (see DESIGN.md):
//!
//! - `block_hash = xxh3_64(u32le(len(bucket)) ‖ bucket ‖ u32le(len(key)) ‖ key ‖ u64le(index), SEED)`
//! - `node_hash  = xxh3_64(node_id, SEED)` with the canonical `host:port` id
//! - `score      = xxh3_64(u64le(node_hash) ‖ u64le(block_hash), SEED)`
//! - unweighted: higher `score` first, equal scores by node id bytes, smaller first
//! - weighted (any weight ≠ 1): higher `weight / -ln(u)` first with
//!   `u = ((score >> 11) + 0.5) / 2^53`; ties by higher score, then smaller id.
//!
//! Changing [`SEED`] or any encoding here is a new routing version: the golden
//! vectors in `tests/data/routing-v1.json` fail loudly if anything moves.

use std::cmp::Ordering;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The ASCII bytes of `shoal_v1`, read big-endian.
pub const SEED: u64 = 0x7368_6F61_6C5F_7631;

/// Identity of one cluster block. The ETag is not part of it: the first block of a
/// file is routed before the ETag is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockId<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub index: u64,
}

impl BlockId<'_> {
    pub fn hash(&self) -> u64 {
        let (b, k) = (self.bucket.as_bytes(), self.key.as_bytes());
        let len = 16 + b.len() + k.len();
        // Most identities fit on the stack; this runs once per block request.
        let mut stack = [0u8; 512];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if len <= stack.len() {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap
        };
        let mut at = 0;
        for part in [
            &(b.len() as u32).to_le_bytes()[..],
            b,
            &(k.len() as u32).to_le_bytes()[..],
            k,
            &self.index.to_le_bytes()[..],
        ] {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        xxh3_64_with_seed(buf, SEED)
    }
}

/// The key in the identity of one listing page (index 0 of its bucket): a listing
/// of `prefix` with `delimiter` (`""` for none) from `continuation` (`""` for the
/// first page). The NUL bytes keep it apart from every object key, which S3 never
/// lets hold one. An object's HEAD is routed as its block 0.
pub fn list_page_key(prefix: &str, delimiter: &str, continuation: &str) -> String {
    format!("\0list\0{prefix}\0{delimiter}\0{continuation}")
}

pub fn node_hash(id: &str) -> u64 {
    xxh3_64_with_seed(id.as_bytes(), SEED)
}

pub fn score(node_hash: u64, block_hash: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&node_hash.to_le_bytes());
    buf[8..].copy_from_slice(&block_hash.to_le_bytes());
    xxh3_64_with_seed(&buf, SEED)
}

/// The logarithmic-method key of a weighted node.
pub fn weighted_key(weight: f64, score: u64) -> f64 {
    let u = ((score >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    weight / -u.ln()
}

/// A node as placement sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedNode {
    pub id: String,
    pub weight: f64,
    pub hash: u64,
}

/// One node's standing for one block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Index into [`NodeSet::nodes`] (which is sorted by id, so a smaller index is a
    /// smaller id: the tie-break).
    pub index: usize,
    pub score: u64,
    /// `weight / -ln(u)` in a weighted set, else 0.
    pub key: f64,
}

impl Candidate {
    /// Ranks before `other`.
    #[inline]
    fn beats(&self, other: &Candidate) -> bool {
        if self.key != other.key {
            return self.key > other.key;
        }
        if self.score != other.score {
            return self.score > other.score;
        }
        self.index < other.index
    }
}

/// A set of nodes ready for ranking. The order nodes are given in never matters.
#[derive(Clone, Debug, Default)]
pub struct NodeSet {
    nodes: Vec<PlacedNode>,
    weighted: bool,
}

impl NodeSet {
    /// `nodes` are `(canonical id, weight)`; weights must be finite and > 0.
    pub fn new<I: IntoIterator<Item = (String, f64)>>(nodes: I) -> NodeSet {
        let mut nodes: Vec<PlacedNode> = nodes
            .into_iter()
            .map(|(id, weight)| {
                assert!(
                    weight.is_finite() && weight > 0.0,
                    "weight of {id} must be finite and > 0"
                );
                PlacedNode {
                    hash: node_hash(&id),
                    id,
                    weight,
                }
            })
            .collect();
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        nodes.dedup_by(|a, b| a.id == b.id);
        let weighted = nodes.iter().any(|n| n.weight != 1.0);
        NodeSet { nodes, weighted }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn nodes(&self) -> &[PlacedNode] {
        &self.nodes
    }

    pub fn is_weighted(&self) -> bool {
        self.weighted
    }

    #[inline]
    fn candidate(&self, index: usize, block_hash: u64) -> Candidate {
        let n = &self.nodes[index];
        let score = score(n.hash, block_hash);
        let key = if self.weighted {
            weighted_key(n.weight, score)
        } else {
            0.0
        };
        Candidate { index, score, key }
    }

    /// Indexes into [`Self::nodes`], best first: the full failover order.
    pub fn rank(&self, block: &BlockId<'_>) -> Vec<usize> {
        let bh = block.hash();
        let mut c: Vec<Candidate> = (0..self.nodes.len())
            .map(|i| self.candidate(i, bh))
            .collect();
        c.sort_by(|a, b| {
            if a.beats(b) {
                Ordering::Less
            } else if b.beats(a) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        });
        c.into_iter().map(|c| c.index).collect()
    }

    /// The best `k` nodes, best first, without sorting the rest.
    pub fn top_k(&self, block: &BlockId<'_>, k: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(k + 1);
        self.top_k_into(block, k, &mut out);
        out.into_iter().map(|c| c.index).collect()
    }

    /// [`Self::top_k`] into a caller's buffer: no allocation on the hot path.
    pub fn top_k_into(&self, block: &BlockId<'_>, k: usize, out: &mut Vec<Candidate>) {
        out.clear();
        if k == 0 {
            return;
        }
        let bh = block.hash();
        for i in 0..self.nodes.len() {
            let c = self.candidate(i, bh);
            if out.len() == k {
                if !c.beats(&out[k - 1]) {
                    continue;
                }
                out.pop();
            }
            let pos = out.partition_point(|x| x.beats(&c));
            out.insert(pos, c);
        }
    }

    /// The ids of [`Self::rank`].
    pub fn rank_ids(&self, block: &BlockId<'_>) -> Vec<&str> {
        self.rank(block)
            .into_iter()
            .map(|i| self.nodes[i].id.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> NodeSet {
        NodeSet::new(ids.iter().map(|s| (s.to_string(), 1.0)))
    }

    #[test]
    fn seed_is_shoal_v1() {
        assert_eq!(SEED.to_be_bytes(), *b"shoal_v1");
    }

    #[test]
    fn top_k_agrees_with_rank() {
        let s = NodeSet::new((0..37).map(|i| (format!("10.0.0.{i}:9000"), 1.0 + (i % 3) as f64)));
        for index in 0..500 {
            let b = BlockId {
                bucket: "b",
                key: "k",
                index,
            };
            let full = s.rank(&b);
            for k in [1, 2, 3, 10, 37, 50] {
                assert_eq!(s.top_k(&b, k), full[..k.min(full.len())].to_vec());
            }
        }
    }

    #[test]
    fn empty_set_ranks_nothing() {
        let s = set(&[]);
        assert!(s
            .rank(&BlockId {
                bucket: "b",
                key: "k",
                index: 0
            })
            .is_empty());
        assert!(s
            .top_k(
                &BlockId {
                    bucket: "b",
                    key: "k",
                    index: 0
                },
                2
            )
            .is_empty());
    }

    #[test]
    fn block_encoding_separates_bucket_and_key() {
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        let a = BlockId {
            bucket: "ab",
            key: "c",
            index: 0,
        }
        .hash();
        let b = BlockId {
            bucket: "a",
            key: "bc",
            index: 0,
        }
        .hash();
        assert_ne!(a, b);
    }
}
