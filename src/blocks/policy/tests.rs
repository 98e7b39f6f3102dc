use std::sync::Arc;

use super::*;

/// A tier of `capacity` bytes over `policy`, evicting as the tiers do.
struct Tier {
    policy: Box<dyn Eviction<u64, ()>>,
    bytes: u64,
    capacity: u64,
    misses: u64,
}

impl Tier {
    fn new(policy: Box<dyn Eviction<u64, ()>>, capacity: u64) -> Tier {
        Tier {
            policy,
            bytes: 0,
            capacity,
            misses: 0,
        }
    }

    fn read(&mut self, k: u64, weight: u64) {
        if self.policy.get(&k).is_some() {
            return;
        }
        self.misses += 1;
        self.policy.insert(k, (), weight);
        self.bytes += weight;
        while self.bytes > self.capacity {
            self.policy
                .pop_victim()
                .expect("over its bound, it holds something");
            self.bytes -= weight;
        }
    }
}

fn scan_then_hot_set(kind: PolicyKind) -> u64 {
    // 20 hot blocks read three times in a tier of 50, then a scan of 250
    // others read once, then the hot set again.
    let mut t = Tier::new(kind.build(50), 50);
    for _ in 0..3 {
        (0..20).for_each(|k| t.read(k, 1));
    }
    (1000..1250).for_each(|k| t.read(k, 1));
    t.misses = 0;
    (0..20).for_each(|k| t.read(k, 1));
    t.misses
}

#[test]
fn a_scan_pushes_out_no_block_read_many_times() {
    assert_eq!(scan_then_hot_set(PolicyKind::S3Fifo), 0);
    // The same stream through LRU loses every hot block.
    assert_eq!(scan_then_hot_set(PolicyKind::Lru), 20);
}

#[test]
fn a_block_read_once_goes_before_one_read_again() {
    let mut p = S3Fifo::new(10);
    for k in 0..10u64 {
        p.insert(k, k, 1);
    }
    p.get(&3);
    p.get(&7);
    let first: Vec<u64> = (0..7).map(|_| p.pop_victim().unwrap().0).collect();
    assert_eq!(first, vec![0, 1, 2, 4, 5, 6, 8]);
    assert!(p.contains(&3) && p.contains(&7));
    // The block just fetched is the last of the small queue to go while the
    // main queue holds others.
    assert_eq!(p.pop_victim().map(|v| v.0), Some(3));
    assert!(p.contains(&9));
}

#[test]
fn a_block_evicted_too_early_comes_back_to_the_main_queue() {
    let mut p = S3Fifo::new(10);
    p.insert(1u64, (), 1);
    assert_eq!(p.pop_victim().map(|v| v.0), Some(1));
    // Back while its key is a ghost: into the main queue, so new blocks in
    // the small one go first.
    p.insert(1, (), 1);
    for k in 2..7 {
        p.insert(k, (), 1);
    }
    let out: Vec<u64> = (0..4).map(|_| p.pop_victim().unwrap().0).collect();
    assert_eq!(out, vec![2, 3, 4, 5]);
    assert!(p.contains(&1));
}

#[test]
fn weights_replace_and_removal_keep_the_queues_straight() {
    let mut p = S3Fifo::new(100);
    assert_eq!(p.insert(1u64, "a", 10), None);
    assert_eq!(p.insert(1, "b", 20), Some("a"));
    assert_eq!(p.peek(&1), Some(&"b"));
    assert_eq!(p.remove(&1), Some("b"));
    assert_eq!(p.remove(&1), None);
    // Inserted and removed many times without an eviction: the slots left
    // behind are swept, and what is held is popped in order.
    for round in 0..10_000u64 {
        p.insert(round % 7, "x", 1);
        p.remove(&(round % 7));
    }
    assert!(p.slots() < 200, "{}", p.slots());
    p.insert(5, "five", 1);
    p.insert(6, "six", 1);
    assert_eq!(p.len(), 2);
    assert_eq!(p.iter().count(), 2);
    assert_eq!(p.pop_victim(), Some((5, "five")));
    assert_eq!(p.pop_victim(), Some((6, "six")));
    assert_eq!(p.pop_victim(), None);
}

#[test]
fn blocks_kept_over_a_restart_outlast_a_scan_after_it() {
    // A tier of 100 found full at start: its 90 newest blocks go to the main
    // queue. A scan of 200 after the start costs it the 10 oldest at most.
    let mut t = Tier::new(PolicyKind::S3Fifo.build(100), 100);
    t.policy.restore((0..100u64).map(|k| (k, (), 1)).collect());
    t.bytes = 100;
    (1000..1200).for_each(|k| t.read(k, 1));
    let kept: Vec<u64> = (0..100).filter(|k| t.policy.contains(k)).collect();
    assert_eq!(kept, (10..100).collect::<Vec<_>>());
}

#[test]
fn the_policies_name_themselves_and_refuse_others() {
    for k in [PolicyKind::S3Fifo, PolicyKind::Lru] {
        assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
    }
    let e = "LRU".parse::<PolicyKind>().unwrap_err();
    assert!(e.contains("\"s3-fifo\" and \"lru\""), "{e}");
}

fn pinned_tier(share: u64) -> Tier {
    let pin: PinFn<u64> = Arc::new(|k| *k < 100);
    let inner = PolicyKind::S3Fifo.build(50);
    Tier::new(Box::new(Pinned::new(inner, 50, share, pin)), 50)
}

#[test]
fn pinned_blocks_outlast_any_scan_within_their_budget() {
    let mut t = pinned_tier(500);
    (0..20).for_each(|k| t.read(k, 1));
    (1000..2000).for_each(|k| t.read(k, 1));
    t.misses = 0;
    (0..20).for_each(|k| t.read(k, 1));
    assert_eq!(t.misses, 0);
}

#[test]
fn pins_past_their_budget_yield_the_least_recently_used_first() {
    // Budget 25 of 50: 40 pinned blocks keep the 25 used last.
    let mut t = pinned_tier(500);
    (0..40).for_each(|k| t.read(k, 1));
    (1000..1100).for_each(|k| t.read(k, 1));
    let kept: Vec<u64> = (0..40).filter(|k| t.policy.contains(k)).collect();
    assert_eq!(kept, (15..40).collect::<Vec<_>>());
}

#[test]
fn blocks_fetched_ahead_wait_for_their_reader_within_the_floor() {
    // A tier of 100 whose main queue is full of blocks read again; a reader
    // 30 blocks ahead of itself (past a tenth of the tier) loses none of them
    // before it reads them with a floor of 31 (the window and the block
    // arriving), and its first ones without.
    let run = |floor: u64| {
        let mut p: Box<dyn Eviction<u64, ()>> = PolicyKind::S3Fifo.build_with_floor(100, floor);
        let mut t = Tier::new(std::mem::replace(&mut p, PolicyKind::Lru.build(0)), 100);
        for _ in 0..2 {
            (0..100).for_each(|k| t.read(k, 1));
        }
        for k in 1000..1030 {
            t.read(k, 1);
        }
        (1000..1030).filter(|k| !t.policy.contains(k)).count()
    };
    assert_eq!(run(31), 0);
    assert!(run(0) > 0);
}

#[test]
fn blocks_of_no_bytes_are_given_up_too() {
    let mut p = S3Fifo::new(10);
    p.insert(1u64, (), 0);
    p.insert(2, (), 0);
    p.get(&2);
    assert_eq!(p.pop_victim().map(|v| v.0), Some(1));
    assert_eq!(p.pop_victim().map(|v| v.0), Some(2));
    assert_eq!(p.pop_victim(), None);
}
